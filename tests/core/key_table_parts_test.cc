// The key table's parts (src/core/key_table/), each on its own: what KeyTable's own tests
// (key_table_test.cc) can only reach through a whole table.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/key_table/entry_store.h"
#include "core/key_table/pending_orphans.h"
#include "core/key_table/probes.h"
#include "core/key_table/rate_scale.h"
#include "core/key_table/remembered_balances.h"
#include "core/key_table/shard_mutex.h"

namespace tollgate::key_table {
namespace {

Limit limit_of(int64_t tokens, int64_t period_ns, int64_t burst) {
  Limit l;
  l.rate = {tokens, period_ns};
  l.burst = burst;
  l.max_debt = 10 * burst;
  return l;
}

// --- RateScale ------------------------------------------------------------------------------

TEST(RateScale, OutOfRangeFractionsMeanTheRulesOwnRateAndZeroNeverStopsRefill) {
  EXPECT_EQ(RateScale::of(3, 0), RateScale());  // no denominator: 1/1
  EXPECT_EQ(RateScale::of(5, 4), RateScale());  // above 1: 1/1
  const RateScale zero = RateScale::of(0, 8);
  EXPECT_EQ(zero.num(), 1);
  EXPECT_EQ(zero.den(), 8000);
  EXPECT_EQ(RateScale::of(2, 4), RateScale::of(1, 2));  // the same fraction
  EXPECT_FALSE(RateScale::of(1, 3) == RateScale::of(1, 2));
}

TEST(RateScale, ScalesTheRefillExactlyAndLeavesTheBurst) {
  const Limit l = limit_of(100, kNanosPerSecond, 50);
  EXPECT_EQ(RateScale().apply(l), l);
  const Limit two_thirds = RateScale::of(2, 3).apply(l);
  EXPECT_EQ(two_thirds.rate.tokens, 200);
  EXPECT_EQ(two_thirds.rate.period_ns, 3 * kNanosPerSecond);
  EXPECT_EQ(two_thirds.burst, 50);
}

// A slow rule in a large cluster overflows 64 bits: reduced exactly when that fits, otherwise
// the period per token is kept to within one part in the tokens, and the period never reaches 0.
TEST(RateScale, ProductsBeyondSixtyFourBitsStayCloseToTheExactRate) {
  const Limit hourly = limit_of(1, 3600 * kNanosPerSecond, 1);
  const Limit scaled = RateScale::of(1, 4096 * 1000).apply(hourly);  // 1.5e19 ns
  EXPECT_EQ(scaled.rate.tokens, 1);
  EXPECT_EQ(scaled.rate.period_ns, INT64_MAX);  // slower than one token in 2^63 ns: capped

  const Limit big = limit_of(INT64_MAX / 2, 3, 1);
  const Limit reduced = RateScale::of(4, 6).apply(big);  // x 2/3 after reduction, exact
  // (INT64_MAX / 2) x 4 / (3 x 6), reduced by their gcd (6): 2 (INT64_MAX / 2) / 3 tokens per 3 ns.
  EXPECT_EQ(reduced.rate.tokens, INT64_MAX / 2 / 3 * 2);
  EXPECT_EQ(reduced.rate.period_ns, 3);
  EXPECT_GE(reduced.rate.period_ns, 1);
}

// --- RememberedBalances ---------------------------------------------------------------------

TokenBucket spent(const Limit& l, int64_t tokens_left) {
  return TokenBucket::with_balance(l, tokens_left * kMicrotokensPerToken, 0);
}

TEST(RememberedBalances, ABalanceComesBackOnceAndIsGoneAfter) {
  const Limit l = limit_of(1, kNanosPerSecond, 100);
  RememberedBalances r(8);
  EXPECT_EQ(r.remember(42, spent(l, -30), l), 0u);
  ASSERT_NE(r.find(42), nullptr);
  EXPECT_EQ(r.find(42)->bucket.raw_balance_microtokens(), -30 * kMicrotokensPerToken);
  const auto back = r.take(42);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->limit, l);
  EXPECT_FALSE(r.take(42).has_value());
  EXPECT_EQ(r.size(), 0u);
}

// A flood of barely spent balances must not push out a debt: at capacity the light ones go
// first, oldest first.
TEST(RememberedBalances, AtCapacityBarelySpentBalancesAreForgottenBeforeDebts) {
  const Limit l = limit_of(1, kNanosPerSecond, 100);
  RememberedBalances r(3);
  r.remember(1, spent(l, -50), l);  // in debt
  r.remember(2, spent(l, 99), l);   // barely spent
  r.remember(3, spent(l, 98), l);
  EXPECT_EQ(r.remember(4, spent(l, 97), l), 1u);  // forgets 2, the oldest light one
  EXPECT_EQ(r.find(2), nullptr);
  EXPECT_EQ(r.remember(5, spent(l, 96), l), 1u);  // then 3
  EXPECT_EQ(r.find(3), nullptr);
  ASSERT_NE(r.find(1), nullptr);  // the debt stays
  EXPECT_EQ(r.size(), 3u);
}

TEST(RememberedBalances, RefilledBalancesExpireOldestFirstAndDebtsWait) {
  const Limit l = limit_of(10, kNanosPerSecond, 10);  // refills 10 tokens a second
  RememberedBalances r(8);
  r.remember(1, spent(l, 5), l);    // full again after 0.5 s
  r.remember(2, spent(l, -90), l);  // after 10 s
  r.expire(kNanosPerSecond, 100);
  EXPECT_EQ(r.find(1), nullptr);
  EXPECT_NE(r.find(2), nullptr);
  r.expire(11 * kNanosPerSecond, 100);
  EXPECT_TRUE(r.empty());
}

// Keys that come back leave stale order entries; behind a long debt they are compacted, so the
// queues stay within twice the capacity plus the slack however long the debt lasts.
TEST(RememberedBalances, StaleOrderEntriesStayBounded) {
  const Limit l = limit_of(1, 86400 * kNanosPerSecond, 1000);
  RememberedBalances r(16);
  r.remember(7, spent(l, -1000), l);  // a debt that refills over days, at the front
  for (size_t i = 0; i < 100'000; ++i) {
    r.remember(100 + i, spent(l, 0), l);
    r.take(100 + i);  // its key came back
    ASSERT_LE(r.queued(), 2 * 16 + RememberedBalances::kOrderSlack + 1);
  }
  EXPECT_NE(r.find(7), nullptr);
  EXPECT_LE(r.bytes(), RememberedBalances::bound_bytes(16));
}

// --- PendingOrphans -------------------------------------------------------------------------

TEST(PendingOrphans, KeepsUpToItsCapacityCountsTheRestAndHandsThemOverOnce) {
  PendingOrphans o(3);
  EXPECT_TRUE(o.add("a", 1));
  EXPECT_TRUE(o.add(std::string(40, 'b'), 2));  // a key on the heap
  EXPECT_TRUE(o.add("c", 3));
  EXPECT_FALSE(o.add("d", 4));
  EXPECT_EQ(o.dropped(), 1u);
  EXPECT_EQ(o.bytes(), o.walked_bytes());
  EXPECT_LE(o.bytes(), PendingOrphans::bound_bytes(3, 40));

  std::vector<std::pair<std::string, int64_t>> got;
  auto take = [&](std::string_view k, int64_t t) { got.emplace_back(std::string(k), t); };
  EXPECT_EQ(o.take(2, take), 2u);  // the most recent two
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].second, 2);
  EXPECT_EQ(got[1].first, "c");
  EXPECT_EQ(o.take(5, take), 1u);
  EXPECT_EQ(got.back().first, "a");
  EXPECT_EQ(o.size(), 0u);
  EXPECT_EQ(o.bytes(), 0u);
  EXPECT_TRUE(o.add("e", 5));  // room again
}

// --- Probes ---------------------------------------------------------------------------------

TEST(Probes, FindsEveryKeyAddedBelowAndAboveTheLinearScan) {
  Probes probes;
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) keys.push_back("key-" + std::to_string(i));
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(probes.find(keys[i]), nullptr);
    Probe p;
    p.key = keys[i];
    p.rule = uint32_t(i);
    probes.add(p);
    for (size_t j = 0; j <= i; ++j) {  // every key so far, past the switch to the index at 17
      const Probe* found = probes.find(keys[j]);
      ASSERT_NE(found, nullptr) << keys[j];
      EXPECT_EQ(found->rule, j);
    }
  }
  probes.clear();
  EXPECT_EQ(probes.find(keys[3]), nullptr);
  EXPECT_TRUE(probes.all().empty());
}

// --- EntryStore -----------------------------------------------------------------------------

TEST(EntryStore, EntriesNeverMoveAsTheStoreGrowsAndLongKeysLiveOnTheHeap) {
  EntryStore store;
  store.emplace_back();
  Entry* first = &store[0];
  first->set_key("short");
  EXPECT_EQ(first->key_heap_bytes(), 0u);
  for (size_t i = 1; i < 3 * EntryStore::kChunk; ++i) store.emplace_back();
  EXPECT_EQ(&store[0], first);
  EXPECT_EQ(store[0].key(), "short");
  const std::string long_key(Entry::kInlineKey + 1, 'k');
  store[2000].set_key(long_key);
  EXPECT_EQ(store[2000].key(), long_key);
  EXPECT_EQ(store[2000].key_heap_bytes(), long_key.size());
  store[2000].clear_key();
  EXPECT_EQ(store[2000].key_heap_bytes(), 0u);
  EXPECT_EQ(store.bytes(), EntryStore::bound_bytes(store.size()));
}

// --- ShardMutex -----------------------------------------------------------------------------

// Two threads add under the lock, with the holder yielding inside it so that the other spins,
// yields and sleeps on it: not one increment is lost.
TEST(ShardMutex, ExcludesAndEveryWaiterGetsIn) {
  ShardMutex mutex;
  int64_t counter = 0;
  auto work = [&] {
    for (int i = 0; i < 20'000; ++i) {
      ShardLock lock(mutex, true);
      const int64_t seen = counter;
      if (i % 1000 == 0) std::this_thread::yield();
      counter = seen + 1;
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(counter, 40'000);
  ShardLock off(mutex, false);  // a single-owner table takes no lock
  ShardLock on(mutex, true);    // so this one does not wait
}

}  // namespace
}  // namespace tollgate::key_table
