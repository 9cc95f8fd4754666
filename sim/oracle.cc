#include "oracle.h"

#include <algorithm>

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

namespace {
bool later(const auto& a, const auto& b) { return a.end_ns > b.end_ns; }
}  // namespace

void Holds::advance(MonoNanos now_ns) {
  while (!heap_.empty() && heap_.front().end_ns <= now_ns) {
    std::pop_heap(heap_.begin(), heap_.end(), later<Hold, Hold>);
    counts_[*heap_.back().key] -= heap_.back().count;
    heap_.pop_back();
  }
}

void Holds::add(std::string_view key, int64_t count, size_t node, MonoNanos end_ns) {
  auto it = counts_.try_emplace(std::string(key), 0).first;
  it->second += count;
  heap_.push_back({end_ns, count, node, &it->first});
  std::push_heap(heap_.begin(), heap_.end(), later<Hold, Hold>);
}

void Holds::node_down(size_t node) {
  std::erase_if(heap_, [&](const Hold& h) {
    if (h.node != node) return false;
    counts_[*h.key] -= h.count;
    return true;
  });
  std::make_heap(heap_.begin(), heap_.end(), later<Hold, Hold>);
}

int64_t Holds::in_flight(std::string_view key) const {
  auto it = counts_.find(std::string(key));
  return it == counts_.end() ? 0 : it->second;
}

int64_t OracleSemaphore::limit(std::string_view key) const {
  const uint32_t rule = rules_->concurrency_match(key);
  return rule == RuleSet::kUnlimited ? 0 : rules_->concurrency_rules()[rule].limit;
}

bool OracleSemaphore::admit(std::string_view key, int64_t count, size_t node, MonoNanos now_ns, int64_t hold_ns) {
  holds_.advance(now_ns);
  const int64_t l = limit(key);
  if (l == 0) return true;
  if (holds_.in_flight(key) + count > l) return false;
  holds_.add(key, count, node, now_ns + hold_ns);
  return true;
}

}  // namespace tollgate::sim
