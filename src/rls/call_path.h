// What every ShouldRateLimit call goes through, whichever engine serves the rate limit service
// (gRPC C++ in grpc_engine.cc, our own HTTP/2 in native_engine.cc): resolved against the RLS
// config, decided through the daemon's request path, answered as the reference server answers,
// and counted. One per server; safe from any thread.
#ifndef TOLLGATE_SRC_RLS_CALL_PATH_H_
#define TOLLGATE_SRC_RLS_CALL_PATH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "request/decision_gate.h"
#include "request/request_handler.h"
#include "rls/decide.h"
#include "rls/grpc_wire.h"
#include "rls/rls_server.h"
#include "rls/value_metrics.h"
#include "util/stat_def.h"

namespace tollgate::rls {

// One call's decision: a status other than OK (not charged, or the check failed), or the answer.
struct Decided {
  wire::Code status = wire::Code::kOk;
  std::string message;  // with a status other than OK
  Code overall = Code::kOk;
  std::vector<DescriptorResult> results;
};

class CallPath {
 public:
  CallPath(RequestHandler& handler, const RlsServerOptions& options)
      : handler_(handler), options_(options), value_metrics_(options.value_metrics_per_rule) {}

  void set_config(std::shared_ptr<const RlsConfig> config);
  std::shared_ptr<const RlsConfig> config() const;

  // Resolves `request` against the config now: "" or why it is invalid (INVALID_ARGUMENT).
  std::string plan(const envoy::service::ratelimit::v3::RateLimitRequest& request, Plan& plan);
  // Decides a planned call on the calling thread (the handler safe from any thread), unless
  // stop() began: then UNAVAILABLE, uncharged. A check that throws is INTERNAL. Counted.
  void decide_here(const Plan& plan, Decided& out);
  // Decides through the handler, on the node's thread (the queued path): no gate, no counting.
  void decide_on_node(const Plan& plan, Decided& out);
  // The response to a decided call (OK): the statuses, and the headers and metadata the options
  // ask for. Counts over_limit, shadow and value metrics.
  void respond(const envoy::service::ratelimit::v3::RateLimitRequest& request, const Plan& plan, const Decided& d,
               envoy::service::ratelimit::v3::RateLimitResponse& response);
  // No decision made here from now on, and those under way have ended when it returns.
  void stop() { decisions_.close(); }

  StatsList stats() const;
  static std::vector<StatDef> stat_defs();
  std::vector<ValueMetrics::Series> value_metrics() const { return value_metrics_.snapshot(); }

  // The counters (stat_table() in the .cc says what each counts); the engines count here too.
  std::atomic<int64_t> calls{0}, over_limit{0}, invalid{0}, busy{0}, deadline_expired{0}, cancelled{0}, unavailable{0},
      shadow_over{0}, overrides_ignored{0}, domain_not_found{0}, value_metrics_dropped{0}, connections_accepted{0},
      connections_evicted{0}, connections_open{0}, streams_refused{0}, connections_cut{0}, health_checks{0},
      tls_reloads{0}, tls_reload_failures{0}, queued{0};

 private:
  using Stat = StatField<CallPath, std::atomic<int64_t>>;
  static std::span<const Stat> stat_table();

  RequestHandler& handler_;
  const RlsServerOptions& options_;
  mutable std::mutex config_mu_;
  std::shared_ptr<const RlsConfig> config_;
  request::DecisionGate decisions_;
  ValueMetrics value_metrics_;
};

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_CALL_PATH_H_
