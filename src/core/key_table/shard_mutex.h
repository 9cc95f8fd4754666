// Part of the key table (core/key_table.cc): a concurrent table's per-shard lock.
//
// Test-and-test-and-set, released by a plain store; a waiter spins briefly, then yields its
// core, then sleeps 20 us at a time (70 with the default timer slack), rather than burn the core
// a preempted holder needs. Chosen over glibc's adaptive mutex by measurement: in a member the
// checking threads meet the sealer on the hot keys' shards, and with the adaptive mutex
// Member::check on Zipf keys cost 1.42-1.47x the single-owner table (two runs, its waiters
// sleeping on a futex after their spin) against 1.21-1.25x with this lock (four runs); one hot
// key on 2 threads: 12.7-14.8 M checks/s against 7.8-9.2 M. Uncontended, within the noise. Not
// fair: a waiter that went to sleep may lose the lock to spinning ones many times. Holds are
// short for checks and sealing (one key; at most kTakePerLock keys); reloads, rate scale changes
// and stats visit a whole shard, rarely. ThreadSanitizer sees the atomics (no false reports) but
// not a mutex, so it does not check allow_all's lock order.
#ifndef TOLLGATE_SRC_CORE_KEY_TABLE_SHARD_MUTEX_H_
#define TOLLGATE_SRC_CORE_KEY_TABLE_SHARD_MUTEX_H_

#include <sched.h>
#include <time.h>

#include <atomic>

namespace tollgate::key_table {

class ShardMutex {
 public:
  void lock() {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    lock_contended();
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  [[gnu::noinline]] void lock_contended() {
    for (unsigned attempt = 0;; ++attempt) {
      for (int i = 0; i < 128 && locked_.load(std::memory_order_relaxed); ++i) cpu_relax();
      if (!locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire)) return;
      if (attempt < 32) {
        sched_yield();
      } else {
        const timespec pause{0, 20'000};
        nanosleep(&pause, nullptr);
      }
    }
  }

  std::atomic<bool> locked_{false};
};

// Holds `mutex` for its scope when `on` (a concurrent table); nothing otherwise.
class ShardLock {
 public:
  ShardLock(ShardMutex& mutex, bool on) : mutex_(on ? &mutex : nullptr) {
    if (mutex_) mutex_->lock();
  }
  ~ShardLock() {
    if (mutex_) mutex_->unlock();
  }
  ShardLock(const ShardLock&) = delete;
  ShardLock& operator=(const ShardLock&) = delete;

 private:
  ShardMutex* mutex_;
};

}  // namespace tollgate::key_table

#endif  // TOLLGATE_SRC_CORE_KEY_TABLE_SHARD_MUTEX_H_
