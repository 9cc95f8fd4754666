#include "tollgate/rules.h"

#include "tollgate/types.h"

#include <string.h>

#include <algorithm>
#include <stdexcept>

#include "core/clock.h"
#include "tollgate/rls_config.h"

namespace tollgate {

bool glob_match(std::string_view pattern, std::string_view key) {
  // The text before the first '*' must start the key and the text after the last one end it;
  // each run between two stars is then found leftmost, in order, in what is left between them
  // (leftmost is never worse for the runs after it). With memmem (two-way search, linear) the
  // whole match is linear in the key whatever the pattern: a crafted key cannot make it slow.
  const size_t first = pattern.find('*');
  if (first == std::string_view::npos) return pattern == key;
  const size_t last = pattern.rfind('*');
  const std::string_view head = pattern.substr(0, first), tail = pattern.substr(last + 1);
  if (key.size() < head.size() + tail.size() || !key.starts_with(head) || !key.ends_with(tail)) return false;
  std::string_view rest = key.substr(head.size(), key.size() - head.size() - tail.size());
  size_t p = first + 1;
  while (p < last) {
    const size_t star = pattern.find('*', p);
    const std::string_view run = pattern.substr(p, star - p);
    p = star + 1;
    if (run.empty()) continue;
    const void* at = ::memmem(rest.data(), rest.size(), run.data(), run.size());
    if (!at) return false;
    rest.remove_prefix(size_t(static_cast<const char*>(at) - rest.data()) + run.size());
  }
  return true;
}

RuleSet::RuleSet(std::vector<Rule> rules, std::optional<Limit> default_limit)
    : RuleSet(std::move(rules), std::move(default_limit), nullptr) {}

RuleSet::RuleSet(std::vector<Rule> rules, std::optional<Limit> default_limit, std::shared_ptr<const RlsConfig> rls)
    : RuleSet(std::move(rules), std::move(default_limit), std::move(rls), {}) {}

RuleSet::RuleSet(std::vector<Rule> rules, std::optional<Limit> default_limit, std::shared_ptr<const RlsConfig> rls,
                 std::vector<ConcurrencyRule> concurrency)
    : rules_(std::move(rules)),
      default_(std::move(default_limit)),
      rls_(std::move(rls)),
      concurrency_(std::move(concurrency)) {
  if (default_ && !validate_limit(*default_).empty()) {
    throw std::invalid_argument("default limit: " + validate_limit(*default_));
  }
  for (uint32_t i = 0; i < rules_.size(); ++i) {
    const Rule& r = rules_[i];
    if (const std::string why = validate_limit(r.limit); !why.empty()) {
      throw std::invalid_argument("rule \"" + r.match + "\": " + why);
    }
    if (!patterns_.add(r.match, i)) throw std::invalid_argument("rule \"" + r.match + "\" appears twice");
  }
  patterns_.finish();
  for (uint32_t i = 0; i < concurrency_.size(); ++i) {
    const ConcurrencyRule& r = concurrency_[i];
    if (r.limit < 1 || r.limit > kMaxTokens) {
      throw std::invalid_argument("concurrency rule \"" + r.match + "\": concurrency must be >= 1");
    }
    if (r.ttl_ns < kNanosPerMilli) {
      throw std::invalid_argument("concurrency rule \"" + r.match + "\": lease_ttl must be at least 1ms");
    }
    if (!concurrency_patterns_.add(r.match, i)) {
      throw std::invalid_argument("concurrency rule \"" + r.match + "\" appears twice");
    }
  }
  concurrency_patterns_.finish();
  own_concurrency_ = concurrency_.size();
  if (rls_) {
    for (uint32_t i = 0; i < rls_->concurrency_count(); ++i) {
      const RlsConcurrency& c = rls_->concurrency(i);
      concurrency_.push_back(ConcurrencyRule{"rls:" + rls_->concurrency_label(i), c.limit, c.ttl_ns, 0});
    }
  }
}

bool RuleSet::Patterns::add(const std::string& pattern, uint32_t i) {
  if (pattern.find('*') == std::string::npos) return exact_.emplace(pattern, i).second;
  for (const auto& [glob, _] : globs_) {
    if (glob == pattern) return false;
  }
  globs_.emplace_back(pattern, i);
  return true;
}

void RuleSet::Patterns::finish() {
  auto prefix_len = [](const std::string& m) { return m.find('*'); };
  auto literal_len = [](const std::string& m) { return m.size() - size_t(std::count(m.begin(), m.end(), '*')); };
  std::stable_sort(globs_.begin(), globs_.end(), [&](const auto& x, const auto& y) {
    if (prefix_len(x.first) != prefix_len(y.first)) return prefix_len(x.first) > prefix_len(y.first);
    return literal_len(x.first) > literal_len(y.first);
  });
}

uint32_t RuleSet::Patterns::find(std::string_view key) const {
  if (auto it = exact_.find(key); it != exact_.end()) return it->second;
  for (const auto& [pattern, i] : globs_) {
    const size_t prefix = pattern.find('*');
    // Cheap reject on the literal prefix before the general matcher.
    if (key.substr(0, prefix) != std::string_view(pattern).substr(0, prefix)) continue;
    if (glob_match(pattern, key)) return i;
  }
  return kUnlimited;
}

const Limit& RuleSet::rls_limit(uint32_t index) const { return rls_->limit(index).bucket; }

std::string RuleSet::label(uint32_t index) const {
  if (index < rules_.size()) return rules_[index].match;
  if (index == rules_.size()) return "(default)";
  return "rls:" + rls_->label(index - uint32_t(rules_.size()) - 1);
}

uint32_t RuleSet::size() const { return uint32_t(rules_.size() + 1 + (rls_ ? rls_->limit_slots() : 0)); }

static_assert(kRlsKeyPrefix == kReservedKeyByte, "the doors refuse exactly the keys RLS buckets are named by");

uint32_t RuleSet::match(std::string_view key) const {
  if (rls_ && !key.empty() && key[0] == kRlsKeyPrefix) {
    if (const std::optional<uint32_t> i = rls_->limit_index(key)) return uint32_t(rules_.size()) + 1 + *i;
  }
  // Any other key, 0x1E-prefixed or not, goes by the rules: a key no RLS limit claims is never
  // let through unlimited for its first byte.
  if (const uint32_t i = patterns_.find(key); i != kUnlimited) return i;
  return default_ ? uint32_t(rules_.size()) : kUnlimited;
}

uint32_t RuleSet::concurrency_match(std::string_view key) const {
  if (concurrency_.empty()) return kUnlimited;
  if (own_concurrency_ < concurrency_.size() && !key.empty() && key[0] == kRlsKeyPrefix) {
    if (const std::optional<uint32_t> i = rls_->concurrency_index(key)) return uint32_t(own_concurrency_) + *i;
  }
  return own_concurrency_ == 0 ? kUnlimited : concurrency_patterns_.find(key);
}

}  // namespace tollgate
