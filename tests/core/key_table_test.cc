#include "core/key_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/test_rules.h"
#include "tollgate/rules.h"
#include "util/keyed_hash.h"

namespace tollgate {
namespace {

using testing::one_rule;
using testing::per_second;
constexpr int64_t kSec = kNanosPerSecond;
constexpr int64_t kM = kMicrotokensPerToken;

std::map<std::string, int64_t> drain(KeyTable& t) {
  std::vector<ConsumptionEntry> out;
  t.take_pending(out);
  std::map<std::string, int64_t> sum;
  for (const auto& e : out) sum[e.key] += e.tokens;
  return sum;
}

TEST(KeyTable, KeysGetIndependentBuckets) {
  KeyTable t(one_rule("user:*", per_second(1, 2, 2)));
  EXPECT_TRUE(t.allow("user:a", 2, 0).allowed);
  EXPECT_FALSE(t.allow("user:a", 1, 0).allowed);
  EXPECT_TRUE(t.allow("user:b", 2, 0).allowed);
  EXPECT_EQ(t.size(), 2u);
}

// --- hash flooding (issue 34, finding 2) --------------------------------------------------------

// Keys crafted offline to share their hash's low 12 bits under one secret: what an attacker who
// knew the secret (or faced an unkeyed hash, as std::hash was) would send. Under that secret
// they pile into one home and every lookup walks the pile; under any other, they spread.
TEST(KeyTableHashFlooding, KeysCraftedAgainstOneSecretDoNotClusterUnderAnother) {
  const KeyedHash::Key known{0x1234, 0x5678}, secret{0x9abc'def0'1234'5678, 0x0fed'cba9'8765'4321};
  const KeyedHash attackers(known);
  std::vector<std::string> crafted;
  for (uint64_t i = 0; crafted.size() < 400; ++i) {
    std::string key = "user:" + std::to_string(i);
    if ((attackers(key) & 0xfff) == 0x5a5) crafted.push_back(std::move(key));
  }
  auto longest_probe_after_flood = [&](const KeyedHash::Key& k) {
    KeyTableOptions options;
    options.hash_key = k;
    KeyTable t(one_rule("user:*", per_second(1, 5, 5)), options);
    for (const std::string& key : crafted) EXPECT_TRUE(t.allow(key, 1, 0).allowed);
    EXPECT_EQ(t.size(), crafted.size());
    return t.stats().longest_probe;
  };
  EXPECT_GT(longest_probe_after_flood(known), 300u);  // the attack, when the secret is known
  EXPECT_LE(longest_probe_after_flood(secret), 16u);  // and when it is not
}

TEST(KeyTableHashFlooding, TheHashDependsOnTheSecret) {
  const KeyedHash a({1, 2}), a_again({1, 2}), b({1, 3});
  EXPECT_EQ(a("user:alice"), a_again("user:alice"));
  EXPECT_NE(a("user:alice"), b("user:alice"));
  EXPECT_NE(a("user:alice"), a("user:alicf"));
}

// --- all or nothing (allow_all) ----------------------------------------------------------------

TEST(KeyTableAllOrNothing, WhenEveryCheckPassesEachIsChargedAsAllowWould) {
  KeyTable t(one_rule("user:*", per_second(1, 5, 5)));
  const CheckItem items[] = {{"user:a", 2}, {"user:b", 4}, {"other", 9}};
  Decision out[3];
  EXPECT_TRUE(t.allow_all(items, out, 0));
  EXPECT_TRUE(out[0].allowed && out[1].allowed && out[2].allowed);
  EXPECT_EQ(out[0].remaining, 3);
  EXPECT_EQ(out[1].remaining, 1);
  EXPECT_FALSE(out[2].limited);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"user:a", 2}, {"user:b", 4}}));
}

// The lesson of the systems we replace: a request over several limits must not spend the limits
// that allowed it when another one denies it.
TEST(KeyTableAllOrNothing, WhenOneCheckIsDeniedNoneIsCharged) {
  KeyTable t(one_rule("user:*", per_second(1, 5, 5)));
  ASSERT_TRUE(t.allow("user:b", 4, 0).allowed);  // b has 1 left
  drain(t);
  const CheckItem items[] = {{"user:a", 2}, {"user:b", 3}, {"user:new", 1}, {"other", 1}};
  Decision out[4];
  EXPECT_FALSE(t.allow_all(items, out, 0));
  EXPECT_EQ(out[1].reason, DenyReason::kInsufficientTokens);
  EXPECT_EQ(out[1].retry_after_ns, 2 * kSec);  // 2 more tokens at 1/s
  EXPECT_FALSE(out[0].allowed);
  EXPECT_EQ(out[0].reason, DenyReason::kOtherCheckDenied);
  EXPECT_EQ(out[0].retry_after_ns, 2 * kSec);  // when the whole request could pass
  EXPECT_EQ(out[0].remaining, 5);              // untouched
  EXPECT_EQ(out[2].reason, DenyReason::kOtherCheckDenied);
  EXPECT_TRUE(out[3].allowed);  // no rule: nothing to spend
  EXPECT_EQ(t.balance_microtokens("user:a", 0), std::nullopt) << "a denied request creates no bucket";
  EXPECT_EQ(t.balance_microtokens("user:b", 0), 1 * kM);
  EXPECT_TRUE(drain(t).empty());
  EXPECT_EQ(t.size(), 1u);
}

TEST(KeyTableAllOrNothing, TheSameKeyTwiceAddsUp) {
  KeyTable t(one_rule("k*", per_second(1, 5, 5)));
  const CheckItem twice[] = {{"k", 3}, {"k", 3}};
  Decision out[2];
  EXPECT_FALSE(t.allow_all(twice, out, 0));
  EXPECT_EQ(out[1].reason, DenyReason::kInsufficientTokens);
  EXPECT_EQ(out[0].reason, DenyReason::kOtherCheckDenied);
  EXPECT_TRUE(drain(t).empty());
  const CheckItem fits[] = {{"k", 2}, {"k", 3}};
  EXPECT_TRUE(t.allow_all(fits, out, 0));
  EXPECT_EQ(out[1].remaining, 0);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"k", 5}}));
}

TEST(KeyTableAllOrNothing, AnEvictedKeysRememberedDebtIsWhatDecides) {
  KeyTableOptions o;
  o.max_keys = 2;
  KeyTable t(one_rule("k*", per_second(1, 10, 10)), o);
  ASSERT_TRUE(t.allow("k1", 10, 0).allowed);  // k1 empty
  t.allow("k2", 1, 0);
  t.allow("k3", 1, 0);  // evicts k1, whose balance is remembered
  ASSERT_EQ(t.balance_microtokens("k1", 0), std::nullopt);
  const CheckItem items[] = {{"k2", 1}, {"k1", 1}};
  Decision out[2];
  EXPECT_FALSE(t.allow_all(items, out, 0)) << "k1 must not come back full";
  EXPECT_EQ(out[1].reason, DenyReason::kInsufficientTokens);
}

// Random requests of 1 to 40 checks over 30 keys (past the linear lookup's 16): after each,
// either every balance moved by exactly what the request asked of it, or none moved.
TEST(KeyTableAllOrNothing, RandomRequestsAreChargedWhollyOrNotAtAll) {
  KeyTable t(one_rule("k*", per_second(2, 20, 20)));
  std::mt19937_64 rng(19);
  int64_t now = 0;
  int passed = 0, refused = 0;
  for (int round = 0; round < 2000; ++round) {
    now += int64_t(rng() % 300) * kNanosPerMilli;
    std::vector<std::string> keys;
    std::vector<CheckItem> items;
    const size_t n = 1 + rng() % 40;
    for (size_t i = 0; i < n; ++i) keys.push_back("k" + std::to_string(rng() % 30));
    for (size_t i = 0; i < n; ++i) items.push_back({keys[i], int64_t(rng() % 4)});
    std::map<std::string, int64_t> before, asked;
    for (const CheckItem& c : items) {
      before[std::string(c.key)] = t.balance_microtokens(c.key, now).value_or(20 * kM);
      asked[std::string(c.key)] += c.cost;
    }
    std::vector<Decision> out(n);
    const bool all = t.allow_all(items, out, now);
    all ? ++passed : ++refused;
    for (const auto& [key, balance] : before) {
      const int64_t after = t.balance_microtokens(key, now).value_or(20 * kM);
      ASSERT_EQ(after, all ? balance - asked[key] * kM : balance) << "round " << round << " key " << key;
    }
    for (const Decision& d : out) ASSERT_EQ(d.allowed, all);
  }
  EXPECT_GT(passed, 100);
  EXPECT_GT(refused, 100);
}

// --- charge_when_over: costs known only after the work -----------------------------------------

Limit charged_when_over(int64_t rate, int64_t burst, int64_t max_debt) {
  Limit l = per_second(rate, burst, max_debt);
  l.charge_when_over = true;
  return l;
}

TEST(KeyTableChargeWhenOver, ADeniedCostIsChargedIntoDebtAndReportedWhole) {
  KeyTable t(one_rule("llm:*", charged_when_over(10, 10, 30)));
  ASSERT_TRUE(t.allow("llm:a", 4, 0).allowed);  // 6 left
  const Decision d = t.allow("llm:a", 8, 0);    // the answer took 8 tokens: more than there are
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kInsufficientTokens);
  EXPECT_TRUE(d.charged_anyway);
  EXPECT_EQ(d.remaining, -2);
  EXPECT_EQ(d.retry_after_ns, kSec);  // from -2 back to 8 at 10/s: the balance it left, not 6
  EXPECT_EQ(*t.balance_microtokens("llm:a", 0), -2 * kM);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"llm:a", 12}}));  // the whole cost, for the others
  // Later requests wait until the debt is repaid: 3 tokens at 10/s for the next one.
  EXPECT_FALSE(t.allow("llm:a", 0, 2 * kSec / 10).allowed);  // a query: balance 0, not 1
  EXPECT_TRUE(t.allow("llm:a", 1, 3 * kSec / 10).allowed);
}

TEST(KeyTableChargeWhenOver, DebtStopsAtMaxDebtAndACostAboveBurstIsChargedToo) {
  KeyTable t(one_rule("llm:*", charged_when_over(10, 10, 30)));
  const Decision d = t.allow("llm:a", 1000, 0);  // above burst: never admissible, still paid
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kCostExceedsBurst);
  EXPECT_TRUE(d.charged_anyway);
  EXPECT_EQ(d.remaining, -30);  // -max_debt: the rest is forgiven here, as for a remote charge
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"llm:a", 1000}}));
}

TEST(KeyTableChargeWhenOver, WithoutTheFlagADeniedCostIsNotCharged) {
  KeyTable t(one_rule("api:*", per_second(10, 10, 30)));
  const Decision d = t.allow("api:a", 20, 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.charged_anyway);
  EXPECT_EQ(*t.balance_microtokens("api:a", 0), 10 * kM);
  EXPECT_TRUE(drain(t).empty());
}

TEST(KeyTableChargeWhenOver, AllOrNothingStillChargesTheLimitsThatMustBePaid) {
  auto rules = std::make_shared<RuleSet>(
      std::vector<Rule>{{"llm:*", charged_when_over(10, 10, 30), 0}, {"api:*", per_second(10, 10, 10), 0}},
      std::nullopt);
  KeyTable t(rules);
  ASSERT_TRUE(t.allow("api:b", 10, 0).allowed);  // api:b is spent
  drain(t);
  const CheckItem items[] = {{"llm:a", 3}, {"api:b", 1}, {"api:c", 1}};
  Decision out[3];
  EXPECT_FALSE(t.allow_all(items, out, 0));
  EXPECT_EQ(out[0].reason, DenyReason::kOtherCheckDenied);  // it had room: not what denied
  EXPECT_TRUE(out[0].charged_anyway);
  EXPECT_EQ(out[0].remaining, 7);
  EXPECT_FALSE(out[2].charged_anyway);
  EXPECT_EQ(out[2].remaining, 10);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"llm:a", 3}}));  // and nothing else
}

Limit in_shadow(int64_t rate, int64_t burst) {
  Limit l = per_second(rate, burst, burst);
  l.shadow = true;
  return l;
}

TEST(KeyTableShadow, WhatTheLimitWouldDenyPassesUnchargedAndSaysSo) {
  KeyTable t(one_rule("api:*", in_shadow(10, 10)));
  for (int i = 0; i < 10; ++i) {
    const Decision d = t.allow("api:a", 1, 0);
    ASSERT_TRUE(d.allowed);
    EXPECT_FALSE(d.shadow_denied);
  }
  for (const int64_t cost : {1, 1000}) {  // short of tokens, and above the burst
    const Decision d = t.allow("api:a", cost, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_TRUE(d.shadow_denied);
    EXPECT_EQ(d.reason, DenyReason::kNone);
    EXPECT_EQ(d.retry_after_ns, 0);
    EXPECT_EQ(d.remaining, 0);
  }
  // Uncharged: the bucket is where enforcing the limit would have left it, and only the ten
  // admitted tokens go to the other nodes.
  EXPECT_EQ(*t.balance_microtokens("api:a", 0), 0);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"api:a", 10}}));
  // A bad cost is still refused: shadow mode hides limits, not errors.
  EXPECT_FALSE(t.allow("api:a", -1, 0).allowed);
}

// --- denials for top-K (issue 41) --------------------------------------------------------------

struct Harvest {
  std::map<std::string, int64_t> tokens;
  std::map<std::string, uint32_t> denied;
  std::map<std::string, uint32_t> rule;
};
Harvest harvest(KeyTable& t) {
  std::vector<ConsumptionEntry> out;
  std::vector<KeyActivity> activity;
  t.take_pending(out, SIZE_MAX, &activity);
  EXPECT_EQ(out.size(), activity.size());
  Harvest h;
  for (size_t i = 0; i < out.size() && i < activity.size(); ++i) {
    EXPECT_EQ(h.tokens.count(out[i].key), 0u) << out[i].key << " taken twice";
    h.tokens[out[i].key] = out[i].tokens;
    if (activity[i].denied > 0) h.denied[out[i].key] = activity[i].denied;
    h.rule[out[i].key] = activity[i].rule;
  }
  return h;
}

TEST(KeyTableTopK, DenialsAreHarvestedWithTheirRuleOnceAndAKeyOfDenialsAloneCarriesNoTokens) {
  auto rules = std::make_shared<RuleSet>(
      std::vector<Rule>{{"a:*", per_second(1, 2, 0), 0}, {"b:*", per_second(1, 1, 0), 0}}, std::nullopt);
  for (const bool concurrent : {false, true}) {
    KeyTableOptions options;
    options.concurrent = concurrent;
    KeyTable t(rules, options);
    EXPECT_TRUE(t.allow("a:x", 2, 0).allowed);
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(t.allow("a:x", 1, 0).allowed);
    EXPECT_TRUE(t.allow("b:y", 1, 0).allowed);
    (void)harvest(t);  // b:y's token and a:x's first tokens and denials
    for (int i = 0; i < 5; ++i) EXPECT_FALSE(t.allow("b:y", 1, 0).allowed);
    EXPECT_FALSE(t.allow("a:x", 1, 0).allowed);
    EXPECT_TRUE(t.allow("free", 1, 0).allowed);  // no rule: nothing to count
    const Harvest h = harvest(t);
    EXPECT_EQ(h.denied, (std::map<std::string, uint32_t>{{"a:x", 1}, {"b:y", 5}})) << concurrent;
    EXPECT_EQ(h.tokens, (std::map<std::string, int64_t>{{"a:x", 0}, {"b:y", 0}})) << concurrent;
    EXPECT_EQ(h.rule, (std::map<std::string, uint32_t>{{"a:x", 0}, {"b:y", 1}})) << concurrent;
    EXPECT_TRUE(harvest(t).tokens.empty());  // nothing twice
    // Without activity, a key of denials alone is not handed over at all (nothing to seal).
    EXPECT_FALSE(t.allow("b:y", 1, 0).allowed);
    EXPECT_TRUE(drain(t).empty());
    EXPECT_TRUE(harvest(t).tokens.empty());
  }
}

TEST(KeyTableTopK, AllOrNothingCountsOnlyTheCheckThatDenied) {
  auto rules = std::make_shared<RuleSet>(
      std::vector<Rule>{{"a:*", per_second(1, 5, 0), 0}, {"b:*", per_second(1, 1, 0), 0}}, std::nullopt);
  KeyTable t(rules);
  EXPECT_TRUE(t.allow("b:y", 1, 0).allowed);  // b:y empty, and in the table
  (void)harvest(t);
  const std::vector<CheckItem> items{{"a:x", 1}, {"b:y", 1}, {"b:new", 1}};
  std::vector<Decision> out(items.size());
  EXPECT_FALSE(t.allow_all(items, out, 0));
  EXPECT_EQ(out[0].reason, DenyReason::kOtherCheckDenied);
  const Harvest h = harvest(t);
  // a:x had room (another check denied it) and b:new has no entry (a copy of its bucket was
  // probed, and it would have passed): only b:y's own denial counts.
  EXPECT_EQ(h.denied, (std::map<std::string, uint32_t>{{"b:y", 1}}));
  EXPECT_EQ(t.stats().denials_unharvested, 0u);
}

TEST(KeyTableTopK, ShadowDenialsAreNotDenials) {
  KeyTable t(one_rule("api:*", in_shadow(10, 2)));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(t.allow("api:a", 1, 0).allowed);
  const Harvest h = harvest(t);
  EXPECT_TRUE(h.denied.empty());
  EXPECT_EQ(h.tokens, (std::map<std::string, int64_t>{{"api:a", 2}}));
}

TEST(KeyTableTopK, AnEvictedKeysDenialsAreCountedAsUnharvested) {
  KeyTableOptions options;
  options.max_keys = 1;
  KeyTable t(one_rule("k:*", per_second(1, 1, 0)), options);
  EXPECT_TRUE(t.allow("k:a", 1, 0).allowed);
  EXPECT_FALSE(t.allow("k:a", 1, 0).allowed);
  EXPECT_FALSE(t.allow("k:a", 1, 0).allowed);
  EXPECT_TRUE(t.allow("k:b", 1, 0).allowed);  // evicts k:a: its token survives, its denials do not
  const Harvest h = harvest(t);
  EXPECT_EQ(h.tokens, (std::map<std::string, int64_t>{{"k:a", 1}, {"k:b", 1}}));
  EXPECT_EQ(h.rule.at("k:a"), RuleSet::kUnlimited);  // (left the table: the caller matches it again)
  EXPECT_TRUE(h.denied.empty());
  EXPECT_EQ(t.stats().denials_unharvested, 2u);
}

TEST(KeyTableShadow, AllOrNothingIsDecidedByTheEnforcedLimitsAlone) {
  auto rules = std::make_shared<RuleSet>(
      std::vector<Rule>{{"new:*", in_shadow(10, 1), 0}, {"api:*", per_second(10, 10, 10), 0}}, std::nullopt);
  KeyTable t(rules);
  ASSERT_TRUE(t.allow("new:a", 1, 0).allowed);  // the shadow bucket is spent
  drain(t);
  const CheckItem items[] = {{"new:a", 1}, {"api:b", 1}};
  Decision out[2];
  EXPECT_TRUE(t.allow_all(items, out, 0));  // the shadow limit does not deny the request
  EXPECT_TRUE(out[0].shadow_denied);
  EXPECT_TRUE(out[1].allowed);
  EXPECT_FALSE(out[1].shadow_denied);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"api:b", 1}}));  // new:a uncharged
}

TEST(KeyTable, KeysNoRuleGovernsAreAdmittedWithoutABucket) {
  KeyTable t(one_rule("user:*", per_second(1, 1, 1)));
  for (int i = 0; i < 100; ++i) {
    const Decision d = t.allow("other", 1, 0);
    EXPECT_TRUE(d.allowed);
    EXPECT_FALSE(d.limited);
  }
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(drain(t).empty());
  EXPECT_FALSE(t.charge_remote("other", 5, 0));
  EXPECT_EQ(t.stats().remote_ignored, 1u);
}

TEST(KeyTable, KeysLongerThanTheLimitAreRejectedWithAReason) {
  KeyTable t(one_rule("*", per_second(1, 1, 1)));
  const std::string ok(256, 'k'), too_long(257, 'k');
  EXPECT_TRUE(t.allow(ok, 1, 0).allowed);
  const Decision d = t.allow(too_long, 1, 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, DenyReason::kKeyTooLong);
  EXPECT_EQ(t.stats().rejected_keys, 1u);
  EXPECT_EQ(t.size(), 1u);
}

TEST(KeyTable, EvictsTheLeastRecentlyUsedKeyAtMaxKeys) {
  KeyTableOptions options;
  options.max_keys = 3;
  KeyTable t(one_rule("*", per_second(1, 10, 10)), options);
  t.allow("a", 1, 0);
  t.allow("b", 1, 0);
  t.allow("c", 1, 0);
  t.allow("a", 1, 1);  // a is now the most recently used; b the least
  t.allow("d", 1, 2);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.stats().evictions, 1u);
  EXPECT_FALSE(t.balance_microtokens("b", 2).has_value());
  EXPECT_TRUE(t.balance_microtokens("a", 2).has_value());
  EXPECT_TRUE(t.balance_microtokens("c", 2).has_value());
  EXPECT_TRUE(t.balance_microtokens("d", 2).has_value());
}

TEST(KeyTable, AKeyInUseSurvivesAFloodOfNewKeys) {
  KeyTableOptions options;
  options.max_keys = 100;
  KeyTable t(one_rule("*", per_second(1, 10'000, 10'000)), options);
  t.allow("hot", 1, 0);
  for (int i = 0; i < 10'000; ++i) {
    t.allow("flood:" + std::to_string(i), 1, 0);
    if (i % 10 == 0) {
      ASSERT_TRUE(t.allow("hot", 1, 0).allowed);
    }
    ASSERT_TRUE(t.balance_microtokens("hot", 0).has_value()) << "evicted after " << i << " new keys";
  }
  EXPECT_EQ(t.size(), 100u);
  EXPECT_EQ(t.stats().evictions, 10'000u - 99u);
  EXPECT_EQ(t.balance_microtokens("hot", 0), (10'000 - 1001) * kM);  // 1 + 1,000 uses, never reset
}

TEST(KeyTable, RateScaleSlowsRefillFromNowOn) {
  KeyTable t(one_rule("*", per_second(10, 10, 10)));
  ASSERT_TRUE(t.allow("k", 10, 0).allowed);
  t.set_rate_scale(1, 2, 1 * kSec);  // the first second refilled at the full rate: 10 tokens
  EXPECT_EQ(t.balance_microtokens("k", 1 * kSec), 10 * kM);
  ASSERT_TRUE(t.allow("k", 10, 1 * kSec).allowed);
  EXPECT_EQ(t.balance_microtokens("k", 2 * kSec), 5 * kM);  // then half: 5 per second
  EXPECT_EQ(t.limit_for("k")->rate.tokens * kNanosPerSecond / t.limit_for("k")->rate.period_ns, 5);
  EXPECT_EQ(t.limit_for("other"), (Limit{Rate{10, 2 * kSec}, 10, 10}));
  t.set_rate_scale(1, 1, 2 * kSec);
  EXPECT_EQ(t.balance_microtokens("k", 2 * kSec + kSec / 2), 10 * kM);
}

TEST(KeyTable, AnEvictedKeyInDebtDoesNotComeBackFull) {
  KeyTableOptions options;
  options.max_keys = 1;
  KeyTable t(one_rule("*", per_second(1, 10, 10)), options);
  t.charge_remote("hot", 15, 0);  // -5
  t.allow("other", 1, 0);         // evicts "hot"
  ASSERT_FALSE(t.balance_microtokens("hot", 0).has_value());
  const Decision d = t.allow("hot", 1, 2 * kSec);  // comes back at -5 + 2 refilled = -3
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, -3);
  EXPECT_EQ(t.stats().restored, 1u);
}

TEST(KeyTable, RememberedBalancesAreBounded) {
  KeyTableOptions options;
  options.max_keys = 1;
  options.max_remembered = 2;
  KeyTable t(one_rule("*", per_second(1, 10, 10)), options);
  for (const char* k : {"k1", "k2", "k3", "k4"}) t.charge_remote(k, 20, 0);
  const KeyTableStats s = t.stats();
  EXPECT_EQ(s.remembered, 2u);
  EXPECT_EQ(s.forgotten_debts, 1u);          // k1 was forgotten to make room for k3
  EXPECT_TRUE(t.allow("k1", 1, 0).allowed);  // forgotten: back full (counted above)
  // k1 coming back evicted k4, whose remembered debt pushed out k2's: k3 and k4 remain.
  EXPECT_EQ(t.stats().forgotten_debts, 2u);
  EXPECT_FALSE(t.allow("k3", 1, 0).allowed);  // remembered: still in debt
  EXPECT_EQ(t.stats().restored, 1u);
}

// A flood of new keys that each spend a token fills the remembered table with barely spent
// balances; those are forgotten first, so a key in debt evicted before the flood still comes
// back in debt.
TEST(KeyTable, AFloodOfBarelySpentKeysDoesNotPushOutARememberedDebt) {
  KeyTableOptions options;
  options.max_keys = 1;
  options.max_remembered = 8;
  KeyTable t(one_rule("*", Limit{Rate{1000, 3600 * kSec}, 1000, 1000}), options);
  t.charge_remote("owes", 1500, 0);  // -500
  for (int i = 0; i < 10'000; ++i) t.allow("flood-" + std::to_string(i), 1, 0);
  EXPECT_GE(t.stats().forgotten_debts, 10'000u - 8u);
  const Decision d = t.allow("owes", 1, 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, -500);
}

// Thousands of balances go through the remembered table and come back out of it in another
// order, each at exactly the balance it left with: the table's probing and its deletions (which
// move other entries) lose and mix up nothing.
TEST(KeyTable, EveryRememberedBalanceComesBackExactly) {
  KeyTableOptions options;
  options.max_keys = 16;
  options.max_remembered = 5000;
  KeyTable t(one_rule("*", Limit{Rate{1, 3600 * kSec}, 10, 10}), options);  // no refill to speak of
  constexpr int kKeys = 4000;
  auto spent = [](int i) { return int64_t(i % 17) + 1; };  // 1..17: some light, some in debt
  for (int i = 0; i < kKeys; ++i) t.charge_remote("key-" + std::to_string(i), spent(i), 0);
  EXPECT_EQ(t.stats().remembered, size_t(kKeys - 16));
  for (int i = kKeys - 1; i >= 0; --i) {
    const std::string key = "key-" + std::to_string(i);
    const Decision d = t.allow(key, 0, 0);  // brings the key back (and evicts another)
    ASSERT_EQ(d.remaining, 10 - spent(i)) << key;
  }
  EXPECT_EQ(t.stats().forgotten_debts, 0u);
  EXPECT_EQ(t.stats().restored, uint64_t(kKeys - 16));
}

TEST(KeyTable, IdleKeysWhoseBucketRefilledAreSwept) {
  KeyTable t(one_rule("*", per_second(10, 10, 10)));
  t.allow("spent", 10, 0);
  t.allow("untouched", 0, 0);
  t.charge_remote("indebt", 20, 0);
  std::vector<ConsumptionEntry> ignore;
  t.take_pending(ignore);
  EXPECT_EQ(t.sweep_idle(500 * kNanosPerMilli, 100), 1u);  // only "untouched" is full yet
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.sweep_idle(1 * kSec, 100), 1u);      // "spent" refilled after 1 s
  EXPECT_EQ(t.sweep_idle(2 * kSec - 1, 100), 0u);  // "indebt" needs 2 s
  EXPECT_EQ(t.sweep_idle(2 * kSec, 100), 1u);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.stats().idle_removed, 3u);
}

TEST(KeyTable, SweepExaminesAtMostMaxScanKeys) {
  KeyTable t(one_rule("*", per_second(10, 10, 10)));
  for (int i = 0; i < 10; ++i) t.allow("k" + std::to_string(i), 0, 0);
  EXPECT_EQ(t.sweep_idle(0, 4), 4u);
  EXPECT_EQ(t.size(), 6u);
}

TEST(KeyTable, PendingConsumptionIsReportedOncePerKeyAndReset) {
  KeyTable t(one_rule("*", per_second(1, 100, 100)));
  t.allow("a", 3, 0);
  t.allow("b", 1, 0);
  t.allow("a", 2, 0);
  t.allow("a", 1000, 0);       // denied: not consumption
  t.charge_remote("a", 7, 0);  // remote: not ours to report
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"a", 5}, {"b", 1}}));
  EXPECT_TRUE(drain(t).empty());
  t.allow("b", 4, 0);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"b", 4}}));
}

// Envoy's is_negative_hits: a refund gives tokens back to the bucket (never above burst) and is
// reported as negative consumption, net of the key's consumption in the same round.
TEST(KeyTable, ARefundGivesBackAndIsReportedNetOfTheRoundsConsumption) {
  KeyTable t(one_rule("k*", per_second(1, 10, 10)));
  t.allow("k1", 8, 0);
  Decision d = t.refund("k1", 3, 0);
  EXPECT_TRUE(d.limited);
  EXPECT_EQ(d.remaining, 5);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"k1", 5}}));  // 8 spent, 3 given back
  d = t.refund("k1", 4, 0);
  EXPECT_EQ(d.remaining, 9);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"k1", -4}}));  // a refund alone: negative
  t.allow("k1", 2, 0);
  t.refund("k1", 2, 0);
  EXPECT_TRUE(drain(t).empty());  // cancelled out: nothing to tell
  // Clamped at burst here, but reported whole: a peer that heard the consumption may owe it.
  d = t.refund("k1", 50, 0);
  EXPECT_EQ(d.remaining, 10);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"k1", -50}}));
  // A key no rule governs has no bucket: nothing given back, nothing reported.
  d = t.refund("other", 5, 0);
  EXPECT_FALSE(d.limited);
  EXPECT_TRUE(drain(t).empty());
  // A refund is not a check.
  EXPECT_EQ(t.check_counts().checks, 2u);  // the two allow() calls
  // A peer's refund, heard by gossip, gives back too (and is not ours to report).
  t.allow("k2", 10, 0);
  drain(t);
  EXPECT_TRUE(t.charge_remote("k2", -6, 0));
  EXPECT_EQ(t.allow("k2", 0, 0).remaining, 6);
  EXPECT_TRUE(drain(t).empty());
}

TEST(KeyTable, ARefundOfAnEvictedKeyIsStillReported) {
  KeyTableOptions options;
  options.max_keys = 2;
  KeyTable t(one_rule("*", per_second(1, 100, 100)), options);
  t.allow("a", 10, 0);
  drain(t);
  t.refund("a", 4, 0);
  for (int i = 0; i < 10; ++i) t.allow("x" + std::to_string(i), 1, 0);  // evicts "a"
  EXPECT_EQ(drain(t)["a"], -4);
}

// take_pending() a few keys at a time (the node's early sealing under a key flood) loses nothing,
// reports nothing twice, and leaves pending_keys() at zero once everything is taken.
TEST(KeyTable, PendingConsumptionCanBeTakenAFewKeysAtATime) {
  KeyTableOptions options;
  options.max_keys = 4;  // so most keys are evicted with their consumption pending
  KeyTable t(one_rule("*", per_second(1, 100, 100)), options);
  std::map<std::string, int64_t> admitted;
  for (int i = 0; i < 10; ++i) {
    const std::string key = "k" + std::to_string(i);
    t.allow(key, i + 1, 0);
    admitted[key] = i + 1;
  }
  t.allow("k0", 1, 0);
  ++admitted["k0"];
  EXPECT_GE(t.pending_keys(), 10u);
  std::map<std::string, int64_t> taken;
  for (int calls = 0; calls < 100; ++calls) {
    std::vector<ConsumptionEntry> out;
    t.take_pending(out, 3);
    ASSERT_LE(out.size(), 3u);
    for (const auto& e : out) taken[e.key] += e.tokens;
  }
  EXPECT_EQ(taken, admitted);
  EXPECT_EQ(t.pending_keys(), 0u);
}

TEST(KeyTable, PendingConsumptionOfEvictedKeysIsNotLost) {
  KeyTableOptions options;
  options.max_keys = 2;
  KeyTable t(one_rule("*", per_second(1, 100, 100)), options);
  int64_t admitted = 0;
  for (int i = 0; i < 50; ++i) {
    const std::string key = "k" + std::to_string(i % 7);
    if (t.allow(key, 1 + i % 3, i).allowed) admitted += 1 + i % 3;
  }
  EXPECT_GT(t.stats().evictions, 0u);
  int64_t reported = 0;
  for (const auto& [key, tokens] : drain(t)) reported += tokens;
  EXPECT_EQ(reported, admitted);
  EXPECT_TRUE(drain(t).empty());
}

// A key flood while nothing takes what was admitted (a member whose thread is stuck): keys that
// left the table wait for take_pending up to a bound (here its floor, 4,096), and the consumption
// of those beyond it is dropped and counted instead of held in ever more memory.
TEST(KeyTable, EvictedConsumptionWaitingToBeTakenIsBounded) {
  KeyTableOptions options;
  options.max_keys = 10;
  KeyTable t(one_rule("*", per_second(1, 10, 10)), options);
  constexpr size_t kKeys = 10'000, kKept = 4096;
  for (size_t i = 0; i < kKeys; ++i) ASSERT_TRUE(t.allow("flood:" + std::to_string(i), 1, 0).allowed);
  const KeyTableStats s = t.stats();
  EXPECT_EQ(s.evictions, kKeys - 10);
  EXPECT_EQ(s.pending_dropped, kKeys - 10 - kKept);
  EXPECT_EQ(t.pending_keys(), kKept + 10);
  // The first keys evicted and the ten in the table, a token each, once.
  const auto taken = drain(t);
  EXPECT_EQ(taken.size(), kKept + 10);
  for (size_t i = 0; i < kKeys; ++i) {
    const bool kept = i < kKept || i >= kKeys - 10;
    const auto it = taken.find("flood:" + std::to_string(i));
    ASSERT_EQ(it != taken.end(), kept) << i;
    if (kept) {
      EXPECT_EQ(it->second, 1) << i;
    }
  }
  EXPECT_EQ(t.pending_keys(), 0u);
  // Once taken, there is room again: 20 more keys push out the 10 taken ones (nothing pending)
  // and 10 of their own, whose consumption waits.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(t.allow("again:" + std::to_string(i), 1, 1).allowed);
  EXPECT_EQ(t.stats().pending_dropped, kKeys - 10 - kKept);
  EXPECT_EQ(drain(t).size(), 20u);
}

TEST(KeyTable, RemoteChargesCreateTheKeyAndDebtIt) {
  KeyTable t(one_rule("*", per_second(10, 10, 10)));
  EXPECT_TRUE(t.charge_remote("k", 12, 0));
  EXPECT_EQ(t.balance_microtokens("k", 0), -2 * kM);
  EXPECT_FALSE(t.allow("k", 1, 0).allowed);
}

TEST(KeyTable, ReloadKeepsBucketsWhoseRuleDidNotChange) {
  const Limit same = per_second(1, 10, 10);
  auto rules = std::make_shared<RuleSet>(
      std::vector<Rule>{{"keep:*", same, 1}, {"change:*", per_second(1, 10, 10), 2}, {"drop:*", same, 3}},
      std::nullopt);
  KeyTable t(rules);
  t.charge_remote("keep:a", 14, 0);    // -4
  t.charge_remote("change:a", 14, 0);  // -4
  t.charge_remote("drop:a", 14, 0);
  auto reloaded = std::make_shared<RuleSet>(
      std::vector<Rule>{{"extra", per_second(5, 5, 5), 1}, {"keep:*", same, 2}, {"change:*", per_second(1, 10, 2), 3}},
      std::nullopt);
  t.replace_rules(reloaded, 0);
  EXPECT_EQ(t.balance_microtokens("keep:a", 0), -4 * kM);
  EXPECT_EQ(t.balance_microtokens("change:a", 0), -2 * kM);  // clamped into the new max_debt
  EXPECT_FALSE(t.balance_microtokens("drop:a", 0).has_value());
  EXPECT_EQ(t.size(), 2u);
}

TEST(KeyTable, ReloadReportsPendingOfKeysThatBecameUnlimited) {
  KeyTable t(one_rule("*", per_second(1, 10, 10)));
  t.allow("x", 3, 0);
  t.replace_rules(one_rule("other:*", per_second(1, 10, 10)), 0);
  EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"x", 3}}));
}

TEST(KeyTable, ReportsBytesThatGrowWithKeys) {
  KeyTable t(one_rule("*", per_second(1, 10, 10)));
  const size_t empty = t.stats().bytes;
  for (int i = 0; i < 1000; ++i) t.allow("a-rather-long-key-name-" + std::to_string(i), 1, 0);
  const size_t full = t.stats().bytes;
  EXPECT_GT(full, empty + 1000 * 64);
  EXPECT_LT(full, empty + 1000 * 512);
}

// Long keys' buffers and evicted keys' pending consumption are counted as they come and go, not
// walked at every stats() (issue 34, finding 4: a million keys walked per /metrics). A debug
// build checks the counters against the walk at each call; here, what they add returns to zero
// once the long keys are evicted and their consumption taken.
TEST(KeyTable, BytesOfLongKeysAndOrphansAreKeptAsTheyChange) {
  KeyTableOptions options;
  options.max_keys = 100;
  options.max_remembered = 0;  // (remembered balances keep their keys: not what is measured here)
  KeyTable t(one_rule("*", per_second(1, 10, 10)), options);
  for (int i = 0; i < 100; ++i) t.allow("s" + std::to_string(i), 1, 0);
  std::vector<ConsumptionEntry> sink;
  t.take_pending(sink);
  const size_t short_only = t.stats().bytes;
  const std::string long_prefix(200, 'L');  // beyond the 72 bytes an entry holds inline
  for (int i = 0; i < 100; ++i) t.allow(long_prefix + std::to_string(i), 1, 1);  // evicts every short key
  const size_t with_long = t.stats().bytes;
  EXPECT_GE(with_long, short_only + 100 * 200);
  for (int i = 0; i < 300; ++i) {
    t.allow("t" + std::to_string(i), 1, 2);  // evicts the long keys, pending and all
    if (i % 50 == 0) (void)t.stats();        // (the debug build compares with a walk here)
  }
  t.take_pending(sink);
  EXPECT_EQ(t.stats().keys, 100u);
  EXPECT_LT(t.stats().bytes, short_only + 100 * 200);  // the long keys' buffers are gone
}

TEST(KeyTable, MemoryStaysBoundedUnderAFloodOfNewKeys) {
  KeyTableOptions options;
  options.max_keys = 1000;
  options.max_remembered = 100;
  KeyTable t(one_rule("*", per_second(1, 10, 10)), options);
  size_t bytes_at_capacity = 0;
  for (int i = 0; i < 100'000; ++i) {
    t.allow("flood:" + std::to_string(i), 1, i);
    if (i % 64 == 0) {
      std::vector<ConsumptionEntry> sink;
      t.take_pending(sink);
    }
    if (i == 5'000) bytes_at_capacity = t.stats().bytes;
  }
  const KeyTableStats s = t.stats();
  EXPECT_EQ(s.keys, 1000u);
  EXPECT_EQ(s.evictions, 99'000u);
  EXPECT_LE(s.remembered, 100u);
  EXPECT_LE(s.bytes, bytes_at_capacity * 11 / 10);
}

// The proportional scale multiplies a rule's period by the number of known members: a slow
// rule in a large cluster must not overflow (1/h x 4,096 members x 1,000 is 1.5e19 ns).
TEST(KeyTable, ARateScaleThatOverflows64BitsStillScalesTheRate) {
  auto rules = std::make_shared<RuleSet>(std::vector<Rule>{{"slow", Limit{Rate{1, 3600 * kSec}, 10, 10}, 0},
                                                           {"k", Limit{Rate{1000, 3600 * kSec}, 10, 10}, 0},
                                                           {"seven", Limit{Rate{7, 3600 * kSec}, 10, 10}, 0}},
                                         std::nullopt);
  KeyTable t(rules);
  t.set_rate_scale(0, 4096, 0);  // nobody reachable: 1/1000 of 1/4096 of the rate
  // 1000/h: exact once the fraction is reduced, one token every 4,096,000 h / 1000.
  const Limit k = *t.limit_for("k");
  EXPECT_EQ(k.rate, (Rate{1, 3600 * kSec * 4'096}));
  // 7/h: no common factor, and 7 tokens per 1.47e19 ns do not fit: fewer tokens over a shorter
  // period, the time per token kept.
  const Limit seven = *t.limit_for("seven");
  const long double per_token = static_cast<long double>(seven.rate.period_ns) / seven.rate.tokens;
  EXPECT_NEAR(per_token / (3600.0L * kSec * 4'096'000 / 7), 1.0L, 1e-12L)
      << seven.rate.tokens << "/" << seven.rate.period_ns;
  // 1/h: one token every 4,096,000 h cannot be written in 64 bits; it refills as slowly as can be.
  const Limit slow = *t.limit_for("slow");
  EXPECT_EQ(slow.rate, (Rate{1, INT64_MAX}));
  ASSERT_TRUE(t.allow("slow", 10, 0).allowed);
  EXPECT_FALSE(t.allow("slow", 1, 3600 * kSec).allowed);  // nothing back after an hour
  EXPECT_TRUE(t.allow("k", 10, 0).allowed);
}

// --- a coarse time, refined on denial (KeyTableOptions::precise_clock) ---------------------------

// A clock that counts its reads: the point of the option is to read it only on denials.
class CountingClock final : public Clock {
 public:
  explicit CountingClock(MonoNanos now) : now_(now) {}
  MonoNanos now_ns() const override {
    ++reads;
    return now_;
  }
  void set(MonoNanos now) { now_ = now; }
  mutable int reads = 0;

 private:
  MonoNanos now_;
};

constexpr int64_t kTick = 4 * kNanosPerMilli;  // the coarse clock's lag in these tests

TEST(KeyTableCoarseTime, APacingLimitDeniedAtTheCoarseTimeIsDecidedAgainAtThePreciseOne) {
  for (bool concurrent : {false, true}) {
    SCOPED_TRACE(concurrent ? "concurrent" : "single owner");
    CountingClock precise(kTick);  // 4 ms after the coarse time 0
    const KeyTableOptions o{.concurrent = concurrent, .precise_clock = &precise, .coarse_lag_ns = kTick};
    // 1,000/s with burst 1 refills its burst within the lag: coarse times alone would hold it
    // to one token per tick.
    KeyTable refined(one_rule("user:*", per_second(1000, 1, 1)), o);
    KeyTable coarse_only(one_rule("user:*", per_second(1000, 1, 1)), {.concurrent = concurrent});
    EXPECT_TRUE(refined.allow("user:a", 1, 0).allowed);
    EXPECT_TRUE(coarse_only.allow("user:a", 1, 0).allowed);
    EXPECT_EQ(precise.reads, 0) << "an admitted check reads no clock";
    // At the coarse time the bucket is empty; 4 ms later it has refilled (1 token per ms).
    EXPECT_FALSE(coarse_only.allow("user:a", 1, 0).allowed);
    EXPECT_TRUE(refined.allow("user:a", 1, 0).allowed);
    EXPECT_EQ(precise.reads, 1);
    // Spent at the precise time: the bucket's time moved on to it, so the same coarse time again
    // is denied, and the precise clock (not moved) says the same, with its retry.
    const Decision again = refined.allow("user:a", 1, 0);
    EXPECT_FALSE(again.allowed);
    EXPECT_EQ(again.reason, DenyReason::kInsufficientTokens);
    EXPECT_EQ(again.retry_after_ns, kNanosPerMilli);
    EXPECT_EQ(precise.reads, 2);
    // An invalid cost is denied at any time, and reads no clock.
    EXPECT_EQ(refined.allow("user:a", -1, 0).reason, DenyReason::kInvalidCost);
    EXPECT_EQ(precise.reads, 2);
    EXPECT_EQ(drain(refined)["user:a"], 2);
  }
}

TEST(KeyTableCoarseTime, OtherLimitsDeniedAtTheCoarseTimeStandAndTheTokensWaitForTheNextCheck) {
  CountingClock precise(kTick);
  KeyTable t(one_rule("user:*", per_second(500, 10, 10)), {.precise_clock = &precise, .coarse_lag_ns = kTick});
  ASSERT_TRUE(t.allow("user:a", 10, 0).allowed);
  // 2 tokens refilled by the precise time, but 500/s does not fill 10 within 4 ms: the coarse
  // time's denial stands, without reading the clock, its retry counted from the coarse time.
  const Decision d = t.allow("user:a", 1, 0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ns, 2 * kNanosPerMilli);
  EXPECT_EQ(precise.reads, 0);
  // The next tick's check has them (nothing was lost).
  EXPECT_TRUE(t.allow("user:a", 2, kTick).allowed);
  EXPECT_FALSE(t.allow("user:a", 1, kTick).allowed);
  // charge_when_over is decided again: its charge is the precise time's.
  Limit over = per_second(500, 10, 10);
  over.charge_when_over = true;
  KeyTable c(one_rule("user:*", over), {.precise_clock = &precise, .coarse_lag_ns = kTick});
  ASSERT_TRUE(c.allow("user:a", 10, 0).allowed);
  const Decision charged = c.allow("user:a", 5, 0);
  EXPECT_FALSE(charged.allowed);
  EXPECT_TRUE(charged.charged_anyway);
  EXPECT_EQ(precise.reads, 1);
  EXPECT_EQ(charged.remaining, -3);  // 2 tokens refilled by the precise time, 5 charged
}

// From any state and any coarse time within the lag: an admitted check is one the precise time
// admits; a denial of a limit decided again is wholly the precise time's; any other denial is
// one the precise time would give too, or whose tokens arrived within the lag. Random limits
// (charge_when_over and shadow among them), random histories applied alike to two tables, then
// one check each.
TEST(KeyTableCoarseTime, DecisionsAgreeWithThePreciseTimesFromAnyStateAndCoarseTime) {
  std::mt19937_64 rng(18);
  int refined_to_allowed = 0, refined_still_denied = 0, stood_tokens_within_lag = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Limit limit = per_second(int64_t(1 + rng() % 2000), int64_t(1 + rng() % 20), int64_t(rng() % 20));
    limit.charge_when_over = rng() % 4 == 0;
    limit.shadow = !limit.charge_when_over && rng() % 4 == 0;
    const bool pacing = limit.rate.tokens * kTick >= limit.burst * kSec;
    CountingClock precise(0);
    KeyTable with_precise(
        one_rule("k:*", limit),
        {.concurrent = trial % 2 == 1, .shards = 2, .precise_clock = &precise, .coarse_lag_ns = kTick});
    KeyTable exact(one_rule("k:*", limit));
    MonoNanos t = int64_t(rng() % kSec);
    for (int op = int(rng() % 12); op > 0; --op) {
      t += int64_t(rng() % (3 * kNanosPerMilli));
      const int64_t cost = int64_t(rng() % 4);
      if (rng() % 3 == 0) {
        with_precise.charge_remote("k:a", cost, t);
        exact.charge_remote("k:a", cost, t);
      } else {
        precise.set(t);  // (the same time as `exact`'s: nothing to refine)
        ASSERT_EQ(with_precise.allow("k:a", cost, t).allowed, exact.allow("k:a", cost, t).allowed);
      }
    }
    const MonoNanos now = t + int64_t(rng() % (5 * kNanosPerMilli));
    const MonoNanos coarse = now - int64_t(rng() % (kTick + 1));
    precise.set(now);
    precise.reads = 0;
    const int64_t cost = int64_t(rng() % 6);
    // Decided again: charge_when_over, or a pacing limit unless the cost is above the burst
    // (denied at any time).
    const bool refines = limit.charge_when_over || (pacing && cost <= limit.burst);
    const Decision a = with_precise.allow("k:a", cost, coarse);
    const Decision b = exact.allow("k:a", cost, now);
    SCOPED_TRACE("trial " + std::to_string(trial));
    // Whether each would deny (a limit in shadow mode says so and passes).
    const bool a_denies = !a.allowed || a.shadow_denied, b_denies = !b.allowed || b.shadow_denied;
    if (!a_denies) {
      ASSERT_FALSE(b_denies);
    }
    if (refines || a_denies == b_denies) {
      ASSERT_EQ(a.allowed, b.allowed);
      ASSERT_EQ(a.reason, b.reason);
      ASSERT_EQ(a.shadow_denied, b.shadow_denied);
      ASSERT_EQ(a.charged_anyway, b.charged_anyway);
    }
    if (refines && a_denies) {
      // Decided again at the precise time, from the same state: everything agrees.
      ASSERT_EQ(a.remaining, b.remaining);
      ASSERT_EQ(a.retry_after_ns, b.retry_after_ns);
      ASSERT_EQ(with_precise.balance_microtokens("k:a", now), exact.balance_microtokens("k:a", now));
    }
    if (a_denies && !b_denies) {
      // A denial that stood: the tokens it lacked arrived between the coarse and precise times.
      ASSERT_FALSE(refines);
      ASSERT_TRUE(a.reason == DenyReason::kInsufficientTokens || a.shadow_denied);
      if (!a.shadow_denied) {
        ASSERT_LE(a.retry_after_ns, now - coarse);
      }
      ++stood_tokens_within_lag;
    }
    if (!refines) {
      ASSERT_EQ(precise.reads, 0);
    }
    if (precise.reads > 0 && !a_denies) ++refined_to_allowed;
    if (precise.reads > 0 && a_denies) ++refined_still_denied;
  }
  // Every branch was exercised.
  EXPECT_GT(refined_to_allowed, 20);
  EXPECT_GT(refined_still_denied, 20);
  EXPECT_GT(stood_tokens_within_lag, 20);
}

// Nothing is lost: one check every 10 us for a second, stamped with a clock that ticks every
// 4 ms, admits what the precise times admit, within a lag's refill, for a limit far above a
// tick's refill and for pacing ones (which only the precise clock's second look keeps whole).
TEST(KeyTableCoarseTime, AFloodAdmitsWhatThePreciseTimesAdmitWithinALagsRefill) {
  for (const Limit& limit :
       {per_second(1000, 1000, 0), per_second(1000, 1, 0), per_second(2000, 5, 0), per_second(100, 5, 0)}) {
    SCOPED_TRACE(std::to_string(limit.rate.tokens) + "/s burst " + std::to_string(limit.burst));
    CountingClock precise(0);
    KeyTable coarse(one_rule("k:*", limit), {.precise_clock = &precise, .coarse_lag_ns = kTick});
    KeyTable exact(one_rule("k:*", limit));
    int64_t admitted_coarse = 0, admitted_exact = 0;
    for (MonoNanos t = 0; t < kSec; t += 10 * kNanosPerMicro) {
      precise.set(t);
      admitted_coarse += coarse.allow("k:a", 1, t - t % kTick).allowed ? 1 : 0;
      admitted_exact += exact.allow("k:a", 1, t).allowed ? 1 : 0;
    }
    // The flood holds the precise bucket to its limit: the burst and a second's refill.
    EXPECT_NEAR(double(admitted_exact), double(limit.burst + limit.rate.tokens), 2.0);
    EXPECT_NEAR(double(admitted_coarse), double(admitted_exact), double(limit.rate.tokens * kTick / kSec + 1));
  }
}

TEST(KeyTableCoarseTime, AllOrNothingIsDecidedAgainAtThePreciseTime) {
  for (bool concurrent : {false, true}) {
    SCOPED_TRACE(concurrent ? "concurrent" : "single owner");
    CountingClock precise(kTick);
    KeyTable t(one_rule("user:*", per_second(1000, 2, 2)),
               {.concurrent = concurrent, .shards = 8, .precise_clock = &precise, .coarse_lag_ns = kTick});
    ASSERT_TRUE(t.allow("user:a", 2, 0).allowed);  // empty at time 0; full again by 4 ms
    Decision out[3];
    const CheckItem both[] = {{"user:a", 2}, {"user:b", 1}, {"other", 1}};
    EXPECT_TRUE(t.allow_all(both, out, 0));
    EXPECT_EQ(precise.reads, 1);
    EXPECT_TRUE(out[0].allowed && out[1].allowed && out[2].allowed);
    EXPECT_FALSE(out[2].limited);
    // Charged at the precise time: a is empty there, and a request that needs it fails whole at
    // the precise time too, with its retry from then.
    const CheckItem again[] = {{"user:b", 1}, {"user:a", 1}};
    EXPECT_FALSE(t.allow_all(again, out, 0));
    EXPECT_EQ(precise.reads, 2);
    EXPECT_EQ(out[0].reason, DenyReason::kOtherCheckDenied);
    EXPECT_EQ(out[1].reason, DenyReason::kInsufficientTokens);
    EXPECT_EQ(out[1].retry_after_ns, kNanosPerMilli);
    EXPECT_EQ(out[0].retry_after_ns, kNanosPerMilli);
    EXPECT_EQ(out[0].remaining, 1);  // b untouched by the failed request
    EXPECT_EQ(drain(t), (std::map<std::string, int64_t>{{"user:a", 4}, {"user:b", 1}}));
  }
}

// A request denied at the coarse time by a limit whose denial stands still charges its
// charge_when_over costs at the precise time: the whole request is decided again there.
TEST(KeyTableCoarseTime, ADeniedRequestChargesItsChargeWhenOverCostsAtThePreciseTime) {
  Limit over = per_second(500, 10, 10);
  over.charge_when_over = true;
  auto rules =
      std::make_shared<RuleSet>(std::vector<Rule>{{"c:*", over, 0}, {"p:*", per_second(500, 10, 10), 1}}, std::nullopt);
  CountingClock precise(kTick);
  KeyTable t(rules, {.precise_clock = &precise, .coarse_lag_ns = 2 * kTick});
  ASSERT_TRUE(t.allow("p:y", 10, 0).allowed);          // empty; 500/s does not refill 10 within the lag
  const CheckItem items[] = {{"c:x", 5}, {"p:y", 5}};  // (p:y has 2 by the precise time)
  Decision out[2];
  EXPECT_FALSE(t.allow_all(items, out, 0));
  EXPECT_EQ(precise.reads, 1);
  EXPECT_TRUE(out[0].charged_anyway);
  // Full (capped at 10) at 4 ms, less 5. Charged at the coarse time 0 it would have kept the
  // 2 tokens refilled between: 7.
  EXPECT_EQ(t.balance_microtokens("c:x", kTick), 5 * kM);
}

// allow_all at a coarse time, from random states where keys are evicted with their balances
// remembered and the rate scale changes (so a remembered limit differs from the current one):
// it stays all or nothing, admits only what the precise time admits, and a denied request with
// a charge_when_over cost is the precise time's whole (its charges included).
TEST(KeyTableCoarseTime, AllOrNothingAgreesWithThePreciseTimeFromRandomStates) {
  std::mt19937_64 rng(1818);
  const std::string keys[] = {"k:a", "k:b", "k:c"};
  int refined = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    Limit limit = per_second(int64_t(1 + rng() % 2000), int64_t(1 + rng() % 20), int64_t(rng() % 20));
    limit.charge_when_over = rng() % 3 == 0;
    CountingClock precise(0);
    KeyTable a(
        one_rule("k:*", limit),
        {.max_keys = 2, .concurrent = trial % 2 == 1, .shards = 1, .precise_clock = &precise, .coarse_lag_ns = kTick});
    KeyTable b(one_rule("k:*", limit), {.max_keys = 2});
    MonoNanos t = int64_t(rng() % kSec);
    for (int op = int(rng() % 16); op > 0; --op) {
      t += int64_t(rng() % (2 * kNanosPerMilli));
      const std::string& key = keys[rng() % 3];
      const int64_t cost = int64_t(rng() % 4);
      precise.set(t);
      switch (rng() % 4) {
        case 0:
          a.charge_remote(key, cost, t);
          b.charge_remote(key, cost, t);
          break;
        case 1: {
          const uint32_t num = uint32_t(1 + rng() % 3);
          a.set_rate_scale(num, 3, t);
          b.set_rate_scale(num, 3, t);
          break;
        }
        default:
          ASSERT_EQ(a.allow(key, cost, t).allowed, b.allow(key, cost, t).allowed);
      }
    }
    const MonoNanos now = t + int64_t(rng() % (3 * kNanosPerMilli));
    const MonoNanos coarse = now - int64_t(rng() % (kTick + 1));
    precise.set(now);
    precise.reads = 0;
    const size_t n = 1 + rng() % 3;
    std::vector<CheckItem> items;
    for (size_t i = 0; i < n; ++i) items.push_back({keys[rng() % 3], int64_t(rng() % 5)});
    std::vector<Decision> out_a(n), out_b(n);
    const bool all_a = a.allow_all(items, out_a, coarse);
    const bool all_b = b.allow_all(items, out_b, now);
    SCOPED_TRACE("trial " + std::to_string(trial));
    bool every = true, charges = false;
    for (size_t i = 0; i < n; ++i) {
      every = every && out_a[i].allowed;
      charges = charges || (limit.charge_when_over && items[i].cost > 0);
    }
    ASSERT_EQ(all_a, every) << "all or nothing";
    if (all_a) {
      ASSERT_TRUE(all_b);
    }
    if (charges && !all_b) {
      // Denied at the coarse time too, so decided again: the precise time's, charges included.
      ASSERT_EQ(all_a, all_b);
      for (const std::string& k : keys) ASSERT_EQ(a.balance_microtokens(k, now), b.balance_microtokens(k, now)) << k;
    }
    if (precise.reads > 0) ++refined;
  }
  EXPECT_GT(refined, 100);
}

}  // namespace
}  // namespace tollgate
