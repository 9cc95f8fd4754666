#include "util/flat_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>

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

}  // namespace
}  // namespace tollgate
