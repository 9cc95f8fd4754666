// tollgated's front ends as components: each door onto the node (the client API, Envoy's rate
// limit service, HTTP, the metrics listener) and each feed into it (the rules retriever) has one
// lifecycle, which the daemon drives for all of them alike, in the order they were made:
//
//   made (bound, serving)  ->  start()  ->  reload()*, tick()*  ->  drain()  ->  stop(done)
//   ->  shutdown()  ->  destroyed
//
// Everything but shutdown() and the destructor runs on the node's thread. A front end holds the
// daemon's RequestHandler (or the host) and never touches another front end.
#ifndef TOLLGATE_SRC_DAEMON_FRONT_END_H_
#define TOLLGATE_SRC_DAEMON_FRONT_END_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tollgate/types.h"
#include "util/stat_def.h"

namespace boost::asio {
class io_context;
}
namespace prometheus {
struct MetricFamily;
}

namespace tollgate {

class NodeHost;
class RequestHandler;
struct DaemonOptions;
namespace http {
struct RoutesOptions;
}

class FrontEnd {
 public:
  virtual ~FrontEnd() = default;
  // The node's thread runs from now on: timers and polls begin.
  virtual void start() {}
  // SIGHUP: files read again (a token), or a poll asked for now.
  virtual void reload() {}
  // Once a second.
  virtual void tick() {}
  // SIGTERM, first step: accept nothing new, say so to health checks; what was read is answered.
  virtual void drain() {}
  // Second step, once the requests read had their moment: later ones are answered "unavailable",
  // uncharged. `done` runs on the node's thread once nothing of this front end can check any more.
  virtual void stop(std::function<void()> done) { done(); }
  // The node's thread has stopped: close what is left (queued work is answered, never decided)
  // and join any thread of its own. Any thread.
  virtual void shutdown() {}
  // Its counters, under tollgate stats' names.
  virtual void append_stats(StatsList& stats) const = 0;
  // Series of its own that are not stats (labelled by what they count), for /metrics. Any thread.
  virtual void append_metrics(std::vector<prometheus::MetricFamily>& /*families*/) const {}
};

// Makes every front end the options ask for, bound and serving, in the order the daemon drives
// them: client API, rate limit service, HTTP, metrics listener, rules retriever. Throws
// std::runtime_error (a listener that cannot start, a non-loopback one without a credential) or
// ConfigError (a token file). `routes` carries what HTTP's routes take from the daemon (its
// histograms, when it may call itself ready alone); `rules_etag` is the first fetch's.
std::vector<std::unique_ptr<FrontEnd>> make_front_ends(const DaemonOptions& options, boost::asio::io_context& io,
                                                       RequestHandler& handler, NodeHost& host,
                                                       const http::RoutesOptions& routes, std::string rules_etag);

// The declarations (util/stat_def.h) of every stat a daemon of these options reports: the
// host's and those of the front ends make_front_ends() makes for them. Known before any front
// end starts, so /metrics can read it from the first request.
StatCatalog daemon_stat_catalog(const DaemonOptions& options);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_FRONT_END_H_
