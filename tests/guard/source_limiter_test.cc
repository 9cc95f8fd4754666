#include "guard/source_limiter.h"

#include <gtest/gtest.h>

#include <string>

namespace tollgate {
namespace {

constexpr int64_t kMs = kNanosPerMilli;
constexpr auto kOther = SourceKind::kOther;
constexpr auto kMember = SourceKind::kMember;

SourceLimiterOptions options(int64_t rate, int64_t burst, size_t max_sources,
                             MonoNanos forget_after = 60 * kNanosPerSecond) {
  SourceLimiterOptions o;
  o.bytes_per_second = rate;
  o.burst_bytes = burst;
  o.max_sources = max_sources;
  o.forget_after_ns = forget_after;
  return o;
}

TEST(SourceLimiter, EachSourceGetsItsOwnBudgetAndTheExcessIsDroppedAndCounted) {
  SourceLimiter limiter(options(100'000, 10'000, 16));
  // A flooder: 1,000-byte datagrams every 1 ms = 1 MB/s, ten times its 100 KB/s budget.
  uint64_t passed = 0;
  for (int i = 0; i < 1000; ++i) passed += limiter.admit("10.0.0.66", kOther, 1000, i * kMs);
  // One second: the 10 KB burst plus 100 KB of refill, within one datagram.
  EXPECT_GE(passed, 109u);
  EXPECT_LE(passed, 111u);
  EXPECT_EQ(limiter.dropped(), 1000 - passed);
  // A member beside it is untouched.
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(limiter.admit("10.0.0.2:7946", kMember, 1000, 1000 * kMs + i * 50 * kMs));
}

TEST(SourceLimiter, SpoofedAddressesShareOneBucketOnceTheTableIsFull) {
  SourceLimiter limiter(options(100'000, 10'000, 8));
  uint64_t passed = 0;
  for (int i = 0; i < 10'000; ++i) passed += limiter.admit("198.51.100." + std::to_string(i), kOther, 1000, 0);
  EXPECT_LE(limiter.sources(kOther), 8u);
  // Each of the first 7 addresses sends one datagram (within its own burst); the 9,993 others
  // share the "other sources" bucket, whose 10 KB burst passes 10 of them.
  EXPECT_EQ(passed, 7u + 10u);
  EXPECT_EQ(limiter.dropped(), 10'000u - 17u);
}

// The finding: 4,095 spoofed (or merely reconnecting) sources used to leave every later one,
// a new member included, in the shared bucket for good.
TEST(SourceLimiter, AFloodOfOtherSourcesNeverTakesAMembersBudget) {
  SourceLimiter limiter(options(100'000, 10'000, 8));
  for (int i = 0; i < 10'000; ++i) limiter.admit("198.51.100." + std::to_string(i), kOther, 10'000, 0);
  // A member that first speaks after the flood has a budget of its own, at once.
  for (int m = 0; m < 7; ++m) {
    EXPECT_TRUE(limiter.admit("10.0.0." + std::to_string(m) + ":7946", kMember, 10'000, 0)) << m;
  }
  EXPECT_EQ(limiter.sources(kMember), 7u);
}

TEST(SourceLimiter, SilentSourcesAreForgottenSoNewOnesGetTheirOwnBudget) {
  const MonoNanos forget = 60 * kNanosPerSecond;
  SourceLimiter limiter(options(100'000, 10'000, 8, forget));
  for (int i = 0; i < 7; ++i) limiter.admit("203.0.113." + std::to_string(i), kOther, 1000, 0);
  EXPECT_EQ(limiter.sources(kOther), 7u);
  // A source that keeps sending is kept (with its balance: still drained), the rest age out.
  for (int i = 0; i < 20; ++i) limiter.admit("203.0.113.0", kOther, 10'000, i * kMs);
  MonoNanos now = 0;
  for (; now <= forget; now += forget / 4) limiter.admit("203.0.113.0", kOther, 1, now);
  EXPECT_EQ(limiter.sources(kOther), 1u);
  // A newcomer is not folded into the shared bucket: it passes a whole burst alone.
  EXPECT_TRUE(limiter.admit("192.0.2.1", kOther, 10'000, now));
  EXPECT_EQ(limiter.sources(kOther), 2u);
}

TEST(SourceLimiter, ABalanceSurvivesTheTurnOfAGeneration) {
  SourceLimiter limiter(options(1'000, 10'000, 8, 2 * kNanosPerSecond));
  EXPECT_TRUE(limiter.admit("10.0.0.9", kOther, 10'000, 0));
  // A second later the table turns a generation; the source is still empty (1,000 bytes back).
  EXPECT_FALSE(limiter.admit("10.0.0.9", kOther, 2'000, kNanosPerSecond));
  EXPECT_TRUE(limiter.admit("10.0.0.9", kOther, 1'000, kNanosPerSecond));
}

}  // namespace
}  // namespace tollgate
