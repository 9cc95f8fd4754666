#include "core/id_map.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/random.h"

namespace tollgate {
namespace {

TEST(IdMap, FindsInsertsAndErases) {
  IdMap<int> m;
  EXPECT_EQ(m.find("a"), nullptr);
  auto [v, inserted] = m.try_emplace("a");
  ASSERT_TRUE(inserted);
  *v = 7;
  EXPECT_FALSE(m.try_emplace("a").second);
  EXPECT_EQ(*m.find("a"), 7);
  m["a-long-node-id-beyond-the-small-string-buffer"] = 9;
  EXPECT_EQ(*m.find("a-long-node-id-beyond-the-small-string-buffer"), 9);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_TRUE(m.erase("a"));
  EXPECT_FALSE(m.erase("a"));
  EXPECT_EQ(m.find("a"), nullptr);
  EXPECT_EQ(m.size(), 1u);
}

// The inline compare behind every lookup (the hash agrees first, so a lookup alone would rarely
// reach it with ids that differ): every length around its 4-, 8- and 16-byte cases, a byte
// changed at every position, and ids that agree but for their length.
TEST(IdMap, SameIdComparesEveryByteOfEveryLength) {
  for (size_t n = 0; n <= 40; ++n) {
    std::string a;
    for (size_t i = 0; i < n; ++i) a.push_back(char('a' + i % 26));
    EXPECT_TRUE(IdMap<int>::same_id(a, std::string(a))) << n;
    for (size_t i = 0; i < n; ++i) {
      std::string b = a;
      b[i] = char(b[i] ^ 0x20);
      EXPECT_FALSE(IdMap<int>::same_id(a, b)) << n << " at " << i;
    }
    EXPECT_FALSE(IdMap<int>::same_id(a, a + "x")) << n;
    if (n > 0) {
      EXPECT_FALSE(IdMap<int>::same_id(a, std::string_view(a).substr(0, n - 1))) << n;
    }
  }
}

// Random inserts and erases against std::map: backward-shift deletion must never lose an entry
// whose probe run passed through the erased slot (wrapping around the end of the table too).
TEST(IdMap, AgreesWithStdMapUnderRandomChurn) {
  IdMap<uint64_t> m;
  std::map<std::string, uint64_t> want;
  SplitMix64 rng(42);
  for (int step = 0; step < 200'000; ++step) {
    const std::string id = "node-" + std::to_string(rng.below(3000));
    if (rng.below(3) == 0) {
      EXPECT_EQ(m.erase(id), want.erase(id) == 1);
    } else {
      m[id] = uint64_t(step);
      want[id] = uint64_t(step);
    }
    if (step % 20'000 == 0) {
      ASSERT_EQ(m.size(), want.size());
      for (const auto& [k, v] : want) {
        const uint64_t* got = m.find(k);
        ASSERT_NE(got, nullptr) << k;
        ASSERT_EQ(*got, v);
      }
    }
  }
  size_t seen = 0;
  m.for_each([&](const std::string& k, uint64_t v) {
    ++seen;
    EXPECT_EQ(want.at(k), v);
  });
  EXPECT_EQ(seen, want.size());
}

}  // namespace
}  // namespace tollgate
