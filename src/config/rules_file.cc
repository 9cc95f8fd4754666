#include "tollgate/rules_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <unordered_map>

#include "config/strict_yaml.h"
#include "read_file.h"
#include "tollgate/duration.h"

namespace tollgate {
namespace {

constexpr int64_t kLeaseTtlMin = 1'000'000;  // 1 ms

class RulesParser {
 public:
  explicit RulesParser(const std::string& source) : source_(source) {}

  std::shared_ptr<const RuleSet> parse(std::string_view text) {
    const YAML::Node root = yaml::load(text, source_);
    // Nothing but blanks and comments: a file being rewritten, truncated, or the wrong path. Taken
    // as rules it would lift every limit; `rules: []` is how a file says "no rules".
    if (root.IsNull()) {
      throw ConfigError(source_, 0, 0,
                        "holds no rules (empty, or comments only): refused; write `rules: []` to mean none");
    }
    if (!root.IsMap()) fail(root, "expected a mapping with `rules:` and optionally `default:`");

    std::vector<Rule> rules;
    std::vector<ConcurrencyRule> concurrency;
    std::optional<Limit> default_limit;
    static constexpr std::string_view kTopFields[] = {"rules", "default"};
    for_each_field(root, kTopFields, [&](const std::string& name, const YAML::Node& value) {
      if (name == "rules") {
        parse_rule_list(value, &rules, &concurrency);
      } else {
        default_limit = parse_limit(value, /*with_match=*/false, nullptr).limit;
      }
    });
    if (!root["rules"] && !root["default"])
      fail(root, "has neither `rules:` nor `default:` (write `rules: []` to mean none)");
    return std::make_shared<RuleSet>(std::move(rules), std::move(default_limit), nullptr, std::move(concurrency));
  }

 private:
  [[noreturn]] void fail(const YAML::Node& at, const std::string& problem) const { yaml::fail(source_, at, problem); }

  template <typename Fn>
  void for_each_field(const YAML::Node& map, std::span<const std::string_view> allowed, Fn&& fn) const {
    yaml::for_each_field(source_, map, allowed, std::forward<Fn>(fn));
  }

  // A rule with `rate` goes to `rules`, one with `concurrency` to `concurrency`; one with both
  // to both (the same line).
  void parse_rule_list(const YAML::Node& list, std::vector<Rule>* rules,
                       std::vector<ConcurrencyRule>* concurrency) const {
    // `rules:` with nothing after it is what a file cut short after its first line looks like.
    if (list.IsNull()) fail(list, "`rules:` has no list; write `rules: []` to mean none");
    if (!list.IsSequence()) fail(list, "`rules` must be a list of rules (each starting with \"- match:\")");
    std::unordered_map<std::string, int> first_line;
    for (const YAML::Node& item : list) {
      std::optional<ConcurrencyRule> c;
      Rule rule = parse_limit(item, /*with_match=*/true, &first_line, &c);
      if (c) concurrency->push_back(*c);
      if (rule.limit.burst > 0) rules->push_back(std::move(rule));
    }
  }

  // Parses one rule (with_match) or the default limit. `first_line` detects duplicate patterns.
  // A rule's `concurrency` and `lease_ttl`, when it has them, go to `*concurrency`; a rule with
  // only those comes back with burst 0 (no rate).
  Rule parse_limit(const YAML::Node& node, bool with_match, std::unordered_map<std::string, int>* first_line,
                   std::optional<ConcurrencyRule>* concurrency = nullptr) const {
    if (!node.IsMap())
      fail(node, with_match ? "a rule must be a mapping with match, rate and burst"
                            : "`default` must be a mapping with rate and burst");
    Rule rule;
    rule.line = node.Mark().line + 1;
    bool has_match = false, has_rate = false, has_burst = false, has_debt = false, has_ttl = false;
    ConcurrencyRule lease;
    lease.line = rule.line;
    std::optional<YAML::Node> ttl_node;  // a handle of its own: the loop's `value` is gone after it
    // Arrays with static storage: an initializer_list chosen by ?: would dangle.
    static constexpr std::string_view kRuleFields[] = {
        "match", "rate", "burst", "max_debt", "charge_when_over", "shadow", "concurrency", "lease_ttl"};
    static constexpr std::string_view kDefaultFields[] = {"rate", "burst", "max_debt", "charge_when_over", "shadow"};
    const std::span<const std::string_view> fields =
        with_match ? std::span<const std::string_view>(kRuleFields) : std::span<const std::string_view>(kDefaultFields);
    for_each_field(node, fields, [&](const std::string& name, const YAML::Node& value) {
      if (name == "match") {
        has_match = true;
        rule.match = scalar(value, "match");
        if (rule.match.empty()) fail(value, "match must not be empty");
        if (rule.match.size() > 256) fail(value, "match is longer than the 256-byte key limit");
        auto [it, fresh] = first_line->emplace(rule.match, value.Mark().line + 1);
        if (!fresh) {
          fail(value, "match \"" + rule.match + "\" already has a rule at line " + std::to_string(it->second));
        }
      } else if (name == "rate") {
        has_rate = true;
        std::string why;
        auto rate = parse_rate(scalar(value, "rate"), &why);
        if (!rate) fail(value, why);
        rule.limit.rate = *rate;
      } else if (name == "burst") {
        has_burst = true;
        rule.limit.burst = integer(value, "burst", 1);
      } else if (name == "max_debt") {
        has_debt = true;
        rule.limit.max_debt = integer(value, "max_debt", 0);
      } else if (name == "concurrency") {
        lease.limit = integer(value, "concurrency", 1);
      } else if (name == "lease_ttl") {
        has_ttl = true;
        ttl_node.emplace(value);
        std::string why;
        const auto ttl = parse_duration_ns(scalar(value, "lease_ttl"), &why);
        if (!ttl) fail(value, "lease_ttl: " + why);
        if (*ttl < kLeaseTtlMin) fail(value, "lease_ttl must be at least 1ms");
        lease.ttl_ns = *ttl;
      } else {
        bool b = false;
        if (!value.IsScalar() || !YAML::convert<bool>::decode(value, b)) fail(value, name + " must be true or false");
        (name == "shadow" ? rule.limit.shadow : rule.limit.charge_when_over) = b;
      }
    });
    if (rule.limit.shadow && rule.limit.charge_when_over) {
      fail(node, "shadow and charge_when_over exclude each other: a shadow limit charges nothing it would deny");
    }
    if (with_match && !has_match) fail(node, "rule has no `match`");
    const bool has_concurrency = lease.limit > 0;
    if (has_ttl && !has_concurrency) fail(*ttl_node, "lease_ttl without `concurrency` (e.g. concurrency: 10)");
    if (has_concurrency) {
      lease.match = rule.match;
      *concurrency = lease;
      // A concurrency-only rule: nothing of the rate may be given.
      if (!has_rate && !has_burst && !has_debt && !rule.limit.shadow && !rule.limit.charge_when_over) {
        rule.limit = Limit{};
        return rule;
      }
    }
    const char* what = with_match ? "rule" : "default";
    if (!has_rate) {
      fail(node, std::string(what) + " has no `rate` (e.g. rate: 100/s)" +
                     (with_match && !has_concurrency ? " nor `concurrency` (e.g. concurrency: 10)" : ""));
    }
    if (!has_burst) fail(node, std::string(what) + " has no `burst`");
    if (!has_debt) rule.limit.max_debt = rule.limit.burst;
    return rule;
  }

  std::string scalar(const YAML::Node& value, const char* field) const {
    if (!value.IsScalar()) fail(value, std::string(field) + " must be a single value");
    return value.Scalar();
  }

  int64_t integer(const YAML::Node& value, const char* field, int64_t min) const {
    const std::string text = scalar(value, field);
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      fail(value, std::string(field) + " must be a whole number, got \"" + text + "\"");
    }
    if (n < min || n > kMaxTokens) {
      fail(value, std::string(field) + " must be between " + std::to_string(min) + " and " +
                      std::to_string(kMaxTokens) + ", got " + text);
    }
    return n;
  }

  const std::string& source_;
};

}  // namespace

std::shared_ptr<const RuleSet> parse_rules(std::string_view text, const std::string& source) {
  return RulesParser(source).parse(text);
}

std::shared_ptr<const RuleSet> load_rules_file(const std::string& path) {
  return parse_rules(read_config_file(path, "rules file"), path);
}

}  // namespace tollgate
