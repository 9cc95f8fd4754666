// tollgated wired together: one io_context thread runs the node's rounds, the gossip transport,
// the client API and the file watchers, so the Node (single-owner) needs no lock and a check
// never waits for anything but its own bucket.
#ifndef TOLLGATE_SRC_DAEMON_DAEMON_H_
#define TOLLGATE_SRC_DAEMON_DAEMON_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "api/request_handler.h"
#include "daemon_options.h"
#include "steady_clock.h"
#include "tollgate/node.h"
#include "core/offense_limiter.h"
#include "tollgate/random.h"

namespace tollgate {

class ApiWorkers;
class Transport;
class FaultInjectingTransport;
class RlsConfig;
class RuleSet;
class RulesRetriever;
namespace api {
class ApiServer;
}
namespace rls {
class RlsServer;
}
namespace http {
class HttpServer;
}
struct DaemonHistograms;

class Daemon final : public RequestHandler {
 public:
  // Loads the rules, peers and key files and binds every socket. Throws ConfigError for a bad
  // file and std::runtime_error for a socket that cannot be bound, with what to fix.
  explicit Daemon(DaemonOptions options);
  ~Daemon() override;

  // Serves until SIGTERM or SIGINT, then announces that it leaves, closes the client API
  // (checks already answered are written; requests still unread are not), removes its socket
  // files and returns 0. SIGHUP reloads the rules (or polls --rules-url at once), the RLS config
  // and the cluster key file; the
  // RLS config also reloads when one of its files changes.
  int run();

  // RequestHandler, called on the io thread; check and check_all also on the client API's other
  // threads (--threads), the node's key table being concurrent then.
  void check(std::span<const CheckItem> items, std::span<Decision> out) override;
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out) override;
  std::vector<MemberInfo> members() override;
  StatsList stats() override;
  std::vector<std::pair<std::string, RuleCounters>> rule_counters() override { return node_->rule_counters(); }
  std::string set_faults(const FaultSettings& faults) override;

 private:
  void wait_for_signal();
  void schedule_tick();
  void schedule_watch();
  // SIGHUP: the RLS config, the rules file and the cluster key file.
  void reload_rules();
  // The rules file alone (on SIGHUP, and when it changes); true if new rules are in force.
  bool reload_rules_file();
  // Reads and parses the rules file, and its version; throws ConfigError.
  void load_rules_file_now();
  // --rules-url at start: the cached copy, else a first fetch (throws ConfigError if neither).
  void load_rules_from_service_now();
  // Parses `text` (named `origin` in errors; throws ConfigError) and puts its rules in force
  // here (not yet in the node): file_rules_, rules_version_, rules_in_force_text_.
  void set_rules_text(std::string text, const std::string& origin);
  // A body the retriever fetched: validated, then in force and cached; refused (the rules in
  // force stay) with a log line and rules_reload_failures.
  void apply_fetched_rules(const std::string& body);
  void write_rules_cache(const std::string& body);
  // Reloads the RLS config; true if it changed what is in force.
  bool reload_rls_config();
  // The rules file's rules with the RLS config's limits: what the node decides against.
  std::shared_ptr<const RuleSet> combined_rules() const;
  void reload_peers_if_changed();
  void shutdown();
  // The client API's stats, summed over its threads (and each thread's share).
  void append_api_stats(StatsList& s) const;

  DaemonOptions options_;
  uint64_t incarnation_;
  boost::asio::io_context io_;
  SteadyClock clock_;
  SplitMix64 random_;
  // Check and round latency for /metrics (prometheus-cpp Histograms: observed on the node's
  // and the client API threads, collected on the HTTP thread). Before http_: it outlives the
  // HTTP thread.
  std::unique_ptr<DaemonHistograms> histograms_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<FaultInjectingTransport> faults_;
  std::unique_ptr<Node> node_;
  // --threads N: the client API's other N - 1 threads. Before api_, which hands them
  // connections: it goes first.
  std::unique_ptr<ApiWorkers> workers_;
  std::unique_ptr<api::ApiServer> api_;
  // The last good rules file and RLS config (either may be empty).
  std::shared_ptr<const RuleSet> file_rules_;
  std::shared_ptr<const RlsConfig> rls_config_;
  std::string rls_fingerprint_;  // of the RLS config's files when last loaded
  int64_t rules_version_ = 0;    // content_version of the rules file in force (0: none)
  std::string rules_fingerprint_;  // its path, mtime and size when last read
  std::string rules_changing_;     // a new fingerprint seen once: read when it holds a second
  std::unique_ptr<RulesRetriever> retriever_;  // with --rules-url
  std::string rules_etag_;  // of the first fetch at start, for the retriever's first poll
  std::string rules_in_force_text_;  // the bytes of the rules in force (--rules-url caches them)
  bool rules_cache_stale_ = false;   // the last cache write failed: retried every second
  std::unique_ptr<rls::RlsServer> rls_;
  std::unique_ptr<http::HttpServer> http_;
  // Misbehaving clients and peers: one log line per offender per 10 s (see OffenseLimiter).
  OffenseLimiter offenses_;
  std::mutex offenses_mu_;
  void report_offense(std::string_view offender, std::string_view what);
  boost::asio::steady_timer tick_timer_;
  boost::asio::steady_timer watch_timer_;
  boost::asio::signal_set signals_;
  std::optional<std::filesystem::file_time_type> peers_mtime_;
  uintmax_t peers_size_ = 0;
  bool stopping_ = false;
  // SIGHUP reloads: done, and refused (the previous file stays in force).
  struct {
    uint64_t rules = 0, rules_failed = 0, keys = 0, keys_failed = 0, rls = 0, rls_failed = 0, cache_write_failed = 0;
  } reloads_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_DAEMON_H_
