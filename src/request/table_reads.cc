#include "request/table_reads.h"

#include <string>
#include <unordered_map>
#include <utility>

#include "core/token_bucket.h"
#include "tollgate/rules.h"

namespace tollgate {

KeyBalance read_balance(KeyTable& table, std::string_view key, MonoNanos now) {
  KeyBalance b;
  const std::optional<Limit> limit = table.limit_for(key);
  if (!limit) return b;
  b.limited = true;
  b.limit = *limit;
  b.rule = table.rules().label(table.rules().match(key));
  const std::optional<int64_t> micro = table.balance_microtokens(key, now);
  b.held = micro.has_value();
  b.balance_microtokens = micro.value_or(limit->burst * kMicrotokensPerToken);
  return b;
}

RulesInForce read_rules_in_force(const KeyTable& table, int64_t version, size_t max) {
  const RuleSet& rules = table.rules();
  RulesInForce out;
  out.version = version;
  std::unordered_map<std::string, RuleCounters> counts;
  for (auto& [label, c] : table.rule_counters()) counts.emplace(std::move(label), c);
  for (uint32_t i = 0; i < rules.size(); ++i) {
    if (i == rules.rules().size() && !rules.default_limit()) continue;  // the default's slot, empty
    if (rules.limit(i).burst == 0) continue;                            // an RLS override slot no request has taken yet
    if (out.rules.size() == max) {
      ++out.omitted;
      continue;
    }
    RuleInForce r{rules.label(i), rules.limit(i), {}};
    if (auto it = counts.find(r.label); it != counts.end()) r.counts = it->second;
    out.rules.push_back(std::move(r));
  }
  return out;
}

}  // namespace tollgate
