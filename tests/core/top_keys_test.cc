// The top-K summary (src/core/top_keys.h, issue 41): space-saving against exact counts on Zipf
// streams, the bounds it states, and the merge of several nodes' summaries.
#include "core/top_keys.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace tollgate {
namespace {

// A Zipf(1) stream over `keys` keys with weights 1..3, deterministic for a seed.
std::vector<std::pair<std::string, uint64_t>> zipf_stream(size_t n, size_t keys, uint32_t seed) {
  std::vector<double> cdf(keys);
  double sum = 0;
  for (size_t i = 0; i < keys; ++i) cdf[i] = (sum += 1.0 / double(i + 1));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<std::pair<std::string, uint64_t>> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t k = size_t(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
    out.emplace_back("user:" + std::to_string(k), 1 + rng() % 3);
  }
  return out;
}

TEST(SpaceSaving, EveryKeysTrueWeightLiesWithinWhatTheSummarySays) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    SpaceSaving s(64);
    std::map<std::string, uint64_t> exact;
    uint64_t total = 0;
    for (const auto& [key, w] : zipf_stream(50'000, 10'000, seed)) {
      s.add(key, w);
      exact[key] += w;
      total += w;
    }
    EXPECT_EQ(s.total(), total);
    EXPECT_EQ(s.size(), 64u);
    EXPECT_LE(s.threshold(), total / 64) << "the counts sum to the total: the smallest is at most n/k";
    uint64_t counted = 0;
    std::map<std::string, const TopEntry*> held;
    const std::vector<TopEntry> all = s.top(64);
    for (const TopEntry& e : all) {
      counted += e.count;
      held[e.key] = &e;
      EXPECT_LE(e.count - e.error, exact[e.key]) << e.key;
      EXPECT_GE(e.count, exact[e.key]) << e.key;
    }
    EXPECT_EQ(counted, total);
    for (const auto& [key, w] : exact) {
      if (!held.contains(key)) {
        EXPECT_LE(w, s.threshold()) << key << " is not held yet weighs more";
      }
    }
    // Zipf's head is held, and ranked as it is: the exact top 5 are the reported top 5.
    std::vector<std::pair<uint64_t, std::string>> by_weight;
    for (const auto& [key, w] : exact) by_weight.emplace_back(w, key);
    std::sort(by_weight.rbegin(), by_weight.rend());
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(all[i].key, by_weight[i].second) << "rank " << i << " seed " << seed;
  }
}

TEST(SpaceSaving, BelowCapacityItIsExactAndClearEmptiesIt) {
  SpaceSaving s(4);
  s.add("a", 3);
  s.add("b", 1);
  s.add("a", 2);
  s.add("c", 0);  // nothing
  EXPECT_EQ(s.threshold(), 0u);
  const std::vector<TopEntry> t = s.top(10);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].key, "a");
  EXPECT_EQ(t[0].count, 5u);
  EXPECT_EQ(t[0].error, 0u);
  EXPECT_EQ(t[1].key, "b");
  EXPECT_GT(s.bytes(), 0u);
  s.clear();
  EXPECT_EQ(s.total(), 0u);
  EXPECT_TRUE(s.top(10).empty());
  EXPECT_THROW(SpaceSaving(0), std::invalid_argument);
}

// A new key takes the smallest counter over: its count is the old one's plus its weight, its
// error the old count, so [count - error, count] still holds its true weight.
TEST(SpaceSaving, ANewKeyInheritsTheSmallestCountAsItsError) {
  SpaceSaving s(2);
  s.add("a", 10);
  s.add("b", 2);
  s.add("c", 1);  // replaces b
  const std::vector<TopEntry> t = s.top(2);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].key, "a");
  EXPECT_EQ(t[1].key, "c");
  EXPECT_EQ(t[1].count, 3u);
  EXPECT_EQ(t[1].error, 2u);
  EXPECT_EQ(s.threshold(), 3u);
}

// Eight nodes each see a share of one Zipf stream (disjoint), summarise it with 64 counters and
// publish their 32 largest; the merge's intervals hold every key's cluster-wide total, are at
// most error_bound wide, and rank the exact top 10 first.
TEST(MergeTopKeys, EightNodesShareOfAStreamMergeIntoIntervalsThatHoldTheTruth) {
  std::vector<SpaceSaving> nodes(8, SpaceSaving(64));
  std::map<std::string, uint64_t> exact;
  std::mt19937 pick(7);
  for (const auto& [key, w] : zipf_stream(200'000, 100'000, 11)) {
    nodes[pick() % 8].add(key, w);
    exact[key] += w;
  }
  std::vector<PublishedTop> parts;
  for (const SpaceSaving& n : nodes) parts.push_back(publish(n, 32));
  const MergedTop m = merge_top_keys(parts, 20);
  ASSERT_EQ(m.keys.size(), 20u);
  uint64_t total = 0;
  for (const auto& [key, w] : exact) total += w;
  EXPECT_EQ(m.total, total);
  for (const MergedKey& k : m.keys) {
    EXPECT_LE(k.lower, exact[k.key]) << k.key;
    EXPECT_GE(k.upper, exact[k.key]) << k.key;
    EXPECT_LE(k.upper - k.lower, m.error_bound) << k.key;
  }
  std::map<std::string, bool> reported;
  for (const MergedKey& k : m.keys) reported[k.key] = true;
  for (const auto& [key, w] : exact) {
    if (!reported.contains(key)) {
      EXPECT_LE(w, m.unreported_bound) << key;
    }
  }
  std::vector<std::pair<uint64_t, std::string>> by_weight;
  for (const auto& [key, w] : exact) by_weight.emplace_back(w, key);
  std::sort(by_weight.rbegin(), by_weight.rend());
  for (size_t i = 0; i < 10; ++i) EXPECT_TRUE(reported.contains(by_weight[i].second)) << "exact rank " << i;
  // The bound the merge states: each part's threshold is at most its total over the 32 it
  // publishes (their counts sum to no more), so error_bound <= n / 32. Here it is 5,492 (the
  // exact 10th key weighs 3,383): wide next to the head's ranks, which are right all the same,
  // as space-saving ranks Zipf data (docs/topk-plan.md). More counters narrow it.
  EXPECT_LE(m.error_bound, m.total / 32);
}

TEST(MergeTopKeys, AKeyOneNodeLacksCountsThatNodesThresholdInItsUpperBound) {
  PublishedTop a{{{"x", 10, 0}, {"y", 4, 1}}, 3, 20};
  PublishedTop b{{{"y", 6, 0}}, 2, 9};
  const std::vector<PublishedTop> parts{a, b};
  const MergedTop m = merge_top_keys(parts, 10);
  EXPECT_EQ(m.error_bound, 5u);
  EXPECT_EQ(m.total, 29u);
  ASSERT_EQ(m.keys.size(), 2u);
  EXPECT_EQ(m.keys[0].key, "x");  // [10, 12]: b may hold up to 2 of it
  EXPECT_EQ(m.keys[0].lower, 10u);
  EXPECT_EQ(m.keys[0].upper, 12u);
  EXPECT_EQ(m.keys[1].key, "y");  // [3 + 6, 4 + 6]
  EXPECT_EQ(m.keys[1].lower, 9u);
  EXPECT_EQ(m.keys[1].upper, 10u);
  EXPECT_EQ(merge_top_keys(parts, 1).unreported_bound, 10u) << "y, left out, may weigh 10";
}

// --- RuleTops: one node's summaries per rule and metric over two windows ------------------------

constexpr MonoNanos kW = 10'000'000'000;  // the window in these tests: 10 s

TEST(RuleTops, AnAnswerCoversTheLastOneToTwoWindowsAndAQuietRuleIsForgotten) {
  RuleTops t({8, kW, 64});
  t.advance(0);
  t.add("user:*", TopMetric::kDenied, "user:a", 5);
  t.advance(kW);  // a second window: the first is still answered
  t.add("user:*", TopMetric::kDenied, "user:a", 2);
  t.add("user:*", TopMetric::kDenied, "user:b", 1);
  auto p = t.published("user:*", TopMetric::kDenied, 10);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->entries.size(), 2u);
  EXPECT_EQ(p->entries[0].key, "user:a");
  EXPECT_EQ(p->entries[0].count, 7u);  // exact below capacity: 5 + 2
  EXPECT_EQ(p->entries[0].error, 0u);
  EXPECT_EQ(p->total, 8u);
  EXPECT_EQ(t.covered_since(), 0);
  EXPECT_FALSE(t.published("user:*", TopMetric::kTokens, 10).has_value());  // nothing counted
  t.advance(2 * kW);                                                        // the first window goes
  p = t.published("user:*", TopMetric::kDenied, 10);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->entries[0].count, 2u);
  EXPECT_EQ(t.covered_since(), kW);
  t.advance(3 * kW);  // and then the second: nothing counted in either window
  EXPECT_FALSE(t.published("user:*", TopMetric::kDenied, 10).has_value());
  EXPECT_TRUE(t.rules().empty());
  // A gap longer than two windows forgets everything at once.
  t.add("user:*", TopMetric::kTokens, "user:c", 3);
  t.advance(6 * kW);
  EXPECT_FALSE(t.published("user:*", TopMetric::kTokens, 10).has_value());
}

TEST(RuleTops, TwoWindowsMergeIntoOneSummaryWhoseIntervalsHoldTheTruth) {
  const auto stream = zipf_stream(20'000, 2'000, 7);
  RuleTops t({32, kW, 64});
  t.advance(0);
  std::map<std::string, uint64_t> exact;
  for (size_t i = 0; i < stream.size(); ++i) {
    if (i == stream.size() / 2) t.advance(kW);
    t.add("r", TopMetric::kTokens, stream[i].first, stream[i].second);
    exact[stream[i].first] += stream[i].second;
  }
  const auto p = t.published("r", TopMetric::kTokens, 32);
  ASSERT_TRUE(p.has_value());
  uint64_t total = 0;
  for (const auto& [key, w] : exact) total += w;
  EXPECT_EQ(p->total, total);
  std::map<std::string, const TopEntry*> listed;
  for (const TopEntry& e : p->entries) {
    listed[e.key] = &e;
    EXPECT_LE(e.count - e.error, exact[e.key]) << e.key;
    EXPECT_GE(e.count, exact[e.key]) << e.key;
  }
  for (const auto& [key, w] : exact) {
    if (!listed.contains(key)) {
      EXPECT_LE(w, p->threshold) << key << " left out";
    }
  }
  EXPECT_LE(p->threshold, total / 16) << "each window's threshold is at most its total / 32";
}

TEST(RuleTops, RulesBeyondTheCapAreRefusedAndCountedAndTheBusiestComeFirst) {
  RuleTops t({4, kW, 2});
  t.advance(0);
  t.add("a", TopMetric::kTokens, "k", 100);
  t.add("b", TopMetric::kDenied, "k", 1);
  t.add("c", TopMetric::kDenied, "k", 50);  // a third rule: refused
  EXPECT_EQ(t.rules_refused(), 1u);
  EXPECT_EQ(t.rules(), (std::vector<std::string>{"b", "a"}));  // denials rank first
  EXPECT_LE(t.bytes(), RuleTops::bound_bytes(t.options(), 1));
  RuleTops off({0, kW, 2});
  off.add("a", TopMetric::kTokens, "k", 1);
  EXPECT_FALSE(off.published("a", TopMetric::kTokens, 1).has_value());
  EXPECT_EQ(RuleTops::bound_bytes(off.options(), 256), 0u);
}

TEST(RuleTops, BytesStayWithinTheBoundAtCapacityWithLongKeys) {
  RuleTopsOptions o{16, kW, 3};
  RuleTops t(o);
  t.advance(0);
  for (int w = 0; w < 3; ++w) {
    for (int r = 0; r < 3; ++r) {
      for (int i = 0; i < 100; ++i) {
        for (const TopMetric m : {TopMetric::kDenied, TopMetric::kTokens}) {
          t.add(std::string(200, char('a' + r)), m, std::string(250, 'x') + std::to_string(i), 1 + uint64_t(i));
        }
      }
    }
    EXPECT_LE(t.bytes(), RuleTops::bound_bytes(o, 256)) << "window " << w;
    t.advance((w + 1) * kW);
  }
}

}  // namespace
}  // namespace tollgate
