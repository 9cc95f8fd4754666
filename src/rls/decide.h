// The Envoy rate limit service's decision, apart from gRPC: a request's descriptors, resolved
// against the RLS config (plan, on a gRPC thread), decided together on the node's thread
// (decide, through the daemon's one request path) and turned into per-descriptor answers.
//
// Semantics (docs/operations.md, "Behind Envoy"):
// - All or nothing: the request is allowed only if every non-shadow descriptor is; if any is
//   over, none is charged. A descriptor that had room but was not charged answers OK with its
//   untouched remaining count; overall_code is OVER_LIMIT.
// - A shadow_mode descriptor is charged only when the request is allowed, and answers OK even
//   when it would have denied (shadow_over tells).
// - A descriptor of several limits (rate_limits) is decided as one entry per limit, all or
//   nothing with the rest, and answered as one: the first of its limits over, or else the one
//   with the fewest tokens left.
// - A quota_mode descriptor (the reference server's quota mode) does not deny alone: one with
//   room is charged with the others (all or nothing); one without answers OVER_LIMIT and is not
//   charged (unless charge_when_over), and the request is over only if every quota descriptor
//   of it is over, or another descriptor is.
// - A descriptor that costs nothing (its own hits_addend 0) is only looked at: OK unless its
//   bucket is in debt (the reference server's count + 0 > limit), and then it denies the
//   request like any other.
// - A charge_when_over limit is charged whatever the answer (KeyTable::allow_all).
// - requests_per_unit 0 denies any cost above 0 without a bucket; unlimited answers OK with
//   remaining 4294967295; no limit answers OK with remaining 0 (as the reference server).
// - A refund (is_negative_hits) gives its hits back to its bucket, never above burst, and spreads
//   the refund like consumption (RequestHandler::refund); it always answers OK, with what is left
//   after it, whatever the request's other descriptors answer, and after they are decided (a
//   check in the same request does not spend what it gives back).
// - A descriptor with tollgate's `concurrency: N` (issue 40) takes its hits as slots of a lease
//   by key (RequestHandler::acquire_anonymous), all or nothing with the rest: a lease over its
//   limit makes the request over (and charges no rate), a request over for any reason keeps no
//   lease. With is_negative_hits (Envoy's apply_on_stream_done) it releases that many slots, the
//   key's oldest leases first, and gives no rate tokens back. Each call that ends holding nothing
//   owes the release Envoy will still send for it (owe_release), so that one frees nobody's
//   lease. A concurrency-only descriptor answers with the slots left as limit_remaining; one over
//   names its concurrency in the over_limit metadata. A lease whose release never comes (Envoy
//   died, the first call was cancelled) is freed by the descriptor's lease_ttl.
#ifndef TOLLGATE_SRC_RLS_DECIDE_H_
#define TOLLGATE_SRC_RLS_DECIDE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "request/request_handler.h"
#include "tollgate/rls_config.h"

namespace tollgate::rls {

// Descriptors per request, at most: one all-or-nothing check each.
inline constexpr size_t kMaxDescriptors = 64;
// Entries per descriptor, at most.
inline constexpr size_t kMaxEntries = 32;

struct DescriptorPlan {
  RlsMatch match;
  int64_t hits = 1;     // tokens this descriptor costs; 0 checks without charging
  bool refund = false;  // is_negative_hits: `hits` tokens are given back, not charged
};

struct Plan {
  std::shared_ptr<const RlsConfig> config;  // keeps every match.limit alive
  std::vector<DescriptorPlan> descriptors;
  // Limit overrides that could not be honoured (RlsMatch::override_ignored): those descriptors
  // have the config's limit. Front ends count them.
  size_t overrides_ignored = 0;
  // The request's domain is not one of the config's: every descriptor answers OK unlimited, as the
  // reference server does. Front ends count it (a misnamed domain in Envoy's filter limits nothing).
  bool domain_not_found = false;
};

// A request descriptor as the front end read it off the wire.
struct DescriptorInput {
  std::vector<RlsEntry> entries;
  std::optional<RlsLimitOverride> limit;  // Envoy's limit override, if it sent one
  bool has_hits = false;                  // the descriptor's own hits_addend was set
  uint64_t hits = 0;
  bool is_negative_hits = false;  // a refund of the hits
};

// Resolves a request against `config` into `plan` (cleared first), applying `replaces`. Bucket
// keys longer than `max_key_bytes` get their values part replaced by a SHA-256 digest of it.
// Returns "" or why the request is invalid (INVALID_ARGUMENT): an empty domain, no descriptors,
// more than kMaxDescriptors, more than kMaxEntries in one, an entry with an empty key, a
// descriptor hits_addend above kMaxTokens (10^12). A cost above a limit's burst is not invalid: it
// answers OVER_LIMIT.
std::string plan_request(std::shared_ptr<const RlsConfig> config, std::string_view domain, uint32_t request_hits,
                         const std::vector<DescriptorInput>& descriptors, size_t max_key_bytes, Plan& plan);

enum class Code : uint8_t { kOk = 1, kOverLimit = 2 };

struct DescriptorResult {
  Code code = Code::kOk;
  const RlsLimit* limit = nullptr;  // current_limit; null for no limit and for unlimited
  uint32_t remaining = 0;           // limit_remaining
  int64_t until_full_ns = -1;       // duration_until_reset; -1: none
  int64_t retry_after_ns = 0;       // when over: until the same cost would pass (kRetryNever: never)
  bool shadow_over = false;         // a shadow_mode descriptor that would have denied
  bool quota = false;               // a quota_mode descriptor: over alone does not deny
  int64_t concurrency_limit = 0;    // the descriptor's `concurrency` (0: none)
  bool concurrency_over = false;    // over because its concurrency limit is held
};

// Nanoseconds until the bucket `d` decided on is full again (to within one token's refill time),
// or -1 when it has no limit or never refills. For duration_until_reset and the HTTP RateLimit
// field.
int64_t until_full_ns(const Decision& d);

// Decides `plan` on the node's thread. `out` gets one result per descriptor, in order. Returns
// the overall code.
Code decide(RequestHandler& handler, const Plan& plan, std::vector<DescriptorResult>& out);

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_DECIDE_H_
