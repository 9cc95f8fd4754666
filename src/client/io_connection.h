// The client's own connection to the daemon, owned by one background thread (an io_context): it
// connects and reconnects with capped, jittered exponential backoff, pipelines the requests
// handed to it, matches answers to calls by id (an answer whose call gave up is counted late and
// dropped), and completes every call whose deadline passes or whose connection is lost. Async
// and admin calls go through it, and synchronous checks when the callers' own connections
// cannot be used; it is also what notices the daemon going and coming back.
//
// Threading: submit(), fail(), connected(), wait_connected() and on_io_thread() may be called
// from any thread; completions run on the io thread.
#ifndef TOLLGATE_SRC_CLIENT_IO_CONNECTION_H_
#define TOLLGATE_SRC_CLIENT_IO_CONNECTION_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "api/endpoint.h"
#include "client/protocol.h"
#include "tollgate/client.h"

namespace tollgate::client {

// What the client has seen, as counted by both of its paths (see ClientCounters).
struct SharedCounters {
  std::atomic<uint64_t> daemon_replies{0}, fallback_replies{0}, late_replies{0};
  std::atomic<uint64_t> connects{0}, connect_failures{0}, disconnects{0}, direct_calls{0};
};

// A call's completion: `response` is the daemon's answer to it, or null with `error` saying why
// there is none.
using Completion = std::function<void(const pb::Response* response, const std::string& error)>;

class IoConnection {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Starts the thread and the first connection attempt; does not wait for it.
  IoConnection(const ClientOptions& options, api::Endpoint endpoint, SharedCounters& counters);
  // Completes every outstanding call (with an error) and joins the thread.
  ~IoConnection();
  IoConnection(const IoConnection&) = delete;
  IoConnection& operator=(const IoConnection&) = delete;

  // Hands over the call `id` (its framed request) to be sent; `done` runs on the io thread once,
  // with the answer or an error, at the latest at `deadline`.
  void submit(uint64_t id, TimePoint deadline, std::string frame, Completion done);
  // Completes `done` with `error` on the io thread, without sending anything.
  void fail(Completion done, std::string error);

  bool connected() const { return connected_.load(); }
  bool wait_connected(std::chrono::nanoseconds timeout);
  bool on_io_thread() const;

 private:
  class Impl;
  // Before impl_: its thread sets them until impl_'s destructor has joined it.
  std::atomic<bool> connected_{false};
  std::mutex connected_mutex_;
  std::condition_variable connected_cv_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::client

#endif  // TOLLGATE_SRC_CLIENT_IO_CONNECTION_H_
