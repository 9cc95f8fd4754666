// Part of the key table (core/key_table.cc): the refill rate every bucket is held to, scaled by
// an exact fraction num/den (the proportional partition policy: reachable over known members),
// so that scaled refill stays drift-free.
#ifndef TOLLGATE_SRC_CORE_KEY_TABLE_RATE_SCALE_H_
#define TOLLGATE_SRC_CORE_KEY_TABLE_RATE_SCALE_H_

#include <cstdint>

#include "tollgate/limit.h"

namespace tollgate::key_table {

class RateScale {
 public:
  // 1/1: every rule's own rate.
  RateScale() = default;
  // The fraction KeyTable::set_rate_scale was given, made usable: num/den within (0, 1]
  // (den 0, or num above den, is 1/1) and never 0 (refill never stops: 0/den is 1/(1000 den)).
  static RateScale of(uint32_t num, uint32_t den);

  bool operator==(const RateScale& o) const { return num_ * o.den_ == den_ * o.num_; }
  int64_t num() const { return num_; }
  int64_t den() const { return den_; }

  // `limit` with its refill rate scaled: tokens x num per period x den, exact while both fit 64
  // bits (every check pays two multiplications, and nothing at 1/1).
  Limit apply(Limit limit) const {
    if (num_ != den_) {
      int64_t tokens, period;
      if (__builtin_mul_overflow(limit.rate.tokens, num_, &tokens) ||
          __builtin_mul_overflow(limit.rate.period_ns, den_, &period)) {
        return apply_wide(limit);
      }
      limit.rate.tokens = tokens;
      limit.rate.period_ns = period;
    }
    return limit;
  }

 private:
  RateScale(int64_t num, int64_t den) : num_(num), den_(den) {}
  // apply() when a product overflows 64 bits (a slow rule in a large cluster: 1/h x 4,096 members
  // x 1,000 is 1.5e19 ns): the fraction reduced, exact whenever it then fits; otherwise fewer
  // tokens over a proportionally shorter period (the period per token kept to within one part in
  // tokens), and a rate slower than one token in 2^63 ns (292 years) refills at that.
  Limit apply_wide(Limit limit) const;

  int64_t num_ = 1, den_ = 1;
};

}  // namespace tollgate::key_table

#endif  // TOLLGATE_SRC_CORE_KEY_TABLE_RATE_SCALE_H_
