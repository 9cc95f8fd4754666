// A connection to the daemon used by one calling thread at a time, with blocking semantics
// bounded by a deadline: the synchronous checks' fast path (see ClientOptions::direct_connections).
//
// Why: the client's io thread owns its connection, so a synchronous call through it costs two
// thread hand-offs (caller -> io thread, io thread -> caller) on top of the daemon's own round
// trip. On a quiet host that was ~30 us of a ~45 us check; on a busy one each wake-up waits for
// a core and the library's p99 was 3-4x the daemon's (scripts/flood-latency). Here the caller
// writes and reads the socket itself, so a check costs what the wire costs.
//
// Not thread-safe: the Client hands each connection to one caller at a time.
#ifndef TOLLGATE_SRC_CLIENT_DIRECT_CONNECTION_H_
#define TOLLGATE_SRC_CLIENT_DIRECT_CONNECTION_H_

#include <array>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "api/endpoint.h"
#include "api/framing.h"

namespace tollgate::client {

class DirectConnection {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Connects to `endpoint` (non-blocking, finished by `deadline`). Returns null and says why in
  // *error when it cannot.
  static std::unique_ptr<DirectConnection> open(const api::Endpoint& endpoint, TimePoint deadline, std::string* error);
  ~DirectConnection();
  DirectConnection(const DirectConnection&) = delete;
  DirectConnection& operator=(const DirectConnection&) = delete;

  enum class Outcome {
    kAnswered,  // *payload is the next frame the daemon sent
    kNotSent,   // nothing of the request was written (e.g. the daemon closed this connection
                // while it sat idle): the caller may try another connection
    kTimedOut,  // the deadline passed; the connection is out of step and must be discarded
    kFailed,    // the connection broke or sent garbage (see *error); discard it
  };
  // Writes `frame` (a whole request frame) and reads one whole answer frame, by `deadline`.
  // *payload stays valid until the next call.
  Outcome exchange(std::string_view frame, TimePoint deadline, std::string_view* payload, std::string* error);

  // True if the daemon has closed this connection (it reads EOF or an error; nothing is
  // consumed). One non-blocking syscall.
  bool closed_by_daemon() const;
  // When the connection was last given back to the pool.
  TimePoint idle_since() const { return idle_since_; }
  void set_idle_since(TimePoint t) { idle_since_ = t; }

 private:
  explicit DirectConnection(int fd) : fd_(fd), decoder_(api::kMaxResponseFrameBytes) {}
  // Waits until fd_ is ready for `events` (POLLIN/POLLOUT) or `deadline`; false on the deadline.
  bool wait(short events, TimePoint deadline);

  int fd_;
  TimePoint idle_since_{};
  FrameReader decoder_;
  std::array<char, 16 * 1024> read_buffer_;
};

// The callers' connections: at most `max_open` exist (idle or in use); a caller takes one,
// uses it alone, and gives it back, or discards it when it broke. Thread-safe.
class DirectPool {
 public:
  DirectPool(api::Endpoint endpoint, uint32_t max_open) : endpoint_(std::move(endpoint)), max_open_(max_open) {}

  // An idle connection, or a new one (connected by `deadline`) while fewer than max_open exist;
  // null otherwise. An idle connection that sat in the pool for kCheckAfterIdle is first checked
  // for a close by the daemon (its idle timeout), and replaced if so: over TCP a request
  // written to a closed connection is only found out when the answer never comes.
  static constexpr std::chrono::seconds kCheckAfterIdle{1};
  std::unique_ptr<DirectConnection> take(DirectConnection::TimePoint deadline);
  void give_back(std::unique_ptr<DirectConnection> connection);
  // Accounts for a taken connection that the caller destroys.
  void discard();

 private:
  const api::Endpoint endpoint_;
  const uint32_t max_open_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<DirectConnection>> idle_;
  uint32_t open_ = 0;  // idle + taken
};

}  // namespace tollgate::client

#endif  // TOLLGATE_SRC_CLIENT_DIRECT_CONNECTION_H_
