#include "util/flat_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace tollgate {
namespace {

// A slot holding its key; a key's hash is key % 8 + 8 * (key % 3), so probe runs collide,
// wrap around the end of the array and interleave: the cases backward-shift deletion must get
// right.
struct Slot {
  uint64_t key = 0;  // 0: empty
};
struct Policy {
  static bool empty(const Slot& s) { return s.key == 0; }
  static size_t hash(const Slot& s) { return hash_of(s.key); }
  static size_t hash_of(uint64_t key) { return key % 8 + 8 * (key % 3); }
};
using Table = FlatTable<Slot, Policy, int>;

size_t find(const Table& t, uint64_t key) {
  return t.find(Policy::hash_of(key), [key](const Slot& s) { return s.key == key; });
}

TEST(FlatTable, AgreesWithAMapUnderRandomInsertsAndErases) {
  Table table;
  std::map<uint64_t, int> model;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 200'000; ++step) {
    const uint64_t key = 1 + rng() % 300;
    const size_t at = find(table, key);
    ASSERT_EQ(at != Table::kNone, model.count(key) == 1) << "step " << step << " key " << key;
    if (rng() % 2 == 0) {
      if (at == Table::kNone) {
        const size_t i = table.claim(Policy::hash_of(key));
        table.slot(i).key = key;
        table.value(i) = step;
        model[key] = step;
      } else {
        ASSERT_EQ(table.value(at), model[key]);
      }
    } else if (at != Table::kNone) {
      table.erase(at);
      model.erase(key);
    }
    ASSERT_EQ(table.size(), model.size());
    ASSERT_LE(table.size() * 2, table.slot_count());  // at most half full
  }
  for (const auto& [key, value] : model) {
    const size_t at = find(table, key);
    ASSERT_NE(at, Table::kNone);
    EXPECT_EQ(table.value(at), value);
  }
}

TEST(FlatTable, AnEmptyTableFindsNothingAndCopiesAndMovesKeepTheirEntries) {
  Table empty;
  EXPECT_EQ(find(empty, 5), Table::kNone);
  Table a;
  for (uint64_t k = 1; k <= 40; ++k) {
    const size_t i = a.claim(Policy::hash_of(k));
    a.slot(i).key = k;
    a.value(i) = int(k) * 10;
  }
  Table copy = a;
  Table moved = std::move(a);
  EXPECT_EQ(find(a, 7), Table::kNone);  // NOLINT(bugprone-use-after-move): moved-from is empty
  for (const Table* t : {&copy, &moved}) {
    for (uint64_t k = 1; k <= 40; ++k) {
      const size_t at = find(*t, k);
      ASSERT_NE(at, Table::kNone) << k;
      EXPECT_EQ(const_cast<Table*>(t)->value(at), int(k) * 10);
    }
  }
}

// Slots whose hash is the key itself, so a test places entries exactly.
struct IdentityPolicy {
  static bool empty(const Slot& s) { return s.key == 0; }
  static size_t hash(const Slot& s) { return s.key; }
};
using IdentityTable = FlatTable<Slot, IdentityPolicy>;

// Keys 1..n each at its own home: one cluster of n slots, every entry at distance 0. A lookup
// of an absent hash inside the cluster reads one slot, not the rest of the cluster (issue 34,
// finding 2: before, it walked to the cluster's end, and a flood of such keys made checks walk
// thousands of slots).
TEST(FlatTable, AnAbsentKeysLookupStopsWhereNoEntryOfItsHomeCanBe) {
  IdentityTable t;
  for (uint64_t k = 1; k <= 1000; ++k) t.slot(t.claim(k)).key = k;
  EXPECT_EQ(t.longest_probe(), 1u);
  const uint64_t absent = 5 + t.slot_count();  // home 5, inside the cluster
  size_t read = 0;
  EXPECT_EQ(t.find(absent, [&](const Slot& s) { return ++read, s.key == absent; }), IdentityTable::kNone);
  EXPECT_EQ(read, 1u);
  // Present keys are all found.
  for (uint64_t k = 1; k <= 1000; ++k)
    ASSERT_NE(t.find(k, [k](const Slot& s) { return s.key == k; }), IdentityTable::kNone);
}

// Hashes that agree in their low bits make long runs; a run of kLongRun makes the table double
// early, only while it is at least 1/4 full (so never beyond 8 slots per entry, twice its usual
// most), which splits hashes that differ above.
TEST(FlatTable, ALongRunMakesTheTableGrowEarlyWithinEightSlotsPerEntry) {
  IdentityTable t;
  std::mt19937_64 rng(11);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 2000; ++i) keys.push_back(((rng() >> 20) << 8) | 1);  // low 8 bits agree
  for (uint64_t k : keys) t.slot(t.claim(k)).key = k;
  EXPECT_GT(t.slot_count(), 4096u);  // 2,000 entries: it did grow early
  EXPECT_LE(t.slot_count(), 8 * t.size());
  for (uint64_t k : keys) {
    size_t read = 0;
    ASSERT_NE(t.find(k, [&](const Slot& s) { return ++read, s.key == k; }), IdentityTable::kNone);
    ASSERT_LE(read, t.longest_probe());
  }
  // With random hashes no run gets long: the bound holds with room to spare.
  IdentityTable random;
  for (int i = 0; i < 200'000; ++i) {
    const uint64_t k = rng() | 1;
    random.slot(random.claim(k)).key = k;
  }
  EXPECT_LE(random.longest_probe(), IdentityTable::kLongRun);
  EXPECT_LE(random.slot_count(), 2 * 262'144u);
}

}  // namespace
}  // namespace tollgate
