#include "core/source_limiter.h"

#include <gtest/gtest.h>

#include <string>

namespace tollgate {
namespace {

constexpr int64_t kMs = kNanosPerMilli;

TEST(SourceLimiter, EachSourceGetsItsOwnBudgetAndTheExcessIsDroppedAndCounted) {
  SourceLimiter limiter({/*bytes_per_second=*/100'000, /*burst_bytes=*/10'000, /*max_sources=*/16});
  // A flooder: 1,000-byte datagrams every 1 ms = 1 MB/s, ten times its 100 KB/s budget.
  uint64_t passed = 0;
  for (int i = 0; i < 1000; ++i) passed += limiter.admit("10.0.0.66:7946", 1000, i * kMs);
  // One second: the 10 KB burst plus 100 KB of refill, within one datagram.
  EXPECT_GE(passed, 109u);
  EXPECT_LE(passed, 111u);
  EXPECT_EQ(limiter.dropped(), 1000 - passed);
  // A member beside it is untouched.
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(limiter.admit("10.0.0.2:7946", 1000, 1000 * kMs + i * 50 * kMs));
}

TEST(SourceLimiter, SpoofedAddressesShareOneBucketOnceTheTableIsFull) {
  SourceLimiter limiter({100'000, 10'000, 8});
  uint64_t passed = 0;
  for (int i = 0; i < 10'000; ++i) passed += limiter.admit("198.51.100." + std::to_string(i), 1000, 0);
  EXPECT_LE(limiter.sources(), 8u);
  // Each of the first 7 addresses sends one datagram (within its own burst); the 9,993 others
  // share the "other sources" bucket, whose 10 KB burst passes 10 of them.
  EXPECT_EQ(passed, 7u + 10u);
  EXPECT_EQ(limiter.dropped(), 10'000u - 17u);
}

}  // namespace
}  // namespace tollgate
