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

}  // namespace
}  // namespace tollgate::sim
