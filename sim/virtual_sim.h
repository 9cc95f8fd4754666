// The virtual back end of tollgate-sim: the real Node code (core: buckets, ledger, membership,
// dissemination) on a simulated network in virtual time. Every random choice is drawn from the
// scenario's seed: the same seed gives the same run, bit for bit, whatever the thread count.
//
// How it runs on several cores (a conservative parallel event loop): no message arrives sooner
// than the network's minimum latency after it is sent, so within a window of virtual time that
// short, what one node does cannot change what another does. A window's events are run node by
// node on several threads; what crosses nodes (messages, applied batches, sends, decisions) is
// collected per thread and merged in the order one thread would have produced it, before the next
// window. Each node draws from random streams of its own, so no draw depends on how nodes were
// spread over threads. Timeline events (partitions, loss, crashes, joins) run between windows.
#ifndef TOLLGATE_SIM_VIRTUAL_SIM_H_
#define TOLLGATE_SIM_VIRTUAL_SIM_H_

#include <cstddef>
#include <memory>

#include "result.h"
#include "scenario.h"
#include "tollgate/rules.h"

namespace tollgate::sim {

struct VirtualOptions {
  // Threads that run the nodes, the caller's included; 0: one per core. The output does not
  // depend on it.
  unsigned threads = 0;
  // Windows with fewer events than this run on the calling thread alone (waking the crew would
  // cost more than it saves). Tests set 1 so that every window goes through the crew.
  size_t min_parallel_events = 24;
};

// Runs `scenario` to its end. `rules` are the scenario's rules, parsed.
SimResult run_virtual(const Scenario& scenario, std::shared_ptr<const RuleSet> rules,
                      const VirtualOptions& options = {});

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_VIRTUAL_SIM_H_
