// MemoryRelease (issue 34): freed memory that glibc keeps in its heap is given back once the
// resident size grew by a step, without the daemon's threads doing anything.
#include "daemon/memory_release.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tollgate/types.h"

namespace tollgate {
namespace {

int64_t stat(const MemoryRelease& r, const char* name) {
  StatsList stats;
  r.append_stats(stats);
  for (const auto& [key, value] : stats) {
    if (key == name) return value;
  }
  ADD_FAILURE() << "no " << name;
  return -1;
}

TEST(MemoryRelease, GivesBackWhatABurstFreedOnceResidentMemoryGrewAStep) {
  // A burst that is over: 64 MiB in small blocks (from the heap, not mmap), each touched, then
  // freed but for one block above them, which keeps glibc from giving the heap's top back by
  // itself. Resident memory stays where the burst took it.
  std::vector<char*> blocks;
  for (int i = 0; i < 16 * 1024; ++i) {
    char* b = static_cast<char*>(std::malloc(4000));
    std::memset(b, 1, 4000);
    blocks.push_back(b);
  }
  char* pin = static_cast<char*>(std::malloc(4000));
  std::memset(pin, 1, 4000);
  for (char* b : blocks) std::free(b);
  MemoryRelease release(16u << 20, std::chrono::milliseconds(10));
  release.start();
  // Then memory grows by more than the step (80 MiB: more than the free heap holds, so glibc
  // maps it anew): the release trims, and what the burst freed goes back.
  std::vector<char> more(80u << 20, 1);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // (A sanitizer's allocator keeps its own heap: malloc_trim has nothing of it to give back.)
  const char* counter = "memory_releases";
  const int64_t want = 1;
#else
  const char* counter = "memory_released_bytes";
  const int64_t want = int64_t(32) << 20;
#endif
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (stat(release, counter) < want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling the counter, not timing
  }
  EXPECT_GE(stat(release, counter), want) << "resident now: " << (MemoryRelease::resident_bytes() >> 20) << " MiB";
  EXPECT_EQ(more[12345], 1);
  release.stop();
  std::free(pin);
}

}  // namespace
}  // namespace tollgate
