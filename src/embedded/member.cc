// The embedded member: tollgated's node, transport and files, minus its front ends, on a thread
// of its own. The node's round, gossip and file watching run on that thread (the node's owner);
// checks run on the callers' threads against the node's concurrent key table (Node::check), and
// ask the owner to seal early when a flood of keys piles up (NodeOptions::seal_wanted).
#include "tollgate/member.h"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <mutex>
#include <random>
#include <stdexcept>
#include <time.h>
#include <thread>

#include "codec/cluster_key.h"
#include "codec/codec.h"
#include "config/node_settings.h"
#include "config/read_file.h"
#include "rls/decide.h"
#include "tcp_transport.h"
#include "tollgate/node.h"
#include "tollgate/peers_file.h"
#include "tollgate/random.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/rules_file.h"
#include "udp_transport.h"

namespace tollgate {
namespace {

MonoNanos steady_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The time a check is decided at: the kernel's coarse monotonic clock (up to two ticks behind
// steady_clock, which is CLOCK_MONOTONIC, and never ahead of it). It costs a few nanoseconds, where
// steady_clock's ordered TSC read costs about 100 ns per check in a loop of checks, because the CPU
// cannot overlap one check's cache misses with the next's (docs/results.md). A denial the lag
// could change is decided again at steady_clock's time (KeyTableOptions::precise_clock).
MonoNanos check_now() {
#ifdef CLOCK_MONOTONIC_COARSE
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return MonoNanos(ts.tv_sec) * kNanosPerSecond + ts.tv_nsec;
#else
  return steady_now();
#endif
}

// How far check_now() may lag steady_clock: two ticks. The kernel moves the coarse clock once a
// tick, to the time of the last whole tick's worth of clock cycles, so right after a move it
// already lags by part of a tick (1.7 ms of 4 on this VM, measured), and a tick later by that
// and a tick.
int64_t check_now_lag() {
#ifdef CLOCK_MONOTONIC_COARSE
  timespec res{};
  if (::clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0) {
    return 2 * (int64_t(res.tv_sec) * kNanosPerSecond + res.tv_nsec);
  }
  return 20 * kNanosPerMilli;  // (not reached on Linux; HZ=100 is the coarsest tick)
#else
  return 0;
#endif
}

class SteadyClock final : public Clock {
 public:
  MonoNanos now_ns() const override { return steady_now(); }
};
// Never destroyed: a Member that outlives static destruction (itself a static, or checked from
// another static's destructor) still reads it.
const Clock& precise_clock() {
  static const Clock* const clock = new SteadyClock;
  return *clock;
}

// The settings, as tollgated would take them from its flags: every name known, every value
// valid, and the settings consistent with each other.
NodeSettings parse_settings(const std::vector<std::pair<std::string, std::string>>& given) {
  NodeSettings s;
  for (const auto& [name, value] : given) {
    const NodeSettingField* field = nullptr;
    for (const NodeSettingField& f : node_setting_fields()) {
      if (f.flag == name) field = &f;
    }
    if (!field) {
      std::string known;
      for (const NodeSettingField& f : node_setting_fields()) known += (known.empty() ? "" : ", ") + std::string(f.flag);
      throw std::invalid_argument("tollgate::Member: unknown setting \"" + name + "\" (known: " + known + ")");
    }
    if (std::string why = field->parse(value, s); !why.empty()) {
      throw std::invalid_argument("tollgate::Member: setting " + name + " " + why);
    }
  }
  if (SettingProblem p = validate(s, SettingNames::kFlags); !p.message.empty()) {
    throw std::invalid_argument("tollgate::Member: " + p.message);
  }
  return s;
}

// The rate limit service's decision asks for checks through the daemon's request path; in a
// member they go straight to the node, on the caller's thread.
class NodeChecks final : public RequestHandler {
 public:
  explicit NodeChecks(Node& node) : node_(node) {}
  void check(std::span<const CheckItem> items, std::span<Decision> out) override {
    const MonoNanos now = check_now();
    for (size_t i = 0; i < items.size(); ++i) out[i] = node_.check(items[i].key, items[i].cost, now);
  }
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out) override {
    return node_.check_all(items, out, check_now());
  }
  // Not asked by the decision.
  std::vector<MemberInfo> members() override { return {}; }
  StatsList stats() override { return {}; }
  std::string set_faults(const FaultSettings&) override { return "not available in a member"; }

 private:
  Node& node_;
};

}  // namespace

class Member::Impl {
 public:
  explicit Impl(MemberOptions o)
      : options_(std::move(o)), random_(std::random_device{}() ^ uint64_t(steady_now())), tick_(io_), watch_(io_) {
    if (options_.transport != "udp" && options_.transport != "tcp") {
      throw std::invalid_argument("tollgate::Member: transport must be udp or tcp, got \"" + options_.transport + "\"");
    }
    if (options_.cluster_key_file.empty() == !options_.insecure_gossip) {
      throw std::invalid_argument(options_.insecure_gossip
                                      ? "tollgate::Member: insecure_gossip and cluster_key_file contradict each other"
                                      : "tollgate::Member: gossip must be authenticated: give cluster_key_file (the "
                                        "cluster's key), or set insecure_gossip");
    }
    if (!options_.rules_file.empty() && !options_.rules_yaml.empty()) {
      throw std::invalid_argument("tollgate::Member: give the rules as rules_file or as rules_yaml, not both");
    }
    if (options_.rules_file.empty() && options_.rules_yaml.empty() && options_.rls_config.empty()) {
      throw std::invalid_argument("tollgate::Member: give the rules (rules_file or rules_yaml), an rls_config, or both");
    }
    const NodeSettings settings = parse_settings(options_.settings);
    if (settings.membership == MembershipKind::kStatic && options_.peers_file.empty()) {
      throw std::invalid_argument("tollgate::Member: static membership needs peers_file");
    }
    if (settings.membership == MembershipKind::kHeartbeat && options_.seeds.empty()) {
      throw std::invalid_argument("tollgate::Member: heartbeat membership needs seeds");
    }
    std::shared_ptr<const RuleSet> rules =
        !options_.rules_file.empty()   ? load_rules_file(options_.rules_file)
        : !options_.rules_yaml.empty() ? parse_rules(options_.rules_yaml, "rules_yaml")
                                       : std::make_shared<const RuleSet>();
    if (!options_.rls_config.empty()) {
      // As the daemon: the RLS config's limits beside the rules (Daemon::combined_rules).
      rls_config_ = load_rls_config(options_.rls_config);
      rules = std::make_shared<const RuleSet>(rules->rules(), rules->default_limit(), rls_config_);
    }
    ClusterKeys keys;
    if (!options_.cluster_key_file.empty()) keys = load_cluster_keys(options_.cluster_key_file);

    if (options_.transport == "udp") {
      auto udp = std::make_unique<UdpTransport>(io_, options_.bind, keys, options_.max_datagram);
      port_ = udp->port();
      transport_ = std::move(udp);
    } else {
      auto tcp = std::make_unique<TcpTransport>(io_, options_.bind, keys, TcpTransportOptions{});
      port_ = tcp->port();
      transport_ = std::move(tcp);
    }
    // Port 0 chose a free port: the others must be told the real one.
    if (options_.bind.ends_with(":0")) options_.bind.replace(options_.bind.size() - 1, 1, std::to_string(port_));
    if (options_.node_id.empty()) options_.node_id = options_.bind;

    NodeOptions n;
    n.id = options_.node_id;
    n.address = options_.bind;
    n.incarnation = options_.incarnation
                        ? options_.incarnation
                        : uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
    n.seeds = options_.seeds;
    settings.apply_to(n);
    n.keys.concurrent = true;  // checks come from the service's threads
    n.keys.precise_clock = &precise_clock();  // checks read check_now()
    n.keys.coarse_lag_ns = check_now_lag();
    n.early_seal_keys = options_.early_seal_keys;
    const size_t max_batch_bytes = max_batch_bytes_for(options_.max_datagram);
    n.split_for_sealing = [id = n.id, max_batch_bytes](std::vector<ConsumptionEntry> entries) {
      return split_for_sealing(std::move(entries), id, max_batch_bytes);
    };
    n.seal_wanted = [this] {
      boost::asio::post(io_, [this] { node_->seal_early(steady_now()); });
    };
    node_ = std::make_unique<Node>(n, rules, *transport_, random_);
    checks_ = std::make_unique<NodeChecks>(*node_);
    max_key_bytes_ = n.keys.max_key_bytes;
    if (settings.membership == MembershipKind::kStatic) {
      node_->set_peers(load_peers_file(options_.peers_file), steady_now());
      peers_stamp_ = file_fingerprint(options_.peers_file);
    }
    transport_->set_receiver([this](GossipMessage&& m) { node_->receive(m, steady_now()); });
    interval_ = std::chrono::nanoseconds(n.interval_ns);
    tick_.expires_after(std::chrono::nanoseconds(0));
    schedule_tick();
    schedule_watch();
    thread_ = std::thread([this] {
      // Nothing the node does should throw; if something does, the service must not die of it
      // (std::terminate): the thread stops, and checks go on from local state, as in a partition.
      try {
        io_.run();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> hold(error_lock_);
        error_ = e.what();
      }
    });
  }

  ~Impl() {
    boost::asio::post(io_, [this] {
      stopping_ = true;
      tick_.cancel();
      watch_.cancel();
      node_->leave(steady_now());
      // Give the departure a moment to leave the socket, then stop.
      tick_.expires_after(std::chrono::milliseconds(100));
      tick_.async_wait([this](const boost::system::error_code&) {
        transport_->stop();
        io_.stop();
      });
    });
    thread_.join();
  }

  Decision check(std::string_view key, int64_t cost) { return node_->check(key, cost, check_now()); }
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out) {
    return node_->check_all(items, out, check_now());
  }
  uint16_t port() const { return port_; }

  bool should_rate_limit(std::string_view domain, std::span<const RateLimitDescriptor> descriptors,
                         std::vector<RateLimitStatus>& out, uint32_t hits_addend) {
    if (!rls_config_) throw std::invalid_argument("tollgate::Member::should_rate_limit: the member has no rls_config");
    std::vector<rls::DescriptorInput> inputs;
    inputs.reserve(descriptors.size());
    for (const RateLimitDescriptor& d : descriptors) inputs.push_back({d.entries, d.has_hits, d.hits});
    rls::Plan plan;
    if (std::string why = rls::plan_request(rls_config_, domain, hits_addend, inputs, max_key_bytes_, plan);
        !why.empty()) {
      throw std::invalid_argument("tollgate::Member::should_rate_limit: " + why);
    }
    std::vector<rls::DescriptorResult> results;
    const rls::Code code = rls::decide(*checks_, plan, results);
    out.clear();
    for (const rls::DescriptorResult& r : results) {
      out.push_back({r.code == rls::Code::kOverLimit, r.limit, r.remaining, r.until_full_ns, r.retry_after_ns, r.shadow_over});
    }
    return code == rls::Code::kOverLimit;
  }

  MemberStats stats() const {
    MemberStats s;
    const CheckCounts c = node_->table().check_counts();
    s.checks = c.checks;
    s.allowed = c.allowed;
    s.denied = c.denied;
    s.rounds = rounds_.load(std::memory_order_relaxed);
    s.members_alive = alive_.load(std::memory_order_relaxed);
    s.messages_sent = sent_.load(std::memory_order_relaxed);
    s.messages_received = received_.load(std::memory_order_relaxed);
    s.early_seals = early_seals_.load(std::memory_order_relaxed);
    s.pending_dropped = node_->table().pending_dropped();
    std::lock_guard<std::mutex> hold(error_lock_);
    s.stopped_by = error_;
    return s;
  }

 private:
  void schedule_tick() {
    // As the daemon: rounds keep their cadence, and after a stall skip to now.
    auto next = tick_.expiry() + interval_;
    if (next < std::chrono::steady_clock::now()) next = std::chrono::steady_clock::now() + interval_;
    tick_.expires_at(next);
    tick_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopping_) return;
      node_->tick(steady_now());
      // What other threads may read (Node's stats are the owner's).
      const NodeStats n = node_->stats();
      rounds_.store(n.rounds, std::memory_order_relaxed);
      sent_.store(n.messages_sent, std::memory_order_relaxed);
      received_.store(n.messages_received, std::memory_order_relaxed);
      early_seals_.store(n.early_seals, std::memory_order_relaxed);
      alive_.store(node_->membership().live().size(), std::memory_order_relaxed);
      schedule_tick();
    });
  }

  // Static membership: the peers file again when it changed (a broken one keeps the peers in
  // force: the service must not lose its cluster to a bad edit).
  void schedule_watch() {
    watch_.expires_after(std::chrono::seconds(1));
    watch_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopping_) return;
      if (!options_.peers_file.empty() && node_->membership().kind() == MembershipKind::kStatic) {
        const auto stamp = file_fingerprint(options_.peers_file);
        if (stamp != peers_stamp_) {
          peers_stamp_ = stamp;
          try {
            node_->set_peers(load_peers_file(options_.peers_file), steady_now());
          } catch (const std::exception&) {
            ++peers_reload_failures_;
          }
        }
      }
      schedule_watch();
    });
  }

  MemberOptions options_;
  boost::asio::io_context io_;
  SplitMix64 random_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Node> node_;
  std::shared_ptr<const RlsConfig> rls_config_;  // with rls_config; never reloaded
  std::unique_ptr<NodeChecks> checks_;
  size_t max_key_bytes_ = 0;  // the key table's: longer RLS bucket keys are digested
  boost::asio::steady_timer tick_, watch_;
  std::chrono::nanoseconds interval_{0};
  std::string peers_stamp_;  // file_fingerprint of the peers file when last read
  uint64_t peers_reload_failures_ = 0;
  uint16_t port_ = 0;
  bool stopping_ = false;  // the owner's
  std::atomic<uint64_t> rounds_{0}, sent_{0}, received_{0}, early_seals_{0};
  mutable std::mutex error_lock_;
  std::string error_;  // what stopped the background thread, if anything did
  std::atomic<size_t> alive_{0};
  std::thread thread_;
};

Member::Member(MemberOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Member::~Member() = default;
Decision Member::check(std::string_view key, int64_t cost) { return impl_->check(key, cost); }
bool Member::check_all(std::span<const CheckItem> items, std::span<Decision> out) {
  return impl_->check_all(items, out);
}
bool Member::should_rate_limit(std::string_view domain, std::span<const RateLimitDescriptor> descriptors,
                               std::vector<RateLimitStatus>& out, uint32_t hits_addend) {
  return impl_->should_rate_limit(domain, descriptors, out, hits_addend);
}
uint16_t Member::gossip_port() const { return impl_->port(); }
MemberStats Member::stats() const { return impl_->stats(); }

}  // namespace tollgate
