// Time as the core sees it: a monotonic count of nanoseconds, passed in by the caller.
//
// Nothing in the core reads a clock on its own. The daemon passes a steady (monotonic) clock,
// never the wall clock, so that a system-clock jump moves no bucket and fails no peer; tests and
// the simulator pass a ManualClock and move time by hand.
#ifndef TOLLGATE_SRC_CORE_CLOCK_H_
#define TOLLGATE_SRC_CORE_CLOCK_H_

#include <cstdint>

namespace tollgate {

// Monotonic time in nanoseconds since an arbitrary, fixed origin. Differences are meaningful,
// absolute values are not, and values from two processes are not comparable.
using MonoNanos = int64_t;

inline constexpr int64_t kNanosPerMicro = 1'000;
inline constexpr int64_t kNanosPerMilli = 1'000'000;
inline constexpr int64_t kNanosPerSecond = 1'000'000'000;

// Source of monotonic time. Implementations must never go backwards. Thread-safety is up to the
// implementation (the daemon's SteadyClock, src/daemon/steady_clock.h, is; ManualClock is not).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonoNanos now_ns() const = 0;
};

// A clock that only moves when told to: for tests and virtual-time simulation.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(MonoNanos start_ns = 0) : now_(start_ns) {}
  MonoNanos now_ns() const override { return now_; }
  // Moves time forward by `delta_ns` (>= 0).
  void advance_ns(int64_t delta_ns) { now_ += delta_ns > 0 ? delta_ns : 0; }
  // Sets the time; ignored if it would move backwards.
  void set_ns(MonoNanos t) { now_ = t > now_ ? t : now_; }

 private:
  MonoNanos now_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_CLOCK_H_
