#include "daemon/front_end.h"

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <stdexcept>

#include "api/api_server.h"
#include "api/endpoint.h"
#include "daemon/api_workers.h"
#include "daemon/daemon_options.h"
#include "daemon/memory_release.h"
#include "host/node_host.h"
#include "http/http_server.h"
#include "http/token_file.h"
#include "retriever/rules_feed.h"
#include "rls/rls_server.h"
#include "rls/xds_client.h"
#include "tollgate/rls_config.h"

namespace tollgate {
namespace {

std::chrono::milliseconds ms(int64_t ns) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(ns));
}

// Whether a front end's listen address ("HOST:PORT", "tcp:HOST:PORT" or "unix:PATH") is loopback
// or a Unix socket, from its text (IP addresses only, as the listeners take). One that does not
// parse counts as loopback here: the listener's start reports it.
bool listens_on_loopback(std::string text) {
  if (!text.starts_with("unix:") && !text.starts_with("tcp:")) text = "tcp:" + text;
  std::string why;
  const auto endpoint = api::parse_endpoint(text, &why);
  return !endpoint || endpoint->is_loopback();
}

// With --threads: the client API's stats are summed over its threads, plus each thread's share.
constexpr StatDef kThreads{"api.threads", StatKind::kGauge, "Client API threads (--threads)"};
constexpr StatDef kPerThread[] = {
    kThreads,
    {"api.thread.*.connections_open", StatKind::kGauge, "Client API connections open, by thread (0: the node's)"},
    {"api.thread.*.checks", StatKind::kCounter, "Checks answered through the client API, by thread (0: the node's)"},
};

constexpr StatDef kMemoryRelease[] = {
    {"memory_releases", StatKind::kCounter,
     "Times freed memory was given back to the system (malloc_trim, after resident memory grew 64 MiB)"},
    {"memory_released_bytes", StatKind::kCounter, "Resident memory those times gave back", StatUnit::kBytes},
};

// Not a door: freed memory given back to the system (daemon/memory_release.h), on a thread of its
// own from start to shutdown.
class FreedMemory final : public FrontEnd {
 public:
  void start() override { release_.start(); }
  void shutdown() override { release_.stop(); }
  void append_stats(StatsList& s) const override { release_.append_stats(s); }

 private:
  MemoryRelease release_;
};

// The client API (--listen), on the node's thread and on the --threads N - 1 others.
class ClientApi final : public FrontEnd {
 public:
  ClientApi(const DaemonOptions& o, boost::asio::io_context& io, RequestHandler& handler, NodeHost& host) {
    api::ApiServerOptions api;
    for (const std::string& l : o.listen) {
      std::string why;
      auto ep = api::parse_endpoint(l, &why);
      if (!ep) throw std::runtime_error("--listen " + why);
      if (!ep->is_loopback())
        spdlog::warn("client API listens on {}, which is not loopback: the API has no authentication", l);
      api.listen.push_back(*ep);
    }
    api.max_connections = o.api_max_connections;
    api.max_connections_per_client = o.api_max_connections_per_client;
    api.idle_timeout = ms(o.api_idle_timeout_ns);
    api.on_offense = [&host](std::string_view who, std::string_view what) { host.report_offense(who, what); };
    if (o.threads > 1) {
      // Each thread's server holds its share of the connection limits and of the answer budget
      // (the node thread's server hands each connection to the least loaded, so they fill evenly).
      const size_t n = o.threads;
      api.max_connections = (api.max_connections + n - 1) / n;
      api.max_connections_per_client = (api.max_connections_per_client + n - 1) / n;
      api.max_output_bytes = (api.max_output_bytes + n - 1) / n;
      workers_ = std::make_unique<ApiWorkers>(n - 1, io, handler, api);
    }
    server_ = std::make_unique<api::ApiServer>(io, handler, api);
    if (workers_) server_->share_connections_with(workers_->servers());
    if (std::string why = server_->start(); !why.empty()) throw std::runtime_error("--listen " + why);
  }
  ~ClientApi() override {
    server_.reset();  // it hands connections to the workers: first
    workers_.reset();
  }

  // Answers to requests already read still go out; the socket file goes now.
  void drain() override {
    server_->drain();
    if (workers_) workers_->drain();
  }
  // A client that has not taken its answers by now is cut off; with worker threads, `done` once
  // none of them can check any more.
  void stop(std::function<void()> done) override {
    server_->stop();
    if (workers_) return workers_->stop(std::move(done));
    done();
  }
  void shutdown() override {
    if (workers_) workers_->node_loop_ended();
  }
  void append_stats(StatsList& s) const override {
    StatsList total = server_->stats();
    if (!workers_) {
      s.insert(s.end(), total.begin(), total.end());
      return;
    }
    // Every thread's server counts its own connections: the sums (the largest, for a high-water
    // mark), and how many connections and checks each thread has, to see the spread.
    std::vector<StatsList> per_thread = {total};
    for (const api::ApiServer* server : workers_->servers()) per_thread.push_back(server->stats());
    for (size_t t = 1; t < per_thread.size(); ++t) {
      for (size_t i = 0; i < total.size(); ++i) {
        const bool high_water = total[i].first.find("high_water") != std::string::npos;
        total[i].second =
            high_water ? std::max(total[i].second, per_thread[t][i].second) : total[i].second + per_thread[t][i].second;
      }
    }
    s.insert(s.end(), total.begin(), total.end());
    s.emplace_back(std::string(kThreads.name), int64_t(per_thread.size()));
    for (const std::string stat : {"connections_open", "checks"}) {
      for (size_t t = 0; t < per_thread.size(); ++t) {
        for (const auto& [name, value] : per_thread[t]) {
          if (name == "api." + stat) s.emplace_back("api.thread." + std::to_string(t) + "." + stat, value);
        }
      }
    }
  }

 private:
  std::unique_ptr<ApiWorkers> workers_;  // --threads N: the other N - 1 threads
  std::unique_ptr<api::ApiServer> server_;
};

// Envoy's rate limit service (--rls-listen), gRPC.
class RateLimitService final : public FrontEnd {
 public:
  RateLimitService(const DaemonOptions& o, boost::asio::io_context& io, RequestHandler& handler, NodeHost& host) {
    // Refused before anything is bound: gRPC serves from its own threads as soon as it starts.
    if (!listens_on_loopback(o.rls_listen) && o.rls_tls_client_ca.empty() && !o.rls_insecure) {
      throw std::runtime_error("--rls-listen " + o.rls_listen +
                               " is not loopback, and without mutual TLS anyone who reaches it can spend any "
                               "descriptor's limit: give --rls-tls-cert, --rls-tls-key and --rls-tls-client-ca (or "
                               "--rls-insecure to serve it without)");
    }
    rls::RlsServerOptions r;
    r.engine = o.rls_native ? rls::RlsServerOptions::Engine::kNative : rls::RlsServerOptions::Engine::kGrpc;
    r.native_threads = unsigned(std::max<size_t>(1, o.threads));  // --threads: the client API's and native's
    r.listen = o.rls_listen;
    r.response_headers = o.rls_response_headers;
    r.response_metadata = o.rls_response_metadata;
    r.value_metrics_per_rule = o.rls_value_metrics;
    r.limit_headers = o.rls_limit_headers;
    r.limit_header = o.rls_limit_header_names.at(0);
    r.remaining_header = o.rls_limit_header_names.at(1);
    r.reset_header = o.rls_limit_header_names.at(2);
    r.max_pending = o.rls_max_pending;
    r.max_connections = o.rls_max_connections;
    r.max_connections_per_client = o.rls_max_connections_per_client;
    // The node's checks are safe from any thread (the table is concurrent): Envoy's calls are
    // decided on gRPC's threads, not queued for the node's.
    r.decide_on_grpc_threads = checks_from_any_thread(o);
    r.tls_cert = o.rls_tls_cert;
    r.tls_key = o.rls_tls_key;
    r.tls_client_ca = o.rls_tls_client_ca;
    server_ = std::make_unique<rls::RlsServer>(io, handler, r);
    const std::shared_ptr<const RlsConfig> config = host.rls_config();
    if (std::string why = server_->start(config); !why.empty()) throw std::runtime_error("--rls-listen " + why);
    if (!server_->is_loopback() && !server_->is_mutual_tls()) {
      spdlog::warn("rate limit service listens on {}, which is not loopback, without mutual TLS (--rls-insecure)",
                   server_->address());
    }
    spdlog::info("rate limit service ({}{}) on {}, {} domains from {}", o.rls_native ? "native HTTP/2" : "gRPC",
                 server_->is_mutual_tls() ? ", mutual TLS"
                 : server_->is_tls()      ? ", TLS"
                                          : "",
                 server_->address(), config->domains().size(), o.rls_config);
    host.on_rls_config([rls = server_.get()](std::shared_ptr<const RlsConfig> c) { rls->set_config(std::move(c)); });
  }
  // detailed_metric and value_to_metric: a series per value (capped; rls_value_metrics_dropped).
  void append_metrics(std::vector<prometheus::MetricFamily>& families) const override {
    const std::vector<rls::ValueMetrics::Series> series = server_->value_metrics();
    if (series.empty()) return;
    prometheus::MetricFamily f{"tollgate_rls_value_hits_total",
                               "Hits of Envoy's descriptors by value (detailed_metric, value_to_metric), by answer: "
                               "descriptor as the reference server names its stats, rule the limit's",
                               prometheus::MetricType::Counter,
                               {}};
    auto add = [&](const rls::ValueMetrics::Series& s, const char* result, uint64_t hits) {
      prometheus::ClientMetric m;
      m.label = {{"rule", "rls:" + s.rule}, {"descriptor", s.name}, {"result", result}};
      m.counter.value = double(hits);
      f.metric.push_back(std::move(m));
    };
    for (const rls::ValueMetrics::Series& s : series) {
      add(s, "within_limit", s.within_limit);
      add(s, "over_limit", s.over_limit);
      if (s.shadow_over > 0) add(s, "shadow_over", s.shadow_over);
    }
    families.push_back(std::move(f));
  }
  void drain() override { server_->drain(); }  // health NOT_SERVING; calls are still answered
  void stop(std::function<void()> done) override {
    server_->stop();  // later calls answer UNAVAILABLE, uncharged
    done();
  }
  void shutdown() override { server_->shutdown(); }  // what is still queued answers UNAVAILABLE
  void append_stats(StatsList& s) const override {
    for (const auto& [name, value] : server_->stats()) s.emplace_back(name, value);
  }

 private:
  std::unique_ptr<rls::RlsServer> server_;
};

// HTTP (--http-listen), or the metrics listener (--metrics-listen: metrics and health only, its
// counters under metrics_http.*).
class Http final : public FrontEnd {
 public:
  Http(const DaemonOptions& o, boost::asio::io_context& io, RequestHandler& handler, NodeHost& host,
       const http::RoutesOptions& routes, bool metrics_only)
      : token_file_(metrics_only ? "" : o.http_token_file), prefix_(metrics_only ? "metrics_" : "") {
    const std::string& listen = metrics_only ? o.metrics_listen : o.http_listen;
    const char* flag = metrics_only ? "--metrics-listen " : "--http-listen ";
    std::string token;
    if (!token_file_.empty()) {
      token = http::read_token_file(token_file_);  // a ConfigError stops the start
      if (auto warning = http::token_file_warning(token_file_)) spdlog::warn("{}", *warning);
    }
    // Refused before the port is bound: the HTTP thread accepts as soon as it starts.
    if (!metrics_only && !listens_on_loopback(listen) && token.empty() && !o.http_insecure) {
      throw std::runtime_error(flag + listen +
                               " is not loopback, and HTTP without a credential lets anyone who reaches it spend any "
                               "key: give --http-token-file FILE (or --http-insecure to serve it without one)");
    }
    http::HttpServerOptions h;
    h.listen = listen;
    h.max_connections = o.http_max_connections;
    h.max_connections_per_client = o.http_max_connections_per_client;
    h.io_timeout = ms(o.http_timeout_ns);
    h.routes = routes;
    h.routes.metrics_only = metrics_only;
    h.decide_on_http_thread = checks_from_any_thread(o);  // true with --http-listen
    server_ = std::make_unique<http::HttpServer>(io, handler, h);
    server_->set_token(token);
    if (std::string why = server_->start(host.rls_config()); !why.empty()) throw std::runtime_error(flag + why);
    if (metrics_only) {
      spdlog::info("metrics and health on {}", server_->address());
      return;
    }
    if (!server_->is_loopback() && token.empty()) {
      spdlog::warn("HTTP front end listens on {}, which is not loopback, without a token (--http-insecure)",
                   server_->address());
    }
    spdlog::info("HTTP on {}{}", server_->address(), token.empty() ? "" : " (bearer token required)");
    host.on_rls_config(
        [http = server_.get()](std::shared_ptr<const RlsConfig> c) { http->set_rls_config(std::move(c)); });
  }

  // The token file again. A bad one is logged and the token in force stays (an operator rotating
  // it must not open the door, nor lock every client out).
  void reload() override {
    if (token_file_.empty()) return;
    try {
      server_->set_token(http::read_token_file(token_file_));
      spdlog::info("HTTP token reloaded from {}", token_file_);
    } catch (const std::exception& e) {
      spdlog::error("HTTP token not reloaded, the one in force stays: {}", e.what());
    }
  }
  void drain() override { server_->drain(); }  // /readyz 503; requests are still answered
  void stop(std::function<void()> done) override {
    server_->stop();  // later HTTP checks answer 503, uncharged
    done();
  }
  void shutdown() override { server_->shutdown(); }  // connections close; queued checks are not decided
  void append_stats(StatsList& s) const override {
    for (const auto& [name, value] : server_->stats()) s.emplace_back(prefix_ + name, value);
  }

 private:
  std::string token_file_;
  std::string prefix_;
  std::unique_ptr<http::HttpServer> server_;
};

// The rules retriever (--rules-url): polls, hands new rules to the host, keeps the cache.
class RulesService final : public FrontEnd {
 public:
  RulesService(const DaemonOptions& o, boost::asio::io_context& io, NodeHost& host, std::string etag)
      : feed_(io, host, RulesFeedOptions{o.rules_url, o.rules_cache, o.rules_ca, o.rules_poll_ns, {}},
              std::move(etag)) {
    spdlog::info("rules version {} in force; polling {}", host.rules_version(), o.rules_url);
  }
  void start() override { feed_.start(); }
  void reload() override { feed_.poll_now(); }  // the answer applies when it comes
  void tick() override { feed_.retry_cache_write(); }
  void drain() override { feed_.stop(); }
  void append_stats(StatsList& s) const override { feed_.append_stats(s); }

 private:
  RulesFeed feed_;
};

// The RLS config from an xDS server (--rls-xds): accepted configs go to the host, which puts
// them in force on the node's thread as it does a reloaded file.
class XdsConfig final : public FrontEnd {
 public:
  XdsConfig(const DaemonOptions& o, boost::asio::io_context& io, NodeHost& host)
      : client_(
            xds_options(o),
            [&io, &host](std::shared_ptr<const RlsConfig> config, const std::string& version) {
    boost::asio::post(io, [&host, config = std::move(config), version] {
      host.offer_rls_config(config, "the xDS server's version \"" + version + "\"");
    });
            },
            [](bool error, const std::string& line) {
    if (error) {
      spdlog::warn("{}", line);
    } else {
      spdlog::info("{}", line);
    }
        }),
  server_(o.rls_xds) {
    // Started now, so that a TLS file that cannot be read stops the daemon before it serves,
    // as the other doors' files do; what it offers waits in the node's io_context until it runs.
    if (std::string why = client_.start(); !why.empty()) throw std::runtime_error("--rls-xds: " + why);
    spdlog::info("RLS config from the xDS server {}; every rate limit call is answered OK until its first config",
                 server_);
  }
  void shutdown() override { client_.stop(); }
  void append_stats(StatsList& s) const override {
    const StatsList mine = client_.stats();
    s.insert(s.end(), mine.begin(), mine.end());
  }

 private:
  static rls::XdsClientOptions xds_options(const DaemonOptions& o) {
    rls::XdsClientOptions x;
    x.server = o.rls_xds;
    x.node_id = o.rls_xds_node_id;
    for (const std::string& kv : o.rls_xds_node_metadata) {
      const size_t eq = kv.find('=');
      x.node_metadata.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
    for (const std::string& h : o.rls_xds_headers) {
      const size_t colon = h.find(':');
      std::string value = h.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      x.headers.emplace_back(h.substr(0, colon), value);
    }
    x.tls_ca = o.rls_xds_tls_ca;
    x.tls_cert = o.rls_xds_tls_cert;
    x.tls_key = o.rls_xds_tls_key;
    x.tls_server_name = o.rls_xds_tls_server_name;
    x.load = {.merge_domains = o.rls_merge_domains, .shadow_mode = o.rls_shadow_mode, .quota_mode = o.rls_quota_mode};
    return x;
  }
  rls::XdsClient client_;
  std::string server_;
};

}  // namespace

std::vector<std::unique_ptr<FrontEnd>> make_front_ends(const DaemonOptions& options, boost::asio::io_context& io,
                                                       RequestHandler& handler, NodeHost& host,
                                                       const http::RoutesOptions& routes, std::string rules_etag) {
  std::vector<std::unique_ptr<FrontEnd>> all;
  all.push_back(std::make_unique<ClientApi>(options, io, handler, host));
  if (!options.rls_listen.empty()) all.push_back(std::make_unique<RateLimitService>(options, io, handler, host));
  if (!options.http_listen.empty()) all.push_back(std::make_unique<Http>(options, io, handler, host, routes, false));
  if (!options.metrics_listen.empty()) all.push_back(std::make_unique<Http>(options, io, handler, host, routes, true));
  if (!options.rules_url.empty())
    all.push_back(std::make_unique<RulesService>(options, io, host, std::move(rules_etag)));
  if (!options.rls_xds.empty()) all.push_back(std::make_unique<XdsConfig>(options, io, host));
  all.push_back(std::make_unique<FreedMemory>());
  return all;
}

StatCatalog daemon_stat_catalog(const DaemonOptions& options) {
  StatCatalog c;
  c.add(NodeHost::stat_defs());
  c.add(api::ApiServer::stat_defs());
  if (options.threads > 1) c.add(kPerThread);
  if (!options.rls_listen.empty()) c.add(rls::RlsServer::stat_defs());
  if (!options.http_listen.empty()) c.add(http::HttpServer::stat_defs());
  if (!options.metrics_listen.empty()) c.add(http::HttpServer::stat_defs(), "metrics_");
  if (!options.rules_url.empty()) c.add(RulesFeed::stat_defs());
  if (!options.rls_xds.empty()) c.add(rls::XdsClient::stat_defs());
  c.add(kMemoryRelease);
  return c;
}

}  // namespace tollgate
