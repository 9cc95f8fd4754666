// The answer to one admission check: the one result type of the core (KeyTable, Node), of the
// daemon's request path that every front end calls, and (as CheckReply) of the client library.
#ifndef TOLLGATE_DECISION_H_
#define TOLLGATE_DECISION_H_

#include <cstdint>

#include "tollgate/limit.h"

namespace tollgate {

// retry_after_ns value meaning "this cost can never be admitted under this limit".
inline constexpr int64_t kRetryNever = INT64_MAX;

enum class DenyReason : uint8_t {
  kNone = 0,            // allowed
  kInsufficientTokens,  // not enough tokens now; retry_after_ns says when there will be
  kCostExceedsBurst,    // cost > burst: no amount of waiting makes it fit
  kInvalidCost,         // cost < 0
  kKeyTooLong,          // key longer than the key table accepts
  kOtherCheckDenied,    // all or nothing (KeyTable::allow_all): this check would have passed, but
                        // another of the same request did not, so nothing was charged
  kReservedKey,         // a key only Envoy's rate limit service may charge (is_reserved_key, api.h)
  kSyncing,             // the daemon just started and is still learning this long-window key's
                        // balance from its peers (docs/design.md 6.5); retry_after_ns: until
                        // it stops waiting at the latest
};

// Human-readable reason, e.g. "cost exceeds burst". Never null.
const char* deny_reason_name(DenyReason reason);

struct Decision {
  bool allowed = false;
  // Whole tokens left after this decision, rounded down (negative while in debt).
  int64_t remaining = 0;
  // 0 when allowed. Otherwise nanoseconds until the same cost would be admitted if nothing else
  // consumed in between, or kRetryNever.
  int64_t retry_after_ns = 0;
  DenyReason reason = DenyReason::kNone;
  // False when no rule governs the key: it was admitted without a bucket.
  bool limited = true;
  // The limit that decided, with the partition policy's rate scale applied. Set by the key table
  // when limited (a bucket's own try_acquire leaves it empty); all zero otherwise.
  Limit limit;
  // Denied, and charged all the same: the limit has charge_when_over (see Limit).
  bool charged_anyway = false;
  // The limit is in shadow mode and would have denied this check: allowed, and not charged.
  bool shadow_denied = false;
  // The index of the rule that governs the key (RuleSet::match), or UINT32_MAX (RuleSet::kUnlimited)
  // when none does or the key was refused. Valid for the RuleSet in force when it was decided.
  uint32_t rule = UINT32_MAX;

  // True when `limit` is set (a valid limit has burst >= 1).
  bool has_limit() const { return limit.burst > 0; }
};

}  // namespace tollgate

#endif  // TOLLGATE_DECISION_H_
