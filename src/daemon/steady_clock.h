// The daemon's clock: std::chrono::steady_clock, never the wall clock, so a system-clock jump
// moves no bucket and fails no peer. Thread-safe.
#ifndef TOLLGATE_SRC_DAEMON_STEADY_CLOCK_H_
#define TOLLGATE_SRC_DAEMON_STEADY_CLOCK_H_

#include <chrono>

#include "tollgate/clock.h"

namespace tollgate {

class SteadyClock final : public Clock {
 public:
  MonoNanos now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_STEADY_CLOCK_H_
