// What only a local run (sim/local_cluster.h) knows, beside its SimResult: the checks the
// daemons did not decide, and how closely the load generator kept to its schedule.
#ifndef TOLLGATE_SIM_LOCAL_STATS_H_
#define TOLLGATE_SIM_LOCAL_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tollgate::sim {

struct LocalStats {
  // Checks with no decision from the daemon (deadline passed, daemon unreachable): left out of
  // every figure of the SimResult, counted here per phase of the scenario, in order.
  std::vector<uint64_t> failed_open;
  uint64_t failed_open_total = 0;
  std::string failed_open_example;  // the client's error for the first one
  uint64_t dropped = 0;             // arrivals when no node that takes load was up (not offered)
  int64_t lag_p99_ns = 0;           // how late checks were sent after their scheduled time
  int64_t lag_max_ns = 0;
  double formed_after_s = 0;        // from the first start until every node saw every other alive
  uint64_t stats_polls_failed = 0;  // counter polls a daemon did not answer (cost undercounted)
  uint64_t rls_calls = 0;           // ShouldRateLimit calls the daemons answered during the run (front_end rls)
};

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_LOCAL_STATS_H_
