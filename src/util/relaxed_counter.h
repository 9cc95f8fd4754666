// A count that one thread writes and any thread may read: an increment is a plain load and store
// (no locked instruction, so it costs what a uint64_t does), and a read from another thread sees
// a recent value, without a data race. For statistics written on a hot path and read rarely.
#ifndef TOLLGATE_SRC_UTIL_RELAXED_COUNTER_H_
#define TOLLGATE_SRC_UTIL_RELAXED_COUNTER_H_

#include <atomic>
#include <cstdint>

namespace tollgate {

class RelaxedCounter {
 public:
  RelaxedCounter(uint64_t v = 0) : v_(v) {}  // NOLINT: used as a uint64_t
  RelaxedCounter(const RelaxedCounter& other) : v_(other.load()) {}
  RelaxedCounter& operator=(const RelaxedCounter& other) { return *this = other.load(); }
  RelaxedCounter& operator=(uint64_t v) {
    v_.store(v, std::memory_order_relaxed);
    return *this;
  }
  operator uint64_t() const { return load(); }  // NOLINT: used as a uint64_t
  uint64_t load() const { return v_.load(std::memory_order_relaxed); }

  // Only the writing thread calls these.
  RelaxedCounter& operator+=(uint64_t d) { return *this = load() + d; }
  RelaxedCounter& operator-=(uint64_t d) { return *this = load() - d; }
  RelaxedCounter& operator++() { return *this += 1; }
  RelaxedCounter& operator--() { return *this -= 1; }

 private:
  std::atomic<uint64_t> v_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_RELAXED_COUNTER_H_
