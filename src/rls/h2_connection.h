// One HTTP/2 connection of the rate limit service on a socket (docs/rls-h2-plan.md 5): an
// H2Session (h2_session.h) between the socket and a CallServer that answers each whole call
// before the next read. What a client can hold is bounded here:
//   - input: one read of at most read_bytes per turn of the io_context (R5), and none while a
//     write is under way, so a client that does not read its answers stops being read;
//   - output: one write at a time, which must finish within write_timeout (else: closed);
//   - time: the HTTP/2 preface within handshake_timeout; a connection without calls (none
//     open, none begun) for idle_timeout, or older than max_age, is sent GOAWAY (graceful: what is open is answered)
//     and closed after age_grace if the peer still holds it.
// All on one io_context thread; the clock is the steady clock (the session takes it as given).
#ifndef TOLLGATE_SRC_RLS_H2_CONNECTION_H_
#define TOLLGATE_SRC_RLS_H2_CONNECTION_H_

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rls/h2_session.h"

namespace tollgate::rls {

struct H2ConnectionOptions {
  H2SessionOptions session;
  size_t read_bytes = 16 * 1024;
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds max_age{std::chrono::hours(1)};
  std::chrono::milliseconds age_grace{std::chrono::seconds(30)};
  std::chrono::milliseconds write_timeout{std::chrono::seconds(10)};
};

// Answers whole calls: every call passed gets exactly one session.answer() or session.fail()
// before serve() returns.
class CallServer {
 public:
  virtual ~CallServer() = default;
  virtual void serve(const H2Call& call, H2Session& session, int64_t now_ns) = 0;
};

// How a connection ended, for the counters.
enum class H2End { kPeerClosed, kGoaway, kCut };

class H2Connection : public std::enable_shared_from_this<H2Connection> {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;
  using OnEnd = std::function<void(H2Connection&, H2End, const H2SessionStats&)>;

  H2Connection(Socket socket, CallServer& server, const H2ConnectionOptions& options, OnEnd on_end);

  // Sends the server's SETTINGS and starts reading. Keeps itself alive until it ends.
  void start();
  // Graceful end: GOAWAY, what is open answered, then closed (a drain or shutdown).
  void goaway();
  // Closes now.
  void close();
  // Something to send outside a call (a health Watch's next message): `change` acts on the
  // session, then what it queued is sent.
  template <typename Change>
  void update(Change&& change) {
    if (ended_) return;
    change(session_);
    flush();
  }
  const H2Session& session() const { return session_; }

 private:
  void read();
  void on_read(const boost::system::error_code& ec, size_t n);
  void flush();
  void arm_timer();
  void on_timer();
  void end(H2End how);

  Socket socket_;
  CallServer& server_;
  const H2ConnectionOptions& options_;
  OnEnd on_end_;
  H2Session session_;
  boost::asio::steady_timer timer_;
  std::vector<char> in_;
  std::string out_;
  bool reading_ = false, writing_ = false, closing_ = false, ended_ = false;
  bool handshaken_ = false;
  size_t received_ = 0;
  std::chrono::steady_clock::time_point opened_, last_call_, write_started_, goaway_at_{};
  bool goaway_sent_ = false;
};

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_H2_CONNECTION_H_
