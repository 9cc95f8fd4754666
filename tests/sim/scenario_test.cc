// The scenario file format (sim/scenario.h): fields and defaults, the timeline grammar, where
// errors point, the phases a timeline cuts a run into, and the scenarios shipped in sim/scenarios/.
#include "scenario.h"

#include "arrivals.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tollgate/config_error.h"
#include "tollgate/rules_file.h"

namespace tollgate::sim {
namespace {

constexpr int64_t kSec = kNanosPerSecond;
constexpr int64_t kMs = kNanosPerMilli;

const std::string kScenarioDir = TOLLGATE_SOURCE_DIR "/sim/scenarios";

// A minimal valid scenario, four lines long, with `extra` appended (top-level fields from line 5).
std::string scenario_with(const std::string& extra) {
  return "# a scenario for a test\n"
         "rules:\n"
         "  rules:\n"
         "    - {match: \"k*\", rate: 100/s, burst: 100}\n" +
         extra;
}

// Parses `text` expecting a ConfigError; returns its message.
std::string scenario_error(const std::string& text) {
  try {
    parse_scenario(text, "s.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

// parse_event expecting std::invalid_argument; returns its message.
std::string event_error(const std::string& line, size_t nodes = 8) {
  try {
    parse_event(line, nodes);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for: " << line;
  return "";
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

using Groups = std::vector<std::vector<size_t>>;

// Phases as "name start_s-end_s" for readable comparisons.
std::vector<std::string> phase_list(const Scenario& s) {
  std::vector<std::string> out;
  for (const Phase& p : s.phases()) {
    out.push_back(p.name + " " + std::to_string(p.start_ns / kSec) + "-" + std::to_string(p.end_ns / kSec));
  }
  return out;
}

Scenario run_of(int64_t duration_s, const std::vector<std::string>& timeline, size_t nodes = 8) {
  std::string text =
      scenario_with("nodes: " + std::to_string(nodes) + "\nduration: " + std::to_string(duration_s) + "s\ntimeline:\n");
  for (const std::string& line : timeline) text += "  - " + line + "\n";
  return parse_scenario(text, "s.yaml");
}

// ---------------------------------------------------------------- shipped scenarios

std::vector<std::filesystem::path> shipped_scenarios() {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(kScenarioDir)) {
    if (entry.path().extension() == ".yaml") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ShippedScenarios, EveryFileParsesIsNamedAfterItselfAndHasRulesTheRulesParserAccepts) {
  const auto files = shipped_scenarios();
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    const Scenario s = load_scenario_file(path.string());
    EXPECT_EQ(s.name, path.stem().string());
    const auto rules = parse_rules(s.rules_yaml, path.string());
    ASSERT_FALSE(rules->rules().empty() && rules->concurrency_rules().empty());
    EXPECT_FALSE(s.phases().empty());
    // max_debt decides how a run pays back parallel admission: every rule writes it out.
    std::ifstream in(path);
    size_t rates = 0, debts = 0;
    for (std::string line; std::getline(in, line);) {
      const std::string code = line.substr(0, line.find('#'));
      rates += contains(code, "match:") && contains(code, "rate:");
      debts += contains(code, "max_debt:");
    }
    EXPECT_EQ(debts, rates);
  }
  for (const char* required : {"steady", "partition-halves", "partition-minority", "loss-20", "crash-restart",
                               "flash-crowd", "churn", "leases-steady", "leases-crash", "leases-leak"}) {
    EXPECT_TRUE(std::filesystem::exists(kScenarioDir + "/" + required + ".yaml")) << required;
  }
}

// The shapes issue #4's targets are stated for.
TEST(ShippedScenarios, MatchTheShapesTheIssueTargetsAreStatedFor) {
  const auto limit_per_sec = [](const Scenario& s) {
    const Rate r = parse_rules(s.rules_yaml, s.name)->rules().at(0).limit.rate;
    return double(r.tokens) * double(kSec) / double(r.period_ns);
  };
  const Scenario steady = load_scenario_file(kScenarioDir + "/steady.yaml");
  EXPECT_EQ(steady.nodes, 8u);
  EXPECT_EQ(steady.load.spread, LoadSpec::Spread::kUniform);
  EXPECT_DOUBLE_EQ(steady.load.rate_per_sec, 5 * limit_per_sec(steady));
  EXPECT_TRUE(steady.timeline.empty());

  // Issue #20's: 1,000 nodes at 100 checks/s each over 10,000 Zipf keys; 5,000 at 10 each.
  const Scenario busy = load_scenario_file(kScenarioDir + "/busy-1000.yaml");
  EXPECT_EQ(busy.nodes, 1000u);
  EXPECT_DOUBLE_EQ(busy.load.rate_per_sec, 100.0 * 1000);
  EXPECT_EQ(busy.load.keys, 10'000u);
  EXPECT_EQ(busy.load.distribution, LoadSpec::Distribution::kZipf);
  EXPECT_EQ(busy.node.mode, DisseminationMode::kAuto);  // the default, which relays at this size
  const Scenario big = load_scenario_file(kScenarioDir + "/busy-5000.yaml");
  EXPECT_EQ(big.nodes, 5000u);
  EXPECT_DOUBLE_EQ(big.load.rate_per_sec, 10.0 * 5000);

  const Scenario halves = load_scenario_file(kScenarioDir + "/partition-halves.yaml");
  ASSERT_EQ(halves.timeline.size(), 1u);
  EXPECT_EQ(halves.timeline[0].groups, (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(halves.timeline[0].at_ns, 10 * kSec);
  EXPECT_EQ(halves.timeline[0].until_ns, 30 * kSec);
  EXPECT_GE(halves.duration_ns, 40 * kSec) << "10 s after the heal";
  EXPECT_DOUBLE_EQ(halves.load.rate_per_sec, 5 * limit_per_sec(halves));

  const Scenario minority = load_scenario_file(kScenarioDir + "/partition-minority.yaml");
  ASSERT_EQ(minority.timeline.size(), 1u);
  EXPECT_EQ(minority.timeline[0].groups, (Groups{{0, 1}, {2, 3, 4, 5, 6, 7}}));

  const Scenario loss = load_scenario_file(kScenarioDir + "/loss-20.yaml");
  EXPECT_EQ(loss.node.mode, DisseminationMode::kGossip);
  EXPECT_EQ(loss.transport, "udp");
  ASSERT_EQ(loss.timeline.size(), 1u);
  EXPECT_DOUBLE_EQ(loss.timeline[0].loss, 0.2);
  EXPECT_EQ(loss.timeline[0].at_ns, 5 * kSec);

  const Scenario crash = load_scenario_file(kScenarioDir + "/crash-restart.yaml");
  ASSERT_EQ(crash.timeline.size(), 1u);
  EXPECT_EQ(crash.timeline[0].node, 3u);
  EXPECT_EQ(crash.timeline[0].until_ns, 20 * kSec);

  const Scenario flash = load_scenario_file(kScenarioDir + "/flash-crowd.yaml");
  EXPECT_EQ(flash.load.spread, LoadSpec::Spread::kOne);
  EXPECT_EQ(flash.load.keys, 1u);

  const Scenario churn = load_scenario_file(kScenarioDir + "/churn.yaml");
  bool crashes = false, restarts = false, joins = false;
  for (const Event& e : churn.timeline) {
    crashes |= e.kind == Event::Kind::kCrash;
    restarts |= e.kind == Event::Kind::kCrash && e.until_ns.has_value();
    joins |= e.kind == Event::Kind::kJoin;
  }
  EXPECT_TRUE(crashes && restarts && joins);
}

// ---------------------------------------------------------------- fields

TEST(ScenarioFile, EveryFieldIsRead) {
  const Scenario s = parse_scenario(
      "name: full\n"
      "nodes: 12\n"
      "mode: mesh\n"
      "transport: tcp\n"
      "front_end: rls\n"
      "membership: heartbeat\n"
      "partition_policy: proportional\n"
      "interval: 20ms\n"
      "fanout: 4\n"
      "fail_after: 3s\n"
      "member_rows: 100\n"
      "duration: 2m\n"
      "seed: 18446744073709551615\n"
      "state_interval: 30s\n"
      "network: {latency: 2ms-7ms, loss: 1.5%, duplicate: 100%}\n"
      "rules:\n"
      "  rules:\n"
      "    - {match: \"k*\", rate: 6000/min, burst: 50, max_debt: 7}\n"
      "  default: {rate: 1/s, burst: 2}\n"
      "load:\n"
      "  rate: 30/min\n"
      "  keys: 1000\n"
      "  distribution: zipf\n"
      "  spread: skewed\n"
      "  cost: 3\n",
      "full.yaml");
  EXPECT_EQ(s.name, "full");
  EXPECT_EQ(s.nodes, 12u);
  EXPECT_EQ(s.node.mode, DisseminationMode::kMesh);
  EXPECT_EQ(s.transport, "tcp");
  EXPECT_EQ(s.front_end, Scenario::FrontEnd::kRls);
  EXPECT_EQ(s.node.membership, MembershipKind::kHeartbeat);
  EXPECT_EQ(s.node.partition_policy, PartitionPolicy::kProportional);
  EXPECT_EQ(s.node.interval_ns, 20 * kMs);
  EXPECT_EQ(s.node.fanout, 4u);
  EXPECT_EQ(s.node.fail_after_ns, 3 * kSec);
  EXPECT_EQ(s.node.member_rows, 100u);
  EXPECT_EQ(s.duration_ns, 120 * kSec);
  EXPECT_EQ(s.seed, UINT64_MAX);
  EXPECT_EQ(s.state_interval_ns, 30 * kSec);
  EXPECT_EQ(s.network.latency_min_ns, 2 * kMs);
  EXPECT_EQ(s.network.latency_max_ns, 7 * kMs);
  EXPECT_DOUBLE_EQ(s.network.loss, 0.015);
  EXPECT_DOUBLE_EQ(s.network.duplicate, 1.0);
  EXPECT_DOUBLE_EQ(s.load.rate_per_sec, 0.5);
  EXPECT_EQ(s.load.keys, 1000u);
  EXPECT_EQ(s.load.distribution, LoadSpec::Distribution::kZipf);
  EXPECT_EQ(s.load.spread, LoadSpec::Spread::kSkewed);
  EXPECT_EQ(s.load.cost, 3);
  EXPECT_TRUE(s.timeline.empty());

  const auto rules = parse_rules(s.rules_yaml, "full.yaml");
  ASSERT_EQ(rules->rules().size(), 1u);
  EXPECT_EQ(rules->rules()[0].match, "k*");
  EXPECT_EQ(rules->rules()[0].limit, (Limit{{6000, 60 * kSec}, 50, 7}));
  ASSERT_TRUE(rules->default_limit().has_value());
  EXPECT_EQ(*rules->default_limit(), (Limit{{1, kSec}, 2, 2}));
}

TEST(ScenarioFile, FieldsLeftOutKeepTheirDefaultsAndTheNameComesFromTheFile) {
  const Scenario s = parse_scenario("rules:\n  rules: []\n", "dir/my-run.yaml");
  const Scenario defaults;
  EXPECT_EQ(s.name, "my-run");
  EXPECT_EQ(s.nodes, 8u);
  EXPECT_EQ(s.node.mode, DisseminationMode::kAuto);
  EXPECT_EQ(s.transport, "udp");
  EXPECT_EQ(s.front_end, Scenario::FrontEnd::kNative);
  EXPECT_EQ(s.node.membership, MembershipKind::kStatic);
  EXPECT_EQ(s.node.partition_policy, PartitionPolicy::kOpen);
  EXPECT_EQ(s.node.interval_ns, 50 * kMs);
  EXPECT_EQ(s.node.fanout, 3u);
  EXPECT_EQ(s.node.fail_after_ns, 2 * kSec);  // tollgated's default --fail-after
  EXPECT_EQ(s.node.member_rows, 64u);         // and --member-rows
  EXPECT_EQ(s.duration_ns, 30 * kSec);
  EXPECT_EQ(s.seed, 1u);
  EXPECT_EQ(s.state_interval_ns, 0) << "no state on disk unless asked, as tollgated without --state-dir";
  EXPECT_EQ(s.network.latency_min_ns, defaults.network.latency_min_ns);
  EXPECT_EQ(s.network.latency_max_ns, defaults.network.latency_max_ns);
  EXPECT_EQ(s.network.loss, 0);
  EXPECT_EQ(s.load.rate_per_sec, defaults.load.rate_per_sec);
  EXPECT_EQ(s.load.keys, 1u);
  EXPECT_EQ(s.load.cost, 1);
  EXPECT_TRUE(s.timeline.empty());
  EXPECT_TRUE(parse_rules(s.rules_yaml, "x")->rules().empty());

  // Empty nested blocks keep their defaults too.
  const Scenario empty_blocks = parse_scenario(scenario_with("network:\nload:\ntimeline:\n"), "s.yaml");
  EXPECT_EQ(empty_blocks.load.keys, 1u);
  EXPECT_TRUE(empty_blocks.timeline.empty());
}

TEST(ScenarioFile, ASingleLatencyIsFixed) {
  const Scenario s = parse_scenario(scenario_with("network: {latency: 2ms}\n"), "s.yaml");
  EXPECT_EQ(s.network.latency_min_ns, 2 * kMs);
  EXPECT_EQ(s.network.latency_max_ns, 2 * kMs);
}

TEST(ScenarioFile, RulesAreReserializedInTheRulesFileFormat) {
  const Scenario s = parse_scenario(scenario_with(""), "s.yaml");
  EXPECT_TRUE(starts_with(s.rules_yaml, "rules:")) << s.rules_yaml;
  // Patterns YAML would misread unquoted survive the round trip.
  const Scenario odd = parse_scenario(
      "rules:\n  rules:\n    - {match: \"*\", rate: 1/s, burst: 1}\n    - {match: \"a: b #c\", rate: 1/s, burst: 1}\n",
      "s.yaml");
  const auto rules = parse_rules(odd.rules_yaml, "s.yaml");
  ASSERT_EQ(rules->rules().size(), 2u);
  EXPECT_EQ(rules->rules()[0].match, "*");
  EXPECT_EQ(rules->rules()[1].match, "a: b #c");
}

// Issue 41: a load that stops before the run does, and the top-K check at the end.
TEST(ScenarioFile, ALoadUntilAndATopCheckAreRead) {
  const Scenario s = parse_scenario(scenario_with("top_check: 10\nload: {rate: 10/s, until: 2s}\n"), "s.yaml");
  EXPECT_EQ(s.top_check, 10u);
  EXPECT_EQ(s.load.until_ns, 2 * kNanosPerSecond);
  const Scenario plain = parse_scenario(scenario_with(""), "s.yaml");
  EXPECT_EQ(plain.top_check, 0u);
  EXPECT_EQ(plain.load.until_ns, 0);
  EXPECT_NE(scenario_error(scenario_with("top_check: 0\n")).find("top_check"), std::string::npos);
  EXPECT_NE(scenario_error(scenario_with("load: {until: 0s}\n")).find("load.until"), std::string::npos);
  // The stream ends at `until`: no arrival at or after it.
  LoadSpec load;
  load.rate_per_sec = 1000;
  load.until_ns = kNanosPerSecond / 2;
  ArrivalStream arrivals(load, 1);
  size_t n = 0;
  while (arrivals.peek_time() < 10 * kNanosPerSecond) {
    EXPECT_LT(arrivals.next({true}).t_ns, load.until_ns);
    ++n;
  }
  EXPECT_GT(n, 400u);
  EXPECT_LT(n, 600u);
}

// Issue 40: a load of leases, its holds and its share of holders that never release.
TEST(ScenarioFile, ALoadOfLeasesIsRead) {
  const Scenario s = parse_scenario(
      scenario_with("load: {kind: leases, hold: {distribution: fixed, mean: 250ms}, never_release: 5%}\n"), "s.yaml");
  EXPECT_EQ(s.load.kind, LoadSpec::Kind::kLeases);
  EXPECT_EQ(s.load.hold, LoadSpec::Hold::kFixed);
  EXPECT_EQ(s.load.hold_mean_ns, 250 * kMs);
  EXPECT_DOUBLE_EQ(s.load.never_release, 0.05);
  const Scenario plain = parse_scenario(scenario_with(""), "s.yaml");
  EXPECT_EQ(plain.load.kind, LoadSpec::Kind::kChecks);
  EXPECT_EQ(plain.load.hold, LoadSpec::Hold::kExponential);
  const auto error_has = [](const std::string& text, const std::string& part) {
    const std::string e = scenario_error(text);
    EXPECT_NE(e.find(part), std::string::npos) << e;
  };
  error_has(scenario_with("load: {kind: semaphores}\n"), "`load.kind` must be checks or leases");
  error_has(scenario_with("load: {hold: {mean: 0s}}\n"), "load.hold.mean");
  error_has(scenario_with("load: {hold: {distribution: normal}}\n"),
            "`load.hold.distribution` must be exponential or fixed");
  error_has(scenario_with("load: {hold: {median: 1s}}\n"), "median");
}

TEST(ScenarioFile, BadValuesAreErrorsThatSayWhatWasExpected) {
  struct Case {
    std::string field;
    std::string expected_in_message;
  };
  const Case cases[] = {
      {"nodes: 0", "`nodes` must be a whole number from 1 to 100000, got \"0\""},
      {"nodes: 8.5", "`nodes` must be a whole number"},
      {"nodes: -1", "`nodes` must be a whole number"},
      {"mode: Gossip", "`mode` must be auto, mesh, gossip or relay, got \"Gossip\""},
      {"transport: quic", "`transport` must be udp or tcp"},
      {"front_end: grpc", "`front_end` must be native or rls"},
      {"membership: dynamic", "`membership` must be static or heartbeat"},
      {"partition_policy: closed", "`partition_policy` must be open or proportional"},
      {"interval: 50", "`interval` is not a duration (duration \"50\": missing unit"},
      {"interval: 0ms", "`interval` must be at least 1ms"},
      {"duration: 0s", "`duration` must be longer than 0s"},
      {"fanout: 0", "`fanout` must be a whole number from 1 to 64"},
      {"fail_after: 0s", "`fail_after` must be longer than 0s"},
      {"fail_after: 99ms", "fail_after 99ms must be at least two interval rounds (50ms)"},
      {"member_rows: 1", "`member_rows` must be a whole number from 2 to 1024"},
      {"seed: x", "`seed` must be a whole number"},
      {"state_interval: 500ms", "`state_interval` must be from 1s to 1h, as tollgated's --state-interval"},
      {"state_interval: 2h", "`state_interval` must be from 1s to 1h"},
      {"name: ''", "`name` must not be empty"},
      {"name: [a]", "`name` must be a single value"},
      {"network: {latency: 5ms-1ms}", "the minimum 5ms is above the maximum 1ms"},
      {"network: {latency: fast}", "`network.latency` must be a duration or MIN-MAX, like 2ms or 1ms-5ms"},
      {"network: {loss: 120%}", "`network.loss`: expected a percentage from 0% to 100%"},
      {"network: {loss: 0.2}", "`network.loss`: expected a percentage"},
      {"network: {loss: nan%}", "expected a percentage"},
      {"network: {duplicate: -1%}", "`network.duplicate`: expected a percentage"},
      {"network: 5", "`network` must be a mapping of latency, loss, duplicate"},
      {"load: {rate: 500}", "`load.rate`:"},
      {"load: {keys: 0}", "`load.keys` must be a whole number from 1"},
      {"load: {distribution: pareto}", "`load.distribution` must be uniform or zipf"},
      {"load: {spread: all}", "`load.spread` must be uniform, skewed or one, got \"all\""},
      {"load: {cost: 0}", "`load.cost` must be a whole number from 1"},
      {"timeline: partition 0-3|4-7 at 1s", "`timeline` must be a list of events"},
  };
  for (const Case& c : cases) {
    const std::string message = scenario_error(scenario_with(c.field + "\n"));
    EXPECT_TRUE(starts_with(message, "s.yaml:5:")) << c.field << " -> " << message;
    EXPECT_TRUE(contains(message, c.expected_in_message)) << c.field << " -> " << message;
  }
}

TEST(ScenarioFile, UnknownAndRepeatedFieldsAreErrorsAtTheirLine) {
  // The node settings (config/node_settings.h) are keys too, between nodes and transport.
  std::string expected = "name, nodes";
  for (const NodeSettingField& f : node_setting_fields()) expected += ", " + f.key();
  expected += ", transport, front_end, duration, seed, state_interval, top_check, network, rules, load, timeline";
  EXPECT_EQ(scenario_error(scenario_with("nodez: 4\n")),
            "s.yaml:5:1: unknown field \"nodez\" (expected one of: " + expected + ")");
  EXPECT_NE(
      expected.find("mode, membership, partition_policy, interval, fanout, relay_groups, member_rows, fail_after"),
      std::string::npos);
  EXPECT_EQ(scenario_error(scenario_with("nodes: 4\nnodes: 5\n")), "s.yaml:6:1: field \"nodes\" appears twice");
  EXPECT_TRUE(starts_with(scenario_error(scenario_with("load:\n  rate: 5/s\n  spred: one\n")),
                          "s.yaml:7:3: unknown field \"spred\""));
  EXPECT_TRUE(starts_with(scenario_error(scenario_with("network: {loss: 1%, loss: 2%}\n")),
                          "s.yaml:5:21: field \"loss\" appears twice"));
}

TEST(ScenarioFile, RulesAreRequiredAndMustBeInTheRulesFileFormat) {
  EXPECT_TRUE(contains(scenario_error("nodes: 4\n"), "no `rules:`"));
  EXPECT_TRUE(contains(scenario_error("rules:\n  - {match: k, rate: 1/s, burst: 1}\n"), "its own `rules:` list"));
  EXPECT_TRUE(contains(scenario_error("rules:\n"), "`rules` must be a mapping"));
}

TEST(ScenarioFile, ABadRuleIsReportedAtItsLineInTheScenario) {
  const std::string text =
      "name: t\n"
      "nodes: 4\n"
      "rules:\n"
      "  # comment\n"
      "  rules:\n"
      "    - {match: \"k*\", rate: 100/s, burst: 100}\n"
      "    - match: \"j*\"\n"
      "      rate: 100/x\n"
      "      burst: 1\n"
      "load: {rate: 5/s}\n";
  const std::string message = scenario_error(text);
  EXPECT_TRUE(starts_with(message, "s.yaml:8:13: ")) << message;
  EXPECT_TRUE(contains(message, "100/x")) << message;

  EXPECT_TRUE(starts_with(scenario_error("rules: {rules: [{match: a, rate: 1/s, burst: 1, brust: 2}]}\n"),
                          "s.yaml:1:49: unknown field \"brust\""));
  EXPECT_TRUE(starts_with(scenario_error(scenario_with("    - {match: \"k*\", rate: 1/s, burst: 1}\n")),
                          "s.yaml:5:15: match \"k*\" already has a rule at line 4"));
}

TEST(ScenarioFile, YamlSyntaxErrorsAndNonMappingsNameTheFile) {
  EXPECT_TRUE(starts_with(scenario_error("rules: {rules: [\n"), "s.yaml:"));
  EXPECT_TRUE(starts_with(scenario_error("- a\n- b\n"), "s.yaml:1:1: a scenario is a mapping"));
  EXPECT_TRUE(contains(scenario_error(""), "empty scenario"));
}

TEST(ScenarioFile, AMissingFileIsAConfigErrorNamingIt) {
  try {
    load_scenario_file("/nonexistent/x.yaml");
    FAIL() << "loaded a file that does not exist";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/x.yaml: cannot read the scenario file");
  }
}

TEST(ScenarioFile, LoadingAFileUsesItsPathInErrors) {
  const std::string path = ::testing::TempDir() + "scenario_test_bad.yaml";
  std::ofstream(path) << "rules:\n  rules: []\nfanout: 99\n";
  try {
    load_scenario_file(path);
    ADD_FAILURE() << "accepted fanout 99";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(starts_with(e.what(), path + ":3:9: `fanout`")) << e.what();
  }
  std::filesystem::remove(path);
}

// ---------------------------------------------------------------- timeline events

TEST(TimelineEvent, PartitionListsItsGroupsWithIndicesAndRanges) {
  const Event e = parse_event("partition 0-3,5|4,6-7 at 10s for 20s", 8);
  EXPECT_EQ(e.kind, Event::Kind::kPartition);
  EXPECT_EQ(e.groups, (Groups{{0, 1, 2, 3, 5}, {4, 6, 7}}));
  EXPECT_EQ(e.at_ns, 10 * kSec);
  EXPECT_EQ(e.until_ns, 30 * kSec);
  EXPECT_EQ(e.text, "partition 0-3,5|4,6-7 at 10s for 20s");

  const Event three = parse_event("partition 2|0|1 at 1s", 3);
  EXPECT_EQ(three.groups, (Groups{{2}, {0}, {1}}));
  EXPECT_FALSE(three.until_ns.has_value());
}

TEST(TimelineEvent, AnyWhitespaceSeparatesWordsAndGroupsMayBeSpaced) {
  const Event e = parse_event("  partition\t0-3 | 4-7   at 10s  for\t20s ", 8);
  EXPECT_EQ(e.groups, (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(e.until_ns, 30 * kSec);
  EXPECT_EQ(e.text, "partition\t0-3 | 4-7   at 10s  for\t20s");
  EXPECT_EQ(parse_event("crash node 3 at 10s ,restart at 20s", 8).until_ns, 20 * kSec);
  EXPECT_EQ(parse_event("crash node 3 at 10s,restart at 20s", 8).until_ns, 20 * kSec);
}

TEST(TimelineEvent, PartitionErrorsSayWhatWasExpected) {
  EXPECT_TRUE(contains(event_error("partition 0-3|4-6 at 1s"),
                       "node 7 is in no group; every node must be in exactly one: the cluster has 8 nodes (0-7)"));
  EXPECT_TRUE(contains(event_error("partition 0-1|6-7 at 1s"), "nodes 2-5 are in no group"));
  EXPECT_TRUE(contains(event_error("partition 0-4|4-7 at 1s"), "node 4 is in two groups"));
  EXPECT_TRUE(contains(event_error("partition 0,0-3|4-7 at 1s"), "node 0 is listed twice in group 1"));
  EXPECT_TRUE(contains(event_error("partition 0-3|4-9 at 1s"), "node 9 does not exist: the cluster has 8 nodes (0-7)"));
  EXPECT_TRUE(contains(event_error("partition 0-7 at 1s"), "at least two groups separated by |"));
  EXPECT_TRUE(contains(event_error("partition 0-3||4-7 at 1s"), "empty group"));
  EXPECT_TRUE(contains(event_error("partition 0-3|4-7| at 1s"), "empty group"));
  EXPECT_TRUE(contains(event_error("partition 0-3|,4-7 at 1s"), "expected a node index or a range like 0-3, got \"\""));
  EXPECT_TRUE(contains(event_error("partition 3-0|4-7 at 1s"), "range \"3-0\" runs backwards"));
  EXPECT_TRUE(contains(event_error("partition at 1s"), "expected groups like 0-3|4-7"));
  EXPECT_TRUE(contains(event_error("partition 0-3|4-7 from 1s"), "expected \"at\" after the groups, got \"from\""));
  EXPECT_TRUE(
      contains(event_error("partition 0-3|4-7 at"), "expected a time after \"at\", like 10s, but the line ends"));
  EXPECT_TRUE(contains(event_error("partition 0-3|4-7 at 1"), "missing unit"));
  EXPECT_TRUE(
      contains(event_error("partition 0-3|4-7 at 1s until 2s"), "expected \"for\" after the time, got \"until\""));
  EXPECT_TRUE(contains(event_error("partition 0-3|4-7 at 1s for 0s"), "\"for\" must be longer than 0s"));
  EXPECT_TRUE(
      contains(event_error("partition 0-3|4-7 at 1s for 2s now"), "unexpected \"now\"; expected the end of the line"));
  // A huge range is refused before it is expanded.
  EXPECT_TRUE(contains(event_error("partition 0-3|4-18446744073709551615 at 1s"), "does not exist"));
  // Every error quotes the line.
  EXPECT_TRUE(starts_with(event_error("partition 0-3|4-6 at 1s"), "\"partition 0-3|4-6 at 1s\": "));
}

TEST(TimelineEvent, LossTakesAPercentageAndAnOptionalEnd) {
  const Event e = parse_event("loss 20% from 5s", 8);
  EXPECT_EQ(e.kind, Event::Kind::kLoss);
  EXPECT_DOUBLE_EQ(e.loss, 0.2);
  EXPECT_EQ(e.at_ns, 5 * kSec);
  EXPECT_FALSE(e.until_ns.has_value());
  EXPECT_EQ(parse_event("loss 0.5% from 5s for 10s", 8).until_ns, 15 * kSec);
  EXPECT_DOUBLE_EQ(parse_event("loss 100% from 0s", 8).loss, 1.0);
  EXPECT_DOUBLE_EQ(parse_event("loss 0% from 0s", 8).loss, 0.0);

  EXPECT_TRUE(contains(event_error("loss 120% from 1s"),
                       "expected a percentage from 0% to 100%, like 20% or 0.5%, got \"120%\""));
  EXPECT_TRUE(contains(event_error("loss 20 from 1s"), "expected a percentage"));
  EXPECT_TRUE(contains(event_error("loss -5% from 1s"), "expected a percentage"));
  EXPECT_TRUE(contains(event_error("loss 1e1% from 1s"), "expected a percentage"));
  EXPECT_TRUE(contains(event_error("loss 20% at 1s"), "expected \"from\" after the percentage, got \"at\""));
  EXPECT_TRUE(contains(event_error("loss"), "expected a percentage after \"loss\", like 20%, but the line ends"));
  EXPECT_TRUE(
      contains(event_error("loss 20% from 1s for"), "expected a duration after \"for\", like 20s, but the line ends"));
}

TEST(TimelineEvent, CrashNamesANodeAndOptionallyItsRestart) {
  const Event e = parse_event("crash node 3 at 10s, restart at 20s", 8);
  EXPECT_EQ(e.kind, Event::Kind::kCrash);
  EXPECT_EQ(e.node, 3u);
  EXPECT_EQ(e.at_ns, 10 * kSec);
  EXPECT_EQ(e.until_ns, 20 * kSec);  // an absolute time, unlike "for"
  EXPECT_FALSE(parse_event("crash node 7 at 10s", 8).until_ns.has_value());

  EXPECT_TRUE(contains(event_error("crash node 8 at 1s"), "node 8 does not exist: the cluster has 8 nodes (0-7)"));
  EXPECT_TRUE(contains(event_error("crash node 1 at 5s, restart at 2s"), "the restart must come after the crash"));
  EXPECT_TRUE(contains(event_error("crash node 1 at 5s, restart at 5s"), "the restart must come after the crash"));
  EXPECT_TRUE(contains(event_error("crash 3 at 1s"), "expected \"node\" after \"crash\", got \"3\""));
  EXPECT_TRUE(contains(event_error("crash node x at 1s"), "expected a node index after \"node\", got \"x\""));
  EXPECT_TRUE(contains(event_error("crash node 1 at 5s restart at 9s"),
                       "expected \",\" after the time (then \"restart at T\"), got \"restart\""));
  EXPECT_TRUE(contains(event_error("crash node 1 at 5s,"), "expected \"restart\" after the comma, but the line ends"));
  EXPECT_TRUE(contains(event_error("crash node 1 at 5s, reboot at 9s"),
                       "expected \"restart\" after the comma, got \"reboot\""));
  EXPECT_TRUE(
      contains(event_error("crash node 1 at 5s, restart at 9s x"), "unexpected \"x\"; expected the end of the line"));
}

TEST(TimelineEvent, StopIsACrashThatLeavesFirst) {
  const Event e = parse_event("stop node 2 at 5s, restart at 9s", 8);
  EXPECT_EQ(e.kind, Event::Kind::kCrash);
  EXPECT_TRUE(e.graceful);
  EXPECT_EQ(e.node, 2u);
  EXPECT_EQ(e.at_ns, 5 * kSec);
  EXPECT_EQ(e.until_ns, 9 * kSec);
  EXPECT_FALSE(parse_event("crash node 2 at 5s", 8).graceful);
  EXPECT_FALSE(parse_event("stop node 7 at 10s", 8).until_ns.has_value());

  EXPECT_TRUE(contains(event_error("stop node 1 at 5s, restart at 2s"), "the restart must come after the stop"));
  EXPECT_TRUE(contains(event_error("stop 3 at 1s"), "expected \"node\" after \"stop\", got \"3\""));
  EXPECT_TRUE(contains(event_error("stop node 9 at 1s"), "node 9 does not exist"));
}

TEST(TimelineEvent, JoinAddsNodes) {
  const Event e = parse_event("join 2 nodes at 30s", 8);
  EXPECT_EQ(e.kind, Event::Kind::kJoin);
  EXPECT_EQ(e.count, 2u);
  EXPECT_EQ(e.at_ns, 30 * kSec);
  EXPECT_EQ(parse_event("join 1 node at 1s", 8).count, 1u);

  EXPECT_TRUE(contains(event_error("join 0 nodes at 1s"), "expected how many nodes join, from 1 to 100000, got \"0\""));
  EXPECT_TRUE(contains(event_error("join two nodes at 1s"), "expected how many nodes join"));
  EXPECT_TRUE(contains(event_error("join 2 hosts at 1s"), "expected \"nodes\" after the count, got \"hosts\""));
  EXPECT_TRUE(contains(event_error("join 2 nodes at 1s for 5s"), "a join has no end"));
}

TEST(TimelineEvent, UnknownOrMisplacedEventsListTheGrammar) {
  const std::string unknown = event_error("explode at 1s");
  EXPECT_TRUE(contains(unknown, "unknown event \"explode\"")) << unknown;
  EXPECT_TRUE(contains(unknown,
                       "partition G|G[|G...] at T [for D]; loss P% from T [for D]; crash node I at T[, restart at T2]; "
                       "stop node I at T[, restart at T2]; join K nodes at T"));
  EXPECT_TRUE(contains(event_error("Partition 0-3|4-7 at 1s"), "unknown event \"Partition\""))
      << "keywords are case-sensitive";
  EXPECT_TRUE(contains(event_error("   "), "empty timeline entry"));
  // What a flow list [crash node 1 at 1s, restart at 2s] leaves of the crash's second half.
  EXPECT_TRUE(contains(event_error("restart at 2s"), "a restart belongs to its crash, on one line"));
}

// ---------------------------------------------------------------- the timeline in a file

TEST(ScenarioTimeline, IsSortedByTimeKeepingFileOrderAtOneInstantWithJoinsFirst) {
  const Scenario s = run_of(60, {"loss 5% from 20s for 5s", "crash node 1 at 10s", "crash node 8 at 30s",
                                 "crash node 2 at 10s", "join 1 node at 30s"});
  ASSERT_EQ(s.timeline.size(), 5u);
  EXPECT_EQ(s.timeline[0].text, "crash node 1 at 10s");
  EXPECT_EQ(s.timeline[1].text, "crash node 2 at 10s");
  EXPECT_EQ(s.timeline[2].text, "loss 5% from 20s for 5s");
  EXPECT_EQ(s.timeline[3].text, "join 1 node at 30s");
  EXPECT_EQ(s.timeline[4].text, "crash node 8 at 30s");
}

TEST(ScenarioTimeline, JoinedNodesTakeTheNextIndicesFromTheirJoinOn) {
  const Scenario s = run_of(60, {"join 2 nodes at 10s", "partition 0-4|5-9 at 20s for 5s", "crash node 9 at 30s"});
  EXPECT_EQ(s.timeline[1].groups, (Groups{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}}));
  // Before the join, node 8 does not exist yet; after it, a partition must list the newcomers.
  const std::string early =
      scenario_error(scenario_with("timeline:\n  - crash node 8 at 5s\n  - join 1 node at 10s\n"));
  EXPECT_TRUE(
      starts_with(early, "s.yaml:6:5: \"crash node 8 at 5s\": node 8 does not exist: the cluster has 8 nodes (0-7)"))
      << early;
  const std::string forgotten =
      scenario_error(scenario_with("timeline:\n  - join 1 node at 10s\n  - partition 0-3|4-7 at 20s\n"));
  EXPECT_TRUE(starts_with(forgotten, "s.yaml:7:5: ")) << forgotten;
  EXPECT_TRUE(contains(
      forgotten,
      "node 8 is in no group; every node must be in exactly one: the cluster has 9 nodes (0-8) at 20s, joins included"))
      << forgotten;
}

TEST(ScenarioTimeline, ErrorsNameTheEntrysLine) {
  const std::string message =
      scenario_error(scenario_with("nodes: 4\ntimeline:\n  - loss 1% from 1s\n  - crash node 7 at 1s\n"));
  EXPECT_EQ(message, "s.yaml:8:5: \"crash node 7 at 1s\": node 7 does not exist: the cluster has 4 nodes (0-3)");
  EXPECT_TRUE(
      starts_with(scenario_error(scenario_with("timeline:\n  - explode\n")), "s.yaml:6:5: \"explode\": unknown event"));
  EXPECT_TRUE(starts_with(scenario_error(scenario_with("timeline:\n  - {crash: 1}\n")),
                          "s.yaml:6:5: a timeline entry is one line of text"));
}

TEST(ScenarioTimeline, FaultsOfOneKindMayNotOverlap) {
  const std::string partitions =
      scenario_error(scenario_with("timeline:\n  - partition 0-3|4-7 at 10s for 20s\n  - partition 0-1|2-7 at 15s\n"));
  EXPECT_EQ(partitions,
            "s.yaml:7:5: \"partition 0-1|2-7 at 15s\": overlaps the partition \"partition 0-3|4-7 at 10s for 20s\" "
            "(line 6, in force from 10s to 30s); one partition at a time");
  EXPECT_TRUE(contains(scenario_error(scenario_with("timeline:\n  - loss 5% from 1s\n  - loss 9% from 20s\n")),
                       "in force from 1s to the end of the run); one loss event at a time (end it with \"for\")"));
  EXPECT_TRUE(contains(
      scenario_error(scenario_with("timeline:\n  - crash node 3 at 1s, restart at 9s\n  - crash node 3 at 5s\n")),
      "node 3 is already down"));
  EXPECT_TRUE(contains(scenario_error(scenario_with("timeline:\n  - partition 0-3|4-7 at 1s\n  - join 1 node at 5s\n")),
                       "nodes cannot join during the partition"));
  // Back to back is not overlapping: an event is in force over [at, until).
  const Scenario ok =
      run_of(60, {"partition 0-3|4-7 at 10s for 10s", "partition 0-1|2-7 at 20s", "crash node 3 at 1s, restart at 5s",
                  "crash node 3 at 5s", "loss 5% from 1s for 4s", "loss 9% from 5s"});
  EXPECT_EQ(ok.timeline.size(), 6u);
  // Different kinds overlap freely.
  EXPECT_EQ(run_of(60, {"partition 0-3|4-7 at 10s for 20s", "loss 20% from 5s", "crash node 3 at 12s"}).timeline.size(),
            3u);
}

TEST(ScenarioTimeline, ARestartInAFlowListIsExplained) {
  // YAML splits "[crash node 1 at 1s, restart at 2s]" at the comma.
  const std::string message = scenario_error(scenario_with("timeline: [crash node 1 at 1s, restart at 2s]\n"));
  EXPECT_TRUE(contains(message, "a restart belongs to its crash")) << message;
  EXPECT_EQ(run_of(60, {"\"crash node 1 at 1s, restart at 2s\""}).timeline[0].until_ns, 2 * kSec);
}

// validate(): the timeline checked again after `nodes` changed (tollgate-sim --nodes).
std::string validate_error(const Scenario& s) {
  try {
    validate(s);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << s.nodes << " nodes";
  return "";
}

TEST(ScenarioValidate, AParsedScenarioIsValid) {
  EXPECT_NO_THROW(validate(run_of(
      60, {"partition 0-3|4-7 at 10s for 20s", "crash node 7 at 35s", "join 2 nodes at 40s", "crash node 9 at 45s"})));
  EXPECT_NO_THROW(validate(load_scenario_file(kScenarioDir + "/churn.yaml")));
}

TEST(ScenarioValidate, FewerNodesThanThePartitionNamesIsAnError) {
  Scenario s = run_of(60, {"partition 0-3|4-7 at 10s for 20s"});
  s.nodes = 4;
  EXPECT_EQ(validate_error(s),
            "\"partition 0-3|4-7 at 10s for 20s\": node 4 does not exist: the cluster has 4 nodes (0-3)");
}

TEST(ScenarioValidate, MoreNodesThanThePartitionListsIsAnError) {
  Scenario s = run_of(60, {"partition 0-3|4-7 at 10s for 20s"});
  s.nodes = 16;
  EXPECT_EQ(validate_error(s),
            "\"partition 0-3|4-7 at 10s for 20s\": nodes 8-15 are in no group; every node must be in exactly one: "
            "the cluster has 16 nodes (0-15)");
}

TEST(ScenarioValidate, ACrashedNodeMustExistCountingTheJoinsBeforeIt) {
  Scenario s = run_of(60, {"crash node 5 at 10s", "join 2 nodes at 20s", "crash node 9 at 30s"});
  s.nodes = 8;
  EXPECT_NO_THROW(validate(s));
  s.nodes = 7;  // 7 + 2 joined = 9 nodes (0-8) by 30s
  EXPECT_EQ(validate_error(s),
            "\"crash node 9 at 30s\": node 9 does not exist: the cluster has 9 nodes (0-8) at 30s, joins included");
  s.nodes = 5;
  EXPECT_EQ(validate_error(s), "\"crash node 5 at 10s\": node 5 does not exist: the cluster has 5 nodes (0-4)");
}

// ---------------------------------------------------------------- phases

TEST(ScenarioPhases, WithoutEventsTheWholeRunIsSteady) {
  EXPECT_EQ(phase_list(run_of(30, {})), (std::vector<std::string>{"steady 0-30"}));
}

TEST(ScenarioPhases, APartitionWithAnEndIsFollowedByHealed) {
  EXPECT_EQ(phase_list(run_of(40, {"partition 0-3|4-7 at 10s for 20s"})),
            (std::vector<std::string>{"steady 0-10", "partition 10-30", "healed 30-40"}));
  EXPECT_EQ(phase_list(run_of(40, {"partition 0-3|4-7 at 10s"})),
            (std::vector<std::string>{"steady 0-10", "partition 10-40"}));
}

TEST(ScenarioPhases, CrashAndRestartLossAndJoinNameTheirPhases) {
  EXPECT_EQ(phase_list(run_of(30, {"crash node 3 at 10s, restart at 20s"})),
            (std::vector<std::string>{"steady 0-10", "crashed 10-20", "restarted 20-30"}));
  EXPECT_EQ(phase_list(run_of(30, {"stop node 3 at 10s, restart at 20s"})),
            (std::vector<std::string>{"steady 0-10", "stopped 10-20", "restarted 20-30"}));
  EXPECT_EQ(phase_list(run_of(30, {"loss 20% from 5s for 10s"})),
            (std::vector<std::string>{"steady 0-5", "loss 5-15", "loss-over 15-30"}));
  EXPECT_EQ(phase_list(run_of(30, {"join 2 nodes at 25s"})), (std::vector<std::string>{"steady 0-25", "joined 25-30"}));
}

TEST(ScenarioPhases, OverlappingEventsCutThePhasesAtEveryStartAndEnd) {
  EXPECT_EQ(
      phase_list(run_of(40, {"loss 20% from 5s for 20s", "partition 0-3|4-7 at 10s for 10s"})),
      (std::vector<std::string>{"steady 0-5", "loss 5-10", "partition 10-20", "healed 20-25", "loss-over 25-40"}));
}

TEST(ScenarioPhases, RepeatedNamesAreNumberedAndPhasesAreContiguous) {
  const Scenario s =
      run_of(60, {"crash node 1 at 10s, restart at 15s", "crash node 2 at 20s, restart at 25s", "crash node 3 at 30s"});
  EXPECT_EQ(phase_list(s), (std::vector<std::string>{"steady 0-10", "crashed 10-15", "restarted 15-20",
                                                     "crashed-2 20-25", "restarted-2 25-30", "crashed-3 30-60"}));
  const auto phases = s.phases();
  EXPECT_EQ(phases.front().start_ns, 0);
  EXPECT_EQ(phases.back().end_ns, s.duration_ns);
  for (size_t i = 1; i < phases.size(); ++i) EXPECT_EQ(phases[i].start_ns, phases[i - 1].end_ns);
}

TEST(ScenarioPhases, EventsAtOneInstantMakeNoEmptyPhaseAndTheStartingOneNamesIt) {
  // At 20s the partition heals and node 3 crashes: one phase, named after the crash.
  EXPECT_EQ(phase_list(run_of(40, {"partition 0-3|4-7 at 10s for 10s", "crash node 3 at 20s"})),
            (std::vector<std::string>{"steady 0-10", "partition 10-20", "crashed 20-40"}));
  // An event at 0s leaves no steady phase; two starts at one instant: the later entry names it.
  EXPECT_EQ(phase_list(run_of(30, {"loss 1% from 0s", "crash node 1 at 0s"})),
            (std::vector<std::string>{"crashed 0-30"}));
}

TEST(ScenarioPhases, EventsAfterTheEndOfTheRunAreIgnoredAndEndsAreClipped) {
  EXPECT_EQ(phase_list(run_of(30, {"partition 0-3|4-7 at 20s for 20s", "crash node 1 at 30s", "join 1 node at 45s"})),
            (std::vector<std::string>{"steady 0-20", "partition 20-30"}));
}

TEST(ScenarioPhases, AScenarioBuiltInCodeGetsPhasesToo) {
  Scenario s;
  s.duration_ns = 10 * kSec;
  s.timeline = {parse_event("crash node 0 at 2s, restart at 4s", 8)};
  EXPECT_EQ(phase_list(s), (std::vector<std::string>{"steady 0-2", "crashed 2-4", "restarted 4-10"}));
}

}  // namespace
}  // namespace tollgate::sim
