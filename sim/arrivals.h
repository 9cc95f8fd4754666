// The offered load of a scenario as a stream of arrivals: Poisson at load.rate over the whole
// cluster, each arrival on one live node (by the spread's weights) for one key (uniform or
// Zipf(1) popularity). Both back ends draw their load from it: the virtual one in virtual time,
// the local one replaying it in real time. Draws come in a fixed order (the gap to the next
// arrival, then the node, then the key; a lease's hold from a stream of its own), so with the same seed and the same
// live nodes both back ends offer the same arrival stream.
#ifndef TOLLGATE_SIM_ARRIVALS_H_
#define TOLLGATE_SIM_ARRIVALS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/random.h"
#include "scenario.h"

namespace tollgate::sim {

struct Arrival {
  int64_t t_ns = 0;      // since the start of the run
  size_t node = 0;       // index of a live node
  size_t key = 0;        // index into ArrivalStream::keys()
  bool dropped = false;  // no live node had any weight: nobody offered this check
  // Leases (LoadSpec::kLeases): how long the holder works, and whether it never releases.
  int64_t hold_ns = 0;
  bool never_release = false;
};

// The share of the load node `index` gets under `spread` (uniform 1, skewed 1/(i+1), one: node 0).
double spread_weight(LoadSpec::Spread spread, size_t index);

class ArrivalStream {
 public:
  // The rng is seeded as the virtual back end seeds its load generator (seed * 3 + 2).
  ArrivalStream(const LoadSpec& load, uint64_t seed);

  // The arrival after the previous one; `up[i]` says whether node i is live at that time (nodes
  // not in `up`, e.g. not joined yet, are not). Call peek_time() first to learn when it is due
  // and update `up` for the events before it.
  Arrival next(const std::vector<bool>& up);
  int64_t peek_time() const { return next_t_ns_; }

  // "k0".."k{N-1}".
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  double uniform01();
  void draw_gap();

  LoadSpec load_;
  SplitMix64 rng_;
  // Leases' holds, a stream of their own (seed * 3 + 3): the check stream's draws stay as they
  // were, and the same seed offers the same arrivals whatever the kind.
  SplitMix64 hold_rng_;
  std::vector<double> key_cdf_;
  std::vector<std::string> keys_;
  int64_t next_t_ns_ = 0;
};

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_ARRIVALS_H_
