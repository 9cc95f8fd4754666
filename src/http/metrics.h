// The daemon's counters as Prometheus text exposition (prometheus-cpp's model and serializer).
#ifndef TOLLGATE_SRC_HTTP_METRICS_H_
#define TOLLGATE_SRC_HTTP_METRICS_H_

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "core/node.h"
#include "tollgate/types.h"
#include "util/stat_def.h"

namespace tollgate::http {

// Every stat as a metric named tollgate_<stat> ('.' becomes '_'), of the kind and with the help
// its declaration in `catalog` gives (util/stat_def.h): a gauge as it is, a counter with the
// _total suffix, a duration in nanoseconds as a gauge in seconds (_ns becomes _seconds); a stat
// the catalog does not declare is a counter whose help says "undeclared". checks_allowed and
// checks_denied become
// tollgate_checks_total{decision="allowed"|"denied"}; the members, tollgate_members{state=...}
// (the node itself included), one series per state, zeros too.
// Per-rule counters become tollgate_rule_{checks,allowed,denied,near_limit}_total{rule=LABEL}, a
// series per rule checked at least once.
// `extra`: families collected elsewhere (the daemon's latency histograms), appended as they are.
// `leases`: per concurrency rule, tollgate_rule_leases_in_flight{rule} and
// tollgate_rule_leases_held{rule} (gauges), a series per rule in force.
// `tops`: top-K (issue 41), the first kTopMetricRules rules as given (busiest first):
// tollgate_top_denied{rule,rank} and tollgate_top_tokens{rule,rank} (the rank-th key's count, its
// upper bound, for ranks 1..kTopMetricRanks; no key label: keys are in /v1/top), and
// tollgate_top_error_bound{rule,metric}. At most 32 x (2 x 5 + 2) series, whatever the keys.
inline constexpr size_t kTopMetricRules = 32;
inline constexpr size_t kTopMetricRanks = 5;
std::string render_metrics(const StatsList& stats, const StatCatalog& catalog, const std::vector<MemberInfo>& members,
                           const std::vector<std::pair<std::string, RuleCounters>>& rules,
                           std::vector<prometheus::MetricFamily> extra = {},
                           const std::vector<std::pair<std::string, RuleLeases>>& leases = {},
                           const std::vector<RuleTop>& tops = {});

}  // namespace tollgate::http

#endif  // TOLLGATE_SRC_HTTP_METRICS_H_
