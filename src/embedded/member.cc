// The embedded member: the node's host (src/host/node_host.h), as tollgated runs it, minus the
// daemon's front ends, on a thread of its own. The node's round, gossip and file watching run on
// that thread (the node's owner);
// checks run on the callers' threads against the node's concurrent key table (Node::check), and
// ask the owner to seal early when a flood of keys piles up (NodeOptions::seal_wanted).
#include "tollgate/member.h"

#include <time.h>
#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "config/node_settings.h"
#include "core/node.h"
#include "fault_injection.h"
#include "host/node_host.h"
#include "rls/decide.h"

namespace tollgate {
namespace {

MonoNanos steady_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
      for (const NodeSettingField& f : node_setting_fields())
        known += (known.empty() ? "" : ", ") + std::string(f.flag);
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
  void refund(std::span<const CheckItem> items, std::span<Decision> out) override {
    const MonoNanos now = check_now();
    for (size_t i = 0; i < items.size(); ++i) out[i] = node_.refund(items[i].key, items[i].cost, now);
  }
  LeaseGrant acquire_anonymous(std::string_view key, int64_t count, int64_t ttl_ns) override {
    return node_.acquire_anonymous(key, count, ttl_ns, check_now());
  }
  void owe_release(std::string_view key, int64_t count) override { node_.owe_release(key, count, check_now()); }
  int64_t in_flight(std::string_view key) override { return node_.leases().in_flight(key); }
  AnonymousRelease release_anonymous(std::string_view key, int64_t count) override {
    return node_.release_anonymous(key, count, check_now());
  }
  // Not asked by the decision.
  std::vector<MemberInfo> members() override { return {}; }
  StatsList stats() override { return {}; }
  std::string set_faults(const FaultSettings&) override { return "not available in a member"; }

 private:
  Node& node_;
};

NodeHostOptions host_options(const MemberOptions& o, const NodeSettings& settings) {
  NodeHostOptions h;
  h.node_id = o.node_id;
  h.bind = o.bind;
  h.transport = o.transport == "tcp" ? TransportKind::kTcp : TransportKind::kUdp;
  h.max_datagram = o.max_datagram;
  h.cluster_key_file = o.cluster_key_file;
  h.peers_file = o.peers_file;
  h.seeds = o.seeds;
  h.rules_file = o.rules_file;
  h.rules_text = o.rules_yaml;
  h.rules_origin = "rules_yaml";
  h.rls_config = o.rls_config;
  h.rls_merge_domains = o.rls_merge_domains;
  h.rls_shadow_mode = o.rls_shadow_mode;
  h.rls_quota_mode = o.rls_quota_mode;
  h.node = settings;
  h.incarnation = o.incarnation;
  h.state_dir = o.state_dir;
  h.concurrent_checks = true;  // checks come from the service's threads
  h.early_seal_keys = o.early_seal_keys;
  h.precise_clock = &precise_clock();  // checks read check_now()
  h.coarse_lag_ns = check_now_lag();
  if (o.log) {
    h.log = [log = o.log](LogLevel level, const std::string& line) {
      log(level == LogLevel::kError  ? MemberLogLevel::kError
          : level == LogLevel::kWarn ? MemberLogLevel::kWarn
                                     : MemberLogLevel::kInfo,
          line);
    };
  }
  return h;
}

}  // namespace

class Member::Impl {
 public:
  explicit Impl(MemberOptions o) : options_(std::move(o)) {
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
      throw std::invalid_argument(
          "tollgate::Member: give the rules (rules_file or rules_yaml), an rls_config, or both");
    }
    const NodeSettings settings = parse_settings(options_.settings);
    if (settings.membership == MembershipKind::kStatic && options_.peers_file.empty()) {
      throw std::invalid_argument("tollgate::Member: static membership needs peers_file");
    }
    if (settings.membership == MembershipKind::kHeartbeat && options_.seeds.empty()) {
      throw std::invalid_argument("tollgate::Member: heartbeat membership needs seeds");
    }
    NodeHostOptions h = host_options(options_, settings);
    // What other threads may read (Node's stats are the owner's), published after each round.
    h.on_round = [this](int64_t) {
      const NodeStats n = host_->node().stats();
      rounds_.store(n.rounds, std::memory_order_relaxed);
      sent_.store(n.messages_sent, std::memory_order_relaxed);
      received_.store(n.messages_received, std::memory_order_relaxed);
      early_seals_.store(n.early_seals, std::memory_order_relaxed);
      alive_.store(host_->node().membership().live().size(), std::memory_order_relaxed);
      publish_host_counters();
    };
    host_ = std::make_unique<NodeHost>(io_, std::move(h));
    checks_ = std::make_unique<NodeChecks>(host_->node());
    host_->start();
    thread_ = std::thread([this] {
      // Nothing the node does should throw; if something does, the service must not die of it
      // (std::terminate): the thread stops, and checks go on from local state, as in a partition.
      try {
        io_.run();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> hold(error_lock_);
        error_ = e.what();
      }
      running_.store(false);
    });
  }

  ~Impl() {
    boost::asio::post(io_, [this] { host_->leave([this] { io_.stop(); }); });
    thread_.join();
  }

  // Keys only should_rate_limit may charge (is_reserved_key) are denied, as at every door.
  Decision check(std::string_view key, int64_t cost) {
    if (is_reserved_key(key)) [[unlikely]]
      return reserved_key_denial();
    return host_->node().check(key, cost, check_now());
  }
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out) {
    for (const CheckItem& item : items) {
      if (is_reserved_key(item.key)) [[unlikely]] {
        for (size_t i = 0; i < items.size(); ++i) {
          out[i] = reserved_key_denial();
          if (!is_reserved_key(items[i].key)) out[i].reason = DenyReason::kOtherCheckDenied;
        }
        return false;
      }
    }
    return host_->node().check_all(items, out, check_now());
  }
  uint16_t port() const { return host_->gossip_port(); }

  LeaseGrant acquire(std::string_view key, int64_t count, int64_t ttl_ns) {
    if (is_reserved_key(key)) [[unlikely]]
      return {};  // kInvalid, as at every door
    return host_->node().acquire(key, count, ttl_ns, check_now());
  }
  bool release(std::string_view id) {
    const std::optional<LeaseId> parsed = LeaseId::parse(id);
    return parsed && host_->node().release(*parsed);
  }
  std::optional<int64_t> renew(std::string_view id, int64_t ttl_ns) {
    const std::optional<LeaseId> parsed = LeaseId::parse(id);
    if (!parsed) return std::nullopt;
    const MonoNanos now = check_now();
    const std::optional<MonoNanos> until = host_->node().renew(*parsed, ttl_ns, now);
    if (!until) return std::nullopt;
    return *until - now;
  }

  // Runs the host's reload() on the member's thread and waits up to kReloadWait for the files
  // to be read, parsed and put in force (or refused). Called on the member's thread (e.g. from
  // the log callback), it starts the reload and returns true at once: the thread that would
  // finish it is the caller's. False when the thread has stopped or did not get to it in time
  // (stuck): it then reloads when it gets to it, if it ever does.
  bool reload() {
    if (std::this_thread::get_id() == thread_.get_id()) {
      host_->reload([this] { publish_host_counters(); });
      return true;
    }
    if (!running_.load()) return false;
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    boost::asio::post(io_, [this, done] {
      host_->reload([this, done] {
        publish_host_counters();
        done->set_value();
      });
    });
    return finished.wait_for(kReloadWait) == std::future_status::ready;
  }

  ResetReply reset(std::string_view key) {
    if (std::string why = reset_key_problem(key, host_->max_key_bytes()); !why.empty()) {
      return {.error = why, .limited = false, .remaining = 0};
    }
    auto make = [this, k = std::string(key)] {
      const std::optional<int64_t> left = host_->node().reset(k, host_->now_ns());
      return ResetReply{.error = "", .limited = left.has_value(), .remaining = left.value_or(0)};
    };
    if (std::this_thread::get_id() == thread_.get_id()) return make();
    if (!running_.load()) return {.error = "the member's thread has stopped", .limited = false, .remaining = 0};
    auto done = std::make_shared<std::promise<ResetReply>>();
    std::future<ResetReply> result = done->get_future();
    boost::asio::post(io_, [make, done] { done->set_value(make()); });
    if (result.wait_for(kReloadWait) != std::future_status::ready) {
      return {.error = "the member's thread did not get to the reset in time (it makes it when it does)",
              .limited = false,
              .remaining = 0};
    }
    return result.get();
  }

  bool should_rate_limit(std::string_view domain, std::span<const RateLimitDescriptor> descriptors,
                         std::vector<RateLimitStatus>& out, uint32_t hits_addend) {
    const std::shared_ptr<const RlsConfig> config = host_->rls_config();
    if (!config) throw std::invalid_argument("tollgate::Member::should_rate_limit: the member has no rls_config");
    std::vector<rls::DescriptorInput> inputs;
    inputs.reserve(descriptors.size());
    for (const RateLimitDescriptor& d : descriptors)
      inputs.push_back({d.entries, d.limit, d.has_hits, d.hits, d.is_negative_hits});
    rls::Plan plan;
    if (std::string why = rls::plan_request(config, domain, hits_addend, inputs, host_->max_key_bytes(), plan);
        !why.empty()) {
      throw std::invalid_argument("tollgate::Member::should_rate_limit: " + why);
    }
    std::vector<rls::DescriptorResult> results;
    const rls::Code code = rls::decide(*checks_, plan, results);
    out.clear();
    for (const rls::DescriptorResult& r : results) {
      out.push_back(
          {r.code == rls::Code::kOverLimit, r.limit, r.remaining, r.until_full_ns, r.retry_after_ns, r.shadow_over});
    }
    return code == rls::Code::kOverLimit;
  }

  MemberStats stats() const {
    MemberStats s;
    const CheckCounts c = host_->node().table().check_counts();
    s.checks = c.checks;
    s.allowed = c.allowed;
    s.denied = c.denied;
    s.rounds = rounds_.load(std::memory_order_relaxed);
    s.members_alive = alive_.load(std::memory_order_relaxed);
    s.syncing = host_->node().syncing();
    s.messages_sent = sent_.load(std::memory_order_relaxed);
    s.messages_received = received_.load(std::memory_order_relaxed);
    s.early_seals = early_seals_.load(std::memory_order_relaxed);
    s.pending_dropped = host_->node().table().pending_dropped();
    s.reloads = reloads_.load(std::memory_order_relaxed);
    s.reload_failures = reload_failures_.load(std::memory_order_relaxed);
    s.rules_version = rules_version_.load(std::memory_order_relaxed);
    s.gossip_rejected = gossip_rejected_.load(std::memory_order_relaxed);
    std::lock_guard<std::mutex> hold(error_lock_);
    s.stopped_by = error_;
    return s;
  }

 private:
  // The host's reload and drop counters, for other threads (on the member's thread).
  void publish_host_counters() {
    const HostReloads& r = host_->reloads();
    reloads_.store(r.rules + r.keys + r.rls + r.peers, std::memory_order_relaxed);
    reload_failures_.store(r.rules_failed + r.keys_failed + r.rls_failed + r.peers_failed, std::memory_order_relaxed);
    rules_version_.store(host_->rules_version(), std::memory_order_relaxed);
    uint64_t rejected = 0;
    for (const auto& [reason, count] : host_->faults().stats().dropped) rejected += count;
    gossip_rejected_.store(rejected, std::memory_order_relaxed);
  }

  MemberOptions options_;
  boost::asio::io_context io_;
  std::unique_ptr<NodeHost> host_;
  std::unique_ptr<NodeChecks> checks_;
  std::atomic<uint64_t> rounds_{0}, sent_{0}, received_{0}, early_seals_{0}, reloads_{0}, reload_failures_{0},
      gossip_rejected_{0};
  std::atomic<int64_t> rules_version_{0};
  std::atomic<bool> running_{true};  // false once the background thread has returned
  static constexpr std::chrono::seconds kReloadWait{10};
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

MemberLease Member::acquire(std::string_view key, int64_t count, std::chrono::nanoseconds ttl) {
  const LeaseGrant g = impl_->acquire(key, count, std::max<int64_t>(0, ttl.count()));
  MemberLease lease;
  lease.granted_ = g.granted();
  lease.limited = g.outcome != LeaseOutcome::kUnlimited;
  lease.in_flight = g.in_flight;
  lease.limit = g.limit;
  lease.reason = lease_outcome_name(g.outcome);
  if (g.outcome == LeaseOutcome::kGranted) {
    lease.member_ = this;
    lease.id_ = g.id.hex();
    lease.expires_in = std::chrono::nanoseconds(g.ttl_ns);
  }
  return lease;
}
bool Member::release_lease(std::string_view id) { return impl_->release(id); }
bool Member::renew_lease(std::string_view id, std::chrono::nanoseconds ttl) {
  return impl_->renew(id, std::max<int64_t>(0, ttl.count())).has_value();
}

MemberLease::MemberLease(MemberLease&& other) noexcept
    : LeaseFacts(std::move(other)),
      member_(std::exchange(other.member_, nullptr)),
      granted_(other.granted_),
      id_(std::move(other.id_)) {
  other.id_.clear();
}
MemberLease& MemberLease::operator=(MemberLease&& other) noexcept {
  if (this != &other) {
    release();
    static_cast<LeaseFacts&>(*this) = std::move(other);
    member_ = std::exchange(other.member_, nullptr);
    granted_ = other.granted_;
    id_ = std::move(other.id_);
    other.id_.clear();
  }
  return *this;
}
MemberLease::~MemberLease() { release(); }
bool MemberLease::release() {
  if (!member_ || id_.empty()) return false;
  const bool held = member_->release_lease(id_);
  member_ = nullptr;
  id_.clear();
  return held;
}
bool MemberLease::renew(std::chrono::nanoseconds ttl) {
  if (!member_ || id_.empty()) return false;
  return member_->renew_lease(id_, ttl);
}
MemberStats Member::stats() const { return impl_->stats(); }
bool Member::reload() { return impl_->reload(); }
ResetReply Member::reset(std::string_view key) { return impl_->reset(key); }

}  // namespace tollgate
