#include "tollgate/rules_file.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/test_rules.h"
#include "tollgate/config_error.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

using testing::per_second;

// Parses `text` expecting a ConfigError; returns its message.
std::string error_of(const std::string& text) {
  try {
    parse_rules(text, "rules.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

TEST(RulesFile, ParsesTheDocumentedShapeExactlyAsWritten) {
  const std::string text = R"(rules:
  - match: "api:login:*"   # an exact key, or a glob where * matches any run of characters
    rate: 5/s              # also /min and /h
    burst: 10
    max_debt: 10           # optional; default = burst
default:                   # optional; without it a key that matches no rule is not limited
  rate: 100/s
  burst: 100
)";
  auto rs = parse_rules(text, "rules.yaml");
  ASSERT_EQ(rs->rules().size(), 1u);
  EXPECT_EQ(rs->rules()[0].match, "api:login:*");
  EXPECT_EQ(rs->rules()[0].limit, per_second(5, 10, 10));
  EXPECT_EQ(rs->rules()[0].line, 2);
  ASSERT_TRUE(rs->default_limit().has_value());
  EXPECT_EQ(*rs->default_limit(), per_second(100, 100, 100));  // max_debt defaults to burst
  EXPECT_EQ(rs->match("api:login:alice"), 0u);
  EXPECT_EQ(rs->match("web:index"), 1u);
}

TEST(RulesFile, MaxDebtDefaultsToBurstAndMayBeZero) {
  auto rs = parse_rules(
      "rules:\n  - {match: a, rate: 1/min, burst: 7}\n  - {match: b, rate: 2/h, burst: 3, max_debt: 0}\n", "r.yaml");
  EXPECT_EQ(rs->rules()[0].limit, (Limit{Rate{1, 60 * kNanosPerSecond}, 7, 7}));
  EXPECT_EQ(rs->rules()[1].limit, (Limit{Rate{2, 3600 * kNanosPerSecond}, 3, 0}));
}

TEST(RulesFile, ChargeWhenOverIsReadAndDefaultsToFalse) {
  auto rs = parse_rules(
      "rules:\n  - {match: a, rate: 1/s, burst: 1, charge_when_over: true}\n  - {match: b, rate: 1/s, burst: 1}\n"
      "default: {rate: 1/s, burst: 1, charge_when_over: yes}\n",
      "r.yaml");
  EXPECT_TRUE(rs->rules()[0].limit.charge_when_over);
  EXPECT_FALSE(rs->rules()[1].limit.charge_when_over);
  EXPECT_TRUE(rs->default_limit()->charge_when_over);
  const std::string msg = error_of("rules:\n  - {match: a, rate: 1/s, burst: 1, charge_when_over: 2}\n");
  EXPECT_EQ(msg.rfind("rules.yaml:2:", 0), 0u) << msg;
  EXPECT_NE(msg.find("charge_when_over must be true or false"), std::string::npos) << msg;
}

TEST(RulesFile, ShadowIsReadAndCannotBeChargedWhenOver) {
  auto rs = parse_rules(
      "rules:\n  - {match: a, rate: 1/s, burst: 1, shadow: true}\n  - {match: b, rate: 1/s, burst: 1}\n"
      "default: {rate: 1/s, burst: 1, shadow: yes}\n",
      "r.yaml");
  EXPECT_TRUE(rs->rules()[0].limit.shadow);
  EXPECT_FALSE(rs->rules()[1].limit.shadow);
  EXPECT_TRUE(rs->default_limit()->shadow);
  std::string msg = error_of("rules:\n  - {match: a, rate: 1/s, burst: 1, shadow: maybe}\n");
  EXPECT_EQ(msg.rfind("rules.yaml:2:", 0), 0u) << msg;
  EXPECT_NE(msg.find("shadow must be true or false"), std::string::npos) << msg;
  msg = error_of("rules:\n  - {match: a, rate: 1/s, burst: 1, shadow: true, charge_when_over: true}\n");
  EXPECT_EQ(msg.rfind("rules.yaml:2:", 0), 0u) << msg;
  EXPECT_NE(msg.find("shadow and charge_when_over exclude each other"), std::string::npos) << msg;
}

// `rules: []` (or a default alone) is how a file says "no rules". What a truncated, half-written
// or wrong file looks like is refused, so a reload keeps the rules in force and a start fails
// (issue 34, finding 12): an empty or comment-only file, `rules:` with no list, neither key.
TEST(RulesFile, NoRulesMustBeSaidAndAnEmptyOrCutFileIsRefused) {
  EXPECT_EQ(parse_rules("rules: []\n", "r.yaml")->match("k"), RuleSet::kUnlimited);
  EXPECT_EQ(parse_rules("default: {rate: 1/s, burst: 1}\n", "r.yaml")->match("k"), 0u);
  const std::pair<const char*, const char*> refused[] = {
      {"", "holds no rules (empty, or comments only)"},
      {"# every rule moved to another file\n\n", "holds no rules (empty, or comments only)"},
      {"rules:\n", "`rules:` has no list; write `rules: []` to mean none"},
      {"{}\n", "has neither `rules:` nor `default:`"},
  };
  for (const auto& [text, why] : refused) {
    try {
      parse_rules(text, "r.yaml");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_EQ(e.file(), "r.yaml");
    }
  }
}

// A rules path that is not a regular file would read as empty (/dev/null) or never end
// (/dev/zero); a directory (an RLS config directory given as --rules) too. Each is refused,
// naming the path.
// yaml-cpp keeps hundreds of bytes per node: a 4 MiB rules document of empty maps took 660 MB
// to load (issue 34, finding 6). A document is counted first, streaming, and refused past
// yaml::kMaxNodes with the place where it went over; a large real file still loads.
TEST(RulesFile, ADocumentOfTooManyNodesIsRefusedBeforeItIsLoaded) {
  std::string bomb = "rules: [";
  for (size_t i = 0; i < 200'001; ++i) bomb += "{},";
  bomb += "{}]\n";
  try {
    parse_rules(bomb, "r.yaml");
    ADD_FAILURE() << "loaded a document of 200,002 mappings";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 200000 YAML nodes"), std::string::npos) << e.what();
    EXPECT_EQ(e.line(), 1);
  }
  std::string many = "rules:\n";
  for (int i = 0; i < 20'000; ++i) many += "  - {match: \"user:" + std::to_string(i) + "\", rate: 10/s, burst: 10}\n";
  EXPECT_EQ(parse_rules(many, "r.yaml")->rules().size(), 20'000u);
}

TEST(RulesFile, ADirectoryOrADeviceIsNotARulesFile) {
  const std::pair<std::string, const char*> refused[] = {
      {std::filesystem::temp_directory_path().string(), "is a directory, not a rules file"},
      {"/dev/null", "is not a regular file"},
      {"/dev/zero", "is not a regular file"},
  };
  for (const auto& [path, why] : refused) {
    try {
      load_rules_file(path);
      ADD_FAILURE() << "loaded " << path;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.file(), path);
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

TEST(RulesFile, ErrorsNameFileLineAndProblem) {
  struct Case {
    std::string text;
    std::string where;    // expected "file:line:" prefix
    std::string problem;  // expected substring
  };
  const Case cases[] = {
      {"rules:\n  - match: a\n    rate: 5/s\n    burts: 10\n", "rules.yaml:4:", "unknown field \"burts\""},
      {"rules:\n  - match: a\n    rate: 5/s\n    burst: 10\n    rate: 6/s\n", "rules.yaml:5:", "appears twice"},
      {"rules:\n  - match: a\n    rate: 5/day\n    burst: 10\n", "rules.yaml:3:", "unknown unit"},
      {"rules:\n  - match: a\n    rate: 5/s\n    burst: 0\n", "rules.yaml:4:", "burst must be between 1"},
      {"rules:\n  - match: a\n    rate: 5/s\n    burst: ten\n", "rules.yaml:4:", "whole number"},
      {"rules:\n  - match: a\n    rate: 5/s\n    burst: 10\n    max_debt: -1\n", "rules.yaml:5:", "max_debt"},
      {"rules:\n  - match: a\n    burst: 10\n", "rules.yaml:2:", "no `rate`"},
      {"rules:\n  - match: a\n    rate: 1/s\n", "rules.yaml:2:", "no `burst`"},
      {"rules:\n  - rate: 1/s\n    burst: 1\n", "rules.yaml:2:", "no `match`"},
      {"rules:\n  - {match: a, rate: 1/s, burst: 1}\n  - {match: a, rate: 2/s, burst: 1}\n",
       "rules.yaml:3:", "already has a rule at line 2"},
      {"rules:\n  - match: \"\"\n    rate: 1/s\n    burst: 1\n", "rules.yaml:2:", "must not be empty"},
      {"rules: {match: a}\n", "rules.yaml:1:", "must be a list"},
      {"default:\n  rate: 1/s\n  burst: 1\n  match: x\n", "rules.yaml:4:", "unknown field \"match\""},
      {"limits: []\n", "rules.yaml:1:", "unknown field \"limits\""},
      {"rules:\n  - match: [a, b]\n    rate: 1/s\n    burst: 1\n", "rules.yaml:2:", "single value"},
      {"rules:\n  - match: a\n    rate: 1/s\n   burst: 1\n", "rules.yaml:", ""},  // bad indentation
      {"- just\n- a list\n", "rules.yaml:1:", "expected a mapping"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of(c.text);
    EXPECT_EQ(msg.rfind(c.where, 0), 0u) << "message: " << msg << "\nfor:\n" << c.text;
    EXPECT_NE(msg.find(c.problem), std::string::npos) << "message: " << msg << "\nfor:\n" << c.text;
  }
}

TEST(RulesFile, ConcurrencyRulesStandAloneOrBesideARate) {
  auto rules = parse_rules(R"(rules:
  - match: "jobs:*"
    concurrency: 2
    lease_ttl: 5m
  - match: "api:*"
    rate: 10/s
    burst: 10
    concurrency: 4
  - match: "plain"
    rate: 1/s
    burst: 1
)",
                           "rules.yaml");
  ASSERT_EQ(rules->concurrency_rules().size(), 2u);
  const ConcurrencyRule& jobs = rules->concurrency_rules()[rules->concurrency_match("jobs:nightly")];
  EXPECT_EQ(jobs.limit, 2);
  EXPECT_EQ(jobs.ttl_ns, 300 * kNanosPerSecond);
  EXPECT_EQ(jobs.line, 2);
  EXPECT_EQ(rules->concurrency_rules()[rules->concurrency_match("api:x")].ttl_ns, 60 * kNanosPerSecond);
  EXPECT_EQ(rules->concurrency_match("plain"), RuleSet::kUnlimited);
  // A concurrency-only rule limits no rate; the rate beside a concurrency is a rule as before.
  EXPECT_EQ(rules->match("jobs:nightly"), RuleSet::kUnlimited);
  ASSERT_NE(rules->match("api:x"), RuleSet::kUnlimited);
  EXPECT_EQ(rules->limit(rules->match("api:x")).burst, 10);
  EXPECT_EQ(rules->rules().size(), 2u);
}

TEST(RulesFile, ConcurrencyMistakesNameTheLine) {
  EXPECT_NE(error_of("rules:\n  - match: a\n    concurrency: 0\n").find("rules.yaml:3"), std::string::npos);
  EXPECT_NE(error_of("rules:\n  - match: a\n    concurrency: 2\n    burst: 3\n").find("has no `rate`"),
            std::string::npos);
  EXPECT_NE(error_of("rules:\n  - match: a\n    lease_ttl: 5s\n    rate: 1/s\n    burst: 1\n")
                .find("lease_ttl without `concurrency`"),
            std::string::npos);
  EXPECT_NE(error_of("rules:\n  - match: a\n    concurrency: 2\n    lease_ttl: 0s\n").find("lease_ttl"),
            std::string::npos);
  EXPECT_NE(error_of("rules:\n  - match: a\n").find("nor `concurrency`"), std::string::npos);
  EXPECT_NE(error_of("default:\n  concurrency: 2\n").find("concurrency"), std::string::npos);
}

TEST(RulesFile, LongMatchIsRejected) {
  const std::string msg = error_of("rules:\n  - match: " + std::string(257, 'k') + "\n    rate: 1/s\n    burst: 1\n");
  EXPECT_NE(msg.find("256-byte"), std::string::npos) << msg;
}

TEST(RulesFile, LoadsFromDiskAndReportsAMissingFile) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("tollgate_rules_test_" + std::to_string(::getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << "rules:\n  - match: \"user:*\"\n    rate: 6000/min\n    burst: 50\n";
  }
  auto rs = load_rules_file(path.string());
  EXPECT_EQ(rs->limit(rs->match("user:1")), (Limit{Rate{6000, 60 * kNanosPerSecond}, 50, 50}));
  std::filesystem::remove(path);

  try {
    load_rules_file(path.string());
    ADD_FAILURE() << "missing file loaded";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), path.string());
    EXPECT_NE(std::string(e.what()).find("cannot read rules file"), std::string::npos) << e.what();
  }
}

TEST(RulesFile, ShippedExampleConfigParses) {
  auto rs = load_rules_file(TOLLGATE_SOURCE_DIR "/config/rules.yaml");
  EXPECT_FALSE(rs->rules().empty());
  EXPECT_TRUE(rs->limit(rs->match("llm:tokens:tenant-a")).charge_when_over);
  EXPECT_FALSE(rs->limit(rs->match("api:eu:export")).charge_when_over);
}

}  // namespace
}  // namespace tollgate
