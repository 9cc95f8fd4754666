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

// Issue 40: concurrency leases against one ideal global semaphore (sim/oracle.h), sampled every
// 100 ms. leases-steady offers twice the capacity of 20 keys of `concurrency: 10`: the slots
// held, time-weighted, stay within 1.02 of the limits, and no key's peak beyond its limit
// exceeds the grants one key got in any window of the convergence p99 (what the nodes can grant
// before they hear of each other's). Measured (seed 1): held/limit 0.932 (the oracle's 0.913),
// peak 5 over (bound 8), over-limit 134.9 of 6,000 limit slot-seconds.
TEST(Targets, LeasesSteadyHoldTheLimitOnAverageAndPeakWithinAConvergenceWindow) {
  const SimResult r = run(load_scenario_file(kScenarioDir + "/leases-steady.yaml"));
  const PhaseStats& p = phase(r, "steady");
  EXPECT_LE(p.lease_in_flight_ratio(), 1.02);
  EXPECT_GE(p.lease_in_flight_ratio(), 0.88) << "the limits should be in use: offered at twice the capacity";
  EXPECT_GE(p.lease_in_flight_ratio(), 0.98 * p.lease_oracle_slot_s / p.lease_limit_slot_s) << "no under-use";
  EXPECT_GT(p.lease_peak_bound, 0);
  EXPECT_LE(p.lease_peak_over, p.lease_peak_bound);
  EXPECT_LE(p.lease_over_slot_s, 0.04 * p.lease_limit_slot_s);
  EXPECT_GT(p.admitted, 5000u);
  EXPECT_EQ(r.member_failures, 0);
}

// Issue 40: a partition in halves under each policy. `open`: each half grants the whole limit
// (1.42 of it over the 10 s, the first 2 s before the halves fail each other included);
// `proportional`: each grants floor(limit x 4/8), so together they hold the limit, and use it.
// Measured (seed 1): open 1.418 (peak 13 over), proportional 0.890 (peak 5), the oracle 0.927.
TEST(Targets, LeasesUnderAPartitionHoldTheLimitTogetherOnlyUnderProportional) {
  Scenario s = load_scenario_file(kScenarioDir + "/leases-partition.yaml");
  const SimResult open = run(s);
  EXPECT_GE(phase(open, "partition").lease_in_flight_ratio(), 1.3) << "each half holds about the limit";
  s.node.partition_policy = PartitionPolicy::kProportional;
  const SimResult proportional = run(s);
  const PhaseStats& p = phase(proportional, "partition");
  EXPECT_LE(p.lease_in_flight_ratio(), 1.02);
  EXPECT_GE(p.lease_in_flight_ratio(), 0.85) << "each half should use its share";
  EXPECT_LE(p.lease_peak_over, phase(open, "partition").lease_peak_over);
  EXPECT_LE(phase(proportional, "healed").lease_in_flight_ratio(), 1.02);
}

// Issue 40: node 3 of 4 crashes holding a quarter of the leases (its holders die with it, in the
// oracle too). The others stop counting its slots once they mark it failed: fail_after (2 s)
// plus a round, here read at the 100 ms samples. Measured (seed 1): 50.3 slots counted beyond
// those held at the crash, below a tenth of that 2,100 ms later; before the crash 0.4 on average.
TEST(Targets, LeasesOfACrashedNodeAreFreeAgainWithinFailAfterAndARound) {
  const Scenario s = load_scenario_file(kScenarioDir + "/leases-crash.yaml");
  const SimResult r = run(s);
  const PhaseStats& crashed = phase(r, "crashed");
  double first = -1;
  int64_t freed_after_ns = -1;
  for (const SeriesPoint& pt : r.series) {
    if (pt.t_ns < crashed.start_ns || pt.t_ns >= crashed.end_ns) continue;
    if (first < 0) {
      first = pt.lease_lost;
    } else if (pt.lease_lost < 0.1 * first) {
      freed_after_ns = pt.t_ns - crashed.start_ns;
      break;
    }
  }
  EXPECT_GE(first, 35) << "a quarter of 200 slots, most of them in use, should be out with node 3";
  ASSERT_GE(freed_after_ns, 0) << "the crashed node's slots were never freed";
  EXPECT_GE(freed_after_ns, s.node.fail_after_ns - s.node.interval_ns) << "freed before the node could be failed?";
  EXPECT_LE(freed_after_ns, s.node.fail_after_ns + s.node.interval_ns + 100 * kNanosPerMilli);
  const PhaseStats& steady = phase(r, "steady");
  EXPECT_LE(steady.lease_lost_slot_s, 0.01 * steady.lease_limit_slot_s);
}

// Issue 40: 5 % of the holders never release; the TTL (5 s) frees theirs. They take capacity
// meanwhile, about what the estimate in the scenario says, and nothing is held beyond the limit
// for it. Measured (seed 1): held/limit 0.808 against the oracle's 0.913 (whose holders' work
// ends at their hold), 911 slot-seconds counted beyond those held (1.5 slots of each key's 10).
TEST(Targets, LeasesNeverReleasedAreFreedByTheirTtl) {
  Scenario s = load_scenario_file(kScenarioDir + "/leases-leak.yaml");
  const SimResult leak = run(s);
  s.load.never_release = 0;
  const SimResult clean = run(s);
  const PhaseStats& p = leak.total;
  const double seconds = double(s.duration_ns) / double(kNanosPerSecond);
  const double lost_per_key = p.lease_lost_slot_s / seconds / double(s.load.keys);
  EXPECT_GE(lost_per_key, 0.5) << "the leaked leases should show";
  EXPECT_LE(lost_per_key, 5.0) << "more than a TTL's worth of leaks: are they ever freed?";
  EXPECT_GT(p.lease_lost_slot_s, 3 * clean.total.lease_lost_slot_s);
  EXPECT_GE(p.lease_in_flight_ratio(), 0.7);
  EXPECT_LE(p.lease_over_slot_s, 0.04 * p.lease_limit_slot_s);
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
