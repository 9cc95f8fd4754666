// Which limit governs a key: exact rules, glob rules and an optional default.
//
// Precedence, most specific first:
//   1. a rule whose `match` has no '*' and equals the key;
//   2. the glob rule with the longest literal prefix (the text before its first '*');
//      ties go to the glob with more literal characters overall, then to the earlier rule;
//   3. the default limit, if there is one;
//   4. otherwise the key is not limited.
// A key of an Envoy rate limit service bucket (first byte 0x1E, see tollgate/rls_config.h) that
// the RLS config given to the RuleSet claims is governed by that config's limit; every other key,
// 0x1E-prefixed or not, by the rules above.
// '*' matches any run of characters (including none); every other character matches itself.
// Concurrency rules (ConcurrencyRule: at most N leases of a key in flight across the cluster)
// are matched the same way, among themselves: a key may have a rate rule, a concurrency rule,
// both or neither, and an exact concurrency rule does not hide a glob's rate (or the reverse).
// Immutable once built, so one RuleSet can be shared by threads and swapped on reload.
#ifndef TOLLGATE_RULES_H_
#define TOLLGATE_RULES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tollgate/limit.h"

namespace tollgate {
class RlsConfig;
}

namespace tollgate {

struct Rule {
  std::string match;  // exact key, or glob with '*'
  Limit limit;
  int line = 0;  // 1-based line in the rules file it came from, 0 if built in code
};

// A concurrency limit (issue 40; docs/design.md 6.7): at most `limit` leases of a key held at
// once across the cluster, each expiring `ttl_ns` after it was taken or last renewed unless the
// request asks for another (never above the daemon's --lease-max-ttl).
struct ConcurrencyRule {
  std::string match;  // exact key, or glob with '*'
  int64_t limit = 0;  // >= 1
  int64_t ttl_ns = 60'000'000'000;
  int line = 0;
};

// True if `key` matches `pattern`, where '*' matches any run of characters.
bool glob_match(std::string_view pattern, std::string_view key);

class RuleSet {
 public:
  // Index returned by match() for keys that no rule (and no default) governs.
  static constexpr uint32_t kUnlimited = UINT32_MAX;

  RuleSet() = default;
  // Rules must have valid limits (validate_limit) and distinct `match` strings; the loader
  // checks both and reports file and line. Here a violation throws std::invalid_argument.
  RuleSet(std::vector<Rule> rules, std::optional<Limit> default_limit);
  // The same, plus the limits of an Envoy RLS config (null: none) for its bucket keys.
  RuleSet(std::vector<Rule> rules, std::optional<Limit> default_limit, std::shared_ptr<const RlsConfig> rls);
  // The same, plus concurrency rules (distinct `match` strings among themselves, limit >= 1,
  // ttl_ns >= 1 ms).
  RuleSet(std::vector<Rule> rules, std::optional<Limit> default_limit, std::shared_ptr<const RlsConfig> rls,
          std::vector<ConcurrencyRule> concurrency);

  // Index of the rule that governs `key` (see precedence above), or kUnlimited. The default
  // limit, when present, has index rules().size().
  uint32_t match(std::string_view key) const;
  // The limit for an index returned by match() (not kUnlimited).
  const Limit& limit(uint32_t index) const {
    if (index < rules_.size()) return rules_[index].limit;
    return index == rules_.size() ? *default_ : rls_limit(index - uint32_t(rules_.size()) - 1);
  }

  // How metrics name the rule at an index from match(): a rule's `match`, "(default)" for the
  // default limit, and for an RLS limit "rls:" and RlsConfig::label.
  std::string label(uint32_t index) const;
  // Indices match() can return: rules, the default slot, then the RLS limits.
  uint32_t size() const;

  // Index into concurrency_rules() of the concurrency rule that governs `key` (the same
  // precedence, no default), or kUnlimited. An RLS bucket key with a descriptor's `concurrency`
  // gets that one (RlsConfig::concurrency_index).
  uint32_t concurrency_match(std::string_view key) const;
  // The concurrency rules given, then one per RLS descriptor with a `concurrency` (its `match`
  // is "rls:" and RlsConfig::concurrency_label, as label() names RLS limits).
  const std::vector<ConcurrencyRule>& concurrency_rules() const { return concurrency_; }
  // The concurrency rules given to the constructor (without the RLS config's).
  std::vector<ConcurrencyRule> own_concurrency_rules() const {
    return {concurrency_.begin(), concurrency_.begin() + long(own_concurrency_)};
  }

  const std::vector<Rule>& rules() const { return rules_; }
  const std::optional<Limit>& default_limit() const { return default_; }
  const std::shared_ptr<const RlsConfig>& rls() const { return rls_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  const Limit& rls_limit(uint32_t index) const;

  // Exact patterns in a map, globs in precedence order (the top of this file), for either list.
  class Patterns {
   public:
    // Adds pattern i; false if it is already there.
    bool add(const std::string& pattern, uint32_t i);
    // Sorts the globs once all are added.
    void finish();
    uint32_t find(std::string_view key) const;

   private:
    std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> exact_;
    std::vector<std::pair<std::string, uint32_t>> globs_;
  };

  std::vector<Rule> rules_;
  std::optional<Limit> default_;
  std::shared_ptr<const RlsConfig> rls_;
  Patterns patterns_;
  std::vector<ConcurrencyRule> concurrency_;
  size_t own_concurrency_ = 0;  // concurrency_'s first entries: the given ones; then the RLS config's
  Patterns concurrency_patterns_;
};

}  // namespace tollgate

#endif  // TOLLGATE_RULES_H_
