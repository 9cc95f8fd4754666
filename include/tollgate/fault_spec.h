// Network faults a daemon can be told to inject into its own gossip (tests and tollgate-sim,
// through the admin API). Inert until set: an empty FaultSpec injects nothing.
#ifndef TOLLGATE_FAULT_SPEC_H_
#define TOLLGATE_FAULT_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tollgate {

struct FaultSpec {
  std::vector<std::string> drop_to;    // node ids (or gossip addresses) we stop sending to
  std::vector<std::string> drop_from;  // node ids whose messages we drop on arrival
  double loss = 0;                     // probability in [0, 1] that an outgoing message is lost
  int64_t delay_ms = 0;                // added to every outgoing message
  double duplicate = 0;                // probability in [0, 1] that an outgoing message goes twice
  int64_t jitter_ms = 0;               // plus a uniform random [0, jitter_ms] each: messages reorder

  bool empty() const { return drop_to.empty() && drop_from.empty() && loss == 0 && delay_ms == 0 && duplicate == 0 && jitter_ms == 0;
  }
  // "" if usable, else what is wrong ("loss must be between 0 and 1").
  std::string validate() const {
    if (!(loss >= 0 && loss <= 1)) return "loss must be between 0 and 1";
    if (!(duplicate >= 0 && duplicate <= 1)) return "duplicate must be between 0 and 1";
    if (delay_ms < 0 || delay_ms > 60'000) return "delay must be between 0 and 60000 ms";
    if (jitter_ms < 0 || jitter_ms > 60'000) return "jitter must be between 0 and 60000 ms";
    return {};
  }
};

}  // namespace tollgate

#endif  // TOLLGATE_FAULT_SPEC_H_
