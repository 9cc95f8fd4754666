#include "guard/offense_limiter.h"

#include <gtest/gtest.h>

#include <string>

namespace tollgate {
namespace {

constexpr int64_t kSec = kNanosPerSecond;

TEST(OffenseLimiter, OneLinePerOffenderPerIntervalAndTheNextSaysHowManyWereSuppressed) {
  OffenseLimiter limiter({/*interval_ns=*/10 * kSec, /*max_offenders=*/16});
  auto first = limiter.admit("pid 7", 0);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->offender, "pid 7");
  EXPECT_EQ(first->suppressed, 0u);
  for (int i = 1; i <= 999; ++i) EXPECT_FALSE(limiter.admit("pid 7", i * kSec / 100));
  EXPECT_TRUE(limiter.admit("pid 8", kSec)) << "another offender has its own allowance";
  auto next = limiter.admit("pid 7", 10 * kSec);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->suppressed, 999u);
  EXPECT_EQ(limiter.suppressed_total(), 999u);
}

TEST(OffenseLimiter, AFloodOfDistinctOffendersSharesOneEntry) {
  OffenseLimiter limiter({10 * kSec, 8});
  size_t lines = 0;
  for (int i = 0; i < 100'000; ++i) lines += limiter.admit("10.0.0." + std::to_string(i), kSec).has_value();
  EXPECT_LE(limiter.offenders(), 8u);
  EXPECT_EQ(lines, 8u) << "7 named offenders, then one line for all the others";
  auto later = limiter.admit("10.0.9.9", 20 * kSec);
  ASSERT_TRUE(later);
  EXPECT_EQ(later->offender, "other offenders");
  EXPECT_EQ(later->suppressed, 100'000u - 8u);
}

}  // namespace
}  // namespace tollgate
