// Proves that KeyTable::allow() on an existing key does no heap allocation. A separate
// executable because it replaces the global operator new to count calls.
#include <gtest/gtest.h>

#include <malloc.h>
#include <atomic>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "core/inflight_view.h"
#include "core/key_table.h"
#include "core/lease_table.h"
#include "core/membership.h"
#include "core/random.h"
#include "support/test_rules.h"
#include "tollgate/rules.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
// Heap bytes held through operator new, as malloc counts them (its header included): what the
// table costs the process.
std::atomic<int64_t> g_live_bytes{0};
int64_t held(void* p) { return int64_t(malloc_usable_size(p) + 8); }
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) {
    g_live_bytes.fetch_add(held(p), std::memory_order_relaxed);
    return p;
  }
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, std::align_val_t align) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const size_t a = static_cast<size_t>(align);
  if (void* p = std::aligned_alloc(a, (std::max<size_t>(size, 1) + a - 1) / a * a)) {
    g_live_bytes.fetch_add(held(p), std::memory_order_relaxed);
    return p;
  }
  throw std::bad_alloc();
}
void* operator new[](std::size_t size, std::align_val_t align) { return operator new(size, align); }
void operator delete(void* p) noexcept {
  if (p) g_live_bytes.fetch_sub(held(p), std::memory_order_relaxed);
  std::free(p);
}
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { operator delete(p); }
void operator delete(void* p, std::align_val_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { operator delete(p); }

namespace tollgate {
namespace {

void ExpectNoAllocationOnExistingKeys(bool concurrent) {
  KeyTable t(testing::one_rule("user:*", testing::per_second(100, 100, 100)), {.concurrent = concurrent, .shards = 8});
  ASSERT_EQ(t.shards(), concurrent ? 8u : 1u);
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back("user:" + std::to_string(i) + ":a-key-long-enough-to-need-the-heap");
  for (const std::string& k : keys) t.allow(k, 1, 0);  // creates the buckets (allocates)

  const uint64_t before = g_allocations.load();
  uint64_t admitted = 0, denied = 0;
  for (int round = 0; round < 200; ++round) {
    for (const std::string& k : keys) {
      const Decision d = t.allow(k, 1, round * kNanosPerMilli);
      d.allowed ? ++admitted : ++denied;
    }
  }
  const uint64_t during = g_allocations.load() - before;
  EXPECT_EQ(during, 0u) << "allocations in 200,000 checks of existing keys";
  EXPECT_GT(admitted, 0u);
  EXPECT_GT(denied, 0u);  // both the admit and the deny path were exercised

  // The counter works: creating a key too long to be stored inline does allocate.
  t.allow("user:new:" + std::string(100, 'x'), 1, 0);
  EXPECT_GT(g_allocations.load() - before, 0u);
}

TEST(KeyTableHotPath, AllowOnAnExistingKeyDoesNotAllocate) { ExpectNoAllocationOnExistingKeys(false); }
// The concurrent table (8 shards, each behind its lock) too.
TEST(KeyTableHotPath, AllowOnAnExistingKeyOfAConcurrentTableDoesNotAllocate) { ExpectNoAllocationOnExistingKeys(true); }

// KeyTable::memory_bound holds whatever keys come: a flood of the longest keys, five times the
// table, never taken by take_pending (so evicted keys' consumption piles up to its cap), each
// leaving a balance to remember. The heap is measured after every check.
TEST(KeyTableMemoryBound, AFloodOfTheLongestKeysStaysWithinTheBound) {
  for (const bool concurrent : {false, true}) {
    const KeyTableOptions o{
        .max_keys = 20'000, .max_key_bytes = 256, .max_remembered = 4'096, .concurrent = concurrent};
    const int64_t bound = int64_t(KeyTable::memory_bound(o));
    const int64_t before = g_live_bytes.load();
    int64_t peak = 0;
    {
      KeyTable t(testing::one_rule("*", Limit{Rate{1, 86'400 * kNanosPerSecond}, 10, 10}), o);
      std::string key(256, 'k');
      for (int i = 0; i < 100'000; ++i) {
        const std::string n = std::to_string(i);
        key.replace(0, n.size(), n);
        t.allow(key, 5, i);
        peak = std::max(peak, g_live_bytes.load() - before);
      }
      EXPECT_LE(int64_t(t.stats().bytes), bound);
    }
    EXPECT_LE(peak, bound) << "concurrent " << concurrent;
    // Not a bound so loose that it says nothing: the flood reaches a good part of it.
    EXPECT_GE(peak, bound / 3) << "concurrent " << concurrent;
    std::printf("max_keys 20,000 of 256 bytes%s: heap peak %.1f MB, bound %.1f MB\n", concurrent ? " (concurrent)" : "",
                peak / 1e6, bound / 1e6);
  }
}

// Two keys taking turns in a table of one: each comes back, leaving a stale entry in the order
// of remembered balances, behind a debt that refills over a day. They piled up one per
// eviction; now the table stays within its bound.
TEST(KeyTableMemoryBound, KeysThatKeepComingBackDoNotGrowTheRememberedOrder) {
  const KeyTableOptions o{.max_keys = 1, .max_key_bytes = 64, .max_remembered = 16};
  const int64_t bound = int64_t(KeyTable::memory_bound(o));
  const int64_t before = g_live_bytes.load();
  int64_t peak = 0;
  {
    KeyTable t(testing::one_rule("*", Limit{Rate{1, 86'400 * kNanosPerSecond}, 10, 10}), o);
    t.allow("debt", 10, 0);  // spent to zero: remembered ahead of everything, for a day
    for (int i = 0; i < 300'000; ++i) {
      t.allow(i % 2 ? "a" : "b", 1, 1 + i);
      peak = std::max(peak, g_live_bytes.load() - before);
    }
  }
  EXPECT_LE(peak, bound);
}

// LeaseTable::bound_bytes (the leases' part of the daemon's printed bound) holds a flood of the
// longest keys: every lease held, each on its own key and in its key's queue (Envoy's by-key
// acquires), as many owed releases on other keys, and as many keys counted from other members.
TEST(LeaseTableMemoryBound, AFloodOfLeasesOnTheLongestKeysStaysWithinTheBound) {
  const LeaseTableOptions o{.max_leases = 5'000, .max_key_bytes = 256};
  const size_t remote_keys = 5'000;
  const int64_t bound = int64_t(LeaseTable::bound_bytes(o, remote_keys));
  const int64_t before = g_live_bytes.load();
  int64_t peak = 0;
  {
    SplitMix64 random(1);
    LeaseTable t(o, [&random](uint8_t* out, size_t n) {
      for (size_t i = 0; i < n; ++i) out[i] = uint8_t(random.next_u64());
    });
    t.set_rules(std::make_shared<RuleSet>(std::vector<Rule>{}, std::nullopt, nullptr,
                                          std::vector<ConcurrencyRule>{{"*", 1'000'000, 3600 * kNanosPerSecond, 0}}));
    std::string key(256, 'k');
    auto named = [&key](char kind, size_t i) {
      const std::string n = kind + std::to_string(i);
      key.replace(0, n.size(), n);
      return std::string_view(key);
    };
    size_t granted = 0;
    for (size_t i = 0; i < o.max_leases + 100; ++i) {
      granted += t.acquire_anonymous(named('a', i), 1, 0, 1).outcome == LeaseOutcome::kGranted;
      t.owe_release(named('o', i), 1, 1);
      t.add_remote(named('r', i % remote_keys), 1);
      peak = std::max(peak, g_live_bytes.load() - before);
    }
    EXPECT_EQ(granted, o.max_leases);
  }
  EXPECT_LE(peak, bound);
  EXPECT_GE(peak, bound / 3) << "a bound so loose it says nothing";
  std::printf("max_leases 5,000 of 256 bytes, 5,000 remote keys: heap peak %.1f MB, bound %.1f MB\n", peak / 1e6,
              bound / 1e6);
}

// InflightView::bound_bytes, with the lease table's keys counted from other members only: two
// members each send counts of the longest keys until the view holds its max_rows and drops the
// rest. What apply() keeps is measured (the batches themselves are the sender's).
TEST(LeaseTableMemoryBound, OtherMembersCountsOfTheLongestKeysStayWithinTheBound) {
  constexpr size_t kRows = 4'000;
  const LeaseTableOptions o{.max_leases = 1, .max_key_bytes = 256};
  const int64_t bound = int64_t(InflightView::bound_bytes(kRows, 256, 2) + LeaseTable::bound_bytes(o, kRows));
  int64_t kept = 0, peak = 0;
  {
    SplitMix64 random(2);
    LeaseTable table(o, [&random](uint8_t* out, size_t n) {
      for (size_t i = 0; i < n; ++i) out[i] = uint8_t(random.next_u64());
    });
    table.set_rules(std::make_shared<RuleSet>(std::vector<Rule>{}, std::nullopt, nullptr,
                                              std::vector<ConcurrencyRule>{{"*", 1'000'000, kNanosPerSecond, 0}}));
    Membership members("me", "10.0.0.9:1", 1, MembershipOptions{});
    members.set_peers({{"a", "10.0.0.1:1"}, {"b", "10.0.0.2:1"}}, 0);
    members.merge({{"a", "10.0.0.1:1", 5, 1, false}, {"b", "10.0.0.2:1", 5, 1, false}}, 0);
    InflightView view("me", kRows, kNanosPerSecond);
    std::string key(256, 'k');
    uint64_t seq = 0;
    for (size_t batch = 0; batch < 3 * kRows / 100; ++batch) {
      Batch b;
      b.origin = batch % 2 ? "a" : "b";
      b.incarnation = 5;
      b.seq = ++seq;
      std::vector<InflightEntry> entries;
      for (size_t j = 0; j < 100; ++j) {
        const std::string n = std::to_string(batch * 100 + j);
        key.replace(0, n.size(), n);
        entries.push_back({key, 1});
      }
      b.counts = std::make_shared<const LeaseCounts>(LeaseCounts{std::move(entries), false, {}, {}});
      const int64_t before = g_live_bytes.load();
      view.apply(b, members, table, 1);
      kept += g_live_bytes.load() - before;
      peak = std::max(peak, kept);
    }
    EXPECT_EQ(view.stats().rows, kRows);
    EXPECT_GT(view.stats().rows_dropped, 0u);
  }
  EXPECT_LE(peak, bound);
  EXPECT_GE(peak, bound / 3) << "a bound so loose it says nothing";
  std::printf("4,000 rows of 256-byte keys from 2 members: heap kept %.1f MB, bound %.1f MB\n", peak / 1e6,
              bound / 1e6);
}

}  // namespace
}  // namespace tollgate
