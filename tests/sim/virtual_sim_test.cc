// The virtual back end: deterministic from its seed, and the accuracy targets of issue #4 (not
// timing-sensitive here: virtual time).
#include "virtual_sim.h"

#include <gtest/gtest.h>

#include <bit>
#include <sstream>

#include "report.h"
#include "scenario.h"
#include "tollgate/rules_file.h"

namespace tollgate::sim {
namespace {

Scenario steady(size_t nodes, DisseminationMode mode) {
  Scenario s;
  s.name = "steady-test";
  s.nodes = nodes;
  s.node.mode = mode;
  s.duration_ns = 20 * kNanosPerSecond;
  s.rules_yaml = "rules:\n  - {match: \"k*\", rate: 100/s, burst: 100, max_debt: 100}\n";
  s.load.rate_per_sec = 500;  // 5x the limit, spread evenly
  s.load.keys = 1;
  return s;
}

// Every window through the crew when threads > 1 (by default small windows run on one thread).
VirtualOptions threaded(unsigned threads) { return VirtualOptions{threads, 1}; }

std::string json_of(const Scenario& s, unsigned threads = 0) {
  std::ostringstream out;
  write_json(out, RunInfo{s.name, "virtual"}, s, run_virtual(s, parse_rules(s.rules_yaml, "test"), threaded(threads)));
  return out.str();
}

TEST(VirtualSim, SameSeedSameBytesOtherSeedOtherRun) {
  Scenario s = steady(8, DisseminationMode::kGossip);
  s.duration_ns = 5 * kNanosPerSecond;
  s.network.loss = 0.1;
  s.timeline.push_back(Event{
      Event::Kind::kPartition, 2 * kNanosPerSecond, 3 * kNanosPerSecond, {{0, 1, 2, 3}, {4, 5, 6, 7}}, 0, 0, 0, "p"});
  const std::string a = json_of(s), b = json_of(s);
  EXPECT_EQ(a, b);
  s.seed = 2;
  EXPECT_NE(json_of(s), a);
}

// Nodes run on several threads window by window; what crosses nodes is merged in one fixed
// order, so the thread count changes nothing: not the decisions, the convergence samples, the
// costs, nor the random draws. With crashes, a partition, loss and duplicates, so every path of
// the merge is exercised, and 33 nodes so the threads get uneven shares.
TEST(VirtualSim, ThreadCountDoesNotChangeTheOutput) {
  Scenario s = steady(33, DisseminationMode::kGossip);
  s.duration_ns = 6 * kNanosPerSecond;
  s.load.keys = 50;
  s.network.loss = 0.05;
  s.network.duplicate = 0.05;
  s.timeline.push_back(
      Event{Event::Kind::kPartition, 1 * kNanosPerSecond, 2 * kNanosPerSecond, {{0, 1, 2}, {3, 4, 5}}, 0, 0, 0, "p"});
  s.timeline.push_back(Event{Event::Kind::kCrash, 3 * kNanosPerSecond, 4 * kNanosPerSecond, {}, 0, 7, 0, "c"});
  s.timeline.push_back(Event{Event::Kind::kJoin, 4 * kNanosPerSecond, std::nullopt, {}, 0, 0, 2, "j"});
  const SimResult r = run_virtual(s, parse_rules(s.rules_yaml, "test"), threaded(2));
  EXPECT_GT(r.total.convergence_ns.size(), 200u);  // batches are timed across threads too
  EXPECT_GT(r.total.offered, 2000u);
  const std::string one = json_of(s, 1);
  EXPECT_EQ(json_of(s, 2), one);
  EXPECT_EQ(json_of(s, 3), one);
  s.node.mode = DisseminationMode::kMesh;
  s.node.membership = MembershipKind::kHeartbeat;
  EXPECT_EQ(json_of(s, 3), json_of(s, 1));
}

// The count of peers marked failed: none in a quiet cluster, and every node on each side of a
// partition long enough for fail_after (2 s) marks every node of the other side.
TEST(VirtualSim, CountsMembersMarkedFailed) {
  Scenario s = steady(8, DisseminationMode::kGossip);
  s.duration_ns = 6 * kNanosPerSecond;
  EXPECT_EQ(run_virtual(s, parse_rules(s.rules_yaml, "test")).member_failures, 0);
  s.timeline.push_back(Event{
      Event::Kind::kPartition, 1 * kNanosPerSecond, 5 * kNanosPerSecond, {{0, 1, 2, 3}, {4, 5, 6, 7}}, 0, 0, 0, "p"});
  EXPECT_EQ(run_virtual(s, parse_rules(s.rules_yaml, "test")).member_failures, 8 * 4);
}

// Scenario::state_interval (tollgated --state-dir): a lone node, a day's limit spent in its first
// two seconds. Its state is written at the first round 10 s in, and when it stops, never when it
// crashes: a crash before the first write loses the day's spending (the bound the docs give: one
// write interval), a crash after it loses none, and a stop none either.
TEST(VirtualSim, AStateFileKeepsWhatWasWrittenAndAStopWritesIt) {
  const auto admitted_after_restart = [](int64_t state_interval_ns, bool graceful, int64_t down_at_s) {
    Scenario s;
    s.name = "state-test";
    s.nodes = 1;
    s.node.mode = DisseminationMode::kGossip;
    s.duration_ns = 30 * kNanosPerSecond;
    s.state_interval_ns = state_interval_ns;
    s.rules_yaml = "rules:\n  - {match: \"k*\", rate: 100/d, burst: 100, max_debt: 100}\n";
    s.load.rate_per_sec = 50;
    s.load.keys = 1;
    Event e{Event::Kind::kCrash, down_at_s * kNanosPerSecond, (down_at_s + 1) * kNanosPerSecond, {}, 0, 0, 0, "down"};
    e.graceful = graceful;
    s.timeline.push_back(e);
    const SimResult r = run_virtual(s, parse_rules(s.rules_yaml, "test"));
    EXPECT_EQ(r.phases.front().admitted, 100u) << "the day's burst, before the restart";
    uint64_t after = 0;
    for (size_t i = 1; i < r.phases.size(); ++i) after += r.phases[i].admitted;
    return after;
  };
  const int64_t every_10s = 10 * kNanosPerSecond;
  EXPECT_EQ(admitted_after_restart(every_10s, false, 15), 0u) << "written at 10 s, crashed at 15 s";
  EXPECT_EQ(admitted_after_restart(every_10s, true, 5), 0u) << "a stop writes the state as it leaves";
  EXPECT_EQ(admitted_after_restart(every_10s, false, 5), 100u) << "a crash before any write loses that interval";
  EXPECT_EQ(admitted_after_restart(0, true, 15), 100u) << "no state: a lone node comes back full";
}

// A 1.5 s partition outlasts a 1 s fail_after, not the default 2 s: the scenario's fail_after
// is what the nodes' membership uses.
TEST(VirtualSim, TheScenariosFailAfterDecidesWhenASilentPeerIsMarkedFailed) {
  Scenario s = steady(8, DisseminationMode::kGossip);
  s.duration_ns = 4 * kNanosPerSecond;
  s.timeline.push_back(Event{Event::Kind::kPartition,
                             1 * kNanosPerSecond,
                             2'500 * kNanosPerMilli,
                             {{0, 1, 2, 3}, {4, 5, 6, 7}},
                             0,
                             0,
                             0,
                             "p"});
  EXPECT_EQ(run_virtual(s, parse_rules(s.rules_yaml, "test")).member_failures, 0);
  s.node.fail_after_ns = 1 * kNanosPerSecond;
  EXPECT_EQ(run_virtual(s, parse_rules(s.rules_yaml, "test")).member_failures, 8 * 4);
}

// A member's heartbeat reaches everyone by relays of the rows each message carries; with too few
// rows for the cluster's size it arrives after fail_after and members are falsely suspected. The
// scenario's member_rows is what the nodes' messages carry.
TEST(VirtualSim, MoreMembershipRowsPerMessageMeanFewerFalseSuspicions) {
  Scenario s = steady(256, DisseminationMode::kGossip);
  s.duration_ns = 4 * kNanosPerSecond;
  s.node.fail_after_ns = 1 * kNanosPerSecond;
  s.node.member_rows = 8;
  const int64_t few_rows = run_virtual(s, parse_rules(s.rules_yaml, "test")).member_failures;
  s.node.member_rows = 64;
  const int64_t default_rows = run_virtual(s, parse_rules(s.rules_yaml, "test")).member_failures;
  EXPECT_GT(few_rows, 0);
  EXPECT_LT(default_rows * 10, few_rows) << "8 rows: " << few_rows << ", 64 rows: " << default_rows;
}

TEST(VirtualSim, SteadyLoadMeetsTheAccuracyTargets) {
  for (DisseminationMode mode : {DisseminationMode::kMesh, DisseminationMode::kGossip}) {
    const Scenario s = steady(8, mode);
    const SimResult r = run_virtual(s, parse_rules(s.rules_yaml, "test"));
    const double target = mode == DisseminationMode::kMesh ? 1.03 : 1.05;
    EXPECT_LE(r.total.over_admission(), target) << dissemination_mode_name(mode);
    EXPECT_GE(r.total.over_admission(), 0.95) << dissemination_mode_name(mode);
    EXPECT_LE(r.total.under_admission(), 0.05) << dissemination_mode_name(mode);
    RecordProperty(std::string(dissemination_mode_name(mode)) + "_over_admission",
                   std::to_string(r.total.over_admission()));
  }
}

TEST(VirtualSim, GossipConvergesWithinLogNPlusTwoRounds) {
  const size_t n = 32;
  Scenario s = steady(n, DisseminationMode::kGossip);
  s.network.latency_min_ns = s.network.latency_max_ns = 1 * kNanosPerMilli;
  s.load.keys = 100;
  s.duration_ns = 10 * kNanosPerSecond;
  const SimResult r = run_virtual(s, parse_rules(s.rules_yaml, "test"));
  const double rounds = double(std::bit_width(n - 1) + 2);  // log2(32) + 2 = 7
  ASSERT_GT(r.total.convergence_ns.size(), 100u);
  EXPECT_LE(r.total.convergence_ms(99), rounds * 50) << "p50 " << r.total.convergence_ms(50) << " ms";
  RecordProperty("p99_ms", std::to_string(r.total.convergence_ms(99)));  // docs/results.md quotes it
}

// Issue #20's goal, sim/scenarios/busy-1000.yaml at a reduced duration: 1,000 busy nodes (100
// checks/s each, 10,000 Zipf keys, limits binding on the hot ones) at the default mode, auto,
// which relays at this size (32 groups; 16 under a sanitizer). After the first
// half second (start-up, every member unheard of under static membership): over-admission
// within 5%, convergence p99 within 1 s, at most 1 MB of gossip per node per second, and no
// false suspicion in the whole run. docs/results.md, "Busy clusters", has the 10 s run. Under a
// sanitizer the same per-node load on 256 nodes (16 groups), which such a build runs in
// reasonable time.
TEST(VirtualSim, RelayHoldsAThousandBusyNodes) {
  Scenario s = load_scenario_file(TOLLGATE_SOURCE_DIR "/sim/scenarios/busy-1000.yaml");
  ASSERT_EQ(s.nodes, 1000u);
  ASSERT_EQ(s.node.mode, DisseminationMode::kAuto);
  uint32_t groups = 32;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  s.nodes = 256;
  s.load.rate_per_sec = 100.0 * 256;
  groups = 16;
#endif
  s.duration_ns = 1 * kNanosPerSecond;
  ASSERT_EQ(s.timeline.size(), 1u);
  s.timeline[0].at_ns = kNanosPerSecond / 2;  // the phase after start-up
  const SimResult r = run_virtual(s, parse_rules(s.rules_yaml, "test"));
  ASSERT_EQ(r.phases.size(), 2u);
  const PhaseStats& p = r.phases[1];
  // Deterministic: the same figures on every run and every build of a kind (measured: 1,000
  // nodes 0.987, p99 59.53 ms, 936 KB/node/s; 256 nodes under ASan and TSan 0.991, 59.27 ms,
  // 319 KB). The bands are the documented figures (design.md 7.7: p99 59-60 ms) with a small
  // margin; they were 1,000 ms and +-5 %, which no regression short of a collapse would cross
  // (issue 37, item 6).
  EXPECT_LE(p.over_admission(), 1.02);
  EXPECT_GE(p.over_admission(), 0.98);
  EXPECT_LE(p.under_admission(), 0.02);
  ASSERT_GT(p.convergence_ns.size(), 1000u);
  EXPECT_LE(p.convergence_ms(99), 70);
  EXPECT_LE(p.bytes_per_node_s(), 1'000'000);
  EXPECT_EQ(r.member_failures, 0);
  const std::map<std::pair<std::string, uint32_t>, size_t> every_node_relaying = {{{"relay", groups}, s.nodes}};
  EXPECT_EQ(r.modes_at_end, every_node_relaying);
  EXPECT_EQ(r.charged_twice, 0u);
  RecordProperty("over_admission", std::to_string(p.over_admission()));
  RecordProperty("p99_ms", std::to_string(p.convergence_ms(99)));
  RecordProperty("bytes_per_node_s", std::to_string(p.bytes_per_node_s()));
}

// Issue 39: the same cluster losing 5% of every message for a second. Relay repairs what each
// hop loses (a gap asks for the batch again) and asks for a silent member's row before failing
// it: every batch sealed during the loss reaches every node within the second after it, none is
// lost for good, no live member is marked failed. (sim/scenarios/busy-1000-loss.yaml is the 4 s
// run of docs/results.md.) Under a sanitizer, 256 nodes.
TEST(VirtualSim, RelayRepairsWhatAThousandBusyNodesLoseAtFivePercent) {
  Scenario s = load_scenario_file(TOLLGATE_SOURCE_DIR "/sim/scenarios/busy-1000-loss.yaml");
  ASSERT_EQ(s.nodes, 1000u);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  s.nodes = 256;
  s.load.rate_per_sec = 100.0 * 256;
#endif
  ASSERT_EQ(s.timeline.size(), 1u);
  s.timeline[0].at_ns = kNanosPerSecond / 2;
  s.timeline[0].until_ns = 3 * kNanosPerSecond / 2;
  s.duration_ns = 5 * kNanosPerSecond / 2;  // a tail of 1 s: what was sealed in the loss is not in flight
  const SimResult r = run_virtual(s, parse_rules(s.rules_yaml, "test"));
  ASSERT_EQ(r.phases.size(), 3u);
  const PhaseStats& p = r.phases[1];
  // Deterministic (measured: 1,000 nodes over 0.996, p99 332 ms, 1,012 KB/node/s; the 4 s run
  // 1.000, 342 ms). Before repair (4 s run): p99 2.1 s, 14,406 lost, 80 live members failed.
  EXPECT_LE(p.over_admission(), 1.02);
  EXPECT_GE(p.over_admission(), 0.98);
  ASSERT_GT(p.convergence_ns.size(), 1000u);
  EXPECT_LE(p.convergence_ms(99), 500);
  EXPECT_LE(p.bytes_per_node_s(), 1'100'000);
  EXPECT_EQ(r.unconverged, 0u);
  EXPECT_EQ(r.member_failures, 0);
  EXPECT_EQ(r.charged_twice, 0u);
  RecordProperty("over_admission", std::to_string(p.over_admission()));
  RecordProperty("p99_ms", std::to_string(p.convergence_ms(99)));
  RecordProperty("bytes_per_node_s", std::to_string(p.bytes_per_node_s()));
}

// Relay at the scenarios' small sizes: as accurate as the other modes on the steady load.
TEST(VirtualSim, RelayMeetsTheSteadyTargetsAtEightNodes) {
  const Scenario s = steady(8, DisseminationMode::kRelay);
  const SimResult r = run_virtual(s, parse_rules(s.rules_yaml, "test"));
  EXPECT_LE(r.total.over_admission(), 1.05);
  EXPECT_GE(r.total.over_admission(), 0.95);
  EXPECT_LE(r.total.under_admission(), 0.05);
  EXPECT_EQ(r.member_failures, 0);
  EXPECT_EQ(r.charged_twice, 0u);
}

// Why auto relays from 128 members (scripts/auto-sweep, docs/results.md "Where auto should
// switch"): 128 busy nodes (100 checks/s each) losing 5% of every message for a second, in the
// default mode. They relay, lose no batch for good, charge none twice, fail no live member, and
// converge within a few rounds (measured: over 1.001, p99 273 ms; the 4 s run 285 ms, and
// gossip there 1,995 ms with 279 batches lost).
TEST(VirtualSim, AutoRelaysAHundredAndTwentyEightBusyNodesAndLosesNothingAtFivePercent) {
  Scenario s = load_scenario_file(TOLLGATE_SOURCE_DIR "/sim/scenarios/busy-1000-loss.yaml");
  ASSERT_EQ(s.node.mode, DisseminationMode::kAuto);
  s.nodes = 128;
  s.load.rate_per_sec = 100.0 * 128;
  ASSERT_EQ(s.timeline.size(), 1u);
  s.timeline[0].at_ns = kNanosPerSecond / 2;
  s.timeline[0].until_ns = 3 * kNanosPerSecond / 2;
  s.duration_ns = 5 * kNanosPerSecond / 2;
  const SimResult r = run_virtual(s, parse_rules(s.rules_yaml, "test"));
  ASSERT_EQ(r.phases.size(), 3u);
  const PhaseStats& p = r.phases[1];
  const std::map<std::pair<std::string, uint32_t>, size_t> every_node_relaying = {
      {{"relay", relay_groups_for(128)}, s.nodes}};
  EXPECT_EQ(r.modes_at_end, every_node_relaying);
  EXPECT_LE(p.over_admission(), 1.02);
  EXPECT_GE(p.over_admission(), 0.98);
  ASSERT_GT(p.convergence_ns.size(), 1000u);
  EXPECT_LE(p.convergence_ms(99), 400);
  EXPECT_EQ(r.unconverged, 0u);
  EXPECT_EQ(r.charged_twice, 0u);
  EXPECT_EQ(r.member_failures, 0);
  RecordProperty("over_admission", std::to_string(p.over_admission()));
  RecordProperty("p99_ms", std::to_string(p.convergence_ms(99)));
}

// Issue 41: sim/scenarios/top-100k.yaml (8 nodes, 100,000 Zipf keys, about 41 of them over
// their limit). Every node reports the cluster's exact top 10 denied keys with bounds that hold,
// and every node's summary is in the answer;
// for tokens, where thousands of keys share each summary and the top keys nearly tie (each
// admitted at its rate), the bounds hold and no key of the exact top 10 is missing by more than
// the stated error.
TEST(VirtualSim, TopKeysAreTheExactTopTenAtEveryNodeWithBoundsThatHold) {
  const Scenario s = load_scenario_file(TOLLGATE_SOURCE_DIR "/sim/scenarios/top-100k.yaml");
  const SimResult r = run_virtual(s, parse_rules(s.rules_yaml, "test"));
  ASSERT_EQ(r.top_checks.size(), 6u) << "nodes 0, 4 and 7, one rule, two metrics";
  for (const SimResult::TopCheck& t : r.top_checks) {
    SCOPED_TRACE("node " + std::to_string(t.node) + " " + t.metric);
    EXPECT_EQ(t.rule, "k*");
    EXPECT_EQ(t.members_reporting, 8u);
    EXPECT_EQ(t.outside, 0u);
    EXPECT_EQ(t.missed, 0u);
    EXPECT_EQ(t.total, t.exact_total) << "every check counted once, cluster-wide";
    if (t.metric == "denied") {
      EXPECT_EQ(t.found, 10u);
      // Members publish their 32 heaviest: the 32nd's count bounds the rest (measured: 147-153
      // of 27,140 denials).
      EXPECT_LT(t.error_bound, t.total / 100);
      EXPECT_GT(t.total, 100'000u / 10) << "a load with a quarter of its checks over their limits";
    } else {
      EXPECT_GT(t.error_bound, 0u) << "thousands of keys per summary: the bound is not zero here";
    }
    RecordProperty(t.metric + "_found_at_" + std::to_string(t.node), std::to_string(t.found));
  }
}

}  // namespace
}  // namespace tollgate::sim
