// The virtual back end of tollgate-sim: the real Node code (core: buckets, ledger, membership,
// dissemination) on a simulated network in virtual time. One thread, one event queue, every
// random choice drawn from the scenario's seed: the same seed gives the same run, bit for bit.
#ifndef TOLLGATE_SIM_VIRTUAL_SIM_H_
#define TOLLGATE_SIM_VIRTUAL_SIM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "result.h"
#include "scenario.h"
#include "tollgate/rules.h"

namespace tollgate::sim {

// Runs `scenario` to its end. `rules` are the scenario's rules, parsed.
SimResult run_virtual(const Scenario& scenario, std::shared_ptr<const RuleSet> rules);

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_VIRTUAL_SIM_H_
