// The local back end of tollgate-sim (--cluster local): the scenario on real tollgated processes
// on 127.0.0.1, driven in real time through the client API.
//
// One run:
// 1. a temp dir (rules file from the scenario, peers file, one Unix socket and one log per node);
//    N daemons on free loopback ports with the scenario's mode, transport, membership (static: the
//    peers file; heartbeat: node 0 is every node's seed), policy, interval and fanout;
// 2. waits until every node lists every other as alive, before t = 0 (a timeout is an error that
//    quotes the tail of every daemon's log);
// 3. replays the scenario's arrivals (sim/arrivals.h) at their scheduled times on a steady clock,
//    one asynchronous check per arrival to the node it falls on (through the client API, or with
//    `front_end: rls` as a gRPC ShouldRateLimit call to the node's rate limit service, the rules
//    given to the daemons as an RLS config: sim/rls_front_end.h); a check's time is its scheduled
//    time, whenever the daemon actually saw it (the lag is measured and reported);
// 4. applies the timeline through the admin API at the scheduled times: partition = every node
//    drops gossip to and from the nodes on other sides; loss = loss on every node; crash =
//    SIGKILL; restart = the same node id and port again (the daemon takes a new incarnation);
//    join = new daemons (static: the peers file is rewritten; the daemons re-read it every 1 s).
//    The scenario's `network` (latency, loss, duplicate) becomes every daemon's fault delay,
//    jitter, loss and duplication, since loopback has none of its own;
// 5. polls each daemon's counters (gossip_messages_sent, transport_bytes_sent) at every phase
//    boundary, so cost is per phase.
//
// What it cannot measure: convergence. That needs the moment every daemon applies every batch,
// which the daemons do not report; the figures are left at "no samples" (printed "-", JSON null)
// rather than estimated.
//
// Checks the daemons did not decide (the client's deadline passed, or the daemon was not
// reachable, e.g. a restarted node still starting) are not decisions: they are left out of the
// figures altogether (neither the cluster's nor the oracle's count) and counted in LocalStats.
//
// Cleanup: every daemon started is stopped (SIGTERM, then SIGKILL after a grace period) and the
// temp dir removed, however run_local returns. The daemons also get SIGKILL from the kernel if
// the thread that called run_local dies (PR_SET_PDEATHSIG), so even a SIGKILLed tollgate-sim
// leaves none behind. They run in their own process group: a Ctrl-C at the terminal reaches only
// tollgate-sim, which sets `interrupted` and stops them itself.
#ifndef TOLLGATE_SIM_LOCAL_CLUSTER_H_
#define TOLLGATE_SIM_LOCAL_CLUSTER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "local_stats.h"
#include "result.h"
#include "scenario.h"
#include "tollgate/client.h"
#include "tollgate/rules.h"

namespace tollgate::sim {

struct LocalOptions {
  std::string tollgated;  // the daemon binary (see find_tollgated)
  // How long a check waits for its daemon; later, it counts as failed open. Longer than a real
  // service's 2 ms: two cores run the daemons and the load generator, and the run measures the
  // cluster's decisions, not the scheduler.
  std::chrono::milliseconds check_deadline{50};
  std::chrono::milliseconds form_timeout{30'000};  // for the cluster to form before t = 0
  std::chrono::milliseconds stop_grace{3'000};     // SIGTERM, then SIGKILL after this
  std::string log_level = "info";                  // the daemons' --log-level
  // Set (from a signal handler, another thread) to end the run early: run_local stops every
  // daemon, removes the temp dir and throws Interrupted. May be null.
  const std::atomic<bool>* interrupted = nullptr;
  std::ostream* progress = nullptr;  // one line per step ("cluster formed"), for people; may be null
};

// Thrown by run_local when LocalOptions::interrupted was set; everything is cleaned up by then.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `scenario` on real daemons. Throws std::runtime_error saying what failed (with the tail of
// the daemons' logs when they are the cause), or Interrupted. `stats` may be null.
SimResult run_local(const Scenario& scenario, std::shared_ptr<const RuleSet> rules, const LocalOptions& options,
                    LocalStats* stats = nullptr);

// The tollgated to run: `configured` if not empty, else the first of `candidates` (e.g. the one
// built with tollgate-sim, the one installed next to it) that is executable, else the first
// "tollgated" on PATH. Throws std::runtime_error naming what it tried.
std::string find_tollgated(const std::string& configured, const std::vector<std::string>& candidates);

// The fault settings that put node `index` of `nodes` where the timeline says: on its side of
// `partition` (null: none in force; nodes it does not list are on no side and cut from all),
// with `loss` (the loss event in force, else the network's), and the scenario network's latency
// (delay = min, jitter = max - min, whole milliseconds) and duplication. Node ids are "node-I".
FaultSettings plan_faults(size_t index, size_t nodes, const Event* partition, double loss, const NetworkSpec& network);

// The id tollgate-sim gives node `index`: "node-3".
std::string local_node_id(size_t index);

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_LOCAL_CLUSTER_H_
