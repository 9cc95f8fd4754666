// The HTTP front end's endpoints, apart from sockets: a parsed request in, its response out.
// Checks go through the daemon's one request path (RequestHandler) on the node's thread; the
// rest of the work (parsing, JSON, the Prometheus text) happens on the caller's thread.
//
//   GET  /v1/check?key=K[&cost=N][&deny_status=403]  200 allowed, 429 (or 403) denied
//   POST /v1/check   {"checks": [{"key": K, "cost": N}, ...], "all_or_nothing": false}
//   POST /v1/leases  {"key": K, "count": N, "ttl": "30s"}: 200 {"id": ...} granted, 429 refused
//   PUT, DELETE /v1/leases/ID   renew, release: 200, or 404 when no such lease is held here
//   POST /json       Envoy's RateLimitRequest as JSON -> RateLimitResponse, 200 or 429
//   GET  /metrics    Prometheus text exposition
//   GET  /healthz    200 while the process serves
//   GET  /readyz     200 once the node has heard from a member or has been alone for fail_after
//                    (rules are loaded before the server starts); 503 before that and while draining
//   GET  /v1/members, GET /v1/stats   the CLI's --json shapes
//   GET  /v1/top?rule=R&k=K   the keys denied most, and charged most, cluster-wide (top-K)
//   GET  /v1/balance?key=K    K's bucket on this node, read without a check
//   GET  /v1/rules            the rules in force, their version and this node's counts
//
// With a token (set_token: tollgated's --http-token-file), every endpoint but /healthz and
// /readyz answers 401 unless the request carries `Authorization: Bearer TOKEN`. A metrics-only
// listener (tollgated's --metrics-listen) serves /metrics, /healthz and /readyz, nothing else.
//
// Threading: handle() is called on one thread (the HTTP server's); `run_on_node` runs a job on
// the node's thread, and the job's continuation, which calls `reply`, back on the caller's;
// `run_checks` (checks only) may run it right there instead, when the key table is concurrent.
#ifndef TOLLGATE_SRC_HTTP_ROUTES_H_
#define TOLLGATE_SRC_HTTP_ROUTES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prometheus/metric_family.h>

#include "request/request_handler.h"
#include "tollgate/rls_config.h"
#include "util/stat_def.h"

namespace tollgate::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // "/v1/check?key=a"
  std::string body;
  std::string authorization;  // the Authorization header's value, or ""
};

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type
};

using Reply = std::function<void(HttpResponse)>;
// The node's part of a request: runs on the node's thread with the request path, and returns
// what to run back on the HTTP thread (which replies).
using NodeJob = std::function<std::function<void()>(RequestHandler&)>;
// Queues `job` for the node's thread, or returns false when it cannot (too many waiting, or
// stopping): the request is then answered 503 without touching the node. A queued job that
// cannot run after all (the node stopped, or it waited too long) is answered 503 through
// `reply` by the runner, on the HTTP thread, uncharged.
using NodeRunner = std::function<bool(NodeJob job, const Reply& reply)>;

struct RoutesOptions {
  size_t max_batch = 1000;     // checks per POST /v1/check
  size_t max_key_bytes = 256;  // the key table's: longer /v1/check keys are 400; RLS keys beyond are digested
  bool rls_headers = true;     // RateLimit fields in /json's response_headers_to_add
  bool metrics_only = false;   // serve /metrics, /healthz and /readyz only (404 for the rest)
  // True once the node has been up for fail_after (then it is ready even alone).
  std::function<bool()> alone_long_enough = [] { return true; };
  // More /metrics families, collected on the HTTP thread (thread-safe: prometheus-cpp's
  // Histogram::Collect). May be empty.
  std::function<std::vector<prometheus::MetricFamily>()> extra_metrics;
  // What each stat is (kind, unit, help) for /metrics; a stat it does not declare is shown as a
  // counter whose help says so. Read on the HTTP thread: complete before the server starts.
  std::shared_ptr<const StatCatalog> stat_catalog;
};

class Routes {
 public:
  // `run_checks` runs the jobs that only check (GET and POST /v1/check, POST /json): the same as
  // run_on_node unless the server decides checks on its own thread (the key table concurrent).
  Routes(NodeRunner run_on_node, RoutesOptions options, NodeRunner run_checks = nullptr);

  // Any thread.
  void set_rls_config(std::shared_ptr<const RlsConfig> config);
  void drain() { draining_ = true; }  // /readyz answers 503 from now on
  // The bearer token every endpoint but /healthz and /readyz requires; "" requires none. Any
  // thread (a reload replaces it).
  void set_token(std::string token);

  void handle(const HttpRequest& request, Reply reply);

  // http_requests, http_responses_2xx/4xx/5xx, http_checks; any thread.
  StatsList stats() const;
  using Stat = StatField<Routes, std::atomic<int64_t>>;
  // The declarations of stats() (util/stat_def.h), each with its counter.
  static std::span<const Stat> stat_table();
  // Counts a response the server made itself (400 for a malformed request, 413, 503).
  void count_response(unsigned status);

 private:
  void check_get(const std::string& query, Reply reply);
  void reset(const std::string& query, Reply reply);
  void check_post(const std::string& body, Reply reply);
  void lease_acquire(const std::string& body, Reply reply);
  void lease_by_id(const std::string& method, const std::string& id, const std::string& body, Reply reply);
  struct Batch;  // a POST /v1/check on its way through the node, a slice at a time
  void check_slice(std::shared_ptr<Batch> batch, size_t from, Reply reply);
  void rls_json(const std::string& body, Reply reply);
  void metrics(Reply reply);
  void readyz(Reply reply);
  void rls_config_dump(Reply reply);
  void members(Reply reply);
  void stats_json(Reply reply);
  void top(const std::string& query, Reply reply);
  void balance(const std::string& query, Reply reply);
  void rules(Reply reply);
  // Runs `job` on the node, or answers 503.
  void on_node(NodeJob job, const Reply& reply);
  // A job that calls only check, check_all and refund on the handler.
  void on_checks(NodeJob job, const Reply& reply);

  NodeRunner run_on_node_;
  NodeRunner run_checks_;
  const RoutesOptions options_;
  std::atomic<bool> draining_{false};
  mutable std::mutex config_mu_;
  std::shared_ptr<const RlsConfig> rls_config_;
  std::shared_ptr<const std::string> token_;  // under config_mu_; null: none required
  bool authorized(const HttpRequest& request, std::string_view path) const;
  std::atomic<int64_t> requests_{0}, responses_2xx_{0}, responses_4xx_{0}, responses_5xx_{0}, checks_{0},
      unauthorized_{0};
};

// A JSON error body: {"error": "..."} (protobuf's JSON writer does the escaping).
HttpResponse error_response(unsigned status, const std::string& message);

}  // namespace tollgate::http

#endif  // TOLLGATE_SRC_HTTP_ROUTES_H_
