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
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/node.h"
#include "core/random.h"
#include "guard/offense_limiter.h"
#include "host/node_host_options.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/types.h"
#include "util/stat_def.h"

namespace boost::asio {
class thread_pool;
}

namespace tollgate {

class ClusterKeys;
class FaultInjectingTransport;
class RlsConfig;
class RuleSet;
class Transport;

// Reloads done and refused (the previous file stays in force).
struct HostReloads {
  uint64_t rules = 0, rules_failed = 0, keys = 0, keys_failed = 0, rls = 0, rls_failed = 0, peers = 0, peers_failed = 0;
};

class NodeHost {
 public:
  // The NodeOptions `options` imply for a node of incarnation `incarnation` (no file is read).
  static NodeOptions node_options(const NodeHostOptions& options, uint64_t incarnation);

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
  // broken file is logged and counted, and the one in force stays. Rules and RLS config are read
  // and parsed off the node's thread (a large document takes a second, and checks must not wait
  // for it); `done`, if given, runs on the owner's thread once they are in force or refused.
  void reload(std::function<void()> done = {});
  // Rules from elsewhere (the rules retriever): parsed off the node's thread, then put in force,
  // or refused (logged, counted). `done` gets "" or why they were refused, on the owner's thread
  // (not at all if the host is destroyed first).
  void offer_rules(std::string text, const std::string& origin, std::function<void(const std::string&)> done);
  // An RLS config from elsewhere (rls_dynamic: the xDS client's, already parsed and checked), put
  // in force now with the rules that hold its limits. On the owner's thread; `origin` is logged.
  void offer_rls_config(std::shared_ptr<const RlsConfig> config, const std::string& origin);
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
  // Their declarations (util/stat_def.h): every name stats() reports is one of these.
  static std::vector<StatDef> stat_defs();

  // With a state_dir: writes the node's state now and waits for it (a timer does it every
  // state_interval_ns, and leave() at the end). Returns "" or that it failed (logged and counted).
  std::string write_state();
  // What a state write off the node's thread reports back.
  struct StateWrite {
    std::string error;  // "" when written
    uint64_t bytes = 0, ns = 0;
  };

 private:
  RlsLoadOptions rls_load_options() const {
    return {.merge_domains = options_.rls_merge_domains,
            .shadow_mode = options_.rls_shadow_mode,
            .quota_mode = options_.rls_quota_mode};
  }
  void log(LogLevel level, const std::string& line) const;
  void schedule_tick();
  void schedule_watch();
  void watch_files();
  void log_rules_reloaded(const std::string& origin) const;
  // Loads of rules and RLS config, one at a time off the node's thread; a request made while
  // one runs is merged into the next.
  struct LoadRequest;
  struct Loaded;
  void request_load(LoadRequest request);
  void start_load();
  void finish_load(Loaded& loaded);
  void reload_cluster_keys();
  void reload_peers_if_changed();
  // Static membership: logs (and flags, peers_self_mismatch) a peers file that does not list
  // this node at the address it binds.
  void check_own_peers_line(const std::vector<PeerSpec>& peers);
  // Parses `text` (a ConfigError names `origin`) and makes it the rules file's part.
  void set_rules_text(std::string text, const std::string& origin);
  // Makes `rules`, parsed from `text`, the rules file's part (not yet in the node's rules).
  void keep_rules(std::shared_ptr<const RuleSet> rules, std::string text);
  std::shared_ptr<const RuleSet> combined_rules() const;
  void set_rls_config(std::shared_ptr<const RlsConfig> config);
  void put_rules_in_force();
  void load_state();
  void schedule_state();
  void start_state_write();  // exports in slices, then writes off the node's thread
  void export_slice(uint64_t generation);
  void launch_state_writer(std::shared_ptr<NodeState> s);  // never throws
  void collect_state_write();                              // the last write's outcome, into state_ (waits for it)

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
  std::shared_ptr<const RlsConfig> staged_rls_;  // reloaded, not yet in the node's rules (owner's)
  std::vector<std::function<void(std::shared_ptr<const RlsConfig>)>> rls_listeners_;
  std::string rls_fingerprint_;    // of the RLS config's files when last read
  int64_t rules_version_ = 0;      // content_version of the rules in force (0: none)
  std::string rules_text_;         // their bytes
  std::string rules_fingerprint_;  // the rules file's when last read
  std::string rules_changing_;     // a new fingerprint seen once: read when it holds a second
  std::string peers_fingerprint_;
  HostReloads reloads_;
  bool peers_problem_ = false;
  bool rls_missing_ = false;  // --rls-config-optional, and no RLS config read yet
  OffenseLimiter offenses_;
  std::mutex offenses_mu_;
  std::unique_ptr<ClusterKeys> keys_;                       // the transport's, for the state file's MAC
  std::unique_ptr<boost::asio::thread_pool> loader_;        // one thread: parses rules and RLS configs
  std::unique_ptr<LoadRequest> loading_, next_load_;        // the load under way, and the one after it
  std::shared_ptr<char> alive_ = std::make_shared<char>();  // a load's answer finds the host gone without it
  std::future<StateWrite> state_writer_;                    // the state write under way, if any
  std::shared_ptr<NodeState> exporting_;                    // the export under way, if any
  uint64_t export_cursor_ = 0;
  uint64_t export_generation_ = 0;
  bool node_id_from_port_zero_ = false;  // the id is "host:port" of a port the kernel chose
  struct StateCounters {
    uint64_t writes = 0, write_failures = 0, restored = 0, bytes = 0, write_ns = 0, skipped = 0;
    uint64_t export_slice_ns = 0;  // the longest slice of the last export on the node's thread
    bool failing = false;          // the last write failed (logged once per streak)
  } state_;
  boost::asio::steady_timer tick_timer_, watch_timer_, leave_timer_, state_timer_;
  bool stopped_ = false;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_HOST_NODE_HOST_H_
