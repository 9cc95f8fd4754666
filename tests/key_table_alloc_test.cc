// Proves that KeyTable::allow() on an existing key does no heap allocation. A separate
// executable because it replaces the global operator new to count calls.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "test_rules.h"
#include "tollgate/key_table.h"
#include "tollgate/rules.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

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

}  // namespace
}  // namespace tollgate
