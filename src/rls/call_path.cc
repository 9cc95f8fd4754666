#include "rls/call_path.h"

#include <exception>
#include <utility>

#include "rls/messages.h"

namespace tollgate::rls {

namespace pb = envoy::service::ratelimit::v3;

void CallPath::set_config(std::shared_ptr<const RlsConfig> config) {
  std::lock_guard lock(config_mu_);
  config_ = std::move(config);
}

std::shared_ptr<const RlsConfig> CallPath::config() const {
  std::lock_guard lock(config_mu_);
  return config_;
}

std::string CallPath::plan(const pb::RateLimitRequest& request, Plan& plan) {
  std::string why = plan_from_message(request, config(), options_.max_key_bytes, plan);
  overrides_ignored += int64_t(plan.overrides_ignored);
  domain_not_found += plan.domain_not_found;
  if (!why.empty()) ++invalid;
  return why;
}

void CallPath::decide_on_node(const Plan& plan, Decided& out) {
  try {
    out.overall = decide(handler_, plan, out.results);
  } catch (const std::exception& e) {  // (an allocation failing in the table, say)
    out.status = wire::Code::kInternal;
    out.message = std::string("the check failed: ") + e.what();
  }
}

void CallPath::decide_here(const Plan& plan, Decided& out) {
  request::DecisionGate::Pass pass(decisions_);
  if (!pass.open()) {
    ++unavailable;
    out.status = wire::Code::kUnavailable;
    out.message = "tollgated is shutting down";
    return;
  }
  decide_on_node(plan, out);
}

void CallPath::respond(const pb::RateLimitRequest& request, const Plan& plan, const Decided& d,
                       pb::RateLimitResponse& response) {
  if (d.overall == Code::kOverLimit) ++over_limit;
  for (const DescriptorResult& r : d.results) shadow_over += r.shadow_over;
  value_metrics_dropped += int64_t(value_metrics_.count(plan, d.results));
  fill_response(d.overall, d.results, options_.response_headers, response);
  if (options_.response_metadata) add_request_metadata(request, plan, d.results, response);
  if (options_.limit_headers) {
    add_limit_headers(d.results, options_.limit_header, options_.remaining_header, options_.reset_header, response);
  }
}

// The rate limit service's stats (docs/operations.md, section 7), each with its counter.
std::span<const CallPath::Stat> CallPath::stat_table() {
  static const Stat kStats[] = {
      {{"rls_calls", StatKind::kCounter, "ShouldRateLimit calls received"}, &CallPath::calls},
      {{"rls_calls_over_limit", StatKind::kCounter, "Calls answered OVER_LIMIT"}, &CallPath::over_limit},
      {{"rls_invalid_argument", StatKind::kCounter, "Calls refused as malformed (INVALID_ARGUMENT)"},
       &CallPath::invalid},
      {{"rls_busy", StatKind::kCounter, "Calls refused RESOURCE_EXHAUSTED: the queue for the node full"},
       &CallPath::busy},
      {{"rls_queued", StatKind::kGauge,
        "Calls waiting for the node's thread (the gRPC engine with one --threads and no other door)"},
       &CallPath::queued},
      {{"rls_deadline_expired", StatKind::kCounter,
        "Calls whose deadline passed before the node reached them (not charged)"},
       &CallPath::deadline_expired},
      {{"rls_cancelled", StatKind::kCounter, "Calls cancelled before the node reached them (not charged)"},
       &CallPath::cancelled},
      {{"rls_unavailable", StatKind::kCounter, "Calls answered UNAVAILABLE while shutting down (not charged)"},
       &CallPath::unavailable},
      {{"rls_shadow_over_limit", StatKind::kCounter, "Descriptors a shadow-mode limit would have put over"},
       &CallPath::shadow_over},
      {{"rls_domain_not_found", StatKind::kCounter,
        "Calls for a domain the RLS config does not have (answered OK, unlimited)"},
       &CallPath::domain_not_found},
      {{"rls_overrides_ignored", StatKind::kCounter,
        "Descriptor limit overrides not honoured (no unit, or too many distinct ones): the config's limit applied"},
       &CallPath::overrides_ignored},
      {{"rls_value_metrics_dropped", StatKind::kCounter,
        "Descriptor values not given a series of their own (detailed_metric, value_to_metric): beyond "
        "--rls-value-metrics values of one limit, or 10,000 in all"},
       &CallPath::value_metrics_dropped},
      {{"rls_connections_accepted", StatKind::kCounter, "TCP connections accepted by the rate limit service"},
       &CallPath::connections_accepted},
      {{"rls_connections_evicted", StatKind::kCounter,
        "TCP connections closed to make room for a newcomer (--rls-max-connections, "
        "--rls-max-connections-per-client)"},
       &CallPath::connections_evicted},
      {{"rls_connections_open", StatKind::kGauge, "TCP connections of the rate limit service open (within a second)"},
       &CallPath::connections_open},
      {{"rls_streams_refused", StatKind::kCounter,
        "--rls-server native: requests refused before any work (bad headers or framing, over a cap, reset "
        "budget at its cap)"},
       &CallPath::streams_refused},
      {{"rls_connections_cut", StatKind::kCounter,
        "--rls-server native: connections ended for breaking HTTP/2, for resetting half their streams "
        "(rapid reset), or for a write or handshake that timed out"},
       &CallPath::connections_cut},
      {{"rls_health_checks", StatKind::kCounter, "--rls-server native: grpc.health.v1 Check and Watch calls"},
       &CallPath::health_checks},
      {{"rls_tls_reloads", StatKind::kCounter,
        "--rls-server native: --rls-tls-* files read again after a change and put in force"},
       &CallPath::tls_reloads},
      {{"rls_tls_reload_failures", StatKind::kCounter,
        "--rls-server native: changed --rls-tls-* files that could not be used (the last good ones stay)"},
       &CallPath::tls_reload_failures},
  };
  return kStats;
}

StatsList CallPath::stats() const {
  StatsList s;
  append_stats(stat_table(), *this, s);
  return s;
}

std::vector<StatDef> CallPath::stat_defs() {
  std::vector<StatDef> defs;
  append_stat_defs(stat_table(), defs);
  return defs;
}

}  // namespace tollgate::rls
