#include <gtest/gtest.h>

#include <filesystem>

#include "scenario.h"
#include "tollgate/config_error.h"
#include "tollgate/rules_file.h"

namespace tollgate::sim {
namespace {

TEST(Scenario, EveryShippedScenarioParsesWithItsRules) {
  size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(TOLLGATE_SOURCE_DIR "/sim/scenarios")) {
    SCOPED_TRACE(entry.path().string());
    const Scenario s = load_scenario_file(entry.path().string());
    EXPECT_FALSE(s.name.empty());
    EXPECT_FALSE(parse_rules(s.rules_yaml, entry.path().string())->rules().empty());
    EXPECT_FALSE(s.phases().empty());
    ++count;
  }
  EXPECT_GE(count, 7u);
}

TEST(Scenario, TimelineCutsTheRunIntoNamedPhases) {
  Scenario s;
  s.duration_ns = 40 * kNanosPerSecond;
  s.timeline = {parse_event("partition 0-3|4-7 at 10s for 20s", 8)};
  const auto p = s.phases();
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].name, "steady");
  EXPECT_EQ(p[1].name, "partition");
  EXPECT_EQ(p[1].start_ns, 10 * kNanosPerSecond);
  EXPECT_EQ(p[1].end_ns, 30 * kNanosPerSecond);
  EXPECT_EQ(p[2].name, "healed");

  s.timeline = {parse_event("crash node 3 at 5s, restart at 8s", 8), parse_event("crash node 4 at 12s, restart at 50s", 8)};
  const auto q = s.phases();
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[2].name, "restarted");
  EXPECT_EQ(q[3].name, "crashed-2");  // its restart is past the end of the run
  EXPECT_EQ(q[3].end_ns, 40 * kNanosPerSecond);
}

TEST(Scenario, EventsParseAndBadOnesSayWhatWasExpected) {
  const Event p = parse_event("partition 0,2|1,3 at 1s", 4);
  EXPECT_EQ(p.groups, (std::vector<std::vector<size_t>>{{0, 2}, {1, 3}}));
  EXPECT_FALSE(p.until_ns.has_value());
  const Event l = parse_event("loss 20% from 5s for 2s", 4);
  EXPECT_DOUBLE_EQ(l.loss, 0.2);
  EXPECT_EQ(l.until_ns, 7 * kNanosPerSecond);
  EXPECT_EQ(parse_event("join 2 nodes at 30s", 4).count, 2u);
  for (const char* bad : {"partition 0-1|2 at 1s", "partition 0-3 at 1s", "partition 0-1|1-3 at 1s", "loss 120% from 1s",
                          "crash node 9 at 1s", "crash node 1 at 5s, restart at 2s", "explode at 1s", "loss 5% at 1s"}) {
    EXPECT_THROW(parse_event(bad, 4), std::invalid_argument) << bad;
  }
}

TEST(Scenario, FileErrorsNameTheLine) {
  try {
    parse_scenario("name: x\nnodes: 4\nrules:\n  rules: []\ntimeline:\n  - crash node 7 at 1s\n", "s.yaml");
    FAIL() << "accepted a crash of node 7 of 4";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("s.yaml:6:", 0), 0u) << e.what();
  }
  EXPECT_THROW(parse_scenario("name: x\nnodez: 4\nrules:\n  rules: []\n", "s.yaml"), ConfigError);
}

}  // namespace
}  // namespace tollgate::sim
