// The oracle: what a perfectly consistent cluster would have admitted. One ideal token bucket per
// key (the same rule as the cluster's), fed every check of the run in arrival order; for leases,
// one ideal semaphore per key.
#ifndef TOLLGATE_SIM_ORACLE_H_
#define TOLLGATE_SIM_ORACLE_H_

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "core/token_bucket.h"
#include "tollgate/rules.h"

namespace tollgate::sim {

class Oracle {
 public:
  explicit Oracle(std::shared_ptr<const RuleSet> rules);
  // Would one global bucket admit `cost` of `key` at `now_ns`? Calls must come in time order.
  // Unlimited keys are always admitted. Like the cluster, it never goes into debt by itself.
  bool admit(std::string_view key, int64_t cost, MonoNanos now_ns);

 private:
  std::shared_ptr<const RuleSet> rules_;
  std::unordered_map<std::string, TokenBucket> buckets_;
};

// Leases held per key, each until its end or until its holder's node goes down: the oracle's
// ideal semaphore keeps one, and the recorder another for what the cluster really granted.
class Holds {
 public:
  // Frees every hold that ended at or before now_ns. Calls must come in time order.
  void advance(MonoNanos now_ns);
  void add(std::string_view key, int64_t count, size_t node, MonoNanos end_ns);
  // The node went down: its holders die with it.
  void node_down(size_t node);
  int64_t in_flight(std::string_view key) const;
  // Each key's count (keys never held are absent).
  const std::unordered_map<std::string, int64_t>& counts() const { return counts_; }

 private:
  struct Hold {
    MonoNanos end_ns;
    int64_t count;
    size_t node;
    const std::string* key;  // in counts_ (node-based: stable)
  };
  std::vector<Hold> heap_;  // a min-heap by end_ns
  std::unordered_map<std::string, int64_t> counts_;
};

// One ideal global semaphore per key with a concurrency rule: what a perfectly consistent
// cluster would grant, fed every acquire of the run in arrival order.
class OracleSemaphore {
 public:
  explicit OracleSemaphore(std::shared_ptr<const RuleSet> rules) : rules_(std::move(rules)) {}
  // Grants `count` of `key` to a holder at `node` for hold_ns if the key's count allows it.
  // Keys no concurrency rule governs are always granted (and not held).
  bool admit(std::string_view key, int64_t count, size_t node, MonoNanos now_ns, int64_t hold_ns);
  void node_down(size_t node) { holds_.node_down(node); }
  // The key's slots held in the ideal semaphore at now_ns.
  int64_t in_flight(std::string_view key, MonoNanos now_ns) {
    holds_.advance(now_ns);
    return holds_.in_flight(key);
  }
  // The key's concurrency limit, 0 when none governs it.
  int64_t limit(std::string_view key) const;

 private:
  std::shared_ptr<const RuleSet> rules_;
  Holds holds_;
};

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_ORACLE_H_
