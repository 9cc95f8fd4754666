// OffenseLimiter: decides which reports of misbehaving peers and clients reach the log. A client
// that sends garbage in a loop, or a host that floods forged gossip, must cost one log line now
// and then, not one per packet: the log would otherwise become the denial of service.
//
// Per offender (a client's pid or address, a gossip sender's address): one line, then silence
// for `interval`; the next line says how many reports were suppressed meanwhile. Offenders are
// remembered up to `max_offenders`; past that, every new offender shares one entry ("other
// offenders"), so a flood of distinct addresses cannot grow memory or the log. Pure logic: the
// caller passes its steady clock's time. Not thread-safe: one owner.
#ifndef TOLLGATE_SRC_GUARD_OFFENSE_LIMITER_H_
#define TOLLGATE_SRC_GUARD_OFFENSE_LIMITER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "core/clock.h"
#include "core/id_map.h"

namespace tollgate {

// How adapters report misbehaviour to whoever logs it: who (a stable name for the offender, e.g.
// "127.0.0.1" or "pid 4242") and what ("malformed frame", "bad_mac", ...).
using OffenseReporter = std::function<void(std::string_view offender, std::string_view what)>;

struct OffenseLimiterOptions {
  int64_t interval_ns = 10 * kNanosPerSecond;
  size_t max_offenders = 1024;
};

class OffenseLimiter {
 public:
  explicit OffenseLimiter(OffenseLimiterOptions options = {}) : options_(options) {}

  struct Verdict {
    std::string_view offender;  // as given, or "other offenders" when the table is full
    uint64_t suppressed = 0;    // reports not logged since this offender's previous line
  };
  // A report at `now_ns`: a Verdict if it should be logged, nullopt if it is suppressed.
  std::optional<Verdict> admit(std::string_view offender, MonoNanos now_ns);

  uint64_t suppressed_total() const { return suppressed_total_; }
  size_t offenders() const { return table_.size(); }

 private:
  struct Entry {
    MonoNanos last_line_ns = 0;
    uint64_t suppressed = 0;
    bool logged = false;
  };
  OffenseLimiterOptions options_;
  IdMap<Entry> table_;
  uint64_t suppressed_total_ = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_GUARD_OFFENSE_LIMITER_H_
