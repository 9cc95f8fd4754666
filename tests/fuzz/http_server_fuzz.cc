// Raw bytes from a client into the real HTTP server (src/http/http_server.h) over loopback TCP:
// Beast's parser under our limits, the connection's state machine and the routes behind it, as
// any client of --http-listen can send them (the http_routes target starts after Beast has
// framed a request; this one starts at the socket).
//
// Input: the stream layout of fuzz_util.h (the fuzzer chooses how the bytes are split into
// sends); the client then half-closes and reads until the server closes.
//
// Contract: the server closes the connection within its io timeout once the client has
// finished (no hang, whatever half a request it was left with); what it sent is a sequence of
// whole, well-formed HTTP/1.1 responses, each with a status the docs list; it never crashes and
// serves the next input; the key table stays within its cap.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "fuzz_util.h"
#include "http/http_server.h"
#include "support/table_handler.h"
#include "tollgate/rules_file.h"

namespace {

using namespace tollgate;
namespace bhttp = boost::beast::http;

class Server {
 public:
  Server()
      : handler_(parse_rules("rules:\n  - {match: \"k*\", rate: 5/s, burst: 5}\n", "rules.yaml"),
                 KeyTableOptions{.max_keys = 64}),
        work_(boost::asio::make_work_guard(node_io_)),
        server_(node_io_, handler_, options()) {
    handler_.members_list = {MemberInfo{"me", "127.0.0.1:1", MemberState::kAlive, 1, 1, 0, true}};
    const std::string error = server_.start(nullptr);
    FUZZ_CHECK(error.empty(), "the HTTP server starts on loopback");
    port_ = uint16_t(std::stoi(server_.address().substr(server_.address().rfind(':') + 1)));
    // The handler runs on the node's thread only, as in the daemon.
    node_thread_ = std::thread([this] { node_io_.run(); });
  }
  ~Server() {  // the replay runner returns from main: stop in order
    server_.shutdown();
    work_.reset();
    node_io_.stop();
    node_thread_.join();
  }
  uint16_t port() const { return port_; }
  size_t keys() {
    size_t n = 0;
    on_node([&] { n = handler_.keys(); });
    return n;
  }
  // Every input starts from an empty key table, so that one saved as a crash replays alone as it
  // failed (issue 37, item 11).
  void reset() {
    on_node([&] { handler_.clear(); });
  }

 private:
  // Runs `f` on the node's thread (the handler's only thread) and waits for it.
  template <class F>
  void on_node(F f) {
    std::promise<void> done;
    boost::asio::post(node_io_, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
  static http::HttpServerOptions options() {
    http::HttpServerOptions o;
    o.listen = "127.0.0.1:0";
    // Small limits, so that short inputs reach them: headers, bodies, the read buffer.
    o.max_header_bytes = 512;
    o.max_body_bytes = 1024;
    o.io_timeout = std::chrono::milliseconds(2'000);
    o.routes.max_batch = 8;
    return o;
  }

  boost::asio::io_context node_io_;
  tollgate::testing::TableHandler handler_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  http::HttpServer server_;
  uint16_t port_ = 0;
  std::thread node_thread_;
};

// Sends the chunks, half-closes, and returns all the server sent until it closed ("" and
// `*hung` when it did not close within 10 s).
std::string exchange(uint16_t port, const fuzz::StreamInput& in, bool* hung) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "a client socket");
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  // Each connection comes from another address of 127.0.0.0/8, so that no 4-tuple is reused
  // while the server's side of an earlier one is in TIME_WAIT (the server closes first). This
  // was once thought to be why CI's connect failed; the errno said EINTR (below), but fresh
  // tuples cost nothing and rule the other cause out.
  static uint32_t next_source = 0;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) | (next_source++ % 0xfffeu + 1));
  const int one = 1;
  ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
  FUZZ_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0, "a loopback source address");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // libFuzzer's timers interrupt blocking calls (SIGALRM every second): a connect cut short by
  // a signal (EINTR) goes on in the background, so wait for it to finish; send and recv are
  // retried. (That EINTR, not a reused tuple, was CI's "the server accepts a connection".)
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int error = errno;
    if (error == EINTR || error == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready;
      do {
        ready = ::poll(&p, 1, 10'000);
      } while (ready < 0 && errno == EINTR);
      socklen_t len = sizeof error;
      error = ready == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 ? error : ETIMEDOUT;
    }
    if (error != 0) {
      std::fprintf(stderr, "connect: %s\n", std::strerror(error));
      FUZZ_CHECK(false, "the server accepts a connection");
    }
  }
  for (std::string_view chunk : in.chunks) {
    // The server may close early (a refused request): what it wrote is still read below.
    ssize_t sent;
    do {
      sent = chunk.empty() ? 0 : ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) break;
  }
  ::shutdown(fd, SHUT_WR);
  std::string received;
  char buffer[16 * 1024];
  *hung = false;
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      received.append(buffer, size_t(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) *hung = true;
    break;  // closed (0), reset, or timed out
  }
  ::close(fd);
  return received;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server server;
  server.reset();
  const fuzz::StreamInput in = fuzz::split_stream_input(data, size);
  bool hung = false;
  const std::string received = exchange(server.port(), in, &hung);
  FUZZ_CHECK(!hung, "the server closes within its io timeout once the client has finished");

  // Whole responses, back to back, and nothing else.
  std::string_view rest = received;
  while (!rest.empty()) {
    bhttp::response_parser<bhttp::string_body> parser;
    parser.eager(true);
    parser.body_limit(1 << 24);
    boost::beast::error_code ec;
    size_t used = 0;
    while (!parser.is_done()) {
      const size_t n = parser.put(boost::asio::buffer(rest.data() + used, rest.size() - used), ec);
      used += n;
      if (ec == bhttp::error::need_more && n > 0 && used < rest.size()) {
        ec = {};
        continue;
      }
      break;
    }
    FUZZ_CHECK(!ec && parser.is_done(), "the server writes whole, well-formed HTTP responses");
    const unsigned s = parser.get().result_int();
    FUZZ_CHECK(s == 200 || s == 400 || s == 401 || s == 403 || s == 404 || s == 405 || s == 413 || s == 429 ||
                   s == 431 || s == 503,
               "a status the docs list");
    rest.remove_prefix(used);
  }
  FUZZ_CHECK(server.keys() <= 64, "the key table stays within its cap");
  return 0;
}
