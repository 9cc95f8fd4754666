#include "oracle.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

namespace tollgate::sim {
namespace {

std::shared_ptr<const RuleSet> ten_per_second_burst_five() {
  return std::make_shared<RuleSet>(std::vector<Rule>{{"k*", Limit{Rate{10, kNanosPerSecond}, 5, 5}, 1}}, std::nullopt);
}

TEST(Oracle, AdmitsTheBurstThenTheRefillRate) {
  Oracle o(ten_per_second_burst_five());
  int admitted = 0;
  for (int i = 0; i < 7; ++i) admitted += o.admit("k1", 1, 0);
  EXPECT_EQ(admitted, 5);                               // the burst
  EXPECT_FALSE(o.admit("k1", 1, 99 * kNanosPerMilli));  // 0.99 tokens refilled
  EXPECT_TRUE(o.admit("k1", 1, 100 * kNanosPerMilli));  // 1 token at 10/s after 100 ms
  EXPECT_FALSE(o.admit("k1", 1, 100 * kNanosPerMilli));
  EXPECT_TRUE(o.admit("k1", 3, 400 * kNanosPerMilli));   // 3 more by 400 ms
  EXPECT_FALSE(o.admit("k1", 6, 10 * kNanosPerSecond));  // above burst: never
}

TEST(Oracle, KeysHaveTheirOwnBucketsAndUnlimitedKeysPass) {
  Oracle o(ten_per_second_burst_five());
  EXPECT_TRUE(o.admit("k1", 5, 0));
  EXPECT_TRUE(o.admit("k2", 5, 0));
  EXPECT_FALSE(o.admit("k1", 1, 0));
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(o.admit("other", 1000, 0));
}

// Issue 40: the ideal semaphore grants up to the limit, frees a hold at its end (not before),
// and a node that goes down takes its holders' slots with it; keys without a concurrency rule
// always pass and hold nothing.
TEST(OracleSemaphore, GrantsUpToTheLimitFreesAtTheHoldsEndAndWithItsNode) {
  OracleSemaphore o(std::make_shared<RuleSet>(std::vector<Rule>{}, std::nullopt, nullptr,
                                              std::vector<ConcurrencyRule>{{"job*", 3, kNanosPerSecond, 1}}));
  EXPECT_EQ(o.limit("job1"), 3);
  EXPECT_EQ(o.limit("other"), 0);
  EXPECT_TRUE(o.admit("job1", 2, /*node=*/0, 0, 100));
  EXPECT_TRUE(o.admit("job1", 1, /*node=*/1, 10, 1000));
  EXPECT_FALSE(o.admit("job1", 1, 0, 50, 1000));
  EXPECT_TRUE(o.admit("job2", 3, 1, 50, 1000)) << "another key, its own slots";
  EXPECT_FALSE(o.admit("job1", 1, 0, 99, 1000)) << "node 0's hold ends at 100";
  EXPECT_TRUE(o.admit("job1", 2, 0, 100, 1000));
  EXPECT_EQ(o.in_flight("job1", 100), 3);
  o.node_down(1);
  EXPECT_EQ(o.in_flight("job1", 100), 2);
  EXPECT_EQ(o.in_flight("job2", 100), 0);
  EXPECT_FALSE(o.admit("job1", 4, 0, 200, 1)) << "above the limit: never";
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(o.admit("other", 100, 0, 300, 1000));
  EXPECT_EQ(o.in_flight("other", 300), 0);
}

}  // namespace
}  // namespace tollgate::sim
