#include "core/key_table/rate_scale.h"

#include <algorithm>
#include <utility>

namespace tollgate::key_table {
namespace {
// __extension__ keeps -Wpedantic quiet about the GCC/Clang builtin type.
__extension__ typedef __int128 Wide;
}  // namespace

RateScale RateScale::of(uint32_t num, uint32_t den) {
  if (den == 0 || num > den) num = den = 1;
  if (num == 0) return RateScale(1, int64_t(std::max<uint32_t>(den, 1)) * 1000);
  return RateScale(num, den);
}

// Only absurd rules pay this (a 128-bit gcd per check), and only under the proportional policy
// while members are unreachable.
Limit RateScale::apply_wide(Limit limit) const {
  Wide tokens = static_cast<Wide>(limit.rate.tokens) * num_;
  Wide period = static_cast<Wide>(limit.rate.period_ns) * den_;
  Wide a = tokens, b = period;
  while (b != 0) a = std::exchange(b, a % b);
  tokens /= a;
  period /= a;
  if (tokens > INT64_MAX || period > INT64_MAX) {
    const Wide per_token = period / tokens;  // >= 0; tokens >= 1
    if (per_token >= INT64_MAX) {
      tokens = 1;
      period = INT64_MAX;
    } else {
      const Wide fewer = std::min<Wide>(tokens, INT64_MAX / (per_token + 1));
      // period x fewer / tokens, below (per_token + 1) x fewer <= INT64_MAX; the product itself
      // may not fit 128 bits, so in long double (64 mantissa bits: exact to one part in 2^63).
      const long double shorter =
          static_cast<long double>(period) * static_cast<long double>(fewer) / static_cast<long double>(tokens);
      period = std::min<Wide>(static_cast<Wide>(shorter), INT64_MAX);
      tokens = fewer;
    }
  }
  limit.rate.tokens = static_cast<int64_t>(tokens);
  limit.rate.period_ns = std::max<int64_t>(static_cast<int64_t>(period), 1);
  return limit;
}

}  // namespace tollgate::key_table
