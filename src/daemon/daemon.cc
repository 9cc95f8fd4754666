#include "daemon.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <random>
#include <system_error>

#include "api/api_server.h"
#include "api/endpoint.h"
#include "daemon/api_workers.h"
#include "bind_address.h"
#include "daemon/descriptor_limit.h"
#include "fault_injection.h"
#include "tcp_transport.h"
#include "codec/codec.h"
#include "udp_transport.h"
#include "codec/cluster_key.h"
#include "tollgate/config_error.h"
#include "tollgate/peers_file.h"
#include "http/http_server.h"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <prometheus/histogram.h>
#include "rls/rls_server.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/rules_file.h"
#include "config/content_version.h"
#include "config/read_file.h"
#include "retriever/rules_retriever.h"

namespace tollgate {
namespace {

uint64_t seed_from_os() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// A restarted node must come back with a higher incarnation than its last life. Wall time is
// used for that one number only (never for buckets or failure detection); microseconds keep
// two restarts within a second distinct.
uint64_t incarnation_from_wall_clock() {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

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
}  // namespace

Daemon::Daemon(DaemonOptions options)
    : options_(std::move(options)),
      incarnation_(options_.incarnation ? options_.incarnation : incarnation_from_wall_clock()),
      random_(seed_from_os()),
      histograms_(std::make_unique<DaemonHistograms>(options_.threads)),
      tick_timer_(io_),
      watch_timer_(io_),
      signals_(io_, SIGTERM, SIGINT) {
  signals_.add(SIGHUP);
  file_rules_ = std::make_shared<const RuleSet>();
  if (!options_.rules_file.empty()) load_rules_file_now();
  if (!options_.rules_url.empty()) load_rules_from_service_now();
  if (!options_.rls_config.empty()) {
    rls_fingerprint_ = rls_config_fingerprint(options_.rls_config);
    rls_config_ = load_rls_config(options_.rls_config);
  }
  auto rules = combined_rules();

  ClusterKeys keys;
  if (!options_.cluster_key_file.empty()) {
    keys = load_cluster_keys(options_.cluster_key_file);
    if (auto w = cluster_key_file_warning(options_.cluster_key_file)) spdlog::warn("{}", *w);
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
  if (keys.empty()) {
    // --insecure-gossip: said at every start, loopback included (there every local user can reach
    // the gossip port, and so bypass the API socket's permissions).
    spdlog::warn("gossip is not authenticated (--insecure-gossip): anyone who can send to {} can charge, deny or "
                 "evict at will{}",
                 options_.bind, all_loopback ? " (on loopback: every local user)" : "");
  }

  // Descriptors for every connection the limits allow, plus outbound connections to peers (a
  // thousand counted) and files.
  const TcpTransportOptions tcp_options;
  uint64_t descriptors = options_.api_max_connections + 64 + (options_.http_listen.empty() ? 0 : options_.http_max_connections);
  if (options_.transport == TransportKind::kTcp) descriptors += tcp_options.max_inbound_connections + 1024;
  if (std::string warning = ensure_descriptor_limit(descriptors); !warning.empty()) spdlog::warn("{}", warning);

  if (options_.transport == TransportKind::kUdp) {
    transport_ = std::make_unique<UdpTransport>(io_, options_.bind, keys, options_.max_datagram);
  } else {
    transport_ = std::make_unique<TcpTransport>(io_, options_.bind, keys, tcp_options);
  }
  transport_->set_source_limits({options_.gossip_peer_bytes_per_second, options_.gossip_peer_bytes_per_second});
  transport_->set_max_message_age(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::nanoseconds(options_.max_message_age_ns)));
  transport_->set_offense_reporter([this](std::string_view who, std::string_view what) { report_offense(who, what); });
  faults_ = std::make_unique<FaultInjectingTransport>(io_, *transport_, random_);

  NodeOptions node = node_options(options_, incarnation_);
  if (options_.threads > 1) {
    // Checks from every client API thread at once; the node's thread seals what they leave
    // pending when a flood of keys asks for it (NodeOptions::early_seal_keys).
    node.keys.concurrent = true;
    node.seal_wanted = [this] { boost::asio::post(io_, [this] { node_->seal_early(clock_.now_ns()); }); };
  }
  // Every batch, sealed here or relayed by anyone, must fit one datagram.
  const size_t max_batch_bytes = max_batch_bytes_for(options_.max_datagram);
  node.split_for_sealing = [id = options_.node_id, max_batch_bytes](std::vector<ConsumptionEntry> entries) {
    return split_for_sealing(std::move(entries), id, max_batch_bytes);
  };
  node_ = std::make_unique<Node>(node, rules, *faults_, random_);
  if (options_.node.membership == MembershipKind::kStatic) {
    node_->set_peers(load_peers_file(options_.peers_file), clock_.now_ns());
    std::error_code ec;
    peers_mtime_ = std::filesystem::last_write_time(options_.peers_file, ec);
    peers_size_ = std::filesystem::file_size(options_.peers_file, ec);
  }
  faults_->set_receiver([this](GossipMessage&& m) { node_->receive(m, clock_.now_ns()); });

  api::ApiServerOptions api_options;
  api_options.listen = endpoints;
  api_options.max_connections = options_.api_max_connections;
  api_options.max_connections_per_client = options_.api_max_connections_per_client;
  api_options.idle_timeout =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(options_.api_idle_timeout_ns));
  api_options.on_offense = [this](std::string_view who, std::string_view what) { report_offense(who, what); };
  if (options_.threads > 1) {
    // Each thread's server holds its share of the connection limits (the node thread's server
    // hands each connection to the least loaded, so the shares fill evenly).
    const size_t n = options_.threads;
    api_options.max_connections = (api_options.max_connections + n - 1) / n;
    api_options.max_connections_per_client = (api_options.max_connections_per_client + n - 1) / n;
    workers_ = std::make_unique<ApiWorkers>(n - 1, io_, *this, api_options);
  }
  api_ = std::make_unique<api::ApiServer>(io_, *this, api_options);
  if (workers_) api_->share_connections_with(workers_->servers());
  if (std::string why = api_->start(); !why.empty()) throw std::runtime_error("--listen " + why);

  if (!options_.rls_listen.empty()) {
    rls::RlsServerOptions rls_options;
    rls_options.listen = options_.rls_listen;
    rls_options.response_headers = options_.rls_response_headers;
    rls_options.max_pending = options_.rls_max_pending;
    // With client API threads the node's checks are safe from any thread (the table is
    // concurrent): Envoy's calls are decided on gRPC's threads, not queued for the node's.
    rls_options.decide_on_grpc_threads = options_.threads > 1;
    rls_ = std::make_unique<rls::RlsServer>(io_, *this, rls_options);
    if (std::string why = rls_->start(rls_config_); !why.empty()) throw std::runtime_error("--rls-listen " + why);
    if (!rls_->is_loopback()) {
      spdlog::warn("rate limit service listens on {}, which is not loopback: it has no authentication", rls_->address());
    }
    spdlog::info("rate limit service (gRPC) on {}, {} domains from {}", rls_->address(), rls_config_->domains().size(),
                 options_.rls_config);
  }

  if (!options_.http_listen.empty()) {
    http::HttpServerOptions http_options;
    http_options.listen = options_.http_listen;
    http_options.max_connections = options_.http_max_connections;
    http_options.io_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(options_.http_timeout_ns));
    // Ready alone once a member would have been declared failed: a node with no peer to hear
    // from (or whose peers are all down) serves from its own buckets.
    const auto ready_alone_at = std::chrono::steady_clock::now() + std::chrono::nanoseconds(options_.node.fail_after_ns);
    http_options.routes.alone_long_enough = [ready_alone_at] { return std::chrono::steady_clock::now() >= ready_alone_at; };
    http_options.routes.extra_metrics = [h = histograms_.get()] { return h->collect(); };
    http_ = std::make_unique<http::HttpServer>(io_, *this, http_options);
    if (std::string why = http_->start(rls_config_); !why.empty()) throw std::runtime_error("--http-listen " + why);
    if (!http_->is_loopback()) {
      spdlog::warn("HTTP front end listens on {}, which is not loopback: it has no authentication", http_->address());
    }
    spdlog::info("HTTP on {}", http_->address());
  }

  spdlog::info("tollgated {} (incarnation {}): {} on {} over {}, {} membership; client API on {} ({} thread{})",
               options_.node_id, incarnation_, dissemination_mode_name(options_.node.mode), options_.bind,
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
  schedule_tick();
  schedule_watch();
  if (retriever_) retriever_->start(rules_in_force_text_, rules_etag_);
  io_.run();
  if (workers_) workers_->node_loop_ended();
  if (http_) http_->shutdown();  // open connections close; checks still queued are not decided
  if (rls_) rls_->shutdown();  // the node no longer runs: what is still queued answers UNAVAILABLE
  return 0;
}

std::shared_ptr<const RuleSet> Daemon::combined_rules() const {
  if (!rls_config_) return file_rules_;
  return std::make_shared<const RuleSet>(file_rules_->rules(), file_rules_->default_limit(), rls_config_);
}

bool Daemon::reload_rls_config() {
  if (options_.rls_config.empty()) return false;
  rls_fingerprint_ = rls_config_fingerprint(options_.rls_config);
  try {
    rls_config_ = load_rls_config(options_.rls_config);
    if (rls_) rls_->set_config(rls_config_);
    if (http_) http_->set_rls_config(rls_config_);
    ++reloads_.rls;
    spdlog::info("RLS config reloaded from {}: {} domains", options_.rls_config, rls_config_->domains().size());
    return true;
  } catch (const std::exception& e) {
    ++reloads_.rls_failed;
    spdlog::error("RLS config not reloaded, the previous config stays in force: {}", e.what());
    return false;
  }
}

void Daemon::report_offense(std::string_view offender, std::string_view what) {
  // Client API threads report their connections' offenses too.
  const std::lock_guard lock(offenses_mu_);
  const auto verdict = offenses_.admit(offender, clock_.now_ns());
  if (!verdict) return;
  if (verdict->suppressed > 0) {
    spdlog::warn("{}: {} ({} more reports from it suppressed in the last {} s)", verdict->offender, what,
                 verdict->suppressed, OffenseLimiterOptions{}.interval_ns / kNanosPerSecond);
  } else {
    spdlog::warn("{}: {} (further reports from it are limited to one every {} s)", verdict->offender, what,
                 OffenseLimiterOptions{}.interval_ns / kNanosPerSecond);
  }
}

void Daemon::wait_for_signal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    if (signo != SIGHUP) return shutdown();
    reload_rules();
    wait_for_signal();
  });
}

void Daemon::schedule_tick() {
  // Rounds keep their cadence: the next deadline follows the previous one, not the end of the
  // work; after a stall the node skips to now rather than running rounds back to back.
  const auto interval = std::chrono::nanoseconds(options_.node.interval_ns);
  auto next = tick_timer_.expiry() + interval;
  if (next < std::chrono::steady_clock::now()) next = std::chrono::steady_clock::now() + interval;
  tick_timer_.expires_at(next);
  tick_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    const MonoNanos start = clock_.now_ns();
    node_->tick(start);
    histograms_->round.Observe(seconds(clock_.now_ns() - start));
    schedule_tick();
  });
}

void Daemon::schedule_watch() {
  watch_timer_.expires_after(std::chrono::seconds(1));
  watch_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    reload_peers_if_changed();
    if (rules_cache_stale_) write_rules_cache(rules_in_force_text_);
    // An edited rules file applies within two seconds, SIGHUP or not: once its fingerprint has
    // held for a whole tick, so that a file written in place (truncated, then filled) is not
    // read half-written, which could parse as fewer rules and drop buckets. A broken one is
    // reported once (its fingerprint is taken) and the rules in force stay.
    if (!options_.rules_file.empty()) {
      const std::string now = file_fingerprint(options_.rules_file);
      if (now == rules_fingerprint_) {
        rules_changing_.clear();
      } else if (now != rules_changing_) {
        rules_changing_ = now;
      } else if (reload_rules_file()) {
        rules_changing_.clear();
        node_->replace_rules(combined_rules(), clock_.now_ns());
      }
    }
    if ((rls_ || http_) && !options_.rls_config.empty() && rls_config_fingerprint(options_.rls_config) != rls_fingerprint_ && reload_rls_config()) {
      node_->replace_rules(combined_rules(), clock_.now_ns());
    }
    schedule_watch();
  });
}

void Daemon::load_rules_file_now() {
  // Fingerprint first: an edit while reading is seen again at the next watch.
  rules_fingerprint_ = file_fingerprint(options_.rules_file);
  set_rules_text(read_config_file(options_.rules_file, "rules file"), options_.rules_file);
}


void Daemon::load_rules_from_service_now() {
  std::string why;
  const std::optional<HttpUrl> url = parse_http_url(options_.rules_url, &why);
  if (!url) throw ConfigError(options_.rules_url, 0, 0, why);  // parse_daemon_options checked it
  FetchLimits limits;  // 5 s, 4 MiB
  if (url->tls) {
    limits.tls = make_tls_context(options_.rules_ca, &why);
    if (!limits.tls) throw ConfigError(options_.rules_ca.empty() ? options_.rules_url : options_.rules_ca, 0, 0, why);
  } else {
    boost::system::error_code not_ip;
    const auto host = boost::asio::ip::make_address(url->host, not_ip);
    if (url->host != "localhost" && (not_ip || !host.is_loopback())) {
      spdlog::warn("rules come over plain http from {}: whoever can alter that traffic sets this cluster's limits; "
                   "use https:// (or keep the rules service on a trusted network)",
                   url->host_header);
    }
  }
  // The cache first: a restart while the rules service is down starts with the last good rules,
  // and the first poll (at once) brings newer ones.
  bool loaded = false;
  std::error_code ec;
  if (std::filesystem::exists(options_.rules_cache, ec)) {
    try {
      set_rules_text(read_config_file(options_.rules_cache, "rules cache"), options_.rules_cache);
      loaded = true;
      spdlog::info("rules from the cache {} (version {}), until {} answers", options_.rules_cache, rules_version_,
                   options_.rules_url);
    } catch (const std::exception& e) {
      spdlog::warn("the rules cache is not used: {}", e.what());
    }
  }
  if (!loaded) {
    FetchResult r = fetch_http_now(*url, limits);
    if (r.kind != FetchResult::Kind::kNew) {
      throw ConfigError(options_.rules_url, 0, 0,
                        "no rules to start with: the rules service answers " + r.error +
                            ", and there is no usable cached copy at " + options_.rules_cache);
    }
    set_rules_text(std::move(r.body), options_.rules_url);  // a broken one stops the start, with its line
    // The cache must be writable: found now rather than when the rules service is down.
    if (std::string failed = write_file_atomically(options_.rules_cache, rules_in_force_text_); !failed.empty()) {
      throw ConfigError(options_.rules_cache, 0, 0, "--rules-cache: " + failed);
    }
    rules_etag_ = std::move(r.etag);
    spdlog::info("rules from {} (version {})", options_.rules_url, rules_version_);
  }
  RulesRetriever::Options retriever;
  retriever.url = *url;
  retriever.url_text = options_.rules_url;
  retriever.poll = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(options_.rules_poll_ns));
  retriever.limits = limits;
  retriever_ = std::make_unique<RulesRetriever>(io_, retriever,
                                                [this](const std::string& body) { apply_fetched_rules(body); });
}

void Daemon::set_rules_text(std::string text, const std::string& origin) {
  file_rules_ = parse_rules(text, origin);  // first: a throw leaves the rules in force as they were
  rules_version_ = content_version(text);
  rules_in_force_text_ = std::move(text);
}

void Daemon::apply_fetched_rules(const std::string& body) {
  const int64_t version = content_version(body);
  if (version == rules_version_) return;  // back to what is in force (after a refused version)
  const int64_t previous = rules_version_;
  try {
    set_rules_text(body, options_.rules_url);
  } catch (const std::exception& e) {
    ++reloads_.rules_failed;
    spdlog::error("rules version {} refused, the previous rules (version {}) stay in force: {}", version, previous,
                  e.what());
    return;
  }
  ++reloads_.rules;
  spdlog::info("rules reloaded from {}: {} rules, version {}", options_.rules_url, file_rules_->rules().size(),
               rules_version_);
  node_->replace_rules(combined_rules(), clock_.now_ns());
  write_rules_cache(body);
}

void Daemon::write_rules_cache(const std::string& body) {
  const std::string failed = write_file_atomically(options_.rules_cache, body);
  if (failed.empty()) {
    if (rules_cache_stale_) spdlog::info("the rules in force are cached again in {}", options_.rules_cache);
    rules_cache_stale_ = false;
    return;
  }
  ++reloads_.cache_write_failed;
  if (!rules_cache_stale_) {  // logged once; retried every second (schedule_watch)
    spdlog::error("the rules in force are not cached (a restart while the rules service is down would start with "
                  "older rules), retrying every second: {}",
                  failed);
  }
  rules_cache_stale_ = true;
}

bool Daemon::reload_rules_file() {
  if (options_.rules_file.empty()) return false;
  try {
    load_rules_file_now();
    ++reloads_.rules;
    spdlog::info("rules reloaded from {}: {} rules, version {}", options_.rules_file, file_rules_->rules().size(),
                 rules_version_);
    return true;
  } catch (const std::exception& e) {
    ++reloads_.rules_failed;
    spdlog::error("rules not reloaded, the previous rules (version {}) stay in force: {}", rules_version_, e.what());
    return false;
  }
}

void Daemon::reload_rules() {
  if (retriever_) retriever_->poll_now();  // the rules service's answer applies when it comes
  bool changed = reload_rls_config();
  changed = reload_rules_file() || changed;
  if (changed) node_->replace_rules(combined_rules(), clock_.now_ns());
  // The cluster key file too: each step of a key rotation is a SIGHUP on every node.
  if (options_.cluster_key_file.empty()) return;
  try {
    faults_->set_cluster_keys(load_cluster_keys(options_.cluster_key_file));
    ++reloads_.keys;
    spdlog::info("cluster keys reloaded from {}", options_.cluster_key_file);
  } catch (const std::exception& e) {
    ++reloads_.keys_failed;
    spdlog::error("cluster keys not reloaded, the previous keys stay in force: {}", e.what());
  }
}

void Daemon::reload_peers_if_changed() {
  if (options_.node.membership != MembershipKind::kStatic) return;
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(options_.peers_file, ec);
  if (ec) return;  // being replaced; try again next second
  const auto size = std::filesystem::file_size(options_.peers_file, ec);
  if (peers_mtime_ && *peers_mtime_ == mtime && peers_size_ == size) return;
  try {
    const auto peers = load_peers_file(options_.peers_file);
    node_->set_peers(peers, clock_.now_ns());
    peers_mtime_ = mtime;
    peers_size_ = size;
    spdlog::info("peers reloaded from {}: {} peers", options_.peers_file, peers.size());
  } catch (const std::exception& e) {
    peers_mtime_ = mtime;  // report a broken file once, not every second
    peers_size_ = size;
    spdlog::error("peers not reloaded, the previous list stays in force: {}", e.what());
  }
}

void Daemon::shutdown() {
  if (stopping_) return;
  stopping_ = true;
  spdlog::info("leaving the cluster");
  if (rls_) rls_->drain();  // health NOT_SERVING; calls are still answered for now
  if (http_) http_->drain();  // /readyz 503; requests are still answered for now
  api_->drain();  // answers to requests already read still go out; the socket file goes now
  if (workers_) workers_->drain();
  tick_timer_.cancel();
  watch_timer_.cancel();
  signals_.cancel();
  if (retriever_) retriever_->stop();
  // Leave only once the requests already read have been answered (a large batch goes a slice
  // at a time): leave() seals what this node admitted and sends it with the departure, and a
  // check admitted after that would never reach the others.
  tick_timer_.expires_after(std::chrono::milliseconds(100));
  tick_timer_.async_wait([this](const boost::system::error_code&) {
    api_->stop();  // a client that has not taken its answers in 100 ms is cut off
    if (rls_) rls_->stop();  // later rate limit calls answer UNAVAILABLE, uncharged
    if (http_) http_->stop();  // later HTTP checks answer 503, uncharged
    auto leave = [this] {
      node_->leave(clock_.now_ns());
      // Give the departure datagrams a moment to leave the socket, then stop.
      tick_timer_.expires_after(std::chrono::milliseconds(100));
      tick_timer_.async_wait([this](const boost::system::error_code&) {
        transport_->stop();
        io_.stop();
      });
    };
    // With client API threads, leave once none of them can check any more.
    if (workers_) {
      workers_->stop(leave);
    } else {
      leave();
    }
  });
}

void Daemon::check(std::span<const CheckItem> items, std::span<Decision> out) {
  const MonoNanos now = clock_.now_ns();
  for (size_t i = 0; i < items.size(); ++i) out[i] = node_->check(items[i].key, items[i].cost, now);
  histograms_->check[current_api_thread()]->Observe(seconds(clock_.now_ns() - now));
}

bool Daemon::check_all(std::span<const CheckItem> items, std::span<Decision> out) {
  const MonoNanos now = clock_.now_ns();
  const bool all = node_->check_all(items, out, now);
  histograms_->check[current_api_thread()]->Observe(seconds(clock_.now_ns() - now));
  return all;
}

std::vector<MemberInfo> Daemon::members() { return node_->membership().view(clock_.now_ns()); }

StatsList Daemon::stats() {
  StatsList s;
  auto add = [&](const std::string& name, uint64_t v) { s.emplace_back(name, int64_t(v)); };
  const NodeStats& n = node_->stats();
  add("checks", n.checks);
  add("checks_allowed", n.allowed);
  add("checks_denied", n.denied);
  add("rounds", n.rounds);
  add("rules_version", uint64_t(rules_version_));
  add("rules_reloads", reloads_.rules);
  add("rules_reload_failures", reloads_.rules_failed);
  const RulesRetrieverStats polls = retriever_ ? retriever_->stats() : RulesRetrieverStats{};
  add("rules_polls", polls.polls);
  add("rules_polls_not_modified", polls.not_modified);
  add("rules_poll_failures", polls.failures);
  add("rules_cache_write_failures", reloads_.cache_write_failed);
  add("cluster_key_reloads", reloads_.keys);
  add("cluster_key_reload_failures", reloads_.keys_failed);
  add("rls_config_reloads", reloads_.rls);
  add("rls_config_reload_failures", reloads_.rls_failed);
  const KeyTableStats k = node_->table().stats();
  add("keys", k.keys);
  add("key_bytes", k.bytes);
  add("key_evictions", k.evictions);
  add("keys_idle_removed", k.idle_removed);
  add("keys_rejected_too_long", k.rejected_keys);
  add("keys_restored_from_eviction", k.restored);
  add("keys_pending_dropped", k.pending_dropped);
  const LedgerStats l = node_->ledger().stats();
  add("batches_sealed", l.sealed);
  add("batches_applied", l.applied);
  add("batches_duplicate", l.duplicates);
  add("batches_stale_incarnation", l.stale);
  add("batches_origin_overflow", l.origin_overflow);
  add("batches_claiming_our_id", l.self_conflicts);
  add("seqs_abandoned", l.abandoned);
  add("ledger_origins", l.origins);
  add("ledger_bytes", l.bytes);
  const MembershipStats& m = node_->membership().stats();
  add("members_joined", m.joined);
  add("members_failed", m.failed);
  add("members_recovered", m.recovered);
  add("members_restarted", m.restarted);
  add("members_forgotten", m.forgotten);
  add("members_unknown_rows", m.unknown_rows);
  add("members_refuted", m.refuted);
  add("members_implausible_incarnation", m.implausible);
  add("gossip_messages_sent", n.messages_sent);
  add("gossip_messages_received", n.messages_received);
  add("gossip_dropped_unknown_sender", n.dropped_unknown_sender);
  add("gossip_dropped_own_id", n.dropped_self);
  add("gossip_queue_overflow", n.queue_overflow);
  add("push_pulls", n.push_pulls);
  add("repairs_sent", n.repairs_sent);
  add("early_seals", n.early_seals);
  add("gossip_queue_expired", n.queue_expired);
  add("gossip_dropped_wrong_source", n.dropped_wrong_source);
  add("digests_ignored", n.digests_ignored);
  add("repairs_capped", n.repairs_capped);
  add("relayed", n.relayed);
  add("relay_mismatch", n.relay_mismatch);
  add("relay_regroupings", n.regroupings);
  add("relay_groups", node_->relay_groups());  // 0: not relaying (auto below 256 members)
  const TransportStats t = faults_->stats();
  add("transport_sent", t.messages_sent);
  add("transport_bytes_sent", t.bytes_sent);
  add("transport_received", t.messages_received);
  add("transport_bytes_received", t.bytes_received);
  add("transport_send_errors", t.send_errors);
  add("transport_send_dropped", t.send_dropped);
  add("transport_unresolved", t.unresolved);
  add("transport_encode_dropped", t.encode_dropped);
  for (const auto& [reason, count] : t.dropped) add("transport_dropped_" + reason, count);
  const FaultStats& f = faults_->fault_stats();
  add("faults_dropped_to", f.dropped_to);
  add("faults_dropped_from", f.dropped_from);
  add("faults_lost", f.lost);
  add("faults_duplicated", f.duplicated);
  add("faults_delayed", f.delayed);
  append_api_stats(s);
  if (rls_) {
    for (const auto& [name, value] : rls_->stats()) s.emplace_back(name, value);
  }
  if (http_) {
    for (const auto& [name, value] : http_->stats()) s.emplace_back(name, value);
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
    if (const MemberInfo* v = node_->membership().find(id)) spec.drop_to.push_back(v->address);
  }
  faults_->set_faults(spec);
  spdlog::info("fault injection {}", spec.empty() ? "cleared" : "set");
  return {};
}

}  // namespace tollgate
