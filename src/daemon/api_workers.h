// The client API's extra threads (tollgated --threads N): N - 1 ApiServers, each on an
// io_context and thread of its own, serving connections that the node thread's server accepts
// and hands over (ApiServer::share_connections_with). A check goes straight to the node, whose
// key table is then concurrent (KeyTableOptions::concurrent); what else a request may ask
// (members, stats, fault settings) runs on the node's thread while the worker waits for it. The
// node's thread never waits for a worker, so the two cannot wait for each other.
#ifndef TOLLGATE_SRC_DAEMON_API_WORKERS_H_
#define TOLLGATE_SRC_DAEMON_API_WORKERS_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "api/api_server.h"
#include "request/request_handler.h"

namespace boost::asio {
class io_context;
}

namespace tollgate {

// The client API thread running the caller: 0 for the node's thread (or any thread that is not
// a worker), i for worker i (1 to N - 1). For per-thread statistics.
size_t current_api_thread();

class ApiWorkers {
 public:
  // `node` answers on the node's thread, which runs `node_io`; its check and check_all must be
  // safe from any thread. Both outlive the workers. Threads start at once; the servers accept
  // nothing until the node thread's server hands them connections.
  ApiWorkers(size_t count, boost::asio::io_context& node_io, RequestHandler& node,
             const api::ApiServerOptions& options);
  // Stops every server and joins every thread (call node_loop_ended() first if the node's
  // thread has stopped running node_io).
  ~ApiWorkers();
  ApiWorkers(const ApiWorkers&) = delete;
  ApiWorkers& operator=(const ApiWorkers&) = delete;

  std::vector<api::ApiServer*> servers() const;

  // From the node's thread. drain(): each server reads no more and closes each connection once
  // its answers are written (ApiServer::drain). stop(): each server closes what is left; then
  // `done` runs on the node's thread. Neither waits.
  void drain();
  void stop(std::function<void()> done);
  // The node's thread no longer runs node_io: a worker waiting for it gives up (members and
  // stats answer empty, fault settings an error).
  void node_loop_ended() { node_loop_ended_.store(true); }

 private:
  struct Worker;
  boost::asio::io_context& node_io_;
  RequestHandler& node_;
  std::atomic<bool> node_loop_ended_{false};
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_API_WORKERS_H_
