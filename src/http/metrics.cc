#include "http/metrics.h"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

namespace tollgate::http {
namespace {

namespace prom = prometheus;

std::string metric_name(std::string_view stat) {
  std::string out = "tollgate_";
  for (const char c : stat) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    out += ok ? c : '_';
  }
  return out;
}

prom::ClientMetric counter(double v, std::vector<prom::ClientMetric::Label> labels = {}) {
  prom::ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = v;
  return m;
}

prom::ClientMetric gauge(double v, std::vector<prom::ClientMetric::Label> labels = {}) {
  prom::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = v;
  return m;
}

prom::MetricFamily gauge_family(std::string name, std::string help) {
  return {std::move(name), std::move(help), prom::MetricType::Gauge, {}};
}

// "api.thread.3.checks" (one client API thread's share, with --threads) is "api.thread.checks"
// with the label thread="3"; other names are returned as they are, with no label.
std::pair<std::string, std::string> split_thread(const std::string& name) {
  constexpr std::string_view kPrefix = "api.thread.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return {name, ""};
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size()) return {name, ""};
  const std::string thread = name.substr(kPrefix.size(), dot - kPrefix.size());
  if (thread.find_first_not_of("0123456789") != std::string::npos) return {name, ""};
  return {std::string(kPrefix) + name.substr(dot + 1), thread};
}

}  // namespace

std::string render_metrics(const StatsList& stats, const StatCatalog& catalog, const std::vector<MemberInfo>& members,
                           const std::vector<std::pair<std::string, RuleCounters>>& rules,
                           std::vector<prometheus::MetricFamily> extra,
                           const std::vector<std::pair<std::string, RuleLeases>>& leases,
                           const std::vector<RuleTop>& tops) {
  std::vector<prom::MetricFamily> families;
  prom::MetricFamily checks{"tollgate_checks_total",
                            "Checks decided by this node, by decision (every front end)",
                            prom::MetricType::Counter,
                            {}};
  for (const auto& [name, value] : stats) {
    if (name == "checks") continue;  // the sum of the two below
    if (name == "checks_allowed" || name == "checks_denied") {
      checks.metric.push_back(counter(double(value), {{"decision", name == "checks_allowed" ? "allowed" : "denied"}}));
      continue;
    }
    const auto [family, thread] = split_thread(name);
    std::vector<prom::ClientMetric::Label> labels;
    if (!thread.empty()) labels.push_back({"thread", thread});
    const StatCatalog::Entry* def = catalog.find(name);
    // A duration in nanoseconds is a gauge in Prometheus's base unit.
    const bool nanos = def && def->unit == StatUnit::kNanoseconds && family.ends_with("_ns");
    const bool is_g = nanos || (def && def->kind == StatKind::kGauge);
    const std::string fname = nanos ? metric_name(family.substr(0, family.size() - 3)) + "_seconds"
                                    : metric_name(family) + (is_g ? "" : "_total");
    const double shown = nanos ? double(value) / 1e9 : double(value);
    prom::ClientMetric metric = is_g ? gauge(shown, labels) : counter(shown, labels);
    // One family per name: a thread's share joins the family of the thread listed before it.
    if (!thread.empty() && !families.empty() && families.back().name == fname) {
      families.back().metric.push_back(std::move(metric));
      continue;
    }
    families.push_back({fname,
                        def ? def->help : "tollgated stat " + family + " (undeclared)",
                        is_g ? prom::MetricType::Gauge : prom::MetricType::Counter,
                        {std::move(metric)}});
  }
  families.push_back(std::move(checks));
  prom::MetricFamily by_state{"tollgate_members",
                              "Cluster members as this node sees them (itself included), by state",
                              prom::MetricType::Gauge,
                              {}};
  for (const MemberState s : {MemberState::kAlive, MemberState::kSuspect, MemberState::kDead, MemberState::kUnreachable,
                              MemberState::kLeft}) {
    const auto n = std::count_if(members.begin(), members.end(), [s](const MemberInfo& m) { return m.state == s; });
    by_state.metric.push_back(gauge(double(n), {{"state", member_state_name(s)}}));
  }
  families.push_back(std::move(by_state));
  struct PerRule {
    const char* name;
    const char* help;
    uint64_t RuleCounters::*field;
  };
  constexpr PerRule kPerRule[] = {
      {"tollgate_rule_checks_total", "Checks decided under the rule at this node", &RuleCounters::checks},
      {"tollgate_rule_allowed_total", "Checks the rule allowed at this node", &RuleCounters::allowed},
      {"tollgate_rule_denied_total", "Checks the rule denied at this node", &RuleCounters::denied},
      {"tollgate_rule_shadow_denied_total",
       "Checks a rule in shadow mode would have denied: allowed (and in _allowed_total), uncharged",
       &RuleCounters::shadow_denied},
      {"tollgate_rule_near_limit_total",
       "Allowed checks that left more than --near-limit percent of the burst used (80 by default)",
       &RuleCounters::near_limit}};
  for (const PerRule& p : kPerRule) {
    prom::MetricFamily f{p.name, p.help, prom::MetricType::Counter, {}};
    for (const auto& [label, counters] : rules)
      f.metric.push_back(counter(double(counters.*(p.field)), {{"rule", label}}));
    if (!f.metric.empty()) families.push_back(std::move(f));
  }
  if (!leases.empty()) {
    prom::MetricFamily in_flight =
        gauge_family("tollgate_rule_leases_in_flight",
                     "Concurrency slots held cluster-wide under the rule, as this node counts them (its "
                     "leases and the live members' it has heard of)");
    prom::MetricFamily held =
        gauge_family("tollgate_rule_leases_held", "Concurrency slots this node's leases hold under the rule");
    for (const auto& [label, l] : leases) {
      in_flight.metric.push_back(gauge(double(l.in_flight), {{"rule", label}}));
      held.metric.push_back(gauge(double(l.held), {{"rule", label}}));
    }
    families.push_back(std::move(in_flight));
    families.push_back(std::move(held));
  }
  if (!tops.empty()) {
    prom::MetricFamily denied =
        gauge_family("tollgate_top_denied",
                     "Top-K: checks the rank-th most denied key of the rule had denied cluster-wide over the "
                     "last one to two --top-window (its upper bound; the keys are in GET /v1/top)");
    prom::MetricFamily tokens =
        gauge_family("tollgate_top_tokens",
                     "Top-K: tokens admitted cluster-wide to the rule's rank-th key over the last one to two "
                     "--top-window (its upper bound; the keys are in GET /v1/top)");
    prom::MetricFamily bound = gauge_family(
        "tollgate_top_error_bound", "Top-K: how far a reported count may be above the true one, per rule and metric");
    for (size_t r = 0; r < std::min(tops.size(), kTopMetricRules); ++r) {
      const RuleTop& t = tops[r];
      for (const auto& [family, merged, metric] :
           {std::tuple{&denied, &t.denied, "denied"}, std::tuple{&tokens, &t.tokens, "tokens"}}) {
        for (size_t k = 0; k < std::min(merged->keys.size(), kTopMetricRanks); ++k) {
          family->metric.push_back(
              gauge(double(merged->keys[k].upper), {{"rule", t.rule}, {"rank", std::to_string(k + 1)}}));
        }
        bound.metric.push_back(gauge(double(merged->error_bound), {{"rule", t.rule}, {"metric", metric}}));
      }
    }
    for (prom::MetricFamily* f : {&denied, &tokens, &bound}) {
      if (!f->metric.empty()) families.push_back(std::move(*f));
    }
  }
  for (prom::MetricFamily& f : extra) families.push_back(std::move(f));
  return prom::TextSerializer().Serialize(families);
}

}  // namespace tollgate::http
