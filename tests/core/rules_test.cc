#include "tollgate/rules.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "support/test_rules.h"
#include "tollgate/limit.h"

namespace tollgate {
namespace {

using testing::per_second;

TEST(ParseRate, AcceptsPerSecondMinuteHourDayWeekAndMonth) {
  EXPECT_EQ(parse_rate("100/s"), (Rate{100, kNanosPerSecond}));
  EXPECT_EQ(parse_rate("6000/min"), (Rate{6000, 60 * kNanosPerSecond}));
  EXPECT_EQ(parse_rate("1/h"), (Rate{1, 3600 * kNanosPerSecond}));
  EXPECT_EQ(parse_rate("100/d"), (Rate{100, 86400 * kNanosPerSecond}));
  EXPECT_EQ(parse_rate("5/w"), (Rate{5, 7 * 86400 * kNanosPerSecond}));
  EXPECT_EQ(parse_rate("1000/month"), (Rate{1000, 30 * 86400 * kNanosPerSecond}));
}

TEST(ParseRate, RejectsMalformedRatesWithAReason) {
  for (const char* bad : {"", "100", "/s", "10/", "10/day", "10/m", "10/months", "10/D", "-1/s", "0/s", "1.5/s",
                          "10 /s", "abc/s", "1000000000001/s", "99999999999999999999/s"}) {
    std::string why;
    EXPECT_FALSE(parse_rate(bad, &why).has_value()) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

TEST(ParseRate, FormatIsTheInverseOfParse) {
  for (const char* text : {"5/s", "6000/min", "1/h", "100/d", "5/w", "1000/month"}) {
    auto rate = parse_rate(text);
    ASSERT_TRUE(rate.has_value());
    EXPECT_EQ(format_rate(*rate), text);
  }
}

TEST(ValidateLimit, NamesTheProblem) {
  EXPECT_EQ(validate_limit(per_second(5, 10, 10)), "");
  EXPECT_NE(validate_limit(per_second(5, 0, 10)).find("burst"), std::string::npos);
  EXPECT_NE(validate_limit(per_second(5, 10, -1)).find("max_debt"), std::string::npos);
  EXPECT_NE(validate_limit(per_second(0, 10, 10)).find("rate"), std::string::npos);
}

TEST(GlobMatch, StarMatchesAnyRunIncludingNone) {
  EXPECT_TRUE(glob_match("api:*", "api:"));
  EXPECT_TRUE(glob_match("api:*", "api:login"));
  EXPECT_TRUE(glob_match("*:login", "api:login"));
  EXPECT_TRUE(glob_match("a*b*c", "a-x-b-y-c"));
  EXPECT_TRUE(glob_match("a*b*c", "abc"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("exact", "exact"));
  EXPECT_FALSE(glob_match("exact", "exactly"));
  EXPECT_FALSE(glob_match("api:*", "ap"));
  EXPECT_FALSE(glob_match("a*b*c", "acb"));
  EXPECT_FALSE(glob_match("*:login", "api:logout"));
}

TEST(GlobMatch, BacktracksOverRepeatedPrefixes) {
  EXPECT_TRUE(glob_match("*aab", "aaaaab"));
  EXPECT_FALSE(glob_match("*aab", "aaaaaba"));
  EXPECT_TRUE(glob_match("a*a*a*a*b", "aaaaaaaaaaab"));
  EXPECT_FALSE(glob_match("a*a*a*a*b", std::string(5000, 'a')));
}

TEST(GlobMatch, TheStartAndTheEndDoNotOverlap) {
  EXPECT_FALSE(glob_match("a*a", "a"));
  EXPECT_TRUE(glob_match("a*a", "aa"));
  EXPECT_FALSE(glob_match("ab*ba", "aba"));
  EXPECT_TRUE(glob_match("ab*ba", "abba"));
  EXPECT_TRUE(glob_match("**", "x"));
  EXPECT_TRUE(glob_match("a**b", "ab"));
  EXPECT_FALSE(glob_match("*x*x*", "x"));
}

// The matcher against the definition (recursive: '*' takes none or one more character), over
// every pattern and key of up to 5 characters from {a, b, *} and {a, b}.
bool glob_by_definition(std::string_view p, std::string_view k) {
  if (p.empty()) return k.empty();
  if (p[0] == '*') return glob_by_definition(p.substr(1), k) || (!k.empty() && glob_by_definition(p, k.substr(1)));
  return !k.empty() && p[0] == k[0] && glob_by_definition(p.substr(1), k.substr(1));
}

TEST(GlobMatch, AgreesWithTheDefinitionOnEverySmallPatternAndKey) {
  auto all = [](std::string_view alphabet, size_t max_len) {
    std::vector<std::string> out = {""};
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].size() == max_len) continue;
      for (char c : alphabet) out.push_back(out[i] + c);
    }
    return out;
  };
  size_t checked = 0;
  for (const std::string& p : all("ab*", 5)) {
    for (const std::string& k : all("ab", 5)) {
      ASSERT_EQ(glob_match(p, k), glob_by_definition(p, k)) << "pattern \"" << p << "\" key \"" << k << "\"";
      ++checked;
    }
  }
  EXPECT_EQ(checked, size_t(364 * 63));
}

// Builds the rules in order; line = position + 1 so tests can tell which rule won.
RuleSet rules_of(std::vector<std::string> patterns, bool with_default) {
  std::vector<Rule> rules;
  for (size_t i = 0; i < patterns.size(); ++i) {
    rules.push_back({patterns[i], per_second(int64_t(i) + 1, 10, 10), int(i) + 1});
  }
  std::optional<Limit> def;
  if (with_default) def = per_second(100, 100, 100);
  return RuleSet(std::move(rules), def);
}

TEST(RuleSet, ExactMatchBeatsAnyGlob) {
  RuleSet rs = rules_of({"api:*", "api:login:alice", "api:login:*"}, false);
  EXPECT_EQ(rs.match("api:login:alice"), 1u);
}

TEST(RuleSet, LongestLiteralPrefixWins) {
  RuleSet rs = rules_of({"api:*", "api:login:*", "*"}, false);
  EXPECT_EQ(rs.match("api:login:bob"), 1u);
  EXPECT_EQ(rs.match("api:search"), 0u);
  EXPECT_EQ(rs.match("web:index"), 2u);
}

TEST(RuleSet, PrefixTiesGoToMoreLiteralsThenFileOrder) {
  RuleSet more_literals = rules_of({"api:*", "api:*:admin"}, false);
  EXPECT_EQ(more_literals.match("api:x:admin"), 1u);
  EXPECT_EQ(more_literals.match("api:x:user"), 0u);

  RuleSet same = rules_of({"api:*:a", "api:*:*a"}, false);
  // Same literal prefix ("api:") and the same number of literal characters: the earlier rule wins.
  EXPECT_EQ(same.match("api:x:a"), 0u);
}

TEST(RuleSet, DefaultGovernsUnmatchedKeysAndIsIndexedAfterTheRules) {
  RuleSet rs = rules_of({"api:*"}, true);
  const uint32_t idx = rs.match("web:index");
  ASSERT_EQ(idx, 1u);
  EXPECT_EQ(rs.limit(idx), per_second(100, 100, 100));
  EXPECT_EQ(rs.limit(rs.match("api:x")), per_second(1, 10, 10));
}

TEST(RuleSet, WithoutDefaultUnmatchedKeysAreUnlimited) {
  RuleSet rs = rules_of({"api:*"}, false);
  EXPECT_EQ(rs.match("web:index"), RuleSet::kUnlimited);
  EXPECT_EQ(RuleSet().match("anything"), RuleSet::kUnlimited);
}

TEST(RuleSet, RejectsDuplicatePatternsAndInvalidLimits) {
  EXPECT_THROW(rules_of({"api:*", "api:*"}, false), std::invalid_argument);
  EXPECT_THROW(RuleSet({{"a", per_second(1, 0, 0), 1}}, std::nullopt), std::invalid_argument);
  EXPECT_THROW(RuleSet({}, per_second(1, 1, -1)), std::invalid_argument);
}

}  // namespace
}  // namespace tollgate
