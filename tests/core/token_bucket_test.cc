#include "core/token_bucket.h"

#include <gtest/gtest.h>

#include "core/clock.h"

namespace tollgate {
namespace {

constexpr int64_t kSec = kNanosPerSecond;
constexpr int64_t kMs = kNanosPerMilli;

Limit per_second(int64_t rate, int64_t burst, int64_t max_debt) { return Limit{Rate{rate, kSec}, burst, max_debt}; }

TEST(TokenBucket, StartsFullAndAdmitsUpToBurst) {
  const Limit limit = per_second(10, 5, 5);
  TokenBucket b(limit, 0);
  for (int i = 0; i < 5; ++i) {
    const Decision d = b.try_acquire(limit, 1, 0);
    EXPECT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.remaining, 4 - i);
    EXPECT_EQ(d.retry_after_ns, 0);
  }
  const Decision d = b.try_acquire(limit, 1, 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kInsufficientTokens);
  EXPECT_EQ(d.retry_after_ns, 100 * kMs);  // one token at 10/s
}

TEST(TokenBucket, LocalAdmissionNeverCreatesDebt) {
  const Limit limit = per_second(1, 3, 10);
  TokenBucket b(limit, 0);
  EXPECT_TRUE(b.try_acquire(limit, 2, 0).allowed);
  const Decision d = b.try_acquire(limit, 2, 0);  // 1 left, 2 asked
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 1);
  EXPECT_EQ(b.raw_balance_microtokens(), 1 * kMicrotokensPerToken);
}

TEST(TokenBucket, RetryAfterIsWhenTheSameCostFits) {
  const Limit limit = per_second(4, 10, 10);
  TokenBucket b(limit, 0);
  ASSERT_TRUE(b.try_acquire(limit, 10, 0).allowed);
  const Decision d = b.try_acquire(limit, 3, 0);
  ASSERT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ns, 750 * kMs);  // 3 tokens at 4/s
  EXPECT_FALSE(b.try_acquire(limit, 3, d.retry_after_ns - 1).allowed);
  EXPECT_TRUE(b.try_acquire(limit, 3, d.retry_after_ns).allowed);
}

TEST(TokenBucket, CostAboveBurstIsAlwaysDeniedWithAReason) {
  const Limit limit = per_second(100, 10, 10);
  TokenBucket b(limit, 0);
  const Decision d = b.try_acquire(limit, 11, 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kCostExceedsBurst);
  EXPECT_EQ(d.retry_after_ns, kRetryNever);
  EXPECT_STREQ(deny_reason_name(d.reason), "cost exceeds burst");
  EXPECT_EQ(d.remaining, 10);  // nothing was taken
  EXPECT_FALSE(b.try_acquire(limit, 11, 1000 * kSec).allowed);
}

TEST(TokenBucket, NegativeCostIsInvalid) {
  const Limit limit = per_second(1, 1, 1);
  TokenBucket b(limit, 0);
  const Decision d = b.try_acquire(limit, -1, 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kInvalidCost);
  EXPECT_EQ(b.raw_balance_microtokens(), kMicrotokensPerToken);
}

TEST(TokenBucket, CostZeroIsAQueryThatTakesNothing) {
  const Limit limit = per_second(1, 2, 2);
  TokenBucket b(limit, 0);
  Decision d = b.try_acquire(limit, 0, 0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 2);
  ASSERT_TRUE(b.try_acquire(limit, 2, 0).allowed);
  d = b.try_acquire(limit, 0, 0);
  EXPECT_FALSE(d.allowed);  // a 1-token request would be denied now
  EXPECT_EQ(d.retry_after_ns, 1 * kSec);
  EXPECT_EQ(b.raw_balance_microtokens(), 0);
}

TEST(TokenBucket, RemoteConsumptionDrivesIntoDebtDownToMaxDebt) {
  const Limit limit = per_second(10, 10, 15);
  TokenBucket b(limit, 0);
  b.consume_remote(limit, 18, 0);
  EXPECT_EQ(b.raw_balance_microtokens(), -8 * kMicrotokensPerToken);
  b.consume_remote(limit, 100, 0);  // beyond max_debt: forgiven
  EXPECT_EQ(b.raw_balance_microtokens(), -15 * kMicrotokensPerToken);
  b.consume_remote(limit, INT64_MAX, 0);  // absurd figures cannot overflow
  EXPECT_EQ(b.raw_balance_microtokens(), -15 * kMicrotokensPerToken);
  b.consume_remote(limit, -5, 0);  // negative remote consumption is a refund
  EXPECT_EQ(b.raw_balance_microtokens(), -10 * kMicrotokensPerToken);
  b.consume_remote(limit, INT64_MIN, 0);  // a figure with no opposite is ignored
  EXPECT_EQ(b.raw_balance_microtokens(), -10 * kMicrotokensPerToken);
}

TEST(TokenBucket, ARefundGivesTokensBackNeverAboveBurst) {
  const Limit limit = per_second(10, 10, 15);
  TokenBucket b(limit, 0);
  b.consume_remote(limit, 12, 0);  // -2
  b.refund(limit, 5, 0);
  EXPECT_EQ(b.raw_balance_microtokens(), 3 * kMicrotokensPerToken);
  b.refund(limit, 100, 0);  // beyond burst: the rest is lost
  EXPECT_EQ(b.raw_balance_microtokens(), 10 * kMicrotokensPerToken);
  b.consume_remote(limit, 25, 0);  // -15
  b.refund(limit, INT64_MAX, 0);   // absurd figures cannot overflow
  EXPECT_EQ(b.raw_balance_microtokens(), 10 * kMicrotokensPerToken);
  b.refund(limit, 0, 0);
  b.refund(limit, -3, 0);  // not a refund: nothing
  EXPECT_EQ(b.raw_balance_microtokens(), 10 * kMicrotokensPerToken);
  // The refill to `now` comes first: a refund does not lose the refill owed before it.
  b.consume_remote(limit, 10, 0);  // 0
  b.refund(limit, 2, kSec / 2);    // refilled 5, then 2 more
  EXPECT_EQ(b.raw_balance_microtokens(), 7 * kMicrotokensPerToken);
}

TEST(TokenBucket, DebtIsRepaidAtTheRefillRate) {
  const Limit limit = per_second(10, 10, 10);
  TokenBucket b(limit, 0);
  b.consume_remote(limit, 20, 0);  // -10
  const Decision denied = b.try_acquire(limit, 1, 0);
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.remaining, -10);
  EXPECT_EQ(denied.retry_after_ns, 1100 * kMs);  // 11 tokens to go from -10 to 1 at 10/s
  EXPECT_EQ(b.balance_microtokens(limit, 1 * kSec), 0);
  EXPECT_FALSE(b.try_acquire(limit, 1, 1099 * kMs).allowed);
  EXPECT_TRUE(b.try_acquire(limit, 1, 1100 * kMs).allowed);
}

TEST(TokenBucket, NeverRefillsAboveBurst) {
  const Limit limit = per_second(1000, 5, 5);
  TokenBucket b(limit, 0);
  ASSERT_TRUE(b.try_acquire(limit, 5, 0).allowed);
  EXPECT_EQ(b.balance_microtokens(limit, 3600 * kSec), 5 * kMicrotokensPerToken);
  EXPECT_TRUE(b.full_at(limit, 3600 * kSec));
}

TEST(TokenBucket, RemainingRoundsDownWhileInDebt) {
  const Limit limit = per_second(2, 10, 10);
  TokenBucket b(limit, 0);
  b.consume_remote(limit, 11, 0);                         // -1.0
  const Decision d = b.try_acquire(limit, 1, 250 * kMs);  // -0.5
  EXPECT_EQ(d.remaining, -1);
}

TEST(TokenBucket, TimeGoingBackwardsChangesNothing) {
  const Limit limit = per_second(10, 10, 10);
  TokenBucket b(limit, 5 * kSec);
  ASSERT_TRUE(b.try_acquire(limit, 10, 5 * kSec).allowed);
  EXPECT_EQ(b.balance_microtokens(limit, 1 * kSec), 0);
  EXPECT_EQ(b.balance_microtokens(limit, 5 * kSec + 100 * kMs), kMicrotokensPerToken);
}

// 10^7 refills at irregular steps under a rate that is not a whole number of microtokens per
// nanosecond (7 tokens every 3 s) must add exactly what one closed-form computation says.
TEST(TokenBucket, TenMillionRefillsDoNotDrift) {
  const Limit limit{Rate{7, 3 * kSec}, kMaxTokens, kMaxTokens};
  TokenBucket b = TokenBucket::with_balance(limit, -kMaxTokens * kMicrotokensPerToken, 0);
  uint64_t lcg = 12345;
  MonoNanos now = 0;
  for (int i = 0; i < 10'000'000; ++i) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    now += int64_t(lcg >> 54) + 1;  // 1 .. 1024 ns
    b.balance_microtokens(limit, now);
  }
  __extension__ typedef __int128 Wide;
  const int64_t expected_gain = int64_t(Wide(now) * 7 * kMicrotokensPerToken / (3 * kSec));
  EXPECT_EQ(b.raw_balance_microtokens(), -kMaxTokens * kMicrotokensPerToken + expected_gain);
  EXPECT_GT(expected_gain, 0);
}

TEST(TokenBucket, SlowRatesRefillExactly) {
  const Limit limit{Rate{1, 3600 * kSec}, 2, 0};  // 1/h
  TokenBucket b(limit, 0);
  ASSERT_TRUE(b.try_acquire(limit, 2, 0).allowed);
  const Decision d = b.try_acquire(limit, 1, 0);
  EXPECT_EQ(d.retry_after_ns, 3600 * kSec);
  for (int minute = 1; minute < 60; ++minute) EXPECT_FALSE(b.try_acquire(limit, 1, minute * 60 * kSec).allowed);
  EXPECT_TRUE(b.try_acquire(limit, 1, 3600 * kSec).allowed);
}

TEST(TokenBucket, ClampToANewLimitKeepsTheBalanceInRange) {
  const Limit before = per_second(10, 100, 100);
  TokenBucket b(before, 0);
  b.consume_remote(before, 180, 0);  // -80
  const Limit after = per_second(10, 10, 20);
  b.clamp_to(after);
  EXPECT_EQ(b.raw_balance_microtokens(), -20 * kMicrotokensPerToken);
  TokenBucket full(before, 0);
  full.clamp_to(after);
  EXPECT_EQ(full.raw_balance_microtokens(), 10 * kMicrotokensPerToken);
}

TEST(TokenBucket, ScaledRatesSurviveGapsOfCenturies) {
  // The proportional policy multiplies a rule's tokens by up to ~4096 (reachable members); an
  // idle gap then must not overflow the 128-bit refill product.
  const Limit huge{Rate{kMaxTokens * 4096, kNanosPerSecond * 4096}, kMaxTokens, kMaxTokens};
  TokenBucket b(huge, 0);
  b.consume_remote(huge, 2 * kMaxTokens, 0);
  EXPECT_EQ(b.balance_microtokens(huge, 0), -kMaxTokens * kMicrotokensPerToken);
  EXPECT_EQ(b.balance_microtokens(huge, INT64_MAX / 2), kMaxTokens * kMicrotokensPerToken);
  const Limit slow{Rate{4096, 3600 * kNanosPerSecond * 4096}, kMaxTokens, 0};  // 1/h, scaled
  TokenBucket s(slow, 0);
  ASSERT_TRUE(s.try_acquire(slow, kMaxTokens, 0).allowed);
  const int64_t t = (int64_t(1) << 62);  // ~146 years: 1,280,000-odd hours of refill
  EXPECT_EQ(s.balance_microtokens(slow, t),
            (t / (3600 * kNanosPerSecond)) * kMicrotokensPerToken +
                (t % (3600 * kNanosPerSecond)) * kMicrotokensPerToken / (3600 * kNanosPerSecond));
}

TEST(ManualClock, MovesOnlyForward) {
  ManualClock clock(100);
  clock.advance_ns(50);
  EXPECT_EQ(clock.now_ns(), 150);
  clock.advance_ns(-10);
  clock.set_ns(120);
  EXPECT_EQ(clock.now_ns(), 150);
  clock.set_ns(200);
  EXPECT_EQ(clock.now_ns(), 200);
}

}  // namespace
}  // namespace tollgate
