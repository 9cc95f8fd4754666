// The oracle: what a perfectly consistent cluster would have admitted. One ideal token bucket per
// key (the same rule as the cluster's), fed every check of the run in arrival order.
#ifndef TOLLGATE_SIM_ORACLE_H_
#define TOLLGATE_SIM_ORACLE_H_

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

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

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_ORACLE_H_
