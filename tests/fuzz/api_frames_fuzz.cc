// The client API as the daemon reads it: a byte stream from a client socket cut into frames by
// api::FrameDecoder (src/api/framing.h), each frame parsed as a tollgate.v1.api.Request and
// answered, following the read loop and ApiServer::Impl::answer in src/api/api_server.cc.
// answer() is private to the server and needs a node behind it, so its decoding steps are
// mirrored here (parse, version, body, batch size) with canned answers instead of a node. The
// input layout is fuzz_util.h's StreamInput; flag bit 3 lowers the frame limit to 64 bytes so
// the oversize path is reached with small inputs.
//
// Contract: the frames do not depend on how the stream is split; a frame above the limit is
// refused (kTooLarge, with its length) before its payload is buffered, and nothing after it or
// after a malformed frame is read; what parses re-serializes to a Request that parses to the
// same bytes; every answer fits a response frame, and the client's decoder reads back exactly
// one Response per answer with the request's id.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "api/framing.h"
#include "fuzz_util.h"
#include "tollgate/v1/api.pb.h"

namespace {

namespace api = tollgate::api;
namespace pb = ::tollgate::v1::api;

constexpr size_t kMaxChecksPerBatch = 1000;  // ApiServerOptions::max_checks_per_batch's default
constexpr size_t kMaxKeyBytes = 256;

struct Answer {
  uint64_t id = 0;
  pb::Error::Code error = pb::Error::CODE_UNSPECIFIED;  // CODE_UNSPECIFIED: not an error
  size_t results = 0;                                   // for a check batch
};

pb::Response error_response(uint64_t id, pb::Error::Code code) {
  pb::Response r;
  r.set_version(api::kApiVersion);
  r.set_id(id);
  r.mutable_error()->set_code(code);
  r.mutable_error()->set_message("fuzz");
  return r;
}

std::string serialize(const pb::Request& request) {
  std::string out;
  FUZZ_CHECK(request.SerializeToString(&out), "a parsed Request does not serialize");
  return out;
}

// Answers one frame as the server does; appends the framed response to `out` and its summary
// to `answers`. Returns false when the connection is to be closed (the frame is not a Request).
bool answer(std::string_view payload, std::string& out, std::vector<Answer>& answers) {
  pb::Request request;
  pb::Response response;
  Answer a;
  bool keep_open = true;
  if (!request.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    a.error = pb::Error::MALFORMED;
    response = error_response(0, a.error);
    keep_open = false;
  } else {
    // Protobuf keeps unknown fields, so a parsed request serializes, parses and serializes to
    // the same bytes. (Compared as bytes: a field-wise comparison calls a NaN loss different
    // from itself, and the daemon's FaultSpec check refuses NaN anyway.)
    const std::string once = serialize(request);
    pb::Request again;
    FUZZ_CHECK(again.ParseFromString(once), "a re-serialized Request does not parse");
    FUZZ_CHECK(serialize(again) == once, "a Request does not survive a round trip");

    a.id = request.id();
    if (request.version() != api::kApiVersion) {
      a.error = pb::Error::UNSUPPORTED_VERSION;
    } else if (request.body_case() == pb::Request::BODY_NOT_SET) {
      a.error = pb::Error::EMPTY_REQUEST;
    } else if (request.body_case() == pb::Request::kCheck) {
      const auto& checks = request.check().checks();
      if (checks.empty()) {
        a.error = pb::Error::EMPTY_REQUEST;
      } else if (static_cast<size_t>(checks.size()) > kMaxChecksPerBatch) {
        a.error = pb::Error::BATCH_TOO_LARGE;
      } else {
        for (const pb::Check& check : checks) {
          pb::Result& result = *response.mutable_check()->add_results();
          const bool too_long = check.key().size() > kMaxKeyBytes;
          result.set_allowed(!too_long && check.cost() >= 0);
          result.set_reason_code(too_long ? pb::DENY_REASON_KEY_TOO_LONG
                                          : check.cost() < 0 ? pb::DENY_REASON_INVALID_COST : pb::DENY_REASON_NONE);
        }
        a.results = static_cast<size_t>(checks.size());
      }
    } else if (request.body_case() == pb::Request::kFaults) {
      response.mutable_faults();  // the daemon validates the settings; the decoder only carries them
    } else if (request.body_case() == pb::Request::kMembers) {
      response.mutable_members();
    } else {
      response.mutable_stats();
    }
    if (a.error != pb::Error::CODE_UNSPECIFIED) {
      response = error_response(a.id, a.error);
    } else {
      response.set_version(api::kApiVersion);
      response.set_id(a.id);
    }
  }
  FUZZ_CHECK(api::append_frame(response, api::kMaxResponseFrameBytes, out), "an answer does not fit a response frame");
  answers.push_back(a);
  return keep_open;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tollgate::fuzz::StreamInput in = tollgate::fuzz::split_stream_input(data, size);
  const uint32_t max_frame_bytes = (in.flags & 0x08) ? 64 : api::kDefaultMaxFrameBytes;

  // --- The server's read loop.
  api::FrameDecoder decoder(max_frame_bytes);
  std::string out;
  std::vector<Answer> answers;
  std::vector<std::string> frames;
  bool close = false, too_large = false;
  for (std::string_view chunk : in.chunks) {
    if (close) break;
    decoder.feed(chunk.data(), chunk.size());
    // framing.h: at most one incomplete frame plus the last piece fed.
    FUZZ_CHECK(decoder.buffered_bytes() <= 4 + size_t{max_frame_bytes} + chunk.size(), "the decoder holds too much");
    while (!close) {
      std::string_view payload;
      const api::FrameDecoder::Status s = decoder.next(&payload);
      if (s == api::FrameDecoder::Status::kNeedMore) break;
      if (s == api::FrameDecoder::Status::kTooLarge) {
        FUZZ_CHECK(decoder.rejected_length() > max_frame_bytes, "refused a length within the limit");
        answers.push_back({0, pb::Error::FRAME_TOO_LARGE, 0});
        FUZZ_CHECK(api::append_frame(error_response(0, pb::Error::FRAME_TOO_LARGE), api::kMaxResponseFrameBytes, out),
                   "the too-large answer does not fit");
        too_large = close = true;
        break;
      }
      FUZZ_CHECK(payload.size() <= max_frame_bytes, "a frame above the limit");
      frames.emplace_back(payload);
      if (!answer(payload, out, answers)) close = true;
    }
  }

  // --- The same stream in one pass: the frames must be the same, up to where the server stopped.
  const tollgate::fuzz::ReferenceFrames ref = tollgate::fuzz::reference_frames(in.stream, max_frame_bytes);
  FUZZ_CHECK(frames.size() <= ref.frames.size(), "more frames than the stream holds");
  for (size_t i = 0; i < frames.size(); ++i) FUZZ_CHECK(frames[i] == ref.frames[i], "a frame differs from the stream's");
  if (!close) {
    FUZZ_CHECK(frames.size() == ref.frames.size() && !ref.too_large, "frames depend on how the stream is split");
    FUZZ_CHECK(decoder.buffered_bytes() == ref.leftover, "buffered_bytes() disagrees with the stream");
  } else if (too_large) {
    FUZZ_CHECK(ref.too_large && frames.size() == ref.frames.size(), "kTooLarge depends on how the stream is split");
  }

  // --- The client's side: one Response per answer, in order, with the request's id.
  api::FrameDecoder client(api::kMaxResponseFrameBytes);
  client.feed(out.data(), out.size());
  for (const Answer& a : answers) {
    std::string_view payload;
    FUZZ_CHECK(client.next(&payload) == api::FrameDecoder::Status::kFrame, "an answer is missing");
    pb::Response response;
    FUZZ_CHECK(response.ParseFromArray(payload.data(), static_cast<int>(payload.size())), "an answer does not parse");
    FUZZ_CHECK(response.version() == api::kApiVersion && response.id() == a.id, "an answer has the wrong id");
    if (a.error != pb::Error::CODE_UNSPECIFIED) {
      FUZZ_CHECK(response.has_error() && response.error().code() == a.error, "an answer has the wrong error");
    } else if (a.results > 0) {
      FUZZ_CHECK(static_cast<size_t>(response.check().results_size()) == a.results, "one result per check");
    }
  }
  std::string_view rest;
  FUZZ_CHECK(client.next(&rest) == api::FrameDecoder::Status::kNeedMore && client.buffered_bytes() == 0,
             "bytes after the last answer");
  return 0;
}
