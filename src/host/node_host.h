// One host for a node, whoever runs it: tollgated (src/daemon) and tollgate::Member
// (src/embedded) are each this host plus their own concerns (the daemon: signals, the process,
// its front ends; the member: checks on the caller's threads). The host owns what a node needs
// to live: the gossip transport with its limits, the clock, the incarnation, the rounds, the
// files a node lives by (peers, rules, RLS config, cluster key: watched, and reloaded on
// reload()), and a clean leave. A reload or a setting added here works in both.
//
// Threading: everything runs on the io_context's thread (the node's owner), except what says
// "any thread". Checks are not the host's: callers call node().check() on the owner's thread, or
// from any thread when concurrent_checks is set.
#ifndef TOLLGATE_SRC_HOST_NODE_HOST_H_
#define TOLLGATE_SRC_HOST_NODE_HOST_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/api.h"
#include "config/node_settings.h"
#include "core/offense_limiter.h"
#include "host/transport_kind.h"
#include "tollgate/clock.h"
#include "tollgate/node.h"
#include "tollgate/random.h"

namespace tollgate {

class FaultInjectingTransport;
class RlsConfig;
class RuleSet;
class Transport;

enum class LogLevel : uint8_t { kInfo, kWarn, kError };
// Where the host's log lines go (tollgated: spdlog; a member: the service's, or nowhere).
using HostLog = std::function<void(LogLevel, const std::string&)>;

struct NodeHostOptions {
  std::string node_id;  // default: `bind`, with the port the transport chose for port 0
  std::string bind = "127.0.0.1:7946";
  TransportKind transport = TransportKind::kUdp;
  size_t max_datagram = 1400;                      // bytes per UDP datagram, MAC included
  int64_t gossip_peer_bytes_per_second = 4 << 20;  // per source address, before decoding
  int64_t max_message_age_ns = 30 * kNanosPerSecond;
  // Empty: gossip is not authenticated (the caller decides whether that is allowed).
  std::string cluster_key_file;
  std::string peers_file;          // static membership; watched
  std::vector<std::string> seeds;  // heartbeat membership
  // The rules: a file (watched, reloaded), or text fixed at start (named `rules_origin` in
  // errors), or neither (no rules of its own; the RLS config's limits still apply).
  std::string rules_file;
  std::string rules_text;
  std::string rules_origin = "rules";
  std::string rls_config;  // envoyproxy/ratelimit YAML, a file or a directory; watched
  NodeSettings node;
  uint64_t incarnation = 0;  // 0: the wall clock's microseconds, higher at every restart
  // Checks come from other threads than the owner's (the key table is concurrent); the owner
  // seals early when they pile up (NodeOptions::seal_wanted).
  bool concurrent_checks = false;
  size_t early_seal_keys = 256;  // NodeOptions::early_seal_keys
  // Checks are decided at a time up to coarse_lag_ns behind this clock (KeyTableOptions).
  const Clock* precise_clock = nullptr;
  int64_t coarse_lag_ns = 0;
  HostLog log;
  // After each round, on the owner's thread, with the time the round took.
  std::function<void(int64_t round_ns)> on_round;
};

// Reloads done and refused (the previous file stays in force).
struct HostReloads {
  uint64_t rules = 0, rules_failed = 0, keys = 0, keys_failed = 0, rls = 0, rls_failed = 0, peers = 0,
           peers_failed = 0;
};

class NodeHost {
 public:
  // Reads the files, binds the gossip socket on `io` and builds the node. Throws ConfigError for
  // a bad file and std::runtime_error for a socket that cannot be bound. Nothing runs until
  // start().
  NodeHost(boost::asio::io_context& io, NodeHostOptions options);
  ~NodeHost();
  NodeHost(const NodeHost&) = delete;
  NodeHost& operator=(const NodeHost&) = delete;

  // Schedules the rounds (the first at once) and the file watch (every second).
  void start();
  // What SIGHUP does: the RLS config, the rules file and the cluster key file read again. A
  // broken file is logged and counted, and the one in force stays.
  void reload();
  // Rules from elsewhere (the rules retriever): put in force if they parse, else refused (logged,
  // counted). Returns "" or why they were refused.
  std::string offer_rules(std::string text, const std::string& origin);
  // No more rounds or file watching (idempotent); the node still answers checks.
  void stop_rounds();
  // stop_rounds(), then the departure: what was admitted is sealed and sent with it; `done` runs
  // on the owner's thread once it had 100 ms to leave the socket and the transport stopped.
  void leave(std::function<void()> done);

  Node& node() { return *node_; }
  const Node& node() const { return *node_; }
  FaultInjectingTransport& faults() { return *faults_; }
  MonoNanos now_ns() const;  // the host's clock: steady_clock, never the wall clock; any thread
  const std::string& node_id() const { return options_.node_id; }
  const std::string& bind() const { return options_.bind; }
  uint64_t incarnation() const { return incarnation_; }
  uint16_t gossip_port() const { return port_; }
  size_t max_key_bytes() const { return max_key_bytes_; }  // the key table's; longer RLS keys are digested

  // The RLS config in force (null without one); any thread.
  std::shared_ptr<const RlsConfig> rls_config() const;
  // Called with every RLS config put in force after this call, on the owner's thread.
  void on_rls_config(std::function<void(std::shared_ptr<const RlsConfig>)> listener);
  int64_t rules_version() const { return rules_version_; }
  const std::string& rules_text() const { return rules_text_; }
  const HostReloads& reloads() const { return reloads_; }

  // A misbehaving client or peer, logged at most once per offender per 10 s; any thread.
  void report_offense(std::string_view offender, std::string_view what);

  // The node's, the ledger's, the membership's, the transport's and the reloads' counters, under
  // tollgate stats' names. On the owner's thread.
  StatsList stats() const;

 private:
  void log(LogLevel level, const std::string& line) const;
  void schedule_tick();
  void schedule_watch();
  void watch_files();
  bool reload_rules_file();
  bool reload_rls_config();
  void reload_cluster_keys();
  void reload_peers_if_changed();
  // Static membership: logs (and flags, peers_self_mismatch) a peers file that does not list
  // this node at the address it binds.
  void check_own_peers_line(const std::vector<PeerSpec>& peers);
  // Parses `text` (a ConfigError names `origin`) and makes it the rules file's part.
  void set_rules_text(std::string text, const std::string& origin);
  std::shared_ptr<const RuleSet> combined_rules() const;
  void set_rls_config(std::shared_ptr<const RlsConfig> config);
  void put_rules_in_force();

  boost::asio::io_context& io_;
  NodeHostOptions options_;
  uint64_t incarnation_ = 0;
  uint16_t port_ = 0;
  size_t max_key_bytes_ = 0;
  SplitMix64 random_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<FaultInjectingTransport> faults_;
  std::unique_ptr<Node> node_;
  std::shared_ptr<const RuleSet> file_rules_;
  mutable std::mutex rls_config_mu_;  // rls_config_ is read from any thread
  std::shared_ptr<const RlsConfig> rls_config_;
  std::vector<std::function<void(std::shared_ptr<const RlsConfig>)>> rls_listeners_;
  std::string rls_fingerprint_;    // of the RLS config's files when last read
  int64_t rules_version_ = 0;      // content_version of the rules in force (0: none)
  std::string rules_text_;         // their bytes
  std::string rules_fingerprint_;  // the rules file's when last read
  std::string rules_changing_;     // a new fingerprint seen once: read when it holds a second
  std::string peers_fingerprint_;
  HostReloads reloads_;
  bool peers_problem_ = false;
  OffenseLimiter offenses_;
  std::mutex offenses_mu_;
  boost::asio::steady_timer tick_timer_, watch_timer_, leave_timer_;
  bool stopped_ = false;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_HOST_NODE_HOST_H_
