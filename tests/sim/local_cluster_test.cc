// The local back end on real tollgated processes (integration: labelled so in ctest). A short
// partitioned run must measure what a partition does, and leave no daemon and no temp dir behind,
// also when it is interrupted.
#include "local_cluster.h"

#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "tollgate/rules_file.h"

namespace tollgate::sim {
namespace {

namespace fs = std::filesystem;

// Points TMPDIR (where run_local makes its temp dir) at a fresh empty dir for one test.
class LocalClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("TMPDIR");
    old_tmpdir_ = old ? old : "";
    tmp_ = fs::temp_directory_path() / ("tollgate-sim-test-" + std::to_string(::getpid()));
    fs::create_directories(tmp_);
    ::setenv("TMPDIR", tmp_.c_str(), 1);
  }
  void TearDown() override {
    if (old_tmpdir_.empty())
      ::unsetenv("TMPDIR");
    else
      ::setenv("TMPDIR", old_tmpdir_.c_str(), 1);
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  // Every daemon started was waited for: this process has no child left, running or not.
  static bool no_children() { return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD; }
  bool tmp_empty() const { return fs::is_empty(tmp_); }

  static LocalOptions options() {
    LocalOptions o;
    o.tollgated = TOLLGATED_PATH;
    o.check_deadline = std::chrono::milliseconds(200);  // loaded 2-core CI: a slow answer is not a failure
    return o;
  }

  void expect_the_partition_measured(const Scenario& s, LocalStats& stats);

  fs::path tmp_;
  std::string old_tmpdir_;
};

// 3 nodes, 150 checks/s on one key limited to 20/s: node 0 is cut off from 2 s to 4 s. While
// split each side enforces the whole limit alone (open policy), so the cluster admits about
// twice the oracle; before it, about what the oracle does.
Scenario partitioned() {
  Scenario s;
  s.name = "local-test";
  s.nodes = 3;
  s.node.mode = DisseminationMode::kGossip;
  s.duration_ns = 5 * kNanosPerSecond;
  s.rules_yaml = "rules:\n  - {match: \"k*\", rate: 20/s, burst: 20, max_debt: 20}\n";
  s.load.rate_per_sec = 150;
  Event p;
  p.kind = Event::Kind::kPartition;
  p.at_ns = 2 * kNanosPerSecond;
  p.until_ns = 4 * kNanosPerSecond;
  p.groups = {{0}, {1, 2}};
  p.text = "partition 0|1-2 at 2s for 2s";
  s.timeline.push_back(p);
  return s;
}

const PhaseStats& phase(const SimResult& r, const std::string& name) {
  for (const PhaseStats& p : r.phases) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no phase " << name;
  return r.total;
}

// Runs `s` (partitioned(), through either front end) and holds its figures to the bands below.
void LocalClusterTest::expect_the_partition_measured(const Scenario& s, LocalStats& stats) {
  std::ostringstream progress;
  LocalOptions o = options();
  o.progress = &progress;
  const SimResult r = run_local(s, parse_rules(s.rules_yaml, "test"), o, &stats);
  EXPECT_TRUE(no_children()) << "a daemon was left running";
  EXPECT_TRUE(tmp_empty()) << "the temp dir was left behind";

  const PhaseStats& steady = phase(r, "steady");
  const PhaseStats& split = phase(r, "partition");
  // Most checks are decided (fail-opens are left out of the figures and counted apart).
  // Measured on this 2-vCPU VM with a CI build running beside it (4 runs): steady 1.000-1.017,
  // split 1.950-2.000, 0 of 781 checks failed open. The plain build is held to bands around that
  // which a broken system would leave (the old ones, 0.85-1.3 and 1.4-2.4 with 10% failing open,
  // did not). Daemons under a sanitizer run several times slower, so those builds keep the old
  // bands: they are there to find memory and thread errors, the plain build to hold the figures.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr double kSteady[] = {0.85, 1.3}, kSplit[] = {1.4, 2.4};
  constexpr uint64_t kFailOpenDivisor = 10;
#else
  constexpr double kSteady[] = {0.9, 1.12}, kSplit[] = {1.7, 2.2};
  constexpr uint64_t kFailOpenDivisor = 20;
#endif
  EXPECT_GT(r.total.offered, 600u) << progress.str();
  EXPECT_LT(stats.failed_open_total, r.total.offered / kFailOpenDivisor) << stats.failed_open_example;
  EXPECT_GT(steady.over_admission(), kSteady[0]);
  EXPECT_LT(steady.over_admission(), kSteady[1]);
  // Two sides, each enforcing alone: about 2x. 1.0 would mean the partition was not applied;
  // far above 2, that a side did not enforce at all (150 offered vs 20 allowed per second).
  EXPECT_GT(split.over_admission(), kSplit[0]) << "admitted " << split.admitted << ", oracle " << split.oracle_admitted;
  EXPECT_LT(split.over_admission(), kSplit[1]) << "admitted " << split.admitted << ", oracle " << split.oracle_admitted;
  // Cost was polled: three gossiping nodes send every round.
  EXPECT_GT(steady.msgs_per_node_s(), 5.0);
  EXPECT_GT(steady.bytes_per_node_s(), 100.0);
  EXPECT_NEAR(r.total.node_seconds, 15.0, 0.01);
  // Not measurable on real daemons, so not reported.
  EXPECT_EQ(r.total.convergence_ms(50), -1);
  RecordProperty("steady_over", std::to_string(steady.over_admission()));
  RecordProperty("split_over", std::to_string(split.over_admission()));
  RecordProperty("failed_open", std::to_string(stats.failed_open_total) + " of " + std::to_string(r.total.offered));
  if (s.front_end == Scenario::FrontEnd::kRls) {
    // Every decision came through ShouldRateLimit: the daemons counted the calls (all but the
    // few still in flight at the last counter poll), and none through the client API's checks.
    EXPECT_GE(stats.rls_calls, r.total.offered * 95 / 100);
    EXPECT_LE(stats.rls_calls, r.total.offered + stats.failed_open_total);
  } else {
    EXPECT_EQ(stats.rls_calls, 0u);
  }
}

TEST_F(LocalClusterTest, APartitionedRunMeasuresThePartitionAndLeavesNothingBehind) {
  LocalStats stats;
  expect_the_partition_measured(partitioned(), stats);
  EXPECT_TRUE(no_children()) << "a daemon was left running";
  EXPECT_TRUE(tmp_empty()) << "the temp dir was left behind";
}

// The same run with every check a ShouldRateLimit call to the node's rate limit service, the
// rules given to the daemons as an RLS config: the RLS bucket keys are gossiped and enforced
// cluster-wide as the native ones are, and a partition splits them the same way.
TEST_F(LocalClusterTest, ThroughTheRateLimitServiceTheClusterEnforcesTheSameLimits) {
#if defined(__SANITIZE_THREAD__)
  // Measured in CI: under ThreadSanitizer 744 of 781 calls passed the 200 ms deadline (three
  // TSan daemons' gRPC servers plus this process's gRPC client on two cores), so the run measures
  // nothing. The RLS path's threads are checked under TSan by tollgate_rls_server_tests and
  // rls_grpc_python; this test runs in the plain and ASan builds.
  GTEST_SKIP() << "too slow under ThreadSanitizer to decide checks within the deadline";
#endif
  Scenario s = partitioned();
  s.front_end = Scenario::FrontEnd::kRls;
  LocalStats stats;
  expect_the_partition_measured(s, stats);
  EXPECT_TRUE(no_children()) << "a daemon was left running";
  EXPECT_TRUE(tmp_empty()) << "the temp dir was left behind";
}

TEST_F(LocalClusterTest, AnInterruptedRunStopsEveryDaemonAndRemovesItsDir) {
  const Scenario s = partitioned();
  std::atomic<bool> interrupted{true};  // as if Ctrl-C came while the cluster was forming
  LocalOptions o = options();
  o.interrupted = &interrupted;
  EXPECT_THROW(run_local(s, parse_rules(s.rules_yaml, "test"), o), Interrupted);
  EXPECT_TRUE(no_children()) << "a daemon was left running";
  EXPECT_TRUE(tmp_empty()) << "the temp dir was left behind";
}

TEST_F(LocalClusterTest, ADaemonThatCannotStartIsReportedWithItsLog) {
  Scenario s = partitioned();
  s.node.interval_ns = kNanosPerMilli / 2;  // tollgated refuses --interval below 1ms
  try {
    run_local(s, parse_rules(s.rules_yaml, "test"), options());
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("exited with status 2"), std::string::npos) << what;
    EXPECT_NE(what.find("--interval must be at least 1ms"), std::string::npos) << what;
  }
  EXPECT_TRUE(no_children());
  EXPECT_TRUE(tmp_empty());
}

}  // namespace
}  // namespace tollgate::sim
