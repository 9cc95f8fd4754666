#include "daemon.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <prometheus/histogram.h>

#include "api/api_server.h"
#include "api/endpoint.h"
#include "bind_address.h"
#include "daemon/api_workers.h"
#include "daemon/descriptor_limit.h"
#include "fault_injection.h"
#include "host/node_host.h"
#include "http/http_server.h"
#include "http/token_file.h"
#include "retriever/rules_feed.h"
#include "daemon/memory_bound.h"
#include "rls/rls_server.h"
#include "tcp_transport.h"
#include "tollgate/rls_config.h"

namespace tollgate {
namespace {

bool is_loopback_bind(const std::string& bind) {
  try {
    return parse_bind_address(bind).first.is_loopback();
  } catch (const std::runtime_error&) {
    return false;  // the transport reports the bad address when it binds
  }
}

}  // namespace

struct DaemonHistograms {
  explicit DaemonHistograms(size_t threads) {
    for (size_t i = 0; i < std::max<size_t>(threads, 1); ++i) {
      check.push_back(std::make_unique<prometheus::Histogram>(
          prometheus::Histogram::BucketBoundaries{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 1e-2}));
    }
  }
  // A check (one request's items), 1 us to 10 ms: one histogram per client API thread
  // (current_api_thread), since each takes a lock to observe; summed when collected.
  std::vector<std::unique_ptr<prometheus::Histogram>> check;
  // A round (Node::tick): sealing, gossip, membership, housekeeping; 10 us to 0.5 s.
  prometheus::Histogram round{{1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5}};

  prometheus::ClientMetric collect_checks() const {
    prometheus::ClientMetric total = check[0]->Collect();
    for (size_t t = 1; t < check.size(); ++t) {
      const prometheus::ClientMetric m = check[t]->Collect();
      total.histogram.sample_count += m.histogram.sample_count;
      total.histogram.sample_sum += m.histogram.sample_sum;
      for (size_t b = 0; b < total.histogram.bucket.size(); ++b) {
        total.histogram.bucket[b].cumulative_count += m.histogram.bucket[b].cumulative_count;
      }
    }
    return total;
  }

  std::vector<prometheus::MetricFamily> collect() const {
    return {{"tollgate_check_duration_seconds",
             "Time spent deciding one request's checks (any front end, every client API thread)",
             prometheus::MetricType::Histogram,
             {collect_checks()}},
            {"tollgate_round_duration_seconds", "Time one gossip round takes on the node's thread",
             prometheus::MetricType::Histogram,
             {round.Collect()}}};
  }
};

namespace {
double seconds(MonoNanos ns) { return double(ns) / 1e9; }

// Whether a front end's listen address ("HOST:PORT", "tcp:HOST:PORT" or "unix:PATH") is loopback
// or a Unix socket, from its text (IP addresses only, as the listeners take). One that does not
// parse counts as loopback here: the listener's start reports it.
bool listens_on_loopback(std::string text) {
  if (!text.starts_with("unix:") && !text.starts_with("tcp:")) text = "tcp:" + text;
  std::string why;
  const auto endpoint = api::parse_endpoint(text, &why);
  return !endpoint || endpoint->is_loopback();
}

// The host's log lines go to spdlog.
void log_to_spdlog(LogLevel level, const std::string& line) {
  switch (level) {
    case LogLevel::kInfo: return spdlog::info("{}", line);
    case LogLevel::kWarn: return spdlog::warn("{}", line);
    case LogLevel::kError: return spdlog::error("{}", line);
  }
}

}  // namespace

void Daemon::check_memory_bound() const {
  const std::vector<MemoryPart> parts = memory_bound(options_);
  const uint64_t bound = total_bytes(parts);
  std::optional<uint64_t> limit;
  std::string limit_from;
  if (options_.memory_limit == "auto") {
    limit = cgroup_memory_max();
    limit_from = "the memory.max of this process's cgroup (systemd's MemoryMax=)";
  } else if (options_.memory_limit != "none") {
    std::string why;
    limit = parse_memory_size(options_.memory_limit, &why);  // checked by parse_daemon_options
    limit_from = "--memory-limit";
  }
  spdlog::info("memory bound {}{}", describe(parts), limit ? "; limit " + mebibytes(*limit) : "; no memory limit");
  if (limit && bound > *limit) {
    const auto largest = std::max_element(parts.begin(), parts.end(),
                                          [](const MemoryPart& a, const MemoryPart& b) { return a.bytes < b.bytes; });
    throw ConfigError("--memory-limit", 0, 0,
                      "at these settings tollgated can take up to " + mebibytes(bound) + " (" + describe(parts) +
                          "), more than the " + mebibytes(*limit) + " of " + limit_from +
                          ": a flood would end in an OOM kill. Lower the largest part, " + largest->name + " (" +
                          largest->from + "), or raise the limit");
  }
}

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)),
      histograms_(std::make_unique<DaemonHistograms>(options_.threads)),
      watch_timer_(io_),
      shutdown_timer_(io_),
      signals_(io_, SIGTERM, SIGINT) {
  signals_.add(SIGHUP);
  NodeHostOptions host = node_host_options(options_);
  check_memory_bound();
  host.log = log_to_spdlog;
  host.on_round = [h = histograms_.get()](int64_t round_ns) { h->round.Observe(seconds(round_ns)); };
  std::string rules_etag;
  if (!options_.rules_url.empty()) {
    InitialRules initial = RulesFeed::load_initial({options_.rules_url, options_.rules_cache, options_.rules_ca, options_.rules_poll_ns});
    host.rules_text = std::move(initial.text);
    host.rules_origin = std::move(initial.origin);
    rules_etag = std::move(initial.etag);
  }

  bool all_loopback = is_loopback_bind(options_.bind);
  std::vector<api::Endpoint> endpoints;
  for (const std::string& l : options_.listen) {
    std::string why;
    auto ep = api::parse_endpoint(l, &why);
    if (!ep) throw std::runtime_error("--listen " + why);
    if (!ep->is_loopback()) {
      spdlog::warn("client API listens on {}, which is not loopback: the API has no authentication", l);
      all_loopback = false;
    }
    endpoints.push_back(*ep);
  }
  if (options_.cluster_key_file.empty()) {
    // --insecure-gossip: said at every start, loopback included (there every local user can reach
    // the gossip port, and so bypass the API socket's permissions).
    spdlog::warn("gossip is not authenticated (--insecure-gossip): anyone who can send to {} can charge, deny or "
                 "evict at will{}",
                 options_.bind, all_loopback ? " (on loopback: every local user)" : "");
  }

  // Descriptors for every connection the limits allow, plus outbound connections to peers (a
  // thousand counted) and files.
  const TcpTransportOptions tcp_options;
  uint64_t descriptors = options_.api_max_connections + 64 + (options_.http_listen.empty() ? 0 : options_.http_max_connections) +
                         (options_.metrics_listen.empty() ? 0 : options_.http_max_connections);
  if (options_.transport == TransportKind::kTcp) descriptors += tcp_options.max_inbound_connections + 1024;
  if (std::string warning = ensure_descriptor_limit(descriptors); !warning.empty()) spdlog::warn("{}", warning);

  host_ = std::make_unique<NodeHost>(io_, std::move(host));
  if (!options_.rules_url.empty()) {
    rules_feed_ = std::make_unique<RulesFeed>(
        io_, *host_, RulesFeedOptions{options_.rules_url, options_.rules_cache, options_.rules_ca, options_.rules_poll_ns},
        std::move(rules_etag));
    spdlog::info("rules version {} in force; polling {}", host_->rules_version(), options_.rules_url);
  }

  api::ApiServerOptions api_options;
  api_options.listen = endpoints;
  api_options.max_connections = options_.api_max_connections;
  api_options.max_connections_per_client = options_.api_max_connections_per_client;
  api_options.idle_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(options_.api_idle_timeout_ns));
  api_options.on_offense = [this](std::string_view who, std::string_view what) { host_->report_offense(who, what); };
  if (options_.threads > 1) {
    // Each thread's server holds its share of the connection limits (the node thread's server
    // hands each connection to the least loaded, so the shares fill evenly).
    const size_t n = options_.threads;
    api_options.max_connections = (api_options.max_connections + n - 1) / n;
    api_options.max_connections_per_client = (api_options.max_connections_per_client + n - 1) / n;
    api_options.max_output_bytes = (api_options.max_output_bytes + n - 1) / n;  // the budget, too
    workers_ = std::make_unique<ApiWorkers>(n - 1, io_, *this, api_options);
  }
  api_ = std::make_unique<api::ApiServer>(io_, *this, api_options);
  if (workers_) api_->share_connections_with(workers_->servers());
  if (std::string why = api_->start(); !why.empty()) throw std::runtime_error("--listen " + why);

  const std::shared_ptr<const RlsConfig> rls_config = host_->rls_config();
  if (!options_.rls_listen.empty()) {
    rls::RlsServerOptions rls_options;
    rls_options.listen = options_.rls_listen;
    rls_options.response_headers = options_.rls_response_headers;
    rls_options.max_pending = options_.rls_max_pending;
    // With client API threads the node's checks are safe from any thread (the table is
    // concurrent): Envoy's calls are decided on gRPC's threads, not queued for the node's.
    rls_options.decide_on_grpc_threads = options_.threads > 1;
    rls_options.tls_cert = options_.rls_tls_cert;
    rls_options.tls_key = options_.rls_tls_key;
    rls_options.tls_client_ca = options_.rls_tls_client_ca;
    // Refused before anything is bound: gRPC serves from its own threads as soon as it starts.
    if (!listens_on_loopback(options_.rls_listen) && options_.rls_tls_client_ca.empty() && !options_.rls_insecure) {
      throw std::runtime_error("--rls-listen " + options_.rls_listen +
                               " is not loopback, and without mutual TLS anyone who reaches it can spend any "
                               "descriptor's limit: give --rls-tls-cert, --rls-tls-key and --rls-tls-client-ca (or "
                               "--rls-insecure to serve it without)");
    }
    rls_ = std::make_unique<rls::RlsServer>(io_, *this, rls_options);
    if (std::string why = rls_->start(rls_config); !why.empty()) throw std::runtime_error("--rls-listen " + why);
    if (!rls_->is_loopback() && !rls_->is_mutual_tls()) {
      spdlog::warn("rate limit service listens on {}, which is not loopback, without mutual TLS (--rls-insecure)",
                   rls_->address());
    }
    spdlog::info("rate limit service (gRPC{}) on {}, {} domains from {}",
                 rls_->is_mutual_tls() ? ", mutual TLS" : rls_->is_tls() ? ", TLS" : "", rls_->address(),
                 rls_config->domains().size(), options_.rls_config);
    host_->on_rls_config([rls = rls_.get()](std::shared_ptr<const RlsConfig> c) { rls->set_config(std::move(c)); });
  }

  http::HttpServerOptions http_options;
  http_options.max_connections = options_.http_max_connections;
  http_options.max_connections_per_client = options_.http_max_connections_per_client;
  http_options.io_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(options_.http_timeout_ns));
  // Ready alone once a member would have been declared failed: a node with no peer to hear
  // from (or whose peers are all down) serves from its own buckets.
  const auto ready_alone_at = std::chrono::steady_clock::now() + std::chrono::nanoseconds(options_.node.fail_after_ns);
  http_options.routes.alone_long_enough = [ready_alone_at] { return std::chrono::steady_clock::now() >= ready_alone_at; };
  http_options.routes.extra_metrics = [h = histograms_.get()] { return h->collect(); };
  if (!options_.http_listen.empty()) {
    std::string token;
    if (!options_.http_token_file.empty()) {
      token = http::read_token_file(options_.http_token_file);  // a ConfigError stops the start
      if (auto warning = http::token_file_warning(options_.http_token_file)) spdlog::warn("{}", *warning);
    }
    // Refused before the port is bound: the HTTP thread accepts as soon as it starts.
    if (!listens_on_loopback(options_.http_listen) && token.empty() && !options_.http_insecure) {
      throw std::runtime_error("--http-listen " + options_.http_listen +
                               " is not loopback, and HTTP without a credential lets anyone who reaches it spend any "
                               "key: give --http-token-file FILE (or --http-insecure to serve it without one)");
    }
    http_options.listen = options_.http_listen;
    http_ = std::make_unique<http::HttpServer>(io_, *this, http_options);
    http_->set_token(token);
    if (std::string why = http_->start(rls_config); !why.empty()) throw std::runtime_error("--http-listen " + why);
    if (!http_->is_loopback() && token.empty()) {
      spdlog::warn("HTTP front end listens on {}, which is not loopback, without a token (--http-insecure)", http_->address());
    }
    spdlog::info("HTTP on {}{}", http_->address(), token.empty() ? "" : " (bearer token required)");
    host_->on_rls_config([http = http_.get()](std::shared_ptr<const RlsConfig> c) { http->set_rls_config(std::move(c)); });
  }
  if (!options_.metrics_listen.empty()) {
    http_options.listen = options_.metrics_listen;
    http_options.routes.metrics_only = true;
    metrics_http_ = std::make_unique<http::HttpServer>(io_, *this, http_options);
    if (std::string why = metrics_http_->start(rls_config); !why.empty()) throw std::runtime_error("--metrics-listen " + why);
    spdlog::info("metrics and health on {}", metrics_http_->address());
  }

  spdlog::info("tollgated {} (incarnation {}): {} on {} over {}, {} membership; client API on {} ({} thread{})",
               host_->node_id(), host_->incarnation(), dissemination_mode_name(options_.node.mode), host_->bind(),
               options_.transport == TransportKind::kUdp ? "udp" : "tcp",
               options_.node.membership == MembershipKind::kStatic ? "static" : "heartbeat", fmt::join(options_.listen, ", "),
               options_.threads, options_.threads == 1 ? "" : "s");
}

Daemon::~Daemon() {
  // The client API threads first (run() may have ended by an exception, with them still
  // serving): they call into everything below.
  api_.reset();
  workers_.reset();
}

int Daemon::run() {
  wait_for_signal();
  host_->start();
  schedule_watch();
  if (rules_feed_) rules_feed_->start();
  io_.run();
  if (workers_) workers_->node_loop_ended();
  for (auto* h : http_servers()) h->shutdown();  // open connections close; checks still queued are not decided
  if (rls_) rls_->shutdown();  // the node no longer runs: what is still queued answers UNAVAILABLE
  return 0;
}

void Daemon::wait_for_signal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    if (signo != SIGHUP) return shutdown();
    if (rules_feed_) rules_feed_->poll_now();  // the rules service's answer applies when it comes
    host_->reload();
    reload_http_token();
    wait_for_signal();
  });
}

std::vector<http::HttpServer*> Daemon::http_servers() const {
  std::vector<http::HttpServer*> all;
  for (const auto& h : {http_.get(), metrics_http_.get()}) {
    if (h) all.push_back(h);
  }
  return all;
}

// SIGHUP: the token file again. A bad one is logged and the token in force stays (an operator
// rotating it must not open the door, nor lock every client out).
void Daemon::reload_http_token() {
  if (!http_ || options_.http_token_file.empty()) return;
  try {
    http_->set_token(http::read_token_file(options_.http_token_file));
    spdlog::info("HTTP token reloaded from {}", options_.http_token_file);
  } catch (const std::exception& e) {
    spdlog::error("HTTP token not reloaded, the one in force stays: {}", e.what());
  }
}

void Daemon::schedule_watch() {
  // The host watches its own files; the daemon only retries a failed rules-cache write.
  watch_timer_.expires_after(std::chrono::seconds(1));
  watch_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    if (rules_feed_) rules_feed_->retry_cache_write();
    schedule_watch();
  });
}

void Daemon::shutdown() {
  if (stopping_) return;
  stopping_ = true;
  spdlog::info("leaving the cluster");
  if (rls_) rls_->drain();  // health NOT_SERVING; calls are still answered for now
  for (auto* h : http_servers()) h->drain();  // /readyz 503; requests are still answered for now
  api_->drain();  // answers to requests already read still go out; the socket file goes now
  if (workers_) workers_->drain();
  host_->stop_rounds();
  watch_timer_.cancel();
  signals_.cancel();
  if (rules_feed_) rules_feed_->stop();
  // Leave only once the requests already read have been answered (a large batch goes a slice
  // at a time): leave() seals what this node admitted and sends it with the departure, and a
  // check admitted after that would never reach the others.
  shutdown_timer_.expires_after(std::chrono::milliseconds(100));
  shutdown_timer_.async_wait([this](const boost::system::error_code&) {
    api_->stop();  // a client that has not taken its answers in 100 ms is cut off
    if (rls_) rls_->stop();  // later rate limit calls answer UNAVAILABLE, uncharged
    for (auto* h : http_servers()) h->stop();  // later HTTP checks answer 503, uncharged
    auto leave = [this] { host_->leave([this] { io_.stop(); }); };
    // With client API threads, leave once none of them can check any more.
    if (workers_) {
      workers_->stop(leave);
    } else {
      leave();
    }
  });
}

void Daemon::check(std::span<const CheckItem> items, std::span<Decision> out) {
  const MonoNanos now = host_->now_ns();
  Node& node = host_->node();
  for (size_t i = 0; i < items.size(); ++i) out[i] = node.check(items[i].key, items[i].cost, now);
  histograms_->check[current_api_thread()]->Observe(seconds(host_->now_ns() - now));
}

bool Daemon::check_all(std::span<const CheckItem> items, std::span<Decision> out) {
  const MonoNanos now = host_->now_ns();
  const bool all = host_->node().check_all(items, out, now);
  histograms_->check[current_api_thread()]->Observe(seconds(host_->now_ns() - now));
  return all;
}

std::vector<MemberInfo> Daemon::members() { return host_->node().membership().view(host_->now_ns()); }

std::vector<std::pair<std::string, RuleCounters>> Daemon::rule_counters() { return host_->node().rule_counters(); }

StatsList Daemon::stats() {
  StatsList s = host_->stats();
  if (rules_feed_) {
    rules_feed_->append_stats(s);
  } else {
    for (const char* name : {"rules_polls", "rules_polls_not_modified", "rules_poll_failures", "rules_cache_write_failures"}) {
      s.emplace_back(name, 0);
    }
  }
  append_api_stats(s);
  if (rls_) {
    for (const auto& [name, value] : rls_->stats()) s.emplace_back(name, value);
  }
  if (http_) {
    for (const auto& [name, value] : http_->stats()) s.emplace_back(name, value);
  }
  if (metrics_http_) {  // the same counters, of the metrics listener: metrics_http.*
    for (const auto& [name, value] : metrics_http_->stats()) s.emplace_back("metrics_" + name, value);
  }
  return s;
}

void Daemon::append_api_stats(StatsList& s) const {
  StatsList total = api_->stats();
  if (!workers_) {
    s.insert(s.end(), total.begin(), total.end());
    return;
  }
  // Every thread's server counts its own connections: the sums (the largest, for a high-water
  // mark), and how many connections and checks each thread has, to see the spread.
  const std::vector<api::ApiServer*> servers = workers_->servers();
  std::vector<StatsList> per_thread = {total};
  for (const api::ApiServer* server : servers) per_thread.push_back(server->stats());
  for (size_t t = 1; t < per_thread.size(); ++t) {
    for (size_t i = 0; i < total.size(); ++i) {
      const bool high_water = total[i].first.find("high_water") != std::string::npos;
      total[i].second = high_water ? std::max(total[i].second, per_thread[t][i].second) : total[i].second + per_thread[t][i].second;
    }
  }
  s.insert(s.end(), total.begin(), total.end());
  s.emplace_back("api.threads", int64_t(per_thread.size()));
  for (const std::string stat : {"connections_open", "checks"}) {
    for (size_t t = 0; t < per_thread.size(); ++t) {
      for (const auto& [name, value] : per_thread[t]) {
        if (name == "api." + stat) s.emplace_back("api.thread." + std::to_string(t) + "." + stat, value);
      }
    }
  }
}

std::string Daemon::set_faults(const FaultSettings& faults) {
  if (!options_.enable_fault_injection) {
    return "fault injection is off on this daemon: it is accepted only when tollgated runs with "
           "--enable-fault-injection (tests and tollgate-sim's local back end)";
  }
  if (std::string why = faults.validate(); !why.empty()) return why;
  FaultSettings spec = faults;
  // Operators name nodes by id; the transport sees addresses. Accept both.
  for (const std::string& id : faults.drop_to) {
    if (const MemberInfo* v = host_->node().membership().find(id)) spec.drop_to.push_back(v->address);
  }
  host_->faults().set_faults(spec);
  spdlog::info("fault injection {}", spec.empty() ? "cleared" : "set");
  return {};
}

}  // namespace tollgate
