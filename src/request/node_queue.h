// The one way onto the node's thread for a front end that reads requests on threads of its own
// (gRPC's, HTTP's), so that every such door keeps the same rules:
//
// - Bounded: at most max_pending jobs wait at once, holding at most max_pending_bytes (as the
//   caller counts them); beyond, submit() refuses at once and the caller answers "busy" without
//   queueing (the caller's deadline wins: it fails open fast instead of waiting behind others).
// - A job that waited past its deadline runs with kExpired: it answers without deciding, so
//   nothing is charged for a request whose client has given up.
// - One stop gate: from stop() on (on the node's thread, as the node leaves) queued and later jobs
//   run with kStopped, uncharged; from shutdown() on (the node's thread has ended) submit()
//   refuses and what is still queued runs with kShutDown on the caller's thread.
// - Turns: the node's thread runs at most kJobsPerTurn jobs per handler, so gossip rounds and the
//   native API's clients get the thread in between.
//
// Thread-safety: submit() and pending() from any thread; stop() on the node's thread; shutdown()
// from any thread once the node's io_context runs no more. Every job runs exactly once.
#ifndef TOLLGATE_SRC_REQUEST_NODE_QUEUE_H_
#define TOLLGATE_SRC_REQUEST_NODE_QUEUE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace boost::asio {
class io_context;
}

namespace tollgate::request {

class NodeQueue {
 public:
  enum class Outcome { kRun, kExpired, kStopped, kShutDown };
  using Job = std::function<void(Outcome)>;
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kJobsPerTurn = 16;

  // `node_io` must outlive the queue (or shutdown() be called before it goes).
  NodeQueue(boost::asio::io_context& node_io, size_t max_pending, size_t max_pending_bytes = SIZE_MAX);
  ~NodeQueue();  // shutdown()
  NodeQueue(const NodeQueue&) = delete;
  NodeQueue& operator=(const NodeQueue&) = delete;

  // Queues `job` to run on the node's thread, with kExpired if `deadline` has passed by then.
  // False when full or shut down: the job is dropped without running.
  bool submit(Job job, Clock::time_point deadline, size_t bytes = 0);
  void stop();
  void shutdown();
  size_t pending() const;

 private:
  struct State;  // shared with the handlers posted to the node's io_context, which may outlive us
  static void run_turn(const std::shared_ptr<State>& state);

  boost::asio::io_context& node_io_;
  std::shared_ptr<State> state_;
};

}  // namespace tollgate::request

#endif  // TOLLGATE_SRC_REQUEST_NODE_QUEUE_H_
