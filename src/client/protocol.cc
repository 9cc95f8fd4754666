#include "client/protocol.h"

#include "api/framing.h"

namespace tollgate::client {
namespace {

DenyReason deny_reason(pb::DenyReason reason, bool allowed) {
  switch (reason) {
    case pb::DENY_REASON_NONE:
      return DenyReason::kNone;
    case pb::DENY_REASON_INSUFFICIENT_TOKENS:
      return DenyReason::kInsufficientTokens;
    case pb::DENY_REASON_COST_EXCEEDS_BURST:
      return DenyReason::kCostExceedsBurst;
    case pb::DENY_REASON_INVALID_COST:
      return DenyReason::kInvalidCost;
    case pb::DENY_REASON_KEY_TOO_LONG:
      return DenyReason::kKeyTooLong;
    case pb::DENY_REASON_RESERVED_KEY:
      return DenyReason::kReservedKey;
    case pb::DENY_REASON_OTHER_CHECK_DENIED:
      return DenyReason::kOtherCheckDenied;
    case pb::DENY_REASON_SYNCING:
      return DenyReason::kSyncing;
    default:
      break;
  }
  // A reason added by a newer daemon: the closest thing this client knows.
  return allowed ? DenyReason::kNone : DenyReason::kInsufficientTokens;
}

}  // namespace

bool frame_request(pb::Request& request, uint64_t id, uint32_t max_request_bytes, std::string* frame) {
  request.set_version(api::kApiVersion);
  request.set_id(id);
  frame->clear();
  return api::append_frame(request, max_request_bytes, *frame);
}

ResponseCheck validate_response(std::string_view payload, pb::Response* response) {
  using Kind = ResponseCheck::Kind;
  if (!response->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return {Kind::kConnectionError, "the daemon sent a malformed response"};
  }
  if (response->id() == 0 && response->has_error()) {
    // About the connection, not one call (e.g. our frame was too large): the daemon closes it.
    return {Kind::kConnectionError, "daemon error: " + response->error().message()};
  }
  if (response->version() != api::kApiVersion) {
    return {Kind::kCallError, "the daemon answered with API version " + std::to_string(response->version()) +
                                  "; this client speaks version " + std::to_string(api::kApiVersion)};
  }
  return {};
}

CheckReply check_reply(const pb::Result& r) {
  CheckReply reply;
  reply.allowed = r.allowed();
  reply.remaining = r.remaining();
  reply.retry_after_ns = r.retry_after_ns();
  reply.reason = deny_reason(r.reason_code(), r.allowed());
  reply.limited = r.limited();
  if (r.has_limit()) {
    const pb::Limit& l = r.limit();
    reply.limit = Limit{Rate{l.rate_tokens(), l.rate_period_ns()}, l.burst(), l.max_debt()};
  }
  reply.source = ReplySource::kDaemon;
  return reply;
}

std::string unexpected_body(const pb::Response& response, const char* expected) {
  if (response.has_error()) return "daemon error: " + response.error().message();
  return std::string("daemon sent an unexpected answer (expected ") + expected + ")";
}

std::string oversized_frame_error(uint64_t length) {
  std::string error = "the daemon sent a frame of " + std::to_string(length) + " bytes";
  if (length == 0x48545450) {  // "HTTP", read as a big-endian length prefix
    error +=
        " (\"HTTP\": this endpoint is an HTTP server, tollgated's --http-listen perhaps; the client API "
        "is what --listen serves)";
  }
  return error;
}

}  // namespace tollgate::client
