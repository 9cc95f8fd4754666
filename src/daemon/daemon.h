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

#include "api/request_handler.h"
#include "daemon_options.h"

namespace tollgate {

class ApiWorkers;
class NodeHost;
class RulesFeed;
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
  // and the cluster key file (NodeHost::reload); the rules file and the RLS config also reload
  // when they change.
  int run();

  // RequestHandler, called on the io thread; check and check_all also on the client API's other
  // threads (--threads), the node's key table being concurrent then.
  void check(std::span<const CheckItem> items, std::span<Decision> out) override;
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out) override;
  std::vector<MemberInfo> members() override;
  StatsList stats() override;
  std::vector<std::pair<std::string, RuleCounters>> rule_counters() override;
  std::string set_faults(const FaultSettings& faults) override;

 private:
  // Logs the most memory these settings can take; throws ConfigError when it exceeds the limit.
  void check_memory_bound() const;
  void wait_for_signal();
  void schedule_watch();
  void shutdown();
  // The client API's stats, summed over its threads (and each thread's share).
  void append_api_stats(StatsList& s) const;

  DaemonOptions options_;
  boost::asio::io_context io_;
  // Check and round latency for /metrics (prometheus-cpp Histograms: observed on the node's
  // and the client API threads, collected on the HTTP thread). Before http_: it outlives the
  // HTTP thread.
  std::unique_ptr<DaemonHistograms> histograms_;
  std::unique_ptr<NodeHost> host_;
  std::unique_ptr<RulesFeed> rules_feed_;  // with --rules-url
  // --threads N: the client API's other N - 1 threads. Before api_, which hands them
  // connections: it goes first.
  std::unique_ptr<ApiWorkers> workers_;
  std::unique_ptr<api::ApiServer> api_;
  std::unique_ptr<rls::RlsServer> rls_;
  std::unique_ptr<http::HttpServer> http_;
  std::unique_ptr<http::HttpServer> metrics_http_;  // --metrics-listen: /metrics and health only
  // The HTTP servers there are (http_, metrics_http_).
  std::vector<http::HttpServer*> http_servers() const;
  void reload_http_token();
  boost::asio::steady_timer watch_timer_, shutdown_timer_;
  boost::asio::signal_set signals_;
  bool stopping_ = false;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_DAEMON_H_
