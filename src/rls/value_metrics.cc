#include "rls/value_metrics.h"

namespace tollgate::rls {

size_t ValueMetrics::count(const Plan& plan, const std::vector<DescriptorResult>& results) {
  size_t dropped = 0;
  if (per_rule_ == 0) return dropped;
  for (size_t i = 0; i < plan.descriptors.size() && i < results.size(); ++i) {
    const DescriptorPlan& p = plan.descriptors[i];
    if (p.match.metric.empty() || p.refund) continue;
    const DescriptorResult& r = results[i];
    const uint64_t hits = uint64_t(p.hits);
    std::lock_guard lock(mutex_);
    auto it = index_.find(p.match.metric);
    if (it == index_.end()) {
      size_t& kept = per_rule_count_[std::string(p.match.metric_rule)];
      if (kept >= per_rule_ || series_.size() >= kMaxSeries || p.match.metric.size() > kMaxNameBytes) {
        ++dropped;
        continue;
      }
      ++kept;
      it = index_.emplace(p.match.metric, series_.size()).first;
      series_.push_back({std::string(p.match.metric_rule), p.match.metric});
    }
    Series& s = series_[it->second];
    (r.code == Code::kOverLimit ? s.over_limit : s.within_limit) += hits;
    if (r.shadow_over) s.shadow_over += hits;
  }
  return dropped;
}

std::vector<ValueMetrics::Series> ValueMetrics::snapshot() const {
  std::lock_guard lock(mutex_);
  return series_;
}

}  // namespace tollgate::rls
