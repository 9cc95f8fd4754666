// The concurrent KeyTable (KeyTableOptions::concurrent): many threads at once, and every property
// of the single-owner table kept: exact charges, nothing lost or reported twice, all or nothing
// across shards, bounded memory with remembered debt. CI runs these under ThreadSanitizer too.
// Time stands still (every call at the same instant), so the outcome does not depend on how
// the threads interleave, only the order in which they get there.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/key_table.h"
#include "support/test_rules.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

using testing::one_rule;
using testing::per_second;
constexpr int64_t kM = kMicrotokensPerToken;
// Huge and refilling one token an hour: a balance shows what was charged.
constexpr Limit kHuge{Rate{1, 3600 * kNanosPerSecond}, 1'000'000'000, 1'000'000'000};

// Runs fn(i) on n threads released together.
template <class F>
void on_threads(int n, F fn) {
  std::latch go(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&go, &fn, i] {
      go.arrive_and_wait();
      fn(i);
    });
  }
  for (std::thread& t : threads) t.join();
}

int64_t charged(KeyTable& t, const std::string& key, const Limit& limit) {
  const auto b = t.balance_microtokens(key, 0);
  return b ? (limit.burst * kM - *b) / kM : 0;
}

std::string key(int i) { return "k" + std::to_string(i); }

TEST(ConcurrentKeyTable, ShardsAreAPowerOfTwoAndSmallTablesHaveFew) {
  const auto rules = one_rule("k*", kHuge);
  EXPECT_EQ(KeyTable(rules).shards(), 1u);
  EXPECT_EQ(KeyTable(rules, {.concurrent = true}).shards(), 64u);  // 1M keys
  EXPECT_EQ(KeyTable(rules, {.max_keys = 8192, .concurrent = true}).shards(), 8u);
  EXPECT_EQ(KeyTable(rules, {.max_keys = 100, .concurrent = true}).shards(), 1u);
  EXPECT_EQ(KeyTable(rules, {.concurrent = true, .shards = 12}).shards(), 8u);
  EXPECT_EQ(KeyTable(rules, {.concurrent = true, .shards = 1000}).shards(), 64u);
}

// Four threads check kAtOnceKeys keys (random keys, costs 1 to 3), a fifth charges what other nodes
// admitted, and a sixth seals (take_pending, 64 keys at a time) and sweeps, all at once. Returns
// what was admitted, charged remotely and taken, by key number.
struct AtOnce {
  std::map<int, int64_t> admitted, remote, taken;
};
constexpr int kAtOnceKeys = 500;
AtOnce checks_charges_and_sealing_at_once(KeyTable& t, int ops) {
  constexpr int kCheckers = 4;
  std::vector<std::map<int, int64_t>> admitted(kCheckers);
  AtOnce r;
  std::atomic<int> checkers_left{kCheckers};
  on_threads(kCheckers + 2, [&](int i) {
    if (i < kCheckers) {
      std::mt19937 rng{uint32_t(i)};
      for (int n = 0; n < ops; ++n) {
        const int k = int(rng() % kAtOnceKeys);
        const int64_t cost = 1 + int64_t(rng() % 3);
        if (t.allow(key(k), cost, 0).allowed) admitted[size_t(i)][k] += cost;
      }
      checkers_left.fetch_sub(1);
    } else if (i == kCheckers) {
      for (int n = 0; n < ops; ++n) {
        if (t.charge_remote(key((n * 7) % kAtOnceKeys), 2, 0)) r.remote[(n * 7) % kAtOnceKeys] += 2;
      }
    } else {
      std::vector<ConsumptionEntry> out;
      while (checkers_left.load() > 0) {
        t.take_pending(out, 64);
        t.sweep_idle(0, 64);
      }
      t.take_pending(out);
      for (const ConsumptionEntry& e : out) r.taken[std::stoi(e.key.substr(1))] += e.tokens;
    }
  });
  for (const auto& m : admitted) {
    for (const auto& [k, n] : m) r.admitted[k] += n;
  }
  return r;
}

// What was taken is exactly what was admitted, key by key, and every balance is exactly what was
// admitted plus what was charged remotely.
TEST(ConcurrentKeyTable, ChecksRemoteChargesAndSealingAtOnceLoseAndRepeatNothing) {
  KeyTable t(one_rule("k*", kHuge), {.concurrent = true, .shards = 8});
  AtOnce r = checks_charges_and_sealing_at_once(t, 20'000);
  EXPECT_EQ(t.pending_keys(), 0u);
  EXPECT_EQ(r.taken, r.admitted);
  for (int k = 0; k < kAtOnceKeys; ++k) EXPECT_EQ(charged(t, key(k), kHuge), r.admitted[k] + r.remote[k]) << key(k);
}

// The same with a table far too small for its keys (8 shards of 32 for 500 keys): every shard
// evicts all the time, so consumption goes through the orphan list and balances through the
// remembered ones, while the threads run. Still nothing lost or reported twice, every balance
// exact, and the count of pending keys true afterwards (it drifted when evictions by remote
// charges went uncounted).
TEST(ConcurrentKeyTable, EvictionsWhileThreadsCheckLoseNothingAndKeepTheCountTrue) {
  KeyTable t(one_rule("k*", kHuge), {.max_keys = 256, .concurrent = true, .shards = 8});
  AtOnce r = checks_charges_and_sealing_at_once(t, 10'000);
  std::vector<ConsumptionEntry> rest;
  t.take_pending(rest);  // (the remote charger may have evicted keys after the last take)
  for (const ConsumptionEntry& e : rest) r.taken[std::stoi(e.key.substr(1))] += e.tokens;
  EXPECT_EQ(r.taken, r.admitted);
  EXPECT_GT(t.stats().evictions, 1000u);
  EXPECT_LE(t.size(), 256u);
  for (int k = 0; k < kAtOnceKeys; ++k) {
    // A cost-0 check brings an evicted key back at its remembered balance.
    EXPECT_EQ(kHuge.burst - t.allow(key(k), 0, 0).remaining, r.admitted[k] + r.remote[k]) << key(k);
  }
  EXPECT_EQ(t.pending_keys(), 0u);
  for (int n = 0; n < 2000; ++n) t.allow("k-new-" + std::to_string(n), 1, 0);
  // 2,000 keys pending (most of them evicted since: orphans), give or take 15 per shard.
  EXPECT_GE(t.pending_keys(), 2000u - 8 * 15);
  EXPECT_LE(t.pending_keys(), 2000u + 8 * 15);
}

// One hot key, four threads: it admits exactly its burst, however the checks interleave.
TEST(ConcurrentKeyTable, AHotKeyAdmitsExactlyItsBurstAcrossThreads) {
  const Limit limit{Rate{1, 3600 * kNanosPerSecond}, 10'000, 0};
  KeyTable t(one_rule("k*", limit), {.concurrent = true, .shards = 8});
  std::atomic<int64_t> admitted{0};
  on_threads(4, [&](int) {
    for (int n = 0; n < 5'000; ++n) {
      if (t.allow("k-hot", 1, 0).allowed) admitted.fetch_add(1);
    }
  });
  EXPECT_EQ(admitted.load(), 10'000);
  EXPECT_EQ(t.balance_microtokens("k-hot", 0), 0);
}

// Requests of three keys at once from four threads, over 16 keys spread across 8 shards: a
// request is charged to all its keys or to none, so each key is charged exactly once per
// allowed request that names it, and none beyond its burst.
TEST(ConcurrentKeyTable, AllOrNothingHoldsAcrossShards) {
  constexpr int kKeys = 16;
  const Limit limit{Rate{1, 3600 * kNanosPerSecond}, 1'000, 0};
  KeyTable t(one_rule("k*", limit), {.concurrent = true, .shards = 8});
  std::vector<std::atomic<int64_t>> allowed_with(kKeys);
  std::atomic<int64_t> allowed{0}, denied{0};
  on_threads(4, [&](int i) {
    std::mt19937 rng(uint32_t(100 + i));
    std::vector<std::string> names(3);
    std::vector<Decision> out(3);
    for (int n = 0; n < 3'000; ++n) {
      int a = int(rng() % kKeys), b = int(rng() % kKeys), c = int(rng() % kKeys);
      while (b == a) b = int(rng() % kKeys);
      while (c == a || c == b) c = int(rng() % kKeys);
      names = {key(a), key(b), key(c)};
      const CheckItem items[] = {{names[0], 1}, {names[1], 1}, {names[2], 1}};
      if (t.allow_all(items, out, 0)) {
        for (int k : {a, b, c}) allowed_with[size_t(k)].fetch_add(1);
        allowed.fetch_add(1);
      } else {
        denied.fetch_add(1);
      }
    }
  });
  EXPECT_GT(allowed.load(), 0);
  EXPECT_GT(denied.load(), 0);  // 36,000 tokens asked of 16,000
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(charged(t, key(k), limit), allowed_with[size_t(k)].load()) << key(k);
  }
}

// A flood of new keys from four threads: the table stays within max_keys (split over its
// shards), evicts by CLOCK in each, and a key in debt comes back in debt, not full.
TEST(ConcurrentKeyTable, AKeyFloodFromManyThreadsStaysBoundedAndRemembersDebt) {
  const Limit limit = per_second(1, 10, 10);
  // 8,197 keys over 8 shards: 5 shards hold 1,025 and 3 hold 1,024, exactly max_keys in all.
  KeyTable t(one_rule("k*", limit), {.max_keys = 8197, .concurrent = true});
  ASSERT_EQ(t.shards(), 8u);
  ASSERT_TRUE(t.allow("k-debt", 10, 0).allowed);
  ASSERT_TRUE(t.charge_remote("k-debt", 10, 0));  // -10: in debt
  on_threads(4, [&](int i) {
    for (int n = 0; n < 50'000; ++n) t.allow("k" + std::to_string(i) + "-" + std::to_string(n), 1, 0);
  });
  EXPECT_EQ(t.size(), 8197u);  // every shard full, none beyond its share
  const KeyTableStats s = t.stats();
  // Nothing took the evicted keys' consumption: at most 4,096 of them wait per shard (each
  // shard's max_keys is below that floor), and the rest are dropped and counted.
  EXPECT_EQ(s.evictions, 200'001u - 8197u);
  EXPECT_EQ(s.pending_dropped, s.evictions - 8 * 4096u);
  std::vector<ConsumptionEntry> taken;
  t.take_pending(taken);
  EXPECT_EQ(taken.size(), 8197u + 8 * 4096u);
  EXPECT_EQ(t.balance_microtokens("k-debt", 0), std::nullopt);  // evicted...
  const Decision d = t.allow("k-debt", 1, 0);
  EXPECT_FALSE(d.allowed);  // ...and back at its debt
  EXPECT_EQ(t.balance_microtokens("k-debt", 0), -10 * kM);
  EXPECT_GE(t.stats().restored, 1u);
}

// On one thread, a concurrent table decides exactly as the single-owner one: the same random
// mix of checks, requests of several keys, remote charges, sealing and time, two rules.
TEST(ConcurrentKeyTable, DecidesExactlyAsTheSingleOwnerTable) {
  const auto rules = std::make_shared<RuleSet>(
      std::vector<Rule>{{"a*", per_second(5, 10, 5), 0}, {"b*", Limit{Rate{3, kNanosPerSecond}, 4, 4, true}, 0}},
      std::nullopt);
  KeyTable one(rules), many(rules, {.concurrent = true, .shards = 16});
  std::mt19937 rng(7);
  MonoNanos now = 0;
  std::map<std::string, int64_t> pending_one, pending_many;
  auto name = [&] { return std::string(rng() % 2 ? "a" : "b") + std::to_string(rng() % 40); };
  for (int n = 0; n < 20'000; ++n) {
    now += int64_t(rng() % 20) * kNanosPerMilli;
    const uint32_t op = rng() % 10;
    if (op < 6) {
      const std::string k = name();
      const int64_t cost = int64_t(rng() % 4);
      const Decision x = one.allow(k, cost, now), y = many.allow(k, cost, now);
      ASSERT_EQ(x.allowed, y.allowed) << n;
      ASSERT_EQ(x.remaining, y.remaining) << n;
      ASSERT_EQ(x.reason, y.reason) << n;
      ASSERT_EQ(x.retry_after_ns, y.retry_after_ns) << n;
    } else if (op < 8) {
      std::vector<std::string> names(1 + rng() % 4);
      for (std::string& k : names) k = name();
      std::vector<CheckItem> items;
      for (const std::string& k : names) items.push_back({k, int64_t(rng() % 3)});
      std::vector<Decision> x(items.size()), y(items.size());
      ASSERT_EQ(one.allow_all(items, x, now), many.allow_all(items, y, now)) << n;
      for (size_t i = 0; i < items.size(); ++i) {
        ASSERT_EQ(x[i].allowed, y[i].allowed) << n;
        ASSERT_EQ(x[i].remaining, y[i].remaining) << n;
        ASSERT_EQ(x[i].reason, y[i].reason) << n;
        ASSERT_EQ(x[i].retry_after_ns, y[i].retry_after_ns) << n;
        ASSERT_EQ(x[i].charged_anyway, y[i].charged_anyway) << n;
      }
    } else if (op < 9) {
      const std::string k = name();
      ASSERT_EQ(one.charge_remote(k, 2, now), many.charge_remote(k, 2, now));
    } else {
      std::vector<ConsumptionEntry> x, y;
      one.take_pending(x);
      many.take_pending(y);
      for (const auto& e : x) pending_one[e.key] += e.tokens;
      for (const auto& e : y) pending_many[e.key] += e.tokens;
      ASSERT_EQ(pending_one, pending_many) << n;
      ASSERT_EQ(one.pending_keys(), 0u);
      ASSERT_EQ(many.pending_keys(), 0u);
    }
  }
  EXPECT_EQ(one.size(), many.size());
  EXPECT_EQ(one.stats().keys, many.stats().keys);
}

}  // namespace
}  // namespace tollgate
