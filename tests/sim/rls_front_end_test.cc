// The RLS config tollgate-sim gives the daemons for `front_end: rls` must govern each key the
// way the scenario's rules do: the same limit, through the reference server's matching.
#include "rls_front_end.h"

#include <gtest/gtest.h>

#include <array>
#include <stdexcept>
#include <string>

#include "tollgate/rls_config_file.h"
#include "tollgate/rules_file.h"

namespace tollgate::sim {
namespace {

// The limit the RLS config gives sim's request for `key`, or null when none applies.
const Limit* rls_limit_for(const RlsConfig& config, const std::string& key) {
  const std::array<RlsEntry, 1> entries{RlsEntry{kRlsDescriptorKey, key}};
  const RlsMatch m = config.match(kRlsDomain, entries);
  return m.limit && m.limit->limited() ? &m.limit->bucket : nullptr;
}

std::shared_ptr<const RlsConfig> translate(const RuleSet& rules) {
  return parse_rls_config({{"generated.yaml", rls_config_from_rules(rules)}});
}

TEST(RlsConfigFromRules, EveryKeyGetsTheLimitTheRulesGiveIt) {
  // Exact and glob rules (stars anywhere), globs whose precedence is not their file order (the
  // longer prefix wins), rates in every unit the rules file has, tollgate's own fields, and a default.
  const auto rules = parse_rules(
      "rules:\n"
      "  - {match: \"k*\", rate: 100/s, burst: 100}\n"
      "  - {match: \"key-*\", rate: 6000/min, burst: 50, max_debt: 7}\n"
      "  - {match: \"key-7\", rate: 3/h, burst: 1, max_debt: 0, charge_when_over: true}\n"
      "  - {match: \"ke*\", rate: 9/s, burst: 9}\n"
      "  - {match: \"k*y*7\", rate: 8/s, burst: 8}\n"
      "  - {match: \"*-9\", rate: 7/s, burst: 7}\n"
      "  - {match: \"k*-*9\", rate: 6/s, burst: 6}\n"
      "  - {match: \"weird \\\"quoted\\\": key\", rate: 4294967295/s, burst: 1}\n"
      "default: {rate: 2/s, burst: 2}\n",
      "rules.yaml");
  const auto config = translate(*rules);
  for (const std::string key : {"k0", "k", "key-7", "key-70", "key-", "kez", "ke", "x", "", "K1", "kay7", "k-9",
                                "ka-b9", "x-9", "key-9", "weird \"quoted\": key"}) {
    SCOPED_TRACE(key);
    const uint32_t index = rules->match(key);
    ASSERT_NE(index, RuleSet::kUnlimited);
    const Limit* got = rls_limit_for(*config, key);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(*got, rules->limit(index));
  }
}

TEST(RlsConfigFromRules, KeysNoRuleGovernsStayUnlimited) {
  const auto rules = parse_rules("rules:\n  - {match: \"k*\", rate: 5/s, burst: 5}\n", "rules.yaml");
  const auto config = translate(*rules);
  EXPECT_NE(rls_limit_for(*config, "k1"), nullptr);
  EXPECT_EQ(rules->match("other"), RuleSet::kUnlimited);
  EXPECT_EQ(rls_limit_for(*config, "other"), nullptr);
}

TEST(RlsConfigFromRules, WhatAnRlsConfigCannotSayIsAnError) {
  const auto too_many = parse_rules("rules:\n  - {match: \"k\", rate: 4294967296/s, burst: 5}\n", "rules.yaml");
  EXPECT_THROW(rls_config_from_rules(*too_many), std::invalid_argument);
}

}  // namespace
}  // namespace tollgate::sim
