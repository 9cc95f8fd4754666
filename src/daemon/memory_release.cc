#include "daemon/memory_release.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

namespace tollgate {

uint64_t MemoryRelease::resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int read = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return read == 2 ? resident * uint64_t(::sysconf(_SC_PAGESIZE)) : 0;
}

void MemoryRelease::start() {
  if (thread_.joinable()) return;
  // The baseline is what is resident when start() is called, not when the new thread first
  // runs: under load that could be after the growth it is meant to see (the test's 80 MiB once
  // was, and no trim came).
  const uint64_t baseline = resident_bytes();
  thread_ = std::thread([this, baseline] { run(baseline); });
}

void MemoryRelease::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MemoryRelease::run(uint64_t baseline) {
  // After a trim, a few more, a second apart: what the burst still held at the first one (gRPC's
  // reset streams are freed over the following second or two) is given back as it is freed.
  constexpr int kFollowUps = 10;
  int follow_ups = 0;
  std::unique_lock lock(mu_);
  while (!wake_.wait_for(lock, every_, [this] { return stopping_; })) {
    const uint64_t now = resident_bytes();
    if (now < baseline) baseline = now;  // freed and given back by malloc itself
    if (now > baseline + step_bytes_) {
      follow_ups = kFollowUps;
    } else if (follow_ups > 0) {
      --follow_ups;
    } else {
      continue;
    }
    lock.unlock();
    ::malloc_trim(0);
    const uint64_t after = resident_bytes();
    ++releases_;
    if (after < now) released_bytes_ += int64_t(now - after);
    baseline = after;  // what is in use now; grow a step beyond it before the next round of trims
    lock.lock();
  }
}

void MemoryRelease::append_stats(StatsList& out) const {
  out.emplace_back("memory_releases", releases_.load());
  out.emplace_back("memory_released_bytes", released_bytes_.load());
}

}  // namespace tollgate
