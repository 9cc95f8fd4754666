#include "daemon.h"

#include <spdlog/spdlog.h>

#include <prometheus/histogram.h>
#include <chrono>

#include "api/endpoint.h"
#include "bind_address.h"
#include "daemon/api_workers.h"  // current_api_thread
#include "daemon/descriptor_limit.h"
#include "daemon/front_end.h"
#include "daemon/memory_bound.h"
#include "fault_injection.h"
#include "host/node_host.h"
#include "http/routes.h"
#include "request/table_reads.h"
#include "retriever/rules_feed.h"
#include "tcp_transport.h"
#include "util/printable.h"

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
      check.push_back(std::make_unique<prometheus::Histogram>(prometheus::Histogram::BucketBoundaries{
          1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 1e-2}));
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
            {"tollgate_round_duration_seconds",
             "Time one gossip round takes on the node's thread",
             prometheus::MetricType::Histogram,
             {round.Collect()}}};
  }
};

namespace {
double seconds(MonoNanos ns) { return double(ns) / 1e9; }

// The host's log lines go to spdlog.
void log_to_spdlog(LogLevel level, const std::string& line) {
  switch (level) {
    case LogLevel::kInfo:
      return spdlog::info("{}", line);
    case LogLevel::kWarn:
      return spdlog::warn("{}", line);
    case LogLevel::kError:
      return spdlog::error("{}", line);
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
    InitialRules initial = RulesFeed::load_initial(
        {options_.rules_url, options_.rules_cache, options_.rules_ca, options_.rules_poll_ns, {}});
    host.rules_text = std::move(initial.text);
    host.rules_origin = std::move(initial.origin);
    rules_etag = std::move(initial.etag);
  }

  bool all_loopback = is_loopback_bind(options_.bind);
  for (const std::string& l : options_.listen) {
    std::string why;
    auto ep = api::parse_endpoint(l, &why);
    if (ep && !ep->is_loopback()) all_loopback = false;
  }
  if (options_.cluster_key_file.empty()) {
    // --insecure-gossip: said at every start, loopback included (there every local user can reach
    // the gossip port, and so bypass the API socket's permissions).
    spdlog::warn(
        "gossip is not authenticated (--insecure-gossip): anyone who can send to {} can charge, deny or "
        "evict at will{}",
        options_.bind, all_loopback ? " (on loopback: every local user)" : "");
  }

  // Descriptors for every connection the limits allow, plus outbound connections to peers (a
  // thousand counted) and files.
  const TcpTransportOptions tcp_options;
  uint64_t descriptors = options_.api_max_connections + 64 +
                         (options_.http_listen.empty() ? 0 : options_.http_max_connections) +
                         (options_.metrics_listen.empty() ? 0 : options_.http_max_connections);
  if (options_.transport == TransportKind::kTcp) descriptors += tcp_options.max_inbound_connections + 1024;
  if (std::string warning = ensure_descriptor_limit(descriptors); !warning.empty()) spdlog::warn("{}", warning);

  host_ = std::make_unique<NodeHost>(io_, std::move(host));

  http::RoutesOptions routes;
  // Ready alone once a member would have been declared failed: a node with no peer to hear
  // from (or whose peers are all down) serves from its own buckets.
  const auto ready_alone_at = std::chrono::steady_clock::now() + std::chrono::nanoseconds(options_.node.fail_after_ns);
  routes.alone_long_enough = [ready_alone_at] { return std::chrono::steady_clock::now() >= ready_alone_at; };
  routes.extra_metrics = [this] {
    std::vector<prometheus::MetricFamily> families = histograms_->collect();
    for (const std::unique_ptr<FrontEnd>& f : front_ends_) f->append_metrics(families);
    return families;
  };
  routes.stat_catalog = std::make_shared<const StatCatalog>(daemon_stat_catalog(options_));
  front_ends_ = make_front_ends(options_, io_, *this, *host_, routes, std::move(rules_etag));

  spdlog::info("tollgated {} (incarnation {}): {} on {} over {}, {} membership; client API on {} ({} thread{})",
               host_->node_id(), host_->incarnation(), dissemination_mode_name(options_.node.mode), host_->bind(),
               options_.transport == TransportKind::kUdp ? "udp" : "tcp",
               options_.node.membership == MembershipKind::kStatic ? "static" : "heartbeat",
               fmt::join(options_.listen, ", "), options_.threads, options_.threads == 1 ? "" : "s");
}

Daemon::~Daemon() {
  // In the order they were made: the client API first (run() may have ended by an exception,
  // with its threads still serving), whose threads call into everything after it.
  for (auto& f : front_ends_) f.reset();
}

int Daemon::run() {
  wait_for_signal();
  host_->start();
  schedule_watch();
  for (auto& f : front_ends_) f->start();
  io_.run();
  for (auto& f : front_ends_) f->shutdown();  // the node no longer runs: queued work is not decided
  return 0;
}

void Daemon::wait_for_signal() {
  // Signals stay caught while the node leaves: a second SIGTERM (a script's cleanup, an impatient
  // operator) must not cut the leave short and lose what this node admitted since its last batch.
  signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    if (stopping_) {
      spdlog::info(
          "signal {} while leaving: the leave goes on (SIGKILL stops at once, and loses what this node "
          "admitted since its last batch)",
          signo);
    } else if (signo != SIGHUP) {
      shutdown();
    } else {
      host_->reload();
      for (auto& f : front_ends_) f->reload();
    }
    wait_for_signal();
  });
}

void Daemon::schedule_watch() {
  // The host watches its own files; the front ends get their second (a rules-cache write retried).
  watch_timer_.expires_after(std::chrono::seconds(1));
  watch_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopping_) return;
    for (auto& f : front_ends_) f->tick();
    schedule_watch();
  });
}

void Daemon::shutdown() {
  if (stopping_) return;
  stopping_ = true;
  spdlog::info("leaving the cluster");
  for (auto& f : front_ends_) f->drain();  // not ready, nothing new accepted; what was read is answered
  host_->stop_rounds();
  watch_timer_.cancel();
  // Leave only once the requests already read have been answered (a large batch goes a slice
  // at a time): leave() seals what this node admitted and sends it with the departure, and a
  // check admitted after that would never reach the others.
  shutdown_timer_.expires_after(std::chrono::milliseconds(100));
  shutdown_timer_.async_wait([this](const boost::system::error_code&) {
    // Leave once no front end can check any more (the client API's threads may take a moment).
    auto pending = std::make_shared<size_t>(front_ends_.size());
    auto one_stopped = [this, pending] {
      if (--*pending == 0) host_->leave([this] { io_.stop(); });
    };
    for (auto& f : front_ends_) f->stop(one_stopped);
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

void Daemon::refund(std::span<const CheckItem> items, std::span<Decision> out) {
  const MonoNanos now = host_->now_ns();
  Node& node = host_->node();
  for (size_t i = 0; i < items.size(); ++i) out[i] = node.refund(items[i].key, items[i].cost, now);
}

LeaseGrant Daemon::acquire(std::string_view key, int64_t count, int64_t ttl_ns) {
  if (is_reserved_key(key)) return {};  // kInvalid: Envoy's keys are not this door's
  return host_->node().acquire(key, count, ttl_ns, host_->now_ns());
}

bool Daemon::release(const LeaseId& id) { return host_->node().release(id); }

std::optional<int64_t> Daemon::renew(const LeaseId& id, int64_t ttl_ns) {
  const MonoNanos now = host_->now_ns();
  const std::optional<MonoNanos> until = host_->node().renew(id, ttl_ns, now);
  if (!until) return std::nullopt;
  return *until - now;
}

LeaseGrant Daemon::acquire_anonymous(std::string_view key, int64_t count, int64_t ttl_ns) {
  return host_->node().acquire_anonymous(key, count, ttl_ns, host_->now_ns());
}

void Daemon::owe_release(std::string_view key, int64_t count) {
  host_->node().owe_release(key, count, host_->now_ns());
}

int64_t Daemon::in_flight(std::string_view key) { return host_->node().leases().in_flight(key); }

AnonymousRelease Daemon::release_anonymous(std::string_view key, int64_t count) {
  return host_->node().release_anonymous(key, count, host_->now_ns());
}

std::vector<MemberInfo> Daemon::members() { return host_->node().membership().view(host_->now_ns()); }

std::vector<std::pair<std::string, RuleCounters>> Daemon::rule_counters() { return host_->node().rule_counters(); }

std::vector<std::pair<std::string, RuleLeases>> Daemon::rule_leases() { return host_->node().rule_leases(); }
std::vector<TopParts> Daemon::top_parts(std::string_view rule) {
  return host_->node().top_parts(rule, host_->now_ns());
}

std::optional<KeyBalance> Daemon::balance(std::string_view key) {
  return read_balance(host_->node().table(), key, host_->now_ns());
}

RulesInForce Daemon::rules_in_force(size_t max) {
  return read_rules_in_force(host_->node().table(), host_->rules_version(), max);
}

StatsList Daemon::stats() {
  StatsList s = host_->stats();
  for (const auto& f : front_ends_) f->append_stats(s);
  return s;
}

ResetReply Daemon::reset(std::string_view key) {
  if (std::string why = reset_key_problem(key, host_->max_key_bytes()); !why.empty()) {
    return {.error = why, .limited = false, .remaining = 0};
  }
  const std::optional<int64_t> left = host_->node().reset(key, host_->now_ns());
  spdlog::info("key {} reset: full again at every node within a round or two", printable(key));
  return {.error = "", .limited = left.has_value(), .remaining = left.value_or(0)};
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
