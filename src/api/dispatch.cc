#include "api/dispatch.h"

#include <google/protobuf/arena.h>

#include <algorithm>
#include <array>
#include <exception>
#include <utility>

#include "api/framing.h"
#include "tollgate/v1/api.pb.h"

namespace tollgate::api {

namespace pb = ::tollgate::v1::api;

namespace {

pb::LeaseOutcome outcome_to_pb(LeaseOutcome o) {
  switch (o) {
    case LeaseOutcome::kGranted:
      return pb::LEASE_GRANTED;
    case LeaseOutcome::kUnlimited:
      return pb::LEASE_UNLIMITED;
    case LeaseOutcome::kOverLimit:
      return pb::LEASE_OVER_LIMIT;
    case LeaseOutcome::kNever:
      return pb::LEASE_NEVER;
    case LeaseOutcome::kTooManyLeases:
      return pb::LEASE_TOO_MANY_LEASES;
    case LeaseOutcome::kInvalid:
      return pb::LEASE_INVALID;
  }
  return pb::LEASE_INVALID;
}

pb::DenyReason to_proto(DenyReason reason) {
  switch (reason) {
    case DenyReason::kNone:
      return pb::DENY_REASON_NONE;
    case DenyReason::kInsufficientTokens:
      return pb::DENY_REASON_INSUFFICIENT_TOKENS;
    case DenyReason::kCostExceedsBurst:
      return pb::DENY_REASON_COST_EXCEEDS_BURST;
    case DenyReason::kInvalidCost:
      return pb::DENY_REASON_INVALID_COST;
    case DenyReason::kKeyTooLong:
      return pb::DENY_REASON_KEY_TOO_LONG;
    case DenyReason::kReservedKey:
      return pb::DENY_REASON_RESERVED_KEY;
    case DenyReason::kOtherCheckDenied:
      return pb::DENY_REASON_OTHER_CHECK_DENIED;
    case DenyReason::kSyncing:
      return pb::DENY_REASON_SYNCING;
  }
  return pb::DENY_REASON_NONE;
}

void fill_result(const Decision& d, pb::Result& out) {
  out.set_allowed(d.allowed);
  out.set_remaining(d.remaining);
  out.set_retry_after_ns(d.retry_after_ns);
  out.set_reason_code(to_proto(d.reason));
  out.set_reason(deny_reason_name(d.reason));
  out.set_limited(d.limited);
  if (d.has_limit()) {
    pb::Limit& limit = *out.mutable_limit();
    limit.set_rate_tokens(d.limit.rate.tokens);
    limit.set_rate_period_ns(d.limit.rate.period_ns);
    limit.set_burst(d.limit.burst);
    limit.set_max_debt(d.limit.max_debt);
  }
}

pb::Response error_response(uint64_t id, pb::Error::Code code, std::string message) {
  pb::Response response;
  response.set_version(kApiVersion);
  response.set_id(id);
  pb::Error& error = *response.mutable_error();
  error.set_code(code);
  error.set_message(std::move(message));
  return response;
}

// A request and its response live on an arena of their own: a 1,000-check batch is then a few
// block allocations, not thousands of small ones. Under a key flood (300,000 new keys/s in
// 1,000-check requests) those small frees kept glibc's malloc_consolidate busy, 10% of the
// daemon's time in stalls of the one thread that answers everyone (perf, scripts/flood-latency).
std::unique_ptr<google::protobuf::Arena> request_arena() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = 4096;
  o.max_block_size = 32768;  // blocks well below the 64 KiB frees at which glibc consolidates
  return std::make_unique<google::protobuf::Arena>(o);
}

}  // namespace

SlicedBatch::~SlicedBatch() = default;

void Dispatch::write_frame(const pb::Response& response, std::string& out) {
  // Responses are not held to the request limit (see kMaxResponseFrameBytes); one that does not
  // fit even that is replaced by an error rather than sent truncated.
  if (!append_frame(response, kMaxResponseFrameBytes, out)) {
    ++counters_.errors_internal;
    append_frame(error_response(response.id(), pb::Error::INTERNAL, "response too large to send"),
                 kMaxResponseFrameBytes, out);
  }
}

void Dispatch::answer_too_large(uint64_t length, std::string& out) {
  ++counters_.requests;
  ++counters_.errors_frame_too_large;
  write_frame(error_response(0, pb::Error::FRAME_TOO_LARGE,
                             "request frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                                 std::to_string(max_frame_bytes_) + " bytes; closing the connection"),
              out);
}

void Dispatch::check_range(const pb::Request& request, int begin, int end, pb::Response& response) {
  const auto& checks = request.check().checks();
  auto& results = *response.mutable_check()->mutable_results();
  std::array<CheckItem, kChecksPerSlice> items;
  std::array<Decision, kChecksPerSlice> decisions;
  for (int i = begin; i < end; i += kChecksPerSlice) {
    const int n = std::min(kChecksPerSlice, end - i);
    bool reserved = false;
    for (int j = 0; j < n; ++j) {
      items[size_t(j)] = {checks[i + j].key(), checks[i + j].cost()};
      reserved = reserved || is_reserved_key(items[size_t(j)].key);
    }
    if (!reserved) {
      handler_.check(std::span(items.data(), size_t(n)), std::span(decisions.data(), size_t(n)));
    } else {
      // (Rare.) A key only Envoy's rate limit service may charge is denied here, never passed to
      // the node; the others of the slice are decided one by one.
      for (size_t j = 0; j < size_t(n); ++j) {
        if (is_reserved_key(items[j].key)) {
          decisions[j] = reserved_key_denial();
        } else {
          handler_.check(std::span(&items[j], 1), std::span(&decisions[j], 1));
        }
      }
    }
    for (int j = 0; j < n; ++j) fill_result(decisions[size_t(j)], *results.Add());
    counters_.checks += uint64_t(n);
  }
}

void Dispatch::lease(const pb::LeaseRequest& request, pb::LeaseResult& result) {
  switch (request.op_case()) {
    case pb::LeaseRequest::kAcquire: {
      const pb::LeaseAcquire& a = request.acquire();
      const int64_t count = a.count() == 0 ? 1 : a.count();
      const LeaseGrant g = handler_.acquire(a.key(), count, a.ttl_ns());
      result.set_outcome(outcome_to_pb(g.outcome));
      result.set_reason(lease_outcome_name(g.outcome));
      result.set_in_flight(g.in_flight);
      result.set_limit(g.limit);
      if (g.outcome == LeaseOutcome::kGranted) {
        result.set_id(g.id.hex());
        result.set_expires_in_ns(g.ttl_ns);
      }
      return;
    }
    case pb::LeaseRequest::kRelease: {
      const std::optional<LeaseId> id = LeaseId::parse(request.release().id());
      result.set_found(id && handler_.release(*id));
      return;
    }
    case pb::LeaseRequest::kRenew: {
      const std::optional<LeaseId> id = LeaseId::parse(request.renew().id());
      const std::optional<int64_t> left = id ? handler_.renew(*id, request.renew().ttl_ns()) : std::nullopt;
      result.set_found(left.has_value());
      result.set_expires_in_ns(left.value_or(0));
      return;
    }
    case pb::LeaseRequest::OP_NOT_SET:
      result.set_outcome(pb::LEASE_INVALID);
      result.set_reason("lease request has no acquire, release or renew");
      return;
  }
}

void Dispatch::check_all(const pb::Request& request, pb::Response& response) {
  const auto& checks = request.check().checks();
  const size_t n = size_t(checks.size());
  std::array<CheckItem, kMaxAllOrNothingChecks> items;
  std::array<Decision, kMaxAllOrNothingChecks> decisions;
  bool reserved = false;
  for (size_t j = 0; j < n; ++j) {
    items[j] = {checks[int(j)].key(), checks[int(j)].cost()};
    reserved = reserved || is_reserved_key(items[j].key);
  }
  if (reserved) {  // all or nothing: nothing is charged, and the node is not asked
    for (size_t j = 0; j < n; ++j) {
      decisions[j] = reserved_key_denial();
      if (!is_reserved_key(items[j].key)) decisions[j].reason = DenyReason::kOtherCheckDenied;
    }
  } else {
    handler_.check_all(std::span(items.data(), n), std::span(decisions.data(), n));
  }
  auto& results = *response.mutable_check()->mutable_results();
  for (size_t j = 0; j < n; ++j) fill_result(decisions[j], *results.Add());
  counters_.checks += n;
}

namespace {

void fill_merged(const MergedTop& m, pb::MergedTop& out) {
  out.set_total(m.total);
  out.set_error_bound(m.error_bound);
  out.set_unreported_bound(m.unreported_bound);
  for (const MergedKey& k : m.keys) {
    pb::TopKey& key = *out.add_keys();
    key.set_key(k.key);
    key.set_lower(k.lower);
    key.set_upper(k.upper);
    key.set_envoy_descriptor(k.descriptor);
  }
}

}  // namespace

bool Dispatch::top_slice(SlicedBatch& s) {
  if (size_t(s.next_) < s.top_parts_.size()) {
    s.tops_.push_back(merge_top_rule(s.top_parts_[size_t(s.next_)], s.top_k_));
    s.top_parts_[size_t(s.next_)] = TopParts();  // its units go as soon as they are merged
    ++s.next_;
    if (size_t(s.next_) < s.top_parts_.size()) return false;
  }
  sort_busiest_first(s.tops_);
  auto& rules = *s.response_->mutable_top()->mutable_rules();
  for (const RuleTop& t : s.tops_) {
    pb::RuleTop& r = *rules.Add();
    r.set_rule(t.rule);
    r.set_members_reporting(t.members_reporting);
    fill_merged(t.denied, *r.mutable_denied());
    fill_merged(t.tokens, *r.mutable_tokens());
  }
  return true;
}

bool Dispatch::answer_slice(SlicedBatch& s, std::string& out) {
  try {
    if (s.request_->has_top()) {
      if (!top_slice(s)) return false;
      write_frame(*s.response_, out);
      return true;
    }
    const int size = s.request_->check().checks_size();
    const int end = std::min(size, s.next_ + kChecksPerSlice);
    check_range(*s.request_, s.next_, end, *s.response_);
    s.next_ = end;
    if (s.next_ < size) return false;
  } catch (const std::exception& e) {
    ++counters_.errors_internal;
    write_frame(error_response(s.request_->id(), pb::Error::INTERNAL, std::string("daemon error: ") + e.what()), out);
    return true;
  } catch (...) {
    ++counters_.errors_internal;
    write_frame(error_response(s.request_->id(), pb::Error::INTERNAL, "daemon error"), out);
    return true;
  }
  write_frame(*s.response_, out);
  return true;
}

Dispatch::Outcome Dispatch::answer(std::string_view payload, std::string& out, std::unique_ptr<SlicedBatch>* sliced) {
  ++counters_.requests;
  std::unique_ptr<google::protobuf::Arena> arena = request_arena();
  pb::Request& request = *google::protobuf::Arena::CreateMessage<pb::Request>(arena.get());
  if (!request.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    ++counters_.errors_malformed;
    write_frame(
        error_response(0, pb::Error::MALFORMED, "frame is not a tollgate.v1.api.Request; closing the connection"), out);
    return Outcome::kClose;
  }
  const uint64_t id = request.id();
  if (request.version() != kApiVersion) {
    ++counters_.errors_unsupported_version;
    write_frame(error_response(id, pb::Error::UNSUPPORTED_VERSION,
                               "unsupported API version " + std::to_string(request.version()) +
                                   "; this daemon speaks version " + std::to_string(kApiVersion)),
                out);
    return Outcome::kAnswered;
  }
  pb::Response& response = *google::protobuf::Arena::CreateMessage<pb::Response>(arena.get());
  response.set_version(kApiVersion);
  response.set_id(id);
  try {
    switch (request.body_case()) {
      case pb::Request::kCheck: {
        const int n = request.check().checks_size();
        if (n == 0) {
          ++counters_.errors_empty_request;
          write_frame(error_response(id, pb::Error::EMPTY_REQUEST, "check batch has no checks"), out);
          return Outcome::kAnswered;
        }
        if (static_cast<size_t>(n) > max_checks_per_batch_) {
          ++counters_.errors_batch_too_large;
          write_frame(error_response(id, pb::Error::BATCH_TOO_LARGE,
                                     "check batch of " + std::to_string(n) + " checks exceeds the limit of " +
                                         std::to_string(max_checks_per_batch_)),
                      out);
          return Outcome::kAnswered;
        }
        response.mutable_check()->mutable_results()->Reserve(n);
        if (request.check().all_or_nothing()) {
          // Decided in one go, never in slices: hence the smaller limit.
          if (static_cast<size_t>(n) > kMaxAllOrNothingChecks) {
            ++counters_.errors_batch_too_large;
            write_frame(error_response(id, pb::Error::BATCH_TOO_LARGE,
                                       "an all-or-nothing batch of " + std::to_string(n) +
                                           " checks exceeds the limit of " + std::to_string(kMaxAllOrNothingChecks)),
                        out);
            return Outcome::kAnswered;
          }
          check_all(request, response);
          break;
        }
        if (sliced && n > kChecksPerSlice) {
          auto s = std::unique_ptr<SlicedBatch>(new SlicedBatch());
          s->request_ = &request;
          s->response_ = &response;
          s->arena_ = std::move(arena);
          *sliced = std::move(s);
          return Outcome::kSliced;
        }
        check_range(request, 0, n, response);
        break;
      }
      case pb::Request::kMembers: {
        auto& members = *response.mutable_members()->mutable_members();
        for (const MemberInfo& info : handler_.members()) {
          pb::Member& m = *members.Add();
          m.set_id(info.id);
          m.set_address(info.address);
          m.set_state(member_state_name(info.state));
          m.set_incarnation(info.incarnation);
          m.set_heartbeat(info.heartbeat);
          m.set_last_heard_ms(info.last_heard_ns / 1'000'000);
          m.set_self(info.self);
        }
        break;
      }
      case pb::Request::kStats: {
        auto& counters = *response.mutable_stats()->mutable_counters();
        for (const auto& [name, value] : handler_.stats()) {
          pb::Counter& c = *counters.Add();
          c.set_name(name);
          c.set_value(value);
        }
        break;
      }
      case pb::Request::kFaults: {
        const pb::FaultsRequest& in = request.faults();
        FaultSettings faults;
        faults.drop_to.assign(in.drop_to().begin(), in.drop_to().end());
        faults.drop_from.assign(in.drop_from().begin(), in.drop_from().end());
        faults.loss = in.loss();
        faults.delay_ms = in.delay_ms();
        faults.duplicate = in.duplicate();
        faults.jitter_ms = in.jitter_ms();
        response.mutable_faults()->set_error(handler_.set_faults(faults));
        break;
      }
      case pb::Request::kReset: {
        const ResetReply r = handler_.reset(request.reset().key());
        pb::ResetResult& result = *response.mutable_reset();
        result.set_error(r.error);
        result.set_limited(r.limited);
        result.set_remaining(r.remaining);
        break;
      }
      case pb::Request::kLease:
        lease(request.lease(), *response.mutable_lease());
        break;
      case pb::Request::kTop: {
        // The node's thread only copies what it holds (shared pointers to the members' summaries);
        // the merges run a rule a slice, between other clients' requests.
        const uint32_t k = request.top().k() == 0 ? uint32_t(kDefaultTopKeys) : request.top().k();
        if (k > kMaxTopKeys) {
          response.mutable_top()->set_error("k must be from 1 to " + std::to_string(kMaxTopKeys) + " (0 means " +
                                            std::to_string(kDefaultTopKeys) + ")");
          break;
        }
        auto s = std::unique_ptr<SlicedBatch>(new SlicedBatch());
        s->top_parts_ = handler_.top_parts(request.top().rule());
        s->top_k_ = k;
        s->request_ = &request;
        s->response_ = &response;
        if (sliced && s->top_parts_.size() > 1) {
          s->arena_ = std::move(arena);
          *sliced = std::move(s);
          return Outcome::kSliced;
        }
        while (!top_slice(*s)) {
        }
        break;
      }
      case pb::Request::BODY_NOT_SET:
        ++counters_.errors_empty_request;
        write_frame(error_response(id, pb::Error::EMPTY_REQUEST, "request has no body"), out);
        return Outcome::kAnswered;
    }
  } catch (const std::exception& e) {
    ++counters_.errors_internal;
    write_frame(error_response(id, pb::Error::INTERNAL, std::string("daemon error: ") + e.what()), out);
    return Outcome::kAnswered;
  } catch (...) {
    ++counters_.errors_internal;
    write_frame(error_response(id, pb::Error::INTERNAL, "daemon error"), out);
    return Outcome::kAnswered;
  }
  write_frame(response, out);
  return Outcome::kAnswered;
}

}  // namespace tollgate::api
