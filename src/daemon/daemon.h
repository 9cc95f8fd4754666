// tollgated wired together: the node's host (src/host/node_host.h: transport, rounds, files,
// leave) and the front ends (client API, rate limit service, HTTP, rules retriever) on one
// io_context thread that owns the node, plus the client API's other threads (--threads).
#ifndef TOLLGATE_SRC_DAEMON_DAEMON_H_
#define TOLLGATE_SRC_DAEMON_DAEMON_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <vector>

#include "daemon_options.h"
#include "request/request_handler.h"

namespace tollgate {

class FrontEnd;
class NodeHost;
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
  // and the cluster key file (NodeHost::reload); the rules file and the RLS config also reload
  // when they change.
  int run();

  // RequestHandler, called on the io thread; check and check_all also on the client API's other
  // threads (--threads), the node's key table being concurrent then.
  void check(std::span<const CheckItem> items, std::span<Decision> out) override;
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out) override;
  void refund(std::span<const CheckItem> items, std::span<Decision> out) override;
  std::vector<MemberInfo> members() override;
  StatsList stats() override;
  std::vector<std::pair<std::string, RuleCounters>> rule_counters() override;
  std::vector<std::pair<std::string, RuleLeases>> rule_leases() override;
  std::vector<TopParts> top_parts(std::string_view rule) override;
  std::optional<KeyBalance> balance(std::string_view key) override;
  RulesInForce rules_in_force(size_t max) override;
  std::string set_faults(const FaultSettings& faults) override;
  ResetReply reset(std::string_view key) override;
  LeaseGrant acquire(std::string_view key, int64_t count, int64_t ttl_ns) override;
  bool release(const LeaseId& id) override;
  std::optional<int64_t> renew(const LeaseId& id, int64_t ttl_ns) override;
  LeaseGrant acquire_anonymous(std::string_view key, int64_t count, int64_t ttl_ns) override;
  void owe_release(std::string_view key, int64_t count) override;
  int64_t in_flight(std::string_view key) override;
  AnonymousRelease release_anonymous(std::string_view key, int64_t count) override;

 private:
  // Logs the most memory these settings can take; throws ConfigError when it exceeds the limit.
  void check_memory_bound() const;
  void wait_for_signal();
  void schedule_watch();
  void shutdown();

  DaemonOptions options_;
  boost::asio::io_context io_;
  // Check and round latency for /metrics (prometheus-cpp Histograms: observed on the node's
  // and the client API threads, collected on the HTTP thread). Before the front ends: it
  // outlives the HTTP thread.
  std::unique_ptr<DaemonHistograms> histograms_;
  std::unique_ptr<NodeHost> host_;
  // Client API, rate limit service, HTTP, metrics listener, rules retriever (front_end.h), in
  // the order they are driven.
  std::vector<std::unique_ptr<FrontEnd>> front_ends_;
  boost::asio::steady_timer watch_timer_, shutdown_timer_;
  boost::asio::signal_set signals_;
  bool stopping_ = false;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_DAEMON_H_
