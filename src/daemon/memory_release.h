// Gives freed memory back to the system. glibc's malloc keeps what a burst freed (a flood of
// requests, thousands of gRPC streams opened and reset: issue 34) in its arenas, so the daemon's
// resident memory, which systemd's MemoryMax counts, stays at the burst's peak long after the
// burst: 60,000 reset streams left 460 MiB resident with 30 MiB in use. A thread of its own looks
// at the resident size every second and, when it has grown by more than a step since the last
// release, calls malloc_trim(0), which returns every free page, then again each second for ten
// seconds (what the burst still held is freed over those). Off the node's thread: a trim costs
// in proportion to the free chunks it returns.
#ifndef TOLLGATE_SRC_DAEMON_MEMORY_RELEASE_H_
#define TOLLGATE_SRC_DAEMON_MEMORY_RELEASE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "tollgate/types.h"

namespace tollgate {

class MemoryRelease {
 public:
  explicit MemoryRelease(uint64_t step_bytes = 64u << 20,
                         std::chrono::milliseconds every = std::chrono::milliseconds(1000))
      : step_bytes_(step_bytes), every_(every) {}
  ~MemoryRelease() { stop(); }
  MemoryRelease(const MemoryRelease&) = delete;
  MemoryRelease& operator=(const MemoryRelease&) = delete;

  void start();
  void stop();  // idempotent

  // memory_releases (trims done), memory_released_bytes (resident bytes they gave back).
  void append_stats(StatsList& out) const;

  // The process's resident bytes, from /proc/self/statm (0 if unreadable).
  static uint64_t resident_bytes();

 private:
  void run(uint64_t baseline);

  const uint64_t step_bytes_;
  const std::chrono::milliseconds every_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::atomic<int64_t> releases_{0}, released_bytes_{0};
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_MEMORY_RELEASE_H_
