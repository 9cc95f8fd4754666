// The measuring side of tollgate-sim, shared by both back ends: every check's decision, paired
// with the oracle's, is folded into per-phase figures and a 100 ms time series; sends, live
// node-time and convergence samples come from the back end. The back end knows how the cluster
// behaved; the recorder only knows what to count, so virtual and local runs are measured alike.
#ifndef TOLLGATE_SIM_RECORDER_H_
#define TOLLGATE_SIM_RECORDER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "oracle.h"
#include "result.h"
#include "scenario.h"

namespace tollgate::sim {

class Recorder {
 public:
  Recorder(const Scenario& s, std::shared_ptr<const RuleSet> rules);

  // A check made at `t_ns` (times never decrease between calls: the oracle needs arrival order)
  // to a node on partition side `side`, which the cluster answered `allowed`.
  void check(int64_t t_ns, std::string_view key, int64_t cost, size_t side, bool allowed);
  // Leases: an acquire at `t_ns` (in arrival order, as check()) by a holder at `node` that works
  // `hold_ns`, which the cluster `granted`; the oracle's semaphore decides it too.
  void lease(int64_t t_ns, std::string_view key, int64_t count, size_t node, size_t side, bool granted,
             int64_t hold_ns);
  // Node `node` went down at `t_ns` (crashed or stopped): its holders die with it.
  void node_down(int64_t t_ns, size_t node);
  // Leases: the sample of the 100 ms step at `t_ns` (called once a step, in time order):
  // `counted(key)` is the key's count as the live nodes see it, their mean.
  void lease_sample(int64_t t_ns, const std::function<double(std::string_view)>& counted);
  // A gossip message of `bytes` sent at `t_ns`.
  void sent(int64_t t_ns, uint64_t messages, uint64_t bytes);
  // A batch sealed at `sealed_ns` reached every live node `took_ns` later.
  void converged(int64_t sealed_ns, int64_t took_ns);
  // A batch that never reached every node alive when it was sealed.
  void unconverged(uint64_t n = 1) { result_.unconverged += n; }
  void in_flight_at_end(uint64_t n) { result_.in_flight_at_end += n; }
  // `live` nodes were up from the previous call's `until_ns` (0 at first) to `until_ns`.
  void alive(int64_t until_ns, size_t live);

  // Top-K (Scenario::top_check): every check's outcome per key, the cluster's exact counts.
  struct Exact {
    uint64_t denied = 0, tokens = 0;
  };
  const std::unordered_map<std::string, Exact>& exact() const { return exact_; }

  // Completes the figures that need the whole run (under-admission) and hands them over.
  SimResult finish();

  PhaseStats& phase_at(int64_t t_ns);

 private:
  SeriesPoint& series_at(int64_t t_ns);
  // One decision (a check or an acquire) beside the oracle's, in its phase and series step.
  void decided(int64_t t_ns, size_t side, bool allowed, bool ideal);

  Oracle oracle_;
  OracleSemaphore semaphore_;
  Holds held_;                           // what the cluster granted, to living holders at work
  std::vector<std::string> lease_keys_;  // the load's keys, when it takes leases
  std::unordered_map<std::string, std::vector<int64_t>> grant_times_;  // per key, in time order
  SimResult result_;
  int64_t alive_since_ = 0;
  bool count_exact_ = false;
  std::unordered_map<std::string, Exact> exact_;
};

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_RECORDER_H_
