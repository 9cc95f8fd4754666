#include "request/node_queue.h"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

namespace tollgate::request {

struct NodeQueue::State {
  struct Entry {
    Job job;
    Clock::time_point deadline;
    size_t bytes = 0;
  };
  State(boost::asio::io_context& io, size_t pending, size_t pending_bytes)
      : node_io(io), max_pending(pending), max_bytes(pending_bytes) {}

  boost::asio::io_context& node_io;
  const size_t max_pending, max_bytes;
  std::mutex mu;
  std::deque<Entry> queue;   // under mu
  size_t bytes = 0;          // under mu
  bool turn_posted = false;  // under mu: a run_turn() is on its way
  bool shut_down = false;    // under mu
  std::atomic<bool> stopped{false};
};

NodeQueue::NodeQueue(boost::asio::io_context& node_io, size_t max_pending, size_t max_pending_bytes)
    : node_io_(node_io), state_(std::make_shared<State>(node_io, max_pending, max_pending_bytes)) {}

NodeQueue::~NodeQueue() { shutdown(); }

bool NodeQueue::submit(Job job, Clock::time_point deadline, size_t bytes) {
  State& s = *state_;
  bool post = false;
  {
    std::lock_guard lock(s.mu);
    if (s.shut_down || s.queue.size() >= s.max_pending || bytes > s.max_bytes - s.bytes) return false;
    s.queue.push_back({std::move(job), deadline, bytes});
    s.bytes += bytes;
    post = !s.turn_posted;
    s.turn_posted = true;
  }
  if (post) boost::asio::post(node_io_, [state = state_] { run_turn(state); });
  return true;
}

void NodeQueue::run_turn(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::vector<State::Entry> turn;
  bool more = false;
  {
    std::lock_guard lock(s.mu);
    const size_t n = std::min(s.queue.size(), kJobsPerTurn);
    for (size_t i = 0; i < n; ++i) {
      s.bytes -= s.queue.front().bytes;
      turn.push_back(std::move(s.queue.front()));
      s.queue.pop_front();
    }
    more = !s.queue.empty();
    s.turn_posted = more;
  }
  for (State::Entry& e : turn) {
    if (s.stopped.load()) {
      e.job(Outcome::kStopped);
    } else if (Clock::now() >= e.deadline) {
      e.job(Outcome::kExpired);
    } else {
      e.job(Outcome::kRun);
    }
  }
  if (more) boost::asio::post(s.node_io, [state] { run_turn(state); });
}

void NodeQueue::stop() { state_->stopped.store(true); }

void NodeQueue::shutdown() {
  State& s = *state_;
  std::deque<State::Entry> left;
  {
    std::lock_guard lock(s.mu);
    if (s.shut_down) return;
    s.shut_down = true;
    left.swap(s.queue);
    s.bytes = 0;
  }
  for (State::Entry& e : left) e.job(Outcome::kShutDown);
}

size_t NodeQueue::pending() const {
  std::lock_guard lock(state_->mu);
  return state_->queue.size();
}

}  // namespace tollgate::request
