// A token bucket whose balance may go negative (debt), refilled lazily with exact integer math.
//
// The balance is kept in microtokens. Refill adds rate.tokens * elapsed_ns / rate.period_ns
// tokens and carries the remainder of that division to the next refill, so any sequence of
// refills adds exactly what one refill over the whole span would: no drift, ever.
//
// A bucket does not store its Limit (the key table keeps the rule once per rule, not once per
// key); every call takes the Limit the bucket was created with, or its replacement after a rules
// reload. Not thread-safe.
#ifndef TOLLGATE_SRC_CORE_TOKEN_BUCKET_H_
#define TOLLGATE_SRC_CORE_TOKEN_BUCKET_H_

#include <cstdint>

#include "core/clock.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"

namespace tollgate {

inline constexpr int64_t kMicrotokensPerToken = 1'000'000;

class TokenBucket {
 public:
  TokenBucket() = default;
  // A bucket that starts full at `now_ns`.
  TokenBucket(const Limit& limit, MonoNanos now_ns);
  // A bucket holding `balance_microtokens` (clamped to the limit's range) at `now_ns`.
  static TokenBucket with_balance(const Limit& limit, int64_t balance_microtokens, MonoNanos now_ns);

  // Admits `cost` tokens if the balance (after refill) holds them, and takes them. Local
  // admission never creates debt: only consume_remote does. cost == 0 is a query: nothing is
  // taken and `allowed` says whether a 1-token request would be admitted now.
  Decision try_acquire(const Limit& limit, int64_t cost, MonoNanos now_ns);

  // Charges consumption that another node admitted. May drive the balance negative, but never
  // below -max_debt: debt beyond that is forgiven. Negative `tokens` are a refund (refund()).
  void consume_remote(const Limit& limit, int64_t tokens, MonoNanos now_ns);
  // Gives `tokens` back (Envoy's is_negative_hits), never above burst: what would go beyond is
  // lost. 0 or fewer: nothing.
  void refund(const Limit& limit, int64_t tokens, MonoNanos now_ns);

  // The balance in microtokens after refilling to `now_ns`.
  int64_t balance_microtokens(const Limit& limit, MonoNanos now_ns);
  // True when the bucket has refilled to burst by `now_ns` (it then carries no information).
  bool full_at(const Limit& limit, MonoNanos now_ns);
  // Moves the balance into [-max_debt, burst] of a new limit, keeping it otherwise (rules reload).
  void clamp_to(const Limit& limit);

  // Nanoseconds until the balance reaches `microtokens`, 0 if it already has, kRetryNever if it
  // cannot (above burst). Does not refill: call after an operation at the current time.
  int64_t nanos_until(const Limit& limit, int64_t microtokens) const;

  int64_t raw_balance_microtokens() const { return balance_; }
  MonoNanos last_refill_ns() const { return last_ns_; }

 private:
  void refill(const Limit& limit, MonoNanos now_ns);

  int64_t balance_ = 0;    // microtokens, in [-max_debt, burst] * 10^6
  int64_t remainder_ = 0;  // refill carry: microtokens * period_ns not yet credited, in [0, period_ns)
  MonoNanos last_ns_ = 0;  // time of the last refill
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_TOKEN_BUCKET_H_
