// The Envoy RLS config: the YAML loader (rls_config_file.h), the matching and bucket keys of
// RlsConfig (rls_config.h), and RuleSet's routing of RLS bucket keys. Written from the reference
// server's documented behaviour (docs/rls-notes.md sections 2 and 4) and our own headers.
#include "tollgate/rls_config_file.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/top_keys.h"
#include "support/test_rules.h"
#include "tollgate/config_error.h"
#include "tollgate/rls_config.h"
#include "tollgate/rules.h"
#include "util/printable.h"

namespace tollgate {
namespace {

using testing::per_second;
constexpr int64_t kSec = kNanosPerSecond;

std::shared_ptr<const RlsConfig> parse(const std::string& text, const std::string& source = "rls.yaml") {
  return parse_rls_config({{source, text}});
}

// Parses `files` expecting a ConfigError; returns its message.
std::string error_of(const std::vector<RlsConfigText>& files) {
  try {
    parse_rls_config(files);
  } catch (const ConfigError& e) {
    return e.what();
  }
  std::string all;
  for (const auto& f : files) all += f.source + ":\n" + f.text;
  ADD_FAILURE() << "no error for:\n" << all;
  return "";
}
std::string error_of(const std::string& text) { return error_of({{"rls.yaml", text}}); }

RlsMatch match(const RlsConfig& c, std::string_view domain, std::initializer_list<RlsEntry> entries) {
  return c.match(domain, std::span<const RlsEntry>(entries.begin(), entries.size()));
}

// requests_per_unit of the matched limit; -1 when no limit applies, -2 for an unlimited one.
int64_t rpu(const RlsMatch& m) {
  if (!m.limit) return -1;
  if (m.limit->unlimited) return -2;
  return m.limit->requests_per_unit;
}

// --- the documented shape ----------------------------------------------------------------------

TEST(RlsConfigFile, ParsesTheDocumentedShapeExactlyAsWritten) {
  const std::string text = R"(domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
      unit_multiplier: 1
      name: users_limit
      replaces: [{name: other}, {name: more}]
      unlimited: false
      burst: 600
      max_debt: 50
    shadow_mode: true
    share_threshold: false
    detailed_metric: true
    value_to_metric: true
    descriptors:
      - key: collection
        rate_limit: {unit: MINUTE, requests_per_unit: 20, unit_multiplier: 10}
  - key: database
    value: "default"
    rate_limit:
      unit: SECOND
      requests_per_unit: 7
  - key: path
    value: /files/*
    share_threshold: true
)";
  auto c = parse(text);
  ASSERT_EQ(c->domains().size(), 1u);
  const RlsDomain& d = c->domains()[0];
  EXPECT_EQ(d.domain, "mongo_cps");
  EXPECT_EQ(d.source, "rls.yaml");
  EXPECT_EQ(d.line, 1);
  EXPECT_EQ(d.column, 9);
  EXPECT_TRUE(c->has_domain("mongo_cps"));
  EXPECT_FALSE(c->has_domain("mongo"));
  ASSERT_EQ(d.descriptors.size(), 3u);

  const RlsDescriptor& users = d.descriptors[0];
  EXPECT_EQ(users.key, "database");
  EXPECT_EQ(users.value, std::optional<std::string>("users"));
  EXPECT_EQ(users.line, 3);
  EXPECT_EQ(users.column, 5);
  EXPECT_TRUE(users.shadow_mode);
  EXPECT_FALSE(users.share_threshold);
  EXPECT_TRUE(users.detailed_metric);
  EXPECT_TRUE(users.value_to_metric);
  ASSERT_TRUE(users.rate_limit.has_value());
  const RlsLimit& l = *users.rate_limit;
  EXPECT_EQ(l.name, "users_limit");
  EXPECT_FALSE(l.unlimited);
  EXPECT_EQ(l.requests_per_unit, 500u);
  EXPECT_EQ(l.unit, RlsUnit::kSecond);
  EXPECT_EQ(l.unit_multiplier, 1u);
  EXPECT_EQ(l.replaces, (std::vector<std::string>{"other", "more"}));
  EXPECT_EQ(l.burst, std::optional<int64_t>(600));
  EXPECT_EQ(l.max_debt, std::optional<int64_t>(50));
  EXPECT_TRUE(l.limited());
  Limit expected{Rate{500, kSec}, 600, 50};
  expected.shadow = true;  // the descriptor's shadow_mode
  EXPECT_EQ(l.bucket, expected);

  ASSERT_EQ(users.descriptors.size(), 1u);
  const RlsDescriptor& coll = users.descriptors[0];
  EXPECT_EQ(coll.key, "collection");
  EXPECT_FALSE(coll.value.has_value());
  EXPECT_FALSE(coll.shadow_mode);
  EXPECT_FALSE(coll.detailed_metric);
  EXPECT_FALSE(coll.value_to_metric);
  EXPECT_EQ(coll.line, 19);
  ASSERT_TRUE(coll.rate_limit.has_value());
  EXPECT_EQ(coll.rate_limit->unit, RlsUnit::kMinute);  // "MINUTE": units are case-insensitive
  EXPECT_EQ(coll.rate_limit->unit_multiplier, 10u);
  EXPECT_EQ(coll.rate_limit->name, "");
  EXPECT_TRUE(coll.rate_limit->replaces.empty());
  EXPECT_FALSE(coll.rate_limit->burst.has_value());
  EXPECT_FALSE(coll.rate_limit->max_debt.has_value());
  // 20 per 10 minutes; burst defaults to requests_per_unit, max_debt to burst.
  EXPECT_EQ(coll.rate_limit->bucket, (Limit{Rate{20, 600 * kSec}, 20, 20}));

  const RlsDescriptor& def = d.descriptors[1];
  EXPECT_EQ(def.value, std::optional<std::string>("default"));
  ASSERT_TRUE(def.rate_limit.has_value());
  EXPECT_EQ(def.rate_limit->unit, RlsUnit::kSecond);  // "SECOND"
  EXPECT_EQ(def.rate_limit->bucket, (Limit{Rate{7, kSec}, 7, 7}));

  const RlsDescriptor& path = d.descriptors[2];
  EXPECT_EQ(path.value, std::optional<std::string>("/files/*"));
  EXPECT_TRUE(path.share_threshold);
  EXPECT_FALSE(path.rate_limit.has_value());

  // Three limited limits: users, collection, default.
  EXPECT_EQ(c->limit_count(), 3u);
}

TEST(RlsConfigFile, EveryUnitInAnyCaseBecomesItsPeriod) {
  struct Case {
    const char* unit;
    RlsUnit parsed;
    int64_t seconds;
  };
  const Case cases[] = {
      {"second", RlsUnit::kSecond, 1},        {"SECOND", RlsUnit::kSecond, 1},
      {"Minute", RlsUnit::kMinute, 60},       {"hour", RlsUnit::kHour, 3600},
      {"HoUr", RlsUnit::kHour, 3600},         {"day", RlsUnit::kDay, 86400},
      {"week", RlsUnit::kWeek, 7 * 86400},    {"WEEK", RlsUnit::kWeek, 7 * 86400},
      {"month", RlsUnit::kMonth, 30 * 86400}, {"year", RlsUnit::kYear, 365 * 86400},
  };
  for (const Case& cs : cases) {
    auto c = parse(std::string("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: ") + cs.unit +
                   ", requests_per_unit: 3, unit_multiplier: 2}\n");
    const RlsLimit& l = *c->domains()[0].descriptors[0].rate_limit;
    EXPECT_EQ(l.unit, cs.parsed) << cs.unit;
    EXPECT_EQ(rls_unit_seconds(l.unit), cs.seconds) << cs.unit;
    EXPECT_EQ(l.bucket, (Limit{Rate{3, 2 * cs.seconds * kSec}, 3, 3})) << cs.unit;
  }
  RlsUnit u = RlsUnit::kSecond;
  EXPECT_FALSE(parse_rls_unit("unknown", &u));
  EXPECT_FALSE(parse_rls_unit("seconds", &u));
  EXPECT_FALSE(parse_rls_unit("", &u));
  EXPECT_EQ(u, RlsUnit::kSecond);  // untouched on failure
  EXPECT_EQ(rls_unit_seconds(RlsUnit::kUnknown), 0);
  EXPECT_STREQ(rls_unit_name(RlsUnit::kMonth), "month");
  EXPECT_STREQ(rls_unit_name(RlsUnit::kUnknown), "unknown");
}

TEST(RlsConfigFile, AcceptsWhatTheReferenceServerAccepts) {
  // requests_per_unit 0, unlimited with requests_per_unit, duplicate names, replaces naming a
  // limit that does not exist, a node with neither limit nor children, empty descriptor lists.
  auto c = parse(R"(domain: d
descriptors:
  - key: block
    rate_limit: {unit: second, requests_per_unit: 0, name: dup}
  - key: free
    rate_limit: {unlimited: true, requests_per_unit: 5, name: dup, replaces: [{name: nothing}]}
  - key: whitelisted
  - key: emptylist
    descriptors: []
  - key: nulllist
    descriptors:
)");
  const auto& ds = c->domains()[0].descriptors;
  ASSERT_EQ(ds.size(), 5u);
  EXPECT_EQ(ds[0].rate_limit->requests_per_unit, 0u);
  EXPECT_FALSE(ds[0].rate_limit->limited());
  EXPECT_TRUE(ds[1].rate_limit->unlimited);
  EXPECT_FALSE(ds[1].rate_limit->limited());
  EXPECT_EQ(c->limit_count(), 0u);

  const RlsMatch blocked = match(*c, "d", {{"block", "x"}});
  EXPECT_EQ(rpu(blocked), 0);
  EXPECT_EQ(blocked.key, "");  // nothing to count
  const RlsMatch free = match(*c, "d", {{"free", "x"}});
  EXPECT_EQ(rpu(free), -2);
  EXPECT_EQ(free.key, "");
  EXPECT_EQ(rpu(match(*c, "d", {{"whitelisted", "x"}})), -1);

  // A domain with no descriptors at all.
  auto empty = parse("domain: nothing\n");
  EXPECT_TRUE(empty->has_domain("nothing"));
  EXPECT_EQ(rpu(match(*empty, "nothing", {{"k", "v"}})), -1);
}

// --- matching ----------------------------------------------------------------------------------

const char* const kMatchingConfig = R"(domain: d
descriptors:
  - key: k                 # any value: a bucket each
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: k                 # an exact value wins over the valueless entry
    value: special
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: w
    value: foo*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: w
    value: fo*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: w
    value: f*o             # a '*' anywhere is a wildcard (the reference's PR #1085)
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: w
    value: foo9            # exact beats a wildcard, wherever it is in the file
    rate_limit: {unit: second, requests_per_unit: 13}
  - key: w2                # the first wildcard in file order wins, not the longest
    value: fo*
    rate_limit: {unit: second, requests_per_unit: 11}
  - key: w2
    value: foo*
    rate_limit: {unit: second, requests_per_unit: 12}
  - key: w3                # several stars, anywhere; still the first in file order
    value: a*b*c
    rate_limit: {unit: second, requests_per_unit: 16}
  - key: w3
    value: "*mid*"
    rate_limit: {unit: second, requests_per_unit: 17}
  - key: wv                # a wildcard beats the valueless entry listed before it
    rate_limit: {unit: second, requests_per_unit: 14}
  - key: wv
    value: x*
    rate_limit: {unit: second, requests_per_unit: 15}
  - key: exact
    value: foo
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: parent
    value: p               # a placeholder with no limit of its own
    descriptors:
      - key: child
        rate_limit: {unit: minute, requests_per_unit: 6}
  - key: parent
    descriptors:
      - key: child
        value: c
        rate_limit: {unit: minute, requests_per_unit: 7}
      - key: other
        rate_limit: {unit: minute, requests_per_unit: 8}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: empty
    value: ""              # the same as no value
    rate_limit: {unit: hour, requests_per_unit: 9}
)";

TEST(RlsConfigMatch, TheReferenceServersMatchingTable) {
  auto c = parse(kMatchingConfig);
  struct Case {
    std::vector<RlsEntry> entries;
    int64_t rpu;  // -1: no limit, -2: unlimited
  };
  const Case cases[] = {
      // exact value beats valueless
      {{{"k", "anything"}}, 10},
      {{{"k", "special"}}, 1},
      {{{"k", "specialx"}}, 10},
      {{{"k", ""}}, 10},
      // wildcards
      {{{"w", "foo1"}}, 2},
      {{{"w", "foo2"}}, 2},
      {{{"w", "foo"}}, 2},   // the prefix itself
      {{{"w", "fox"}}, 3},   // only fo* matches
      {{{"w", "bar"}}, -1},  // no wildcard, no valueless entry
      {{{"w", "f"}}, -1},
      {{{"w", "foo9"}}, 13},  // exact beats the wildcards before it
      {{{"w", "f*o"}}, 4},    // a '*' in the middle matches any run
      {{{"w", "fxo"}}, 4},
      {{{"w", "fo"}}, 3},  // fo* comes first in the file
      {{{"w", "fxoo"}}, 4},
      {{{"w", "fxob"}}, -1},  // f*o must end with the o
      {{{"w3", "abc"}}, 16},
      {{{"w3", "a-b-c"}}, 16},
      {{{"w3", "acb"}}, -1},
      {{{"w3", "mid"}}, 17},
      {{{"w3", "x-mid-y"}}, 17},
      {{{"w3", "a-mid-c"}}, 17},   // no b: only *mid* matches
      {{{"w3", "ab-mid-c"}}, 16},  // both match: the first in the file
      {{{"w2", "foo1"}}, 11},      // first wildcard in file order, although foo* is longer
      {{{"wv", "xa"}}, 15},
      {{{"wv", "ya"}}, 14},
      // an exact `foo` does not match foo1
      {{{"exact", "foo"}}, 5},
      {{{"exact", "foo1"}}, -1},
      {{{"exact", "fo"}}, -1},
      // keys are matched exactly
      {{{"K", "anything"}}, -1},
      {{{"k2", "anything"}}, -1},
      // depth: the node reached by the last entry must have the limit
      {{{"parent", "p"}}, -1},  // placeholder
      {{{"parent", "p"}, {"child", "x"}}, 6},
      {{{"parent", "p"}, {"child", "x"}, {"extra", "y"}}, -1},  // longer than the tree
      {{{"k", "a"}, {"extra", "y"}}, -1},
      {{{"child", "x"}, {"parent", "p"}}, -1},  // order matters
      {{{"parent", "q"}}, -1},
      {{{"parent", "q"}, {"child", "c"}}, 7},
      {{{"parent", "q"}, {"child", "z"}}, -1},
      {{{"parent", "q"}, {"other", "z"}}, 8},
      // no backtracking: parent=p takes the exact branch; the valueless parent's children are
      // never tried, even where they would match.
      {{{"parent", "p"}, {"other", "z"}}, -1},
      {{{"parent", "p"}, {"child", "c"}}, 6},
      // unlimited
      {{{"ldap", "x"}}, -2},
      // `value: ""` is no value
      {{{"empty", "anything"}}, 9},
      {{{"empty", ""}}, 9},
      // nothing at all
      {{}, -1},
  };
  for (const Case& cs : cases) {
    std::string what;
    for (const RlsEntry& e : cs.entries) what += "(" + std::string(e.key) + "=" + std::string(e.value) + ")";
    const RlsMatch m = c->match("d", cs.entries);
    EXPECT_EQ(rpu(m), cs.rpu) << what;
    if (!m.limit) {
      EXPECT_EQ(m.key, "") << what;
      EXPECT_FALSE(m.shadow_mode) << what;
    }
  }
  EXPECT_FALSE(c->domains()[0].descriptors.back().value.has_value());  // `value: ""`

  // An unknown domain gives no limit, whatever its entries.
  EXPECT_EQ(rpu(match(*c, "other", {{"k", "anything"}})), -1);
  EXPECT_EQ(rpu(match(*c, "", {{"k", "anything"}})), -1);
  // A config of no files matches nothing. (RlsConfig() itself cannot be instantiated outside
  // rls_config.cc: its inline default constructor needs ~unique_ptr<Tree> of an incomplete type.)
  EXPECT_EQ(rpu(match(*parse_rls_config({}), "d", {{"k", "anything"}})), -1);
}

TEST(RlsConfigMatch, ShadowModeIsReportedPerNode) {
  auto c = parse(R"(domain: d
descriptors:
  - key: a
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
)");
  const RlsMatch a = match(*c, "d", {{"a", "1"}});
  EXPECT_EQ(rpu(a), 1);
  EXPECT_TRUE(a.shadow_mode);
  const RlsMatch b = match(*c, "d", {{"a", "1"}, {"b", "2"}});
  EXPECT_EQ(rpu(b), 2);
  EXPECT_FALSE(b.shadow_mode);  // the node's own flag, not its parent's
}

TEST(RlsConfigMatch, QuotaModeAndMetadataArePerNode) {
  auto c = parse(R"(domain: d
descriptors:
  - key: a
    quota_mode: true
    metadata:
      name: service_1
      hits: 3
      ratio: 0.5
      on: yes
      off: false
      nothing: ~
      quoted: "42"
      tags: [x, 7]
      nested: {team: core, level: {deep: true}}
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: nolimit
    metadata: {name: unused}
)");
  const RlsMatch a = match(*c, "d", {{"a", "1"}});
  EXPECT_TRUE(a.quota_mode);
  ASSERT_NE(a.metadata, nullptr);
  const RlsValue& m = *a.metadata;
  ASSERT_EQ(m.kind, RlsValue::Kind::kMap);
  ASSERT_EQ(m.names,
            (std::vector<std::string>{"name", "hits", "ratio", "on", "off", "nothing", "quoted", "tags", "nested"}));
  EXPECT_EQ(m.items[0].kind, RlsValue::Kind::kString);
  EXPECT_EQ(m.items[0].text, "service_1");
  EXPECT_EQ(m.items[1].kind, RlsValue::Kind::kNumber);
  EXPECT_EQ(m.items[1].number, 3);
  EXPECT_EQ(m.items[2].number, 0.5);
  EXPECT_EQ(m.items[3].kind, RlsValue::Kind::kBool) << "YAML 1.1, as the reference's reader";
  EXPECT_TRUE(m.items[3].boolean);
  EXPECT_EQ(m.items[4].kind, RlsValue::Kind::kBool);
  EXPECT_FALSE(m.items[4].boolean);
  EXPECT_EQ(m.items[5].kind, RlsValue::Kind::kNull);
  EXPECT_EQ(m.items[6].kind, RlsValue::Kind::kString) << "quoted: a string whatever it says";
  EXPECT_EQ(m.items[6].text, "42");
  ASSERT_EQ(m.items[7].kind, RlsValue::Kind::kList);
  ASSERT_EQ(m.items[7].items.size(), 2u);
  EXPECT_EQ(m.items[7].items[1].kind, RlsValue::Kind::kNumber);
  ASSERT_EQ(m.items[8].kind, RlsValue::Kind::kMap);
  EXPECT_EQ(m.items[8].names, (std::vector<std::string>{"team", "level"}));
  EXPECT_TRUE(m.items[8].items[1].items[0].boolean);

  const RlsMatch b = match(*c, "d", {{"a", "1"}, {"b", "2"}});
  EXPECT_FALSE(b.quota_mode);  // the node's own flag, not its parent's
  EXPECT_EQ(b.metadata, nullptr);
  EXPECT_EQ(match(*c, "d", {{"nolimit", "1"}}).metadata, nullptr) << "no limit: nothing passed or was over";
}

// The reference server's per-value stat names (its PR #996 and detailed_metric), which
// tollgated counts in tollgate_rls_value_hits_total: a level with value_to_metric names the
// request's value, an explicit value always names itself, a wildcard without the flag names its
// pattern; detailed_metric names every entry. No flag on the way: no per-value name.
TEST(RlsConfigMatch, ValueToMetricAndDetailedMetricNameTheValues) {
  auto c = parse(R"(domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        descriptors:
          - key: subject_id
            rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: "/api/*"
    descriptors:
      - key: user
        value_to_metric: true
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: wild
    value: "a*"
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: detailed
    detailed_metric: true
    descriptors:
      - key: leaf
        detailed_metric: true
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 5}
)");
  const RlsMatch a = match(*c, "d", {{"route", "api"}, {"http_method", "GET"}, {"subject_id", "123"}});
  EXPECT_EQ(a.metric, "d.route_api.http_method_GET.subject_id");  // the reference's own example
  EXPECT_EQ(a.metric_rule, "d.route.http_method_GET.subject_id");
  EXPECT_EQ(match(*c, "d", {{"path", "/api/v1"}, {"user", "bob"}}).metric, "d.path_/api/*.user_bob");
  EXPECT_EQ(match(*c, "d", {{"wild", "abc"}}).metric, "d.wild_abc");
  EXPECT_EQ(match(*c, "d", {{"detailed", "x"}, {"leaf", "y"}}).metric, "d.detailed_x.leaf_y");
  const RlsMatch plain = match(*c, "d", {{"plain", "p"}});
  EXPECT_EQ(plain.metric, "") << "no flag: the limit's own series is enough";
  EXPECT_TRUE(plain.metric_rule.empty());
  EXPECT_EQ(match(*parse("domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"),
                  "e", {{"k", "v"}})
                .metric,
            "")
      << "a config without the flags builds no name";
}

// tollgate's `rate_limits:`: several limits on one descriptor, each its own bucket that every
// node finds from the key alone; names are kept, and `replaces` sees them.
TEST(RlsConfigMatch, SeveralLimitsOnOneDescriptorEachHaveTheirOwnBucket) {
  auto c = parse(R"(domain: d
descriptors:
  - key: api_key
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: day, requests_per_unit: 1000, name: daily}
      - {unit: hour, requests_per_unit: 100}
  - key: one
    rate_limits: [{unit: second, requests_per_unit: 1}]
  - key: vip
    rate_limit: {unit: second, requests_per_unit: 50, replaces: [{name: daily}]}
)");
  const RlsMatch m = match(*c, "d", {{"api_key", "k1"}});
  EXPECT_EQ(rpu(m), 10);
  ASSERT_EQ(m.more.size(), 2u);
  EXPECT_EQ(m.more[0].limit->requests_per_unit, 1000u);
  EXPECT_EQ(m.more[0].limit->name, "daily");
  EXPECT_EQ(m.more[1].limit->unit, RlsUnit::kHour);
  const std::set<std::string> keys{m.key, m.more[0].key, m.more[1].key};
  EXPECT_EQ(keys.size(), 3u) << "one bucket each";
  EXPECT_NE(m.more[0].key, match(*c, "d", {{"api_key", "k2"}}).more[0].key) << "and one per value";
  for (const RlsMatch* one : {&m, &m.more[0], &m.more[1]}) {
    const std::optional<uint32_t> index = c->limit_index(one->key);
    ASSERT_TRUE(index.has_value()) << "a node that only hears the key finds its limit";
    EXPECT_EQ(&c->limit(*index), one->limit);
  }
  EXPECT_EQ(c->label(*c->limit_index(m.more[0].key)), "d.api_key#daily");
  EXPECT_EQ(c->label(*c->limit_index(m.more[1].key)), "d.api_key#3");
  EXPECT_TRUE(match(*c, "d", {{"one", "x"}}).more.empty()) << "a list of one is a rate_limit";

  // `replaces` drops a named limit among several, and the descriptor keeps the others.
  std::vector<RlsMatch> both{match(*c, "d", {{"api_key", "k1"}}), match(*c, "d", {{"vip", "v"}})};
  RlsConfig::apply_replaces(both);
  ASSERT_EQ(both[0].more.size(), 1u);
  EXPECT_EQ(both[0].more[0].limit->unit, RlsUnit::kHour);
  EXPECT_EQ(rpu(both[0]), 10);
}

// --- bucket keys -------------------------------------------------------------------------------

TEST(RlsConfigKeys, ValuelessNodesGiveEachValueItsOwnSelfDescribingKey) {
  auto c = parse(kMatchingConfig);
  const RlsMatch a = match(*c, "d", {{"k", "abc"}});
  const RlsMatch b = match(*c, "d", {{"k", "abd"}});
  // 0x1E domain 0x1F key 0x1D "LEN:VALUE" (rls_config.h).
  EXPECT_EQ(a.key, std::string("\x1e"
                               "d"
                               "\x1f"
                               "k"
                               "\x1d"
                               "3:abc"));
  EXPECT_EQ(a.path_bytes, 5u);
  EXPECT_EQ(b.key, std::string("\x1e"
                               "d"
                               "\x1f"
                               "k"
                               "\x1d"
                               "3:abd"));
  EXPECT_NE(a.key, b.key);
  // The same value, the same key.
  EXPECT_EQ(match(*c, "d", {{"k", "abc"}}).key, a.key);
  // An empty value is a value too.
  EXPECT_EQ(match(*c, "d", {{"k", ""}}).key, std::string("\x1e"
                                                         "d"
                                                         "\x1f"
                                                         "k"
                                                         "\x1d"
                                                         "0:"));
}

TEST(RlsConfigKeys, ExactValueNodesPutNothingIntoTheValuesPart) {
  auto c = parse(kMatchingConfig);
  const RlsMatch special = match(*c, "d", {{"k", "special"}});
  ASSERT_FALSE(special.key.empty());
  EXPECT_EQ(special.key.size(), special.path_bytes);
  EXPECT_EQ(special.key.back(), kRlsKeyValuesSep);
  EXPECT_EQ(special.key[0], kRlsKeyPrefix);
  EXPECT_NE(special.key, match(*c, "d", {{"k", "anything"}}).key);

  // Under an exact parent, only the valueless child's value is in the values part.
  const RlsMatch child = match(*c, "d", {{"parent", "p"}, {"child", "xy"}});
  EXPECT_EQ(child.key.substr(child.path_bytes), "2:xy");
  // Under a valueless parent with an exact child: only the parent's value.
  const RlsMatch child2 = match(*c, "d", {{"parent", "qq"}, {"child", "c"}});
  EXPECT_EQ(child2.key.substr(child2.path_bytes), "2:qq");
}

TEST(RlsConfigKeys, ShareThresholdGivesAllMatchingValuesOneKey) {
  auto c = parse(R"(domain: d
descriptors:
  - key: path
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: files_no_share/*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: any
    value: "*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1}
)");
  const RlsMatch a = match(*c, "d", {{"path", "files/a.pdf"}});
  const RlsMatch b = match(*c, "d", {{"path", "files/b.csv"}});
  ASSERT_FALSE(a.key.empty());
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.key.size(), a.path_bytes);  // no values at all

  const RlsMatch x = match(*c, "d", {{"path", "files_no_share/a"}});
  const RlsMatch y = match(*c, "d", {{"path", "files_no_share/b"}});
  EXPECT_NE(x.key, y.key);
  EXPECT_EQ(x.key.substr(x.path_bytes), "16:files_no_share/a");  // the whole value, not the rest
  EXPECT_NE(x.key.substr(0, x.path_bytes), a.key.substr(0, a.path_bytes));

  const RlsMatch any1 = match(*c, "d", {{"any", ""}});
  const RlsMatch any2 = match(*c, "d", {{"any", "whatever"}});
  ASSERT_FALSE(any1.key.empty());
  EXPECT_EQ(any1.key, any2.key);
}

TEST(RlsConfigKeys, AWildcardAnywhereIsNamedByItsWholePatternAPrefixOneAsBefore) {
  auto c = parse(R"(domain: d
descriptors:
  - key: p
    value: ab*
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: p
    value: a*b
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: p
    value: a*b*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
)");
  const RlsMatch prefix = match(*c, "d", {{"p", "abz"}});
  const RlsMatch inner = match(*c, "d", {{"p", "azb"}});
  const RlsMatch shared1 = match(*c, "d", {{"p", "azbz"}});
  const RlsMatch shared2 = match(*c, "d", {{"p", "aybx"}});
  // A prefix wildcard's node is named by its prefix, as before stars could go anywhere, so a
  // rolling upgrade keeps counting its values in the same buckets.
  EXPECT_EQ(prefix.key.substr(0, prefix.path_bytes), std::string("\x1e"
                                                                 "d\x1fp\x02"
                                                                 "ab\x1d"));
  EXPECT_EQ(prefix.key.substr(prefix.path_bytes), "3:abz");
  EXPECT_EQ(inner.key.substr(0, inner.path_bytes), std::string("\x1e"
                                                               "d\x1fp\x02"
                                                               "a*b\x1d"));
  EXPECT_EQ(inner.key.substr(inner.path_bytes), "3:azb");
  // share_threshold works with any wildcard: one bucket for every value it matches.
  ASSERT_FALSE(shared1.key.empty());
  EXPECT_EQ(shared1.key, shared2.key);
  EXPECT_EQ(shared1.key, std::string("\x1e"
                                     "d\x1fp\x02"
                                     "a*b*\x1d"));
  // Each key finds its limit from the path alone, as every node must for gossiped consumption.
  for (const RlsMatch* m : {&prefix, &inner, &shared1}) EXPECT_TRUE(c->limit_index(m->key).has_value());
}

TEST(RlsConfigKeys, KeysAreInjective) {
  auto c = parse(R"(domain: d
descriptors:
  - key: x
    descriptors:
      - key: y
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a_b               # not the same node as key a, value b (the reference server's quirk)
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    value: b
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: a
    value: b*
    rate_limit: {unit: second, requests_per_unit: 4}
)");
  // Value pairs that collide under naive joining (concatenation, '_' or ':' separators).
  const std::pair<std::string, std::string> pairs[] = {
      {"ab", "c"},
      {"a", "bc"},
      {"a:b", "c"},
      {"a", "b:c"},
      {"1:a", ""},
      {"", "1:a"},
      {"", ""},
      {"0:", ""},
      {"", "0:"},
      {"a_b", "c"},
      {"a", "b_c"},
      {"a\x1d", "b"},
      {"a",
       "\x1d"
       "b"},
      {"2:ab", ""},
      {"1:a1:b", ""},
      {"1:a", "1:b"},
      {std::string(10, 'z'), ""},
      {"9", std::string(9, 'z')},
  };
  std::set<std::string> keys;
  for (const auto& [vx, vy] : pairs) {
    const RlsMatch m = c->match("d", std::vector<RlsEntry>{{"x", vx}, {"y", vy}});
    ASSERT_EQ(rpu(m), 1);
    EXPECT_TRUE(keys.insert(m.key).second) << "collision for (" << vx << ", " << vy << ")";
  }
  EXPECT_EQ(keys.size(), std::size(pairs));

  // key a_b (any value) and key a value b are different nodes with different keys.
  const RlsMatch ab_any = match(*c, "d", {{"a_b", "c"}});
  const RlsMatch a_b = match(*c, "d", {{"a", "b"}});
  const RlsMatch a_bstar = match(*c, "d", {{"a", "bc"}});
  EXPECT_EQ(rpu(ab_any), 2);
  EXPECT_EQ(rpu(a_b), 3);
  EXPECT_EQ(rpu(a_bstar), 4);
  EXPECT_NE(ab_any.key.substr(0, ab_any.path_bytes), a_b.key.substr(0, a_b.path_bytes));
  EXPECT_NE(a_b.key.substr(0, a_b.path_bytes), a_bstar.key.substr(0, a_bstar.path_bytes));
}

TEST(RlsConfigKeys, DomainAndKeysDoNotRunTogether) {
  auto c = parse_rls_config({
      {"one.yaml", "domain: a_b\ndescriptors:\n  - key: c\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
      {"two.yaml", "domain: a\ndescriptors:\n  - key: b_c\n    rate_limit: {unit: second, requests_per_unit: 2}\n"},
      {"three.yaml", "domain: a_b_c\ndescriptors:\n  - key: x\n    rate_limit: {unit: second, requests_per_unit: 3}\n"},
  });
  const RlsMatch one = match(*c, "a_b", {{"c", "v"}});
  const RlsMatch two = match(*c, "a", {{"b_c", "v"}});
  EXPECT_EQ(rpu(one), 1);
  EXPECT_EQ(rpu(two), 2);
  EXPECT_NE(one.key, two.key);
  EXPECT_NE(c->limit_index(one.key), c->limit_index(two.key));
  EXPECT_EQ(c->limit(*c->limit_index(one.key)).requests_per_unit, 1u);
  EXPECT_EQ(c->limit(*c->limit_index(two.key)).requests_per_unit, 2u);
}

TEST(RlsConfigKeys, LimitIndexFindsTheLimitFromThePathAlone) {
  auto c = parse(kMatchingConfig);
  // Every limited match: its key leads back to its own limit.
  std::set<uint32_t> seen;
  for (const std::vector<RlsEntry>& entries : std::vector<std::vector<RlsEntry>>{
           {{"k", "abc"}},
           {{"k", "special"}},
           {{"w", "foo1"}},
           {{"w", "fox"}},
           {{"w", "f*o"}},
           {{"w", "foo9"}},
           {{"parent", "p"}, {"child", "x"}},
           {{"parent", "q"}, {"child", "c"}},
           {{"parent", "q"}, {"other", "z"}},
           {{"empty", "e"}},
           {{"w2", "foo1"}},
           {{"wv", "xa"}},
           {{"wv", "ya"}},
           {{"exact", "foo"}},
           {{"w3", "abc"}},
           {{"w3", "mid"}},
       }) {
    const RlsMatch m = c->match("d", entries);
    ASSERT_NE(m.limit, nullptr);
    const std::optional<uint32_t> i = c->limit_index(m.key);
    ASSERT_TRUE(i.has_value()) << entries[0].key;
    EXPECT_EQ(&c->limit(*i), m.limit) << entries[0].key;
    EXPECT_TRUE(seen.insert(*i).second) << "two limits share an index";
    // The values part may be anything (a digest, bytes that look like separators).
    const std::string path = m.key.substr(0, m.path_bytes);
    for (const std::string& values : {std::string(""), std::string("#0123456789abcdef"),
                                      std::string("\x1d\x1e\x1f\x01\x02", 5), std::string(300, 'v')}) {
      EXPECT_EQ(c->limit_index(path + values), i) << entries[0].key;
    }
  }
  // All 17 but w2's `foo*`, which its `fo*` before it shadows.
  EXPECT_EQ(seen.size(), 16u);
  EXPECT_EQ(c->limit_count(), 17u);

  // A request value with separator bytes still resolves to its limit.
  const std::string odd(
      "a\x1d"
      "b\x1e"
      "c\x1f",
      6);
  const RlsMatch m = c->match("d", std::vector<RlsEntry>{{"k", odd}});
  ASSERT_NE(m.limit, nullptr);
  EXPECT_EQ(m.key.substr(m.path_bytes), "6:" + odd);
  ASSERT_TRUE(c->limit_index(m.key).has_value());
  EXPECT_EQ(&c->limit(*c->limit_index(m.key)), m.limit);

  // Not one of this config's keys.
  for (const std::string& key : {std::string(""), std::string("user:1"),
                                 std::string("d\x1f"
                                             "k\x1d"),
                                 std::string("\x1e"),
                                 std::string("\x1e"
                                             "d"),
                                 std::string("\x1e"
                                             "d\x1f"
                                             "k"),  // no 0x1D
                                 std::string("\x1e"
                                             "d\x1f"
                                             "nope\x1d"),  // unknown key
                                 std::string("\x1e"
                                             "e\x1f"
                                             "k\x1d"
                                             "3:abc"),  // unknown domain
                                 std::string("\x1e"
                                             "d\x1f"
                                             "k\x1f"
                                             "k\x1d"),  // deeper than the tree
                                 std::string("\x1e"
                                             "d\x1f"
                                             "ldap\x1d"
                                             "1:x"),  // unlimited: no bucket
                                 std::string("\x1e"
                                             "d\x1d")}) {  // the domain itself
    EXPECT_FALSE(c->limit_index(key).has_value()) << key;
  }
  EXPECT_FALSE(parse_rls_config({})
                   ->limit_index("\x1e"
                                 "d\x1f"
                                 "k\x1d")
                   .has_value());
}

TEST(RlsConfigKeys, RuleSetRoutesRlsKeysToTheRlsConfig) {
  auto c = parse(kMatchingConfig);
  const RlsMatch m = match(*c, "d", {{"parent", "p"}, {"child", "x"}});
  ASSERT_NE(m.limit, nullptr);
  const Limit glob = per_second(1, 1, 1);
  const Limit fallback = per_second(100, 100, 100);
  const RuleSet rs({{"*", glob, 0}}, fallback, c);
  const uint32_t i = rs.match(m.key);
  ASSERT_NE(i, RuleSet::kUnlimited);
  EXPECT_EQ(i, 2u + *c->limit_index(m.key));  // after the rule and the default
  EXPECT_EQ(rs.limit(i), m.limit->bucket);
  EXPECT_EQ(rs.limit(i), (Limit{Rate{6, 60 * kSec}, 6, 6}));
  // A digest in place of the values part: the same limit.
  EXPECT_EQ(rs.match(m.key.substr(0, m.path_bytes) + "#digest"), i);
  // How metrics name it: the domain and each level's key_value, as the reference server does.
  EXPECT_EQ(rs.label(i), "rls:d.parent_p.child");
  EXPECT_EQ(rs.label(0), "*");
  EXPECT_EQ(rs.label(1), "(default)");
  EXPECT_EQ(rs.size(), 2u + c->limit_count() + RlsConfig::kMaxOverrideLimits);
  // Every other limit too.
  const RlsMatch k = match(*c, "d", {{"k", "v"}});
  EXPECT_EQ(rs.limit(rs.match(k.key)), (Limit{Rate{10, kSec}, 10, 10}));
  // A 0x1E key the config does not claim goes by the ordinary rules: its first byte never lets
  // it through unlimited (a native client could otherwise dodge every limit with it).
  EXPECT_EQ(rs.match("\x1e"
                     "d\x1f"
                     "nope\x1d"
                     "1:x"),
            0u);
  EXPECT_EQ(rs.match("\x1e"), 0u);
  // Other keys keep the ordinary rules.
  EXPECT_EQ(rs.match("user:1"), 0u);
  EXPECT_EQ(rs.match(""), 0u);

  // Without an RLS config, 0x1E keys are ordinary keys.
  const RuleSet plain({{"*", glob, 0}}, fallback);
  EXPECT_EQ(plain.match(m.key), 0u);
  EXPECT_EQ(plain.match("\x1e"), 0u);
  EXPECT_EQ(plain.match("user:1"), 0u);
  const RuleSet only_default({}, fallback, nullptr);
  EXPECT_EQ(only_default.match(m.key), 0u);  // the default's index
  EXPECT_EQ(only_default.match("user:1"), 0u);
  const RuleSet nothing({}, std::nullopt, c);
  EXPECT_EQ(nothing.match("\x1e"
                          "d\x1f"
                          "nope\x1d"
                          "1:x"),
            RuleSet::kUnlimited);  // no rule, no default
}

// --- replaces ----------------------------------------------------------------------------------

constexpr char kOverrideConfig[] = R"(domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 10, name: configured}
)";

RlsMatch override_match(const RlsConfig& c, std::string_view domain, std::initializer_list<RlsEntry> entries,
                        RlsLimitOverride o) {
  return c.match_override(domain, std::vector<RlsEntry>(entries), o);
}

TEST(RlsConfigOverride, TheOverrideWinsWithABucketPerLimitAndDescriptor) {
  auto c = parse(kOverrideConfig);
  const RlsLimitOverride per_minute{5, RlsUnit::kMinute, 1};
  const RlsMatch a = override_match(*c, "d", {{"k", "a"}}, per_minute);
  ASSERT_NE(a.limit, nullptr);
  EXPECT_FALSE(a.override_ignored);
  EXPECT_EQ(a.limit->requests_per_unit, 5u);
  EXPECT_EQ(a.limit->unit, RlsUnit::kMinute);
  EXPECT_EQ(a.limit->name, "");  // the reference's: an override has no name and replaces nothing
  EXPECT_EQ(a.limit->bucket, (Limit{Rate{5, 60 * kSec}, 5, 5}));
  EXPECT_FALSE(a.shadow_mode);
  EXPECT_EQ(a.key, std::string("\x1e\x1c"
                               "5:2:1\x1f"
                               "d\x1d"
                               "1:k1:a"));
  EXPECT_EQ(a.path_bytes, a.key.find('\x1d') + 1);
  // Entries the config's tree does not have at all: the override still limits them.
  const RlsMatch b = override_match(*c, "d", {{"other", "x"}, {"deeper", ""}}, per_minute);
  ASSERT_NE(b.limit, nullptr);
  EXPECT_EQ(b.limit, a.limit);  // one limit object per distinct override
  EXPECT_EQ(b.key.substr(b.path_bytes), "5:other1:x6:deeper0:");
  // Another limit for the same descriptor is another bucket; the multiplier is part of it.
  const RlsMatch c10 = override_match(*c, "d", {{"k", "a"}}, {5, RlsUnit::kMinute, 10});
  EXPECT_NE(c10.key, a.key);
  EXPECT_EQ(c10.limit->bucket.rate, (Rate{5, 600 * kSec}));
  EXPECT_EQ(override_match(*c, "d", {{"k", "a"}}, {5, RlsUnit::kMinute, 0}).key, a.key);  // 0 reads as 1
  // Outside the config's domains there is no limit, as the reference answers.
  EXPECT_EQ(override_match(*c, "other", {{"k", "a"}}, per_minute).limit, nullptr);
  // requests_per_unit 0 blocks without a bucket, as a configured 0 does.
  const RlsMatch zero = override_match(*c, "d", {{"k", "a"}}, {0, RlsUnit::kSecond, 1});
  ASSERT_NE(zero.limit, nullptr);
  EXPECT_FALSE(zero.limit->limited());
  EXPECT_FALSE(zero.limit->unlimited);
  EXPECT_EQ(zero.key, "");
}

TEST(RlsConfigOverride, EveryNodeFindsTheOverridesLimitFromTheKeyAlone) {
  auto c = parse(kOverrideConfig);
  const RlsMatch m = override_match(*c, "d", {{"k", "a"}}, {7, RlsUnit::kHour, 2});
  // Another node, with the same config but that never saw the request, hears the key by gossip.
  auto other = parse(kOverrideConfig);
  RuleSet rules({}, std::nullopt, other);
  const uint32_t i = rules.match(m.key);
  ASSERT_NE(i, RuleSet::kUnlimited);
  EXPECT_EQ(rules.limit(i), (Limit{Rate{7, 7200 * kSec}, 7, 7}));
  EXPECT_EQ(rules.label(i), "rls:(override 7 per 2 hour)");
  EXPECT_LT(i, rules.size());
  EXPECT_EQ(rules.match(m.key.substr(0, m.path_bytes) + "#digest"), i);  // an over-long key's values digested
  // Keys that are not one: malformed numbers, an unknown domain, no unit, a zero multiplier.
  for (const std::string& bad : {std::string("\x1e\x1c"
                                             "7:3:2\x1f"
                                             "nope\x1d"),
                                 std::string("\x1e\x1c"
                                             "7:0:2\x1f"
                                             "d\x1d"),
                                 std::string("\x1e\x1c"
                                             "7:3:0\x1f"
                                             "d\x1d"),
                                 std::string("\x1e\x1c"
                                             "07:3:2\x1f"
                                             "d\x1d"),
                                 std::string("\x1e\x1c"
                                             "7:8:2\x1f"
                                             "d\x1d"),
                                 std::string("\x1e\x1c"
                                             "7:3:2"
                                             "d\x1d"),
                                 std::string("\x1e\x1c"
                                             "x:3:2\x1f"
                                             "d\x1d"),
                                 std::string("\x1e\x1c"
                                             "7:3:2\x1f"
                                             "d"),
                                 std::string("\x1e\x1c"
                                             "99999999999:3:2\x1f"
                                             "d\x1d")}) {
    EXPECT_FALSE(other->limit_index(bad).has_value()) << printable(bad);
  }
}

TEST(RlsConfigOverride, AnOverrideThatCannotBeHonouredFallsBackToTheConfigAndSaysSo) {
  auto c = parse(kOverrideConfig);
  // No unit: the config's limit, flagged (the front end counts it), never no limit.
  const RlsMatch no_unit = override_match(*c, "d", {{"k", "a"}}, {5, RlsUnit::kUnknown, 1});
  EXPECT_TRUE(no_unit.override_ignored);
  ASSERT_NE(no_unit.limit, nullptr);
  EXPECT_EQ(no_unit.limit->name, "configured");
  EXPECT_EQ(no_unit.key, match(*c, "d", {{"k", "a"}}).key);
  // A period beyond 100 years.
  EXPECT_TRUE(override_match(*c, "d", {{"k", "a"}}, {5, RlsUnit::kYear, 101}).override_ignored);
  // A domain so long that the key's path would leave no room for a digest of the values.
  const std::string long_domain(187, 'x');  // the config's path (1 + 187 + 2 bytes) fits, the override's does not
  auto long_config = parse("domain: " + long_domain +
                           "\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
  EXPECT_TRUE(override_match(*long_config, long_domain, {{"k", "a"}}, {5, RlsUnit::kSecond, 1}).override_ignored);
  EXPECT_FALSE(override_match(*long_config, long_domain, {{"k", "a"}}, {5, RlsUnit::kSecond, 1}).key.empty());
  // Every slot taken by another limit: the 65th distinct override falls back too.
  for (uint32_t n = 1; n <= RlsConfig::kMaxOverrideLimits; ++n) {
    ASSERT_FALSE(override_match(*c, "d", {{"k", "a"}}, {n, RlsUnit::kSecond, 1}).override_ignored) << n;
  }
  const RlsMatch full = override_match(*c, "d", {{"k", "a"}}, {1000, RlsUnit::kSecond, 1});
  EXPECT_TRUE(full.override_ignored);
  EXPECT_EQ(full.limit->name, "configured");
  EXPECT_FALSE(override_match(*c, "d", {{"k", "a"}}, {3, RlsUnit::kSecond, 1}).override_ignored);  // known: served
}

TEST(RlsConfigOverride, ThreadsTakingSlotsAtOnceAgreeOnEachLimit) {
  auto c = parse(kOverrideConfig);
  constexpr uint32_t kLimits = 40;
  std::vector<std::vector<const RlsLimit*>> seen(4, std::vector<const RlsLimit*>(kLimits));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t k = 0; k < kLimits; ++k) {
        const uint32_t n = (k * 7 + uint32_t(t) * 13) % kLimits + 1;  // each thread its own order
        seen[t][n - 1] = override_match(*c, "d", {{"k", "a"}}, {n, RlsUnit::kSecond, 1}).limit;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::set<const RlsLimit*> distinct;
  for (uint32_t n = 1; n <= kLimits; ++n) {
    for (size_t t = 1; t < seen.size(); ++t) EXPECT_EQ(seen[t][n - 1], seen[0][n - 1]) << n;
    ASSERT_NE(seen[0][n - 1], nullptr);
    EXPECT_EQ(seen[0][n - 1]->requests_per_unit, n);
    distinct.insert(seen[0][n - 1]);
  }
  EXPECT_EQ(distinct.size(), size_t(kLimits));
}

TEST(RlsConfigReplaces, MatchedLimitsReplaceOthersByNameWithinOneRequest) {
  auto c = parse(R"(domain: d
descriptors:
  - key: user
    rate_limit: {name: base, unit: second, requests_per_unit: 5}
  - key: base2
    rate_limit: {name: base, unit: second, requests_per_unit: 6}
  - key: vip
    rate_limit: {name: vip, replaces: [{name: base}], unit: second, requests_per_unit: 50}
  - key: anon
    rate_limit: {unit: second, requests_per_unit: 7}
  - key: free
    rate_limit: {unlimited: true, replaces: [{name: base}, {name: vip}]}
  - key: other
    rate_limit: {name: other, unit: minute, requests_per_unit: 1}
  - key: x
    rate_limit: {name: x, replaces: [{name: y}], unit: second, requests_per_unit: 1}
  - key: y
    rate_limit: {name: y, replaces: [{name: x}], unit: second, requests_per_unit: 1}
)");
  // Resolves the descriptors, applies replaces, returns each one's rpu (-1: cleared / none).
  auto run = [&](std::vector<std::vector<RlsEntry>> descriptors) {
    std::vector<RlsMatch> ms;
    for (const auto& e : descriptors) ms.push_back(c->match("d", e));
    RlsConfig::apply_replaces(ms);
    std::vector<int64_t> out;
    for (const RlsMatch& m : ms) {
      out.push_back(rpu(m));
      if (!m.limit) {
        EXPECT_EQ(m.key, "");
        EXPECT_EQ(m.path_bytes, 0u);
        EXPECT_FALSE(m.shadow_mode);
      }
    }
    return out;
  };
  using V = std::vector<int64_t>;
  EXPECT_EQ(run({{{"user", "a"}}}), (V{5}));
  EXPECT_EQ(run({{{"user", "a"}}, {{"vip", "b"}}}), (V{-1, 50}));
  EXPECT_EQ(run({{{"vip", "b"}}, {{"user", "a"}}}), (V{50, -1}));  // order does not matter
  // Every limit with the name goes, the nameless one and the others stay.
  EXPECT_EQ(run({{{"user", "a"}}, {{"base2", "a"}}, {{"anon", "a"}}, {{"other", "a"}}, {{"vip", "b"}}}),
            (V{-1, -1, 7, 1, 50}));
  EXPECT_EQ(run({{{"user", "a"}}, {{"user", "b"}}, {{"vip", "b"}}}), (V{-1, -1, 50}));
  // An unlimited limit's replaces count too.
  EXPECT_EQ(run({{{"free", "f"}}, {{"user", "a"}}, {{"vip", "b"}}, {{"anon", "c"}}}), (V{-2, -1, -1, 7}));
  // Mutual replacement clears both.
  EXPECT_EQ(run({{{"x", "1"}}, {{"y", "1"}}}), (V{-1, -1}));
  EXPECT_EQ(run({{{"x", "1"}}, {{"other", "1"}}}), (V{1, 1}));  // y absent: x stays
  // Unmatched descriptors in the request neither replace nor break anything.
  EXPECT_EQ(run({{{"nomatch", "1"}}, {{"user", "a"}}, {}}), (V{-1, 5, -1}));
}

// --- errors ------------------------------------------------------------------------------------

TEST(RlsConfigFile, ErrorsNameFileLineAndProblem) {
  struct Case {
    std::string text;
    std::string where;    // expected "file:line:" prefix
    std::string problem;  // expected substring
  };
  const std::string d = "domain: d\ndescriptors:\n";
  const std::string a = d + "  - key: a\n    rate_limit:\n";  // rate_limit fields go on line 5
  const Case cases[] =
      {
          // TestEmptyDomain / missing domain
          {"domain: \"\"\ndescriptors: []\n", "rls.yaml:1:1:", "`domain` must not be empty"},
          {"domain:\ndescriptors: []\n", "rls.yaml:1:", "`domain` must not be empty"},
          {"descriptors:\n  - key: a\n", "rls.yaml:1:", "no `domain`"},
          {"domain: [d]\n", "rls.yaml:1:9:", "`domain` must be a single value"},
          // TestEmptyKey / missing key
          {d + "  - key: \"\"\n", "rls.yaml:3:10:", "descriptor `key` must not be empty"},
          {d + "  - key: ''\n    value: v\n", "rls.yaml:3:10:", "descriptor `key` must not be empty"},
          {d + "  - value: v\n", "rls.yaml:3:5:", "descriptor has no `key`"},
          {d + "  - key: a\n    quota_mode: maybe\n", "rls.yaml:4:17:", "`quota_mode` must be true or false"},
          {d + "  - key: a\n    rate_limits: []\n", "rls.yaml:4:", "`rate_limits` must be a list of 1 to 8 limits"},
          {d + "  - key: a\n    rate_limits: {unit: second}\n", "rls.yaml:4:", "`rate_limits` must be a list"},
          {d + "  - key: a\n    rate_limits: [" +
               [] {
    std::string l;
    for (int i = 0; i < 9; ++i) l += std::string(i ? ", " : "") + "{unit: second, requests_per_unit: 1}";
    return l;
           }() +
           "]\n",
           "rls.yaml:4:", "`rate_limits` must be a list of 1 to 8 limits"},
          {d + "  - key: a\n    rate_limits: [{unlimited: true}, {unit: second, requests_per_unit: 1}]\n",
           "rls.yaml:4:", "`unlimited: true` cannot be one of several limits"},
          {d + "  - key: a\n    rate_limits: [{unit: second}]\n",
           "rls.yaml:4:", "`rate_limit` has no `requests_per_unit`"},
          {d + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: day, "
               "requests_per_unit: 1}]\n",
           "rls.yaml:5:", "a descriptor takes `rate_limit` or `rate_limits`, not both"},
          {d + "  - key: a\n    metadata: service_1\n", "rls.yaml:4:15:", "`metadata` must be a mapping"},
          {d + "  - key: a\n    metadata: {n: 1, n: 2}\n", "rls.yaml:4:", "`metadata` key \"n\" appears twice"},
          {d + "  - key: a\n    metadata: {[k]: 1}\n", "rls.yaml:4:", "`metadata` keys must be single values"},
          {d + "  - key: a\n    metadata: " + std::string(20, '[') + std::string(20, ']') + "\n",
           "rls.yaml:4:", "`metadata` must be a mapping"},
          {d + "  - key: a\n    metadata: {x: " + std::string(20, '[') + std::string(20, ']') + "}\n",
           "rls.yaml:4:", "`metadata` nests deeper than 16"},
          // TestDuplicateKey: the same key and value twice at one level
          {d + "  - key: a\n    value: b\n  - key: a\n    value: b\n",
           "rls.yaml:5:5:", "duplicate descriptor: key \"a\" value \"b\" is already defined at this level"},
          {d + "  - key: a\n  - key: a\n", "rls.yaml:4:5:", "duplicate descriptor: key \"a\" is already defined"},
          {d + "  - key: a\n  - key: a\n    value: \"\"\n", "rls.yaml:4:5:", "duplicate descriptor"},  // "" = none
          {d + "  - key: a\n    descriptors:\n      - key: b\n        value: x*\n      - key: b\n        value: x*\n",
           "rls.yaml:7:9:", "duplicate descriptor: key \"b\" value \"x*\""},
          // TestBadLimitUnit
          {a + "      unit: fortnight\n      requests_per_unit: 1\n",
           "rls.yaml:5:13:", "unknown unit \"fortnight\" (expected second, minute, hour, day, week, month or year)"},
          {a + "      unit: unknown\n      requests_per_unit: 1\n", "rls.yaml:5:13:", "unknown unit \"unknown\""},
          {a + "      unit: seconds\n      requests_per_unit: 1\n", "rls.yaml:5:13:", "unknown unit \"seconds\""},
          // TestMisspelledKey (x2), and keys in the wrong place
          {d + "  - key: a\n    ratelimit:\n      unit: second\n      requests_per_unit: 5\n",
           "rls.yaml:4:5:", "unknown field \"ratelimit\""},
          {a + "      unit: second\n      requests_per_unti: 5\n",
           "rls.yaml:6:7:", "unknown field \"requests_per_unti\""},
          {"domian: d\n", "rls.yaml:1:1:", "unknown field \"domian\""},
          {d + "  - key: a\n    unit: second\n", "rls.yaml:4:5:", "unknown field \"unit\""},
          {a + "      unit: second\n      requests_per_unit: 5\n      domain: d\n",
           "rls.yaml:7:7:", "unknown field \"domain\""},
          {a + "      unit: second\n      requests_per_unit: 5\n      replaces: [{name: b, nam: c}]\n",
           "rls.yaml:7:", "unknown field \"nam\""},
          // TestNonStringKey: map keys that are not field names, fields that are not single values
          {d + "  - key: a\n    0.25: b\n", "rls.yaml:4:5:", "unknown field \"0.25\""},
          {"? [a, b]\n: c\n", "rls.yaml:1:", "unknown field \"\""},
          {d + "  - key: [a, b]\n", "rls.yaml:3:10:", "`key` must be a single value"},
          {d + "  - key: {a: b}\n", "rls.yaml:3:10:", "`key` must be a single value"},
          {d + "  - key: a\n    value: [b]\n", "rls.yaml:4:12:", "`value` must be a single value"},
          {a + "      unit: second\n      requests_per_unit: 5\n      name: [n]\n",
           "rls.yaml:7:13:", "`name` must be a single value"},
          // TestNonMapList: descriptors not a list, items not mappings
          {d + "  key: a\n", "rls.yaml:3:3:", "`descriptors` must be a list"},
          {d + "  - key: a\n    descriptors: b\n", "rls.yaml:4:18:", "`descriptors` must be a list"},
          {d + "  - a\n  - b\n", "rls.yaml:3:5:", "a descriptor must be a mapping"},
          {d + "  - [key, a]\n", "rls.yaml:3:5:", "a descriptor must be a mapping"},
          {d + "  - key: a\n    rate_limit: 5\n", "rls.yaml:4:17:", "`rate_limit` must be a mapping"},
          {a + "      unit: second\n      requests_per_unit: 5\n      replaces: base\n",
           "rls.yaml:7:17:", "`replaces` must be a list"},
          {a + "      unit: second\n      requests_per_unit: 5\n      replaces: [base]\n",
           "rls.yaml:7:18:", "each `replaces` entry must be a mapping"},
          {"- domain: d\n", "rls.yaml:1:1:", "expected a mapping"},
          {"just text\n", "rls.yaml:1:1:", "expected a mapping"},
          // TestUnlimitedWithRateLimitUnit, whichever comes first
          {a + "      unlimited: true\n      unit: second\n",
           "rls.yaml:6:13:", "`unlimited: true` cannot have a `unit`"},
          {a + "      unit: second\n      unlimited: true\n",
           "rls.yaml:5:13:", "`unlimited: true` cannot have a `unit`"},
          // TestReplacesSelf / TestReplacesEmpty
          {a + "      name: self\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: self}]\n",
           "rls.yaml:3:5:", "limit \"self\" cannot replace itself"},
          {a + "      unit: second\n      requests_per_unit: 1\n      replaces: [{name: \"\"}]\n",
           "rls.yaml:7:", "`replaces` needs a non-empty `name`"},
          {a + "      unit: second\n      requests_per_unit: 1\n      replaces: [{name: }]\n",
           "rls.yaml:7:", "`replaces` needs a non-empty `name`"},
          {a + "      unit: second\n      requests_per_unit: 1\n      replaces: [{}]\n",
           "rls.yaml:7:", "`replaces` entry has no `name`"},
          // a limit without a unit or without requests_per_unit
          {d + "  - key: a\n    rate_limit: {requests_per_unit: 5}\n",
           "rls.yaml:4:17:", "`rate_limit` has no `unit` (e.g. unit: second)"},
          {a + "      requests_per_unit: 5\n", "rls.yaml:5:7:", "`rate_limit` has no `unit`"},
          {a + "      unlimited: false\n      requests_per_unit: 5\n", "rls.yaml:5:7:", "`rate_limit` has no `unit`"},
          {a + "      unit: second\n", "rls.yaml:5:7:", "`rate_limit` has no `requests_per_unit`"},
          // control characters in config text
          {d + "  - key: \"a\\tb\"\n", "rls.yaml:3:5:", "descriptor key and value must not contain control characters"},
          {d + "  - key: a\n    value: \"x\\u0001\"\n", "rls.yaml:3:5:", "must not contain control characters"},
          {d + "  - key: \"a\\x7f\"\n", "rls.yaml:3:5:", "must not contain control characters"},
          {"domain: \"d\\x1f\"\n", "rls.yaml:1:9:", "`domain` must not contain control characters"},
          // share_threshold needs a wildcard value
          {d + "  - key: a\n    value: b\n    share_threshold: true\n",
           "rls.yaml:3:5:", "`share_threshold` needs a wildcard `value` (one with a '*')"},
          {d + "  - key: a\n    share_threshold: true\n", "rls.yaml:3:5:", "`share_threshold` needs a wildcard"},
          // numbers out of range
          {a + "      unit: second\n      requests_per_unit: 5\n      burst: 0\n",
           "rls.yaml:7:14:", "`burst` must be between 1 and 1000000000000, got 0"},
          {a + "      unit: second\n      requests_per_unit: 5\n      burst: 1000000000001\n",
           "rls.yaml:7:", "`burst` must be between 1 and 1000000000000"},
          {a + "      unit: second\n      requests_per_unit: 5\n      max_debt: -1\n",
           "rls.yaml:7:", "`max_debt` must be between 0 and 1000000000000, got -1"},
          {a + "      unit: second\n      requests_per_unit: 4294967296\n",
           "rls.yaml:6:26:", "`requests_per_unit` must be between 0 and 4294967295, got 4294967296"},
          {a + "      unit: second\n      requests_per_unit: -1\n",
           "rls.yaml:6:", "`requests_per_unit` must be between 0 and 4294967295, got -1"},
          {a + "      unit: second\n      requests_per_unit: 1.5\n",
           "rls.yaml:6:", "`requests_per_unit` must be a whole number, got \"1.5\""},
          {a + "      unit: second\n      requests_per_unit: ten\n",
           "rls.yaml:6:", "must be a whole number, got \"ten\""},
          {a + "      unit: second\n      requests_per_unit: 1\n      unit_multiplier: 0\n",
           "rls.yaml:7:", "`unit_multiplier` must be between 1 and 4294967295, got 0"},
          {a + "      unit: year\n      requests_per_unit: 1\n      unit_multiplier: 101\n",
           "rls.yaml:3:5:", "exceeds 100 years"},
          {a + "      unit: second\n      requests_per_unit: 0\n      burst: 5\n",
           "rls.yaml:3:5:", "`burst`, `max_debt` and `charge_when_over` need a limit with requests_per_unit above 0"},
          {a + "      unlimited: true\n      max_debt: 5\n",
           "rls.yaml:3:5:", "`burst`, `max_debt` and `charge_when_over` need"},
          {a + "      unlimited: true\n      charge_when_over: true\n", "rls.yaml:3:5:", "`charge_when_over` need"},
          // booleans
          {d + "  - key: a\n    shadow_mode: maybe\n", "rls.yaml:4:18:", "`shadow_mode` must be true or false"},
          {a + "      unlimited: [true]\n", "rls.yaml:5:18:", "`unlimited` must be true or false"},
          // repeated fields
          {d + "  - key: a\n    key: b\n", "rls.yaml:4:5:", "field \"key\" appears twice"},
          {"domain: d\ndomain: e\n", "rls.yaml:2:1:", "field \"domain\" appears twice"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of(c.text);
    EXPECT_EQ(msg.rfind(c.where, 0), 0u) << "message: " << msg << "\nfor:\n" << c.text;
    EXPECT_NE(msg.find(c.problem), std::string::npos) << "message: " << msg << "\nfor:\n" << c.text;
  }
}

// A field with no value at all (`key:`) is reported at its name: yaml-cpp puts the empty value's
// mark at the next token (line 4, past the end of this 3-line file).
TEST(RlsConfigFile, NullKeyIsReportedOnItsOwnLine) {
  const std::string msg = error_of("domain: d\ndescriptors:\n  - key:\n");
  EXPECT_EQ(msg.rfind("rls.yaml:3:", 0), 0u) << msg;
  EXPECT_NE(msg.find("descriptor `key` must not be empty"), std::string::npos) << msg;
  const std::string next = error_of("domain: d\ndescriptors:\n  - key:\n    value: v\n");
  EXPECT_EQ(next.rfind("rls.yaml:3:", 0), 0u) << next;
}

TEST(RlsConfigFile, BadYamlIsASyntaxErrorAtItsLine) {
  // TestBadYaml
  const std::string unclosed = error_of("domain: d\ndescriptors:\n  - key: [a\n");
  EXPECT_EQ(unclosed.rfind("rls.yaml:4:", 0), 0u) << unclosed;
  const std::string flow = error_of("domain: d\ndescriptors:\n  - key: {a: b\n");
  EXPECT_EQ(flow.rfind("rls.yaml:4:", 0), 0u) << flow;
  const std::string value = error_of("domain: d: e\n");
  EXPECT_EQ(value.rfind("rls.yaml:1:", 0), 0u) << value;
  const std::string indent = error_of("domain: d\ndescriptors:\n  - key: a\n   value: b\n");
  EXPECT_EQ(indent.rfind("rls.yaml:4:", 0), 0u) << indent;
  const std::string empty = error_of("");
  EXPECT_EQ(empty, "rls.yaml: empty file: expected `domain:` and `descriptors:`");  // no line to point at
  const std::string comment = error_of("# nothing but a comment\n");
  EXPECT_EQ(comment.rfind("rls.yaml: empty file", 0), 0u) << comment;
  // A quoted value left open to the end of the file (found by the conformance suite: yaml-cpp
  // 0.7 loads it as "d " when the file ends with a line break), both quotes, and a quote whose
  // end is lines away.
  for (const char* text : {"domain: \"d\n", "domain: 'd\n", "domain: \"d\ndescriptors: []\n", "domain: \"d"}) {
    const std::string open = error_of(text);
    EXPECT_NE(open.find("illegal EOF in scalar"), std::string::npos) << text << " -> " << open;
  }
}

TEST(RlsConfigFile, MergedDomainsJoinTheirFilesAndErrorsNameTheFileTheyAreIn) {
  const RlsLoadOptions merge{.merge_domains = true};
  auto c = parse_rls_config(
      {{"one.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
       {"other.yaml", "domain: e\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 3}\n"},
       {"two.yaml", "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n"}},
      merge);
  EXPECT_EQ(c->domains().size(), 2u);
  EXPECT_EQ(rpu(match(*c, "d", {{"a", "x"}})), 1);
  EXPECT_EQ(rpu(match(*c, "d", {{"b", "x"}})), 2);
  EXPECT_EQ(rpu(match(*c, "e", {{"a", "x"}})), 3);
  EXPECT_EQ(rpu(match(*c, "e", {{"b", "x"}})), -1);
  // A key and value twice at one level is an error still, at the second file's line.
  auto error = [&](const std::vector<RlsConfigText>& files) {
    try {
      parse_rls_config(files, merge);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({{"one.yaml", "domain: d\ndescriptors:\n  - key: a\n"},
                   {"two.yaml", "domain: d\ndescriptors:\n  - key: b\n  - key: a\n"}}),
            "two.yaml:4:5: duplicate descriptor: key \"a\" is already defined at this level");
  // An error the compiled tree finds deep in the second file names the second file.
  EXPECT_EQ(error({{"one.yaml", "domain: d\ndescriptors:\n  - key: a\n"},
                   {"two.yaml",
                    "domain: d\ndescriptors:\n  - key: b\n    descriptors:\n      - key: c\n"
                    "      - key: c\n"}}),
            "two.yaml:6:9: duplicate descriptor: key \"c\" is already defined at this level");
}

TEST(RlsConfigFile, DuplicateDomainAcrossFilesNamesTheOtherFile) {
  // TestDuplicateDomain (without --rls-merge-domains, the reference's MERGE_DOMAIN_CONFIG)
  const std::string msg = error_of({
      {"one.yaml", "domain: d\ndescriptors:\n  - key: a\n"},
      {"other.yaml", "domain: e\n"},
      {"two.yaml", "descriptors:\n  - key: b\ndomain: d\n"},
  });
  EXPECT_EQ(msg, "two.yaml:3:9: domain \"d\" is already defined in one.yaml");
}

TEST(RlsConfigFile, DuplicatesAreOnlyThoseAtOneLevelOfOneParent) {
  // The same key and value under different parents, at different levels, or as exact and
  // wildcard, are all distinct nodes.
  auto c = parse(R"(domain: d
descriptors:
  - key: a
    value: b
    descriptors:
      - key: a
        value: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: c
    descriptors:
      - key: a
        value: b
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
    value: b*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: a
    rate_limit: {unit: second, requests_per_unit: 4}
)");
  EXPECT_EQ(rpu(match(*c, "d", {{"a", "b"}, {"a", "b"}})), 1);
  EXPECT_EQ(rpu(match(*c, "d", {{"a", "c"}, {"a", "b"}})), 2);
  EXPECT_EQ(rpu(match(*c, "d", {{"a", "bb"}})), 3);
  EXPECT_EQ(rpu(match(*c, "d", {{"a", "x"}})), 4);
  EXPECT_EQ(c->limit_count(), 4u);
}

TEST(RlsConfigFile, PathLongerThanABucketKeyAllowsIsRejected) {
  // "\x1e" "d" "\x1f" KEY "\x1d": 4 bytes plus the key may take kRlsMaxKeyPathBytes.
  const size_t longest = kRlsMaxKeyPathBytes - 4;
  auto rl = [](size_t n) {
    return "domain: d\ndescriptors:\n  - key: " + std::string(n, 'k') +
           "\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
  };
  auto c = parse(rl(longest));
  const RlsMatch m = c->match("d", std::vector<RlsEntry>{{std::string(longest, 'k'), "v"}});
  ASSERT_NE(m.limit, nullptr);
  EXPECT_EQ(m.path_bytes, kRlsMaxKeyPathBytes);
  EXPECT_EQ(m.key.size(), kRlsMaxKeyPathBytes + 3);  // "1:v"

  const std::string msg = error_of(rl(longest + 1));
  EXPECT_EQ(msg.rfind("rls.yaml:3:5:", 0), 0u) << msg;
  EXPECT_NE(msg.find("more than 192 bytes: too long for a bucket key"), std::string::npos) << msg;

  // Nested: the path adds up over the levels, even without a limit on the way.
  const std::string nested = "domain: d\ndescriptors:\n  - key: " + std::string(100, 'a') +
                             "\n    value: " + std::string(50, 'b') +
                             "\n    descriptors:\n      - key: " + std::string(40, 'c') + "\n";
  const std::string nmsg = error_of(nested);
  EXPECT_EQ(nmsg.rfind("rls.yaml:6:9:", 0), 0u) << nmsg;
  EXPECT_NE(nmsg.find("too long for a bucket key"), std::string::npos) << nmsg;
}

// --- files and directories ---------------------------------------------------------------------

class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("tollgate_rls_test_" + std::to_string(::getpid()) + "_" + name)) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream out(path_ / name, std::ios::binary | std::ios::trunc);
    out << text;
  }

 private:
  std::filesystem::path path_;
};

const char* const kOneYaml =
    "domain: one\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
const char* const kTwoYml =
    "domain: two\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";

TEST(RlsConfigLoad, ReadsEveryYamlAndYmlFileOfADirectoryInNameOrder) {
  TempDir dir("load");
  dir.write("b.yml", kTwoYml);
  dir.write("a.yaml", kOneYaml);
  dir.write("README.txt", "domain: [ not yaml at all\n");
  dir.write("c.yaml.bak", "domain: [ not yaml at all\n");
  std::filesystem::create_directory(dir.path() / "sub.yaml");  // a directory: skipped
  auto c = load_rls_config(dir.path().string());
  ASSERT_EQ(c->domains().size(), 2u);
  EXPECT_EQ(c->domains()[0].domain, "one");
  EXPECT_EQ(c->domains()[0].source, dir.file("a.yaml"));
  EXPECT_EQ(c->domains()[1].domain, "two");
  EXPECT_EQ(c->domains()[1].source, dir.file("b.yml"));
  EXPECT_EQ(rpu(match(*c, "one", {{"k", "v"}})), 1);
  EXPECT_EQ(rpu(match(*c, "two", {{"k", "v"}})), 2);

  // One file on its own.
  auto one = load_rls_config(dir.file("a.yaml"));
  ASSERT_EQ(one->domains().size(), 1u);
  EXPECT_EQ(one->domains()[0].source, dir.file("a.yaml"));
  EXPECT_FALSE(one->has_domain("two"));
}

TEST(RlsConfigLoad, ErrorsInADirectoryNameTheFile) {
  TempDir dir("errors");
  dir.write("a.yaml", kOneYaml);
  dir.write("b.yaml", "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
  try {
    load_rls_config(dir.path().string());
    ADD_FAILURE() << "bad unit loaded";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), dir.file("b.yaml"));
    EXPECT_EQ(e.line(), 4);
    EXPECT_EQ(std::string(e.what()).rfind(dir.file("b.yaml") + ":4:", 0), 0u) << e.what();
  }
  dir.write("b.yaml", kOneYaml);  // the same domain again
  try {
    load_rls_config(dir.path().string());
    ADD_FAILURE() << "duplicate domain loaded";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.file("b.yaml") + ":1:9: domain \"one\" is already defined in " + dir.file("a.yaml"));
  }
}

TEST(RlsConfigLoad, AnEmptyDirectoryOrAMissingFileIsAnError) {
  TempDir dir("empty");
  for (bool with_other_files : {false, true}) {
    if (with_other_files) dir.write("README.txt", "nothing here\n");
    try {
      load_rls_config(dir.path().string());
      ADD_FAILURE() << "empty directory loaded";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), dir.path().string() + ": the RLS config directory has no *.yaml or *.yml file");
    }
  }
  const std::string missing = dir.file("missing.yaml");
  try {
    load_rls_config(missing);
    ADD_FAILURE() << "missing file loaded";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), missing);
    EXPECT_NE(std::string(e.what()).find("cannot read RLS config file"), std::string::npos) << e.what();
  }
}

TEST(RlsConfigLoad, FingerprintChangesWhenAConfigFileIsAddedChangedOrRemoved) {
  TempDir dir("fingerprint");
  dir.write("a.yaml", kOneYaml);
  const std::string fp0 = rls_config_fingerprint(dir.path().string());
  EXPECT_FALSE(fp0.empty());
  EXPECT_EQ(rls_config_fingerprint(dir.path().string()), fp0);  // stable while nothing changes

  dir.write("README.txt", "not a config file\n");  // not read, so no change
  EXPECT_EQ(rls_config_fingerprint(dir.path().string()), fp0);

  dir.write("b.yml", kTwoYml);  // added
  const std::string fp1 = rls_config_fingerprint(dir.path().string());
  EXPECT_NE(fp1, fp0);

  dir.write("a.yaml", std::string(kOneYaml) + "# a longer file\n");  // changed (size too)
  const std::string fp2 = rls_config_fingerprint(dir.path().string());
  EXPECT_NE(fp2, fp1);
  EXPECT_NE(fp2, fp0);

  std::filesystem::remove(dir.path() / "b.yml");  // removed
  const std::string fp3 = rls_config_fingerprint(dir.path().string());
  EXPECT_NE(fp3, fp2);
  EXPECT_NE(fp3, fp1);

  // A single file's fingerprint follows that file.
  const std::string f0 = rls_config_fingerprint(dir.file("a.yaml"));
  dir.write("a.yaml", kOneYaml);
  EXPECT_NE(rls_config_fingerprint(dir.file("a.yaml")), f0);
  // A missing path does not throw, and differs from an existing file's.
  std::string missing;
  EXPECT_NO_THROW(missing = rls_config_fingerprint(dir.file("missing.yaml")));
  EXPECT_NE(missing, rls_config_fingerprint(dir.file("a.yaml")));
}

TEST(RlsConfigLoad, ShippedExampleConfigParses) {
  auto c = load_rls_config(TOLLGATE_SOURCE_DIR "/config/rls/example.yaml");
  EXPECT_FALSE(c->domains().empty());
}

}  // namespace
}  // namespace tollgate

namespace tollgate {
namespace {

// The shipped example (config/rls/, docs/operations.md section 10.2) loads and means what its
// comments say.
TEST(RlsConfigFile, TheShippedExampleLoadsAndMatchesAsCommented) {
  const auto config = load_rls_config(std::string(TOLLGATE_SOURCE_DIR) + "/config/rls");
  ASSERT_TRUE(config->has_domain("edge"));
  auto match = [&](std::vector<RlsEntry> entries) { return config->match("edge", entries); };
  const RlsMatch ip = match({{"remote_address", "10.0.0.1"}});
  ASSERT_NE(ip.limit, nullptr);
  EXPECT_EQ(ip.limit->requests_per_unit, 10u);
  EXPECT_NE(ip.key, match({{"remote_address", "10.0.0.2"}}).key);  // each IP its own bucket
  EXPECT_EQ(match({{"remote_address", "50.0.0.5"}}).limit->requests_per_unit, 0u);
  const RlsMatch a = match({{"api_key", "k1"}, {"path", "/upload/a"}});
  ASSERT_NE(a.limit, nullptr);
  EXPECT_EQ(a.limit->name, "uploads");
  EXPECT_EQ(a.key, match({{"api_key", "k1"}, {"path", "/upload/b"}}).key);  // shared by the paths
  EXPECT_NE(a.key, match({{"api_key", "k2"}, {"path", "/upload/a"}}).key);  // not by the keys
  EXPECT_TRUE(match({{"internal", "x"}}).limit->unlimited);
  const RlsMatch tenant = match({{"tenant", "t"}});
  EXPECT_TRUE(tenant.shadow_mode);
  EXPECT_EQ(tenant.limit->bucket.burst, 5000);
}

}  // namespace
}  // namespace tollgate

namespace tollgate {
namespace {

// YAML aliases can make the descriptor tree cyclic or exponential: an error at a line, never a
// stack overflow or a hang (both were possible before the loader bounded its walk).
TEST(RlsConfigFile, CyclicAndExponentialAliasesAreErrors) {
  const std::string cyclic = error_of("domain: d\ndescriptors:\n  - &a {key: k, descriptors: [*a]}\n");
  EXPECT_EQ(cyclic.rfind("rls.yaml:3:", 0), 0u) << cyclic;
  EXPECT_NE(cyclic.find("nest deeper than 64 levels"), std::string::npos) << cyclic;

  std::string chain = "domain: d\nx0: &l0 [{key: k}]\n";
  for (int i = 1; i <= 40; ++i) {
    chain += "x" + std::to_string(i) + ": &l" + std::to_string(i) + " [{key: a, descriptors: *l" +
             std::to_string(i - 1) + "}, {key: b, descriptors: *l" + std::to_string(i - 1) + "}]\n";
  }
  chain += "descriptors: *l40\n";
  // The x keys are unknown fields: the loader stops at the first. With them as descriptors of a
  // known level instead, the walk would visit 2^40 nodes; bounded, it stops at 100,000.
  EXPECT_NE(error_of(chain).find("unknown field \"x0\""), std::string::npos);
  std::string nested = "domain: d\ndescriptors:\n  - key: root\n    descriptors: &l0 [{key: k}]\n";
  for (int i = 1; i <= 40; ++i) {
    nested += "  - key: r" + std::to_string(i) + "\n    descriptors: &l" + std::to_string(i) +
              " [{key: a, descriptors: *l" + std::to_string(i - 1) + "}, {key: b, descriptors: *l" +
              std::to_string(i - 1) + "}]\n";
  }
  const std::string exponential = error_of(nested);
  EXPECT_NE(exponential.find("more than 100000 descriptors in one file"), std::string::npos) << exponential;
}

}  // namespace
}  // namespace tollgate

// Issue 41: a bucket key reads as its descriptor where people see it (top-K, the page): the
// request's values where the key holds them, a configured value or a shared wildcard's pattern
// where it does not, an override's limit, "…" for values a digest replaced; "" for any key this
// config did not make.
namespace tollgate {
namespace {

TEST(RlsConfigDescribe, ABucketKeyReadsAsTheDescriptorItStandsFor) {
  auto c = parse(R"(domain: web
descriptors:
  - key: path
    value: /login
    descriptors:
      - key: user
        rate_limits:
          - {unit: second, requests_per_unit: 10}
          - {unit: day, requests_per_unit: 1000}
  - key: ip
    value: "10.*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    value: "t*"
    rate_limit: {unit: hour, requests_per_unit: 10}
)");
  const RlsMatch user = match(*c, "web", {{"path", "/login"}, {"user", "alice"}});
  ASSERT_FALSE(user.key.empty());
  EXPECT_EQ(c->describe_key(user.key), "web: path=/login, user=alice");
  ASSERT_EQ(user.more.size(), 1u);
  EXPECT_EQ(c->describe_key(user.more[0].key), "web: path=/login, user=alice")
      << "another limit of the same descriptor";
  EXPECT_EQ(c->describe_key(match(*c, "web", {{"ip", "10.1.2.3"}}).key), "web: ip=10.*") << "shared: one bucket";
  EXPECT_EQ(c->describe_key(match(*c, "web", {{"tenant", "t42"}}).key), "web: tenant=t42");
  EXPECT_EQ(c->describe_key(user.key.substr(0, user.path_bytes) + "#digest"), "web: path=/login, user=…");

  const RlsMatch over = c->match_override("web", std::vector<RlsEntry>{{"path", "/x"}, {"user", "bob"}},
                                          RlsLimitOverride{5, RlsUnit::kMinute, 2});
  ASSERT_FALSE(over.key.empty());
  EXPECT_EQ(c->describe_key(over.key), "web (override 5 per 2 minutes): path=/x, user=bob");

  for (const std::string& other : {std::string("user:42"), std::string(""), std::string("\x1e"),
                                   std::string("\x1eweb\x1fnope\x1d"), std::string("\x1eother\x1fpath\x1d"),
                                   std::string("\x1e\x1c"
                                               "5:2:1\x1fweb"),
                                   user.key.substr(0, 8)}) {
    EXPECT_EQ(c->describe_key(other), "") << other;
  }
}

// The merged top names an Envoy bucket by its descriptor beside its key, other keys by the key.
TEST(RlsConfigDescribe, TopKeysOfEnvoyBucketsCarryTheirDescriptor) {
  auto c = parse(R"(domain: web
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
)");
  const std::string key = match(*c, "web", {{"user", "alice"}}).key;
  TopParts part;
  part.rule = "rls:web.user";
  part.members = 1;
  part.own[0].push_back(PublishedTop{{{key, 9, 0}, {"plain", 3, 0}}, 0, 12});
  part.rls = c;
  const RuleTop top = merge_top_rule(part, 10);
  ASSERT_EQ(top.denied.keys.size(), 2u);
  EXPECT_EQ(top.denied.keys[0].key, key);
  EXPECT_EQ(top.denied.keys[0].descriptor, "web: user=alice");
  EXPECT_EQ(top.denied.keys[1].descriptor, "");
}

}  // namespace
}  // namespace tollgate
