#include "oracle.h"

namespace tollgate::sim {

Oracle::Oracle(std::shared_ptr<const RuleSet> rules) : rules_(std::move(rules)) {}

bool Oracle::admit(std::string_view key, int64_t cost, MonoNanos now) {
  const uint32_t rule = rules_->match(key);
  if (rule == RuleSet::kUnlimited) return true;
  const Limit& limit = rules_->limit(rule);
  auto it = buckets_.find(std::string(key));
  if (it == buckets_.end()) it = buckets_.emplace(std::string(key), TokenBucket(limit, now)).first;
  return it->second.try_acquire(limit, cost, now).allowed;
}

}  // namespace tollgate::sim
