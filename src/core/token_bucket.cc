#include "core/token_bucket.h"

#include <algorithm>
#include <limits>

namespace tollgate {
namespace {

// Products of a rate (<= 10^12 tokens) by 10^6 microtokens by an elapsed time (< 2^63 ns) need
// 128 bits. __extension__ keeps -Wpedantic quiet about the GCC/Clang builtin type.
__extension__ typedef __int128 Wide;

int64_t cap_micro(const Limit& limit) { return limit.burst * kMicrotokensPerToken; }
int64_t floor_micro(const Limit& limit) { return -limit.max_debt * kMicrotokensPerToken; }

// Whole tokens in `micro`, rounded toward negative infinity (so -0.5 tokens reads as -1).
int64_t whole_tokens(int64_t micro) {
  int64_t q = micro / kMicrotokensPerToken;
  if (micro % kMicrotokensPerToken < 0) --q;
  return q;
}

}  // namespace

TokenBucket::TokenBucket(const Limit& limit, MonoNanos now_ns)
    : balance_(cap_micro(limit)), remainder_(0), last_ns_(now_ns) {}

TokenBucket TokenBucket::with_balance(const Limit& limit, int64_t balance_microtokens, MonoNanos now_ns) {
  TokenBucket b(limit, now_ns);
  b.balance_ = std::clamp(balance_microtokens, floor_micro(limit), cap_micro(limit));
  return b;
}

void TokenBucket::refill(const Limit& limit, MonoNanos now_ns) {
  if (now_ns <= last_ns_) return;  // same instant, or a caller whose clock is behind ours
  const int64_t cap = cap_micro(limit);
  if (balance_ >= cap) {
    // Full: time passing adds nothing, and the carry would only overfill later.
    balance_ = cap;
    remainder_ = 0;
    last_ns_ = now_ns;
    return;
  }
  // elapsed * tokens * 10^6 fits 128 bits for rates up to kMaxTokens (see limit.h). A rate scaled
  // by the proportional policy may be up to ~4096 times larger, so very long gaps are credited
  // in steps of 2^53 ns (104 days), which keeps every product in range and the sum exact.
  constexpr int64_t kStepNs = int64_t(1) << 53;
  while (now_ns - last_ns_ > kStepNs && balance_ < cap) refill(limit, last_ns_ + kStepNs);
  if (balance_ >= cap) {
    balance_ = cap;
    remainder_ = 0;
    last_ns_ = now_ns;
    return;
  }
  const Wide acc = Wide(now_ns - last_ns_) * limit.rate.tokens * kMicrotokensPerToken + remainder_;
  // 128-bit division is a library call several times slower than the 64-bit instruction; the
  // accumulator fits 64 bits unless a bucket sat partly empty for a very long time.
  const Wide gained = acc <= Wide(INT64_MAX) ? Wide(int64_t(acc) / limit.rate.period_ns) : acc / limit.rate.period_ns;
  last_ns_ = now_ns;
  if (gained >= Wide(cap) - balance_) {
    balance_ = cap;
    remainder_ = 0;
  } else {
    balance_ += int64_t(gained);
    remainder_ = int64_t(acc - gained * limit.rate.period_ns);  // acc % period, without a second division
  }
}

int64_t TokenBucket::nanos_until(const Limit& limit, int64_t microtokens) const {
  if (microtokens <= balance_) return 0;
  if (microtokens > cap_micro(limit)) return kRetryNever;
  // Smallest t with floor((t * tokens * 10^6 + remainder) / period) >= deficit.
  const Wide deficit = Wide(microtokens) - balance_;
  const Wide numerator = deficit * limit.rate.period_ns - remainder_;
  const Wide per_ns = Wide(limit.rate.tokens) * kMicrotokensPerToken;
  const Wide t = (numerator + per_ns - 1) / per_ns;
  return t > Wide(INT64_MAX - 1) ? kRetryNever : int64_t(t);
}

Decision TokenBucket::try_acquire(const Limit& limit, int64_t cost, MonoNanos now_ns) {
  Decision d;
  if (cost < 0) {
    d.reason = DenyReason::kInvalidCost;
    d.retry_after_ns = kRetryNever;
    d.remaining = whole_tokens(balance_microtokens(limit, now_ns));
    return d;
  }
  refill(limit, now_ns);
  if (cost > limit.burst) {
    d.reason = DenyReason::kCostExceedsBurst;
    d.retry_after_ns = kRetryNever;
    d.remaining = whole_tokens(balance_);
    return d;
  }
  const int64_t need = std::max<int64_t>(cost, 1) * kMicrotokensPerToken;
  if (balance_ >= need) {
    balance_ -= cost * kMicrotokensPerToken;
    d.allowed = true;
  } else {
    d.reason = DenyReason::kInsufficientTokens;
    d.retry_after_ns = nanos_until(limit, need);
  }
  d.remaining = whole_tokens(balance_);
  return d;
}

void TokenBucket::refund(const Limit& limit, int64_t tokens, MonoNanos now_ns) {
  if (tokens <= 0) return;
  refill(limit, now_ns);
  const int64_t cap = cap_micro(limit);
  if (balance_ >= cap) return;
  // In token units first, so that an absurd figure cannot overflow the multiplication.
  const int64_t room = (cap - balance_) / kMicrotokensPerToken + 1;
  balance_ = tokens >= room ? cap : std::min(cap, balance_ + tokens * kMicrotokensPerToken);
}

void TokenBucket::consume_remote(const Limit& limit, int64_t tokens, MonoNanos now_ns) {
  if (tokens < 0) {
    if (tokens != std::numeric_limits<int64_t>::min()) refund(limit, -tokens, now_ns);
    return;
  }
  if (tokens == 0) return;
  refill(limit, now_ns);
  const int64_t floor = floor_micro(limit);
  // Clamp in token units first so an absurd remote figure cannot overflow the multiplication.
  const int64_t room = (balance_ - floor) / kMicrotokensPerToken + 1;
  if (tokens >= room) {
    balance_ = floor;
  } else {
    balance_ = std::max(floor, balance_ - tokens * kMicrotokensPerToken);
  }
}

int64_t TokenBucket::balance_microtokens(const Limit& limit, MonoNanos now_ns) {
  refill(limit, now_ns);
  return balance_;
}

bool TokenBucket::full_at(const Limit& limit, MonoNanos now_ns) {
  return balance_microtokens(limit, now_ns) >= cap_micro(limit);
}

void TokenBucket::clamp_to(const Limit& limit) {
  balance_ = std::clamp(balance_, floor_micro(limit), cap_micro(limit));
  if (balance_ == cap_micro(limit)) remainder_ = 0;
  // The carry is in units of the old period; keep it only if it still fits the new one.
  if (remainder_ >= limit.rate.period_ns) remainder_ = 0;
}

}  // namespace tollgate
