// Per-value counts of Envoy's rate limit calls (the reference server's detailed_metric and
// value_to_metric stats: RlsMatch::metric), bounded: at most `per_rule` values of one limit and
// kMaxSeries in all are kept; a value beyond either is not counted, and the drop is. Any thread.
#ifndef TOLLGATE_SRC_RLS_VALUE_METRICS_H_
#define TOLLGATE_SRC_RLS_VALUE_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rls/decide.h"
#include "util/string_map.h"

namespace tollgate::rls {

class ValueMetrics {
 public:
  static constexpr size_t kMaxSeries = 10'000;
  static constexpr size_t kMaxNameBytes = 256;  // a longer name is dropped, not cut

  explicit ValueMetrics(size_t per_rule) : per_rule_(per_rule) {}

  struct Series {
    std::string rule;           // RlsConfig::label of the limit
    std::string name;           // RlsMatch::metric
    uint64_t within_limit = 0;  // hits of descriptors answered OK
    uint64_t over_limit = 0;    // hits of descriptors answered OVER_LIMIT
    uint64_t shadow_over = 0;   // hits a shadow_mode descriptor would have put over
  };

  // Counts each descriptor of a decided request that has a per-value name. Returns how many
  // were not counted: a new value beyond the caps.
  size_t count(const Plan& plan, const std::vector<DescriptorResult>& results);

  std::vector<Series> snapshot() const;

 private:
  const size_t per_rule_;
  mutable std::mutex mutex_;
  StringMap<size_t> index_;           // name -> series_
  StringMap<size_t> per_rule_count_;  // rule -> values kept
  std::vector<Series> series_;
};

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_VALUE_METRICS_H_
