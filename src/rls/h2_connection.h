// One HTTP/2 connection of the rate limit service on a socket (docs/rls-h2-plan.md 5): an
// H2Session (h2_session.h) between the socket and a CallServer that answers each whole call
// before the next read. What a client can hold is bounded here:
//   - input: one read of at most read_bytes per turn of the io_context (R5), and none while a
//     write is under way, so a client that does not read its answers stops being read;
//   - output: one write at a time, which must finish within write_timeout (else: closed);
//   - time: the TLS handshake and HTTP/2's preface within handshake_timeout; a connection
//     without calls (none open, none begun) for idle_timeout, or older than max_age, is sent
//     GOAWAY (graceful: what is open is answered) and closed after age_grace if still held;
//     a peer silent for keepalive_time is sent a PING and closed unless it answers in time.
// All on one io_context thread; the clock is the steady clock (the session takes it as given).
#ifndef TOLLGATE_SRC_RLS_H2_CONNECTION_H_
#define TOLLGATE_SRC_RLS_H2_CONNECTION_H_

#include <boost/asio/generic/stream_protocol.hpp>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include "rls/h2_session.h"

namespace boost::asio::ssl {
class context;
}

namespace tollgate::rls {

struct H2ConnectionOptions {
  H2SessionOptions session;
  size_t read_bytes = 16 * 1024;
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds max_age{std::chrono::hours(1)};
  std::chrono::milliseconds age_grace{std::chrono::seconds(30)};
  std::chrono::milliseconds write_timeout{std::chrono::seconds(10)};
  // Nothing from the peer for keepalive_time: a PING, which it must answer (or send anything)
  // within keepalive_timeout, else the connection is closed (a peer gone without a FIN).
  std::chrono::milliseconds keepalive_time{std::chrono::minutes(1)};
  std::chrono::milliseconds keepalive_timeout{std::chrono::seconds(20)};
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

class H2Connection {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;
  using OnEnd = std::function<void(H2Connection&, H2End, const H2SessionStats&)>;

  virtual ~H2Connection() = default;
  // TLS: the handshake (within handshake_timeout). Then sends the server's SETTINGS and starts
  // reading. Keeps itself alive until it ends.
  virtual void start() = 0;
  // Graceful end: GOAWAY, what is open answered, then closed (a drain or shutdown).
  virtual void goaway() = 0;
  // Closes now.
  virtual void close() = 0;
  // Something to send outside a call (a health Watch's next message): `change` acts on the
  // session, then what it queued is sent.
  virtual void update(const std::function<void(H2Session&)>& change) = 0;
  virtual const H2Session& session() const = 0;
};

// Plaintext HTTP/2 ("prior knowledge", as gRPC's plaintext clients and Envoy speak it).
std::shared_ptr<H2Connection> make_h2_connection(H2Connection::Socket socket, CallServer& server,
                                                 const H2ConnectionOptions& options, H2Connection::OnEnd on_end);
// Over TLS with `tls` (tls_context.h: ALPN h2; with a client CA, a client certificate required).
std::shared_ptr<H2Connection> make_h2_connection(H2Connection::Socket socket,
                                                 std::shared_ptr<boost::asio::ssl::context> tls, CallServer& server,
                                                 const H2ConnectionOptions& options, H2Connection::OnEnd on_end);

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_H2_CONNECTION_H_
