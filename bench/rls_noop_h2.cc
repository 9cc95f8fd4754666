// tollgate-rls-noop --engine nghttp2: the same do-nothing rate limit service served on one thread
// of our own by the daemon's HTTP/2 session (src/rls/h2_session.h, on libnghttp2) instead of by
// gRPC C++ (docs/rls-h2-plan.md, phase 0). It answers ShouldRateLimit with one OK status per
// descriptor, as the grpc++ engine does, so that scripts/rls-latency can put the two side by
// side, and scripts/rls-rapid-reset can attack it. A spike, not a server: TCP only, no TLS, no
// deadlines, no health service.
#include "rls_noop_h2.h"

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "rls/h2_session.h"

namespace tollgate::bench {
namespace {

namespace asio = boost::asio;
namespace pb = envoy::service::ratelimit::v3;
using tcp = asio::ip::tcp;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One connection: the daemon's own HTTP/2 session (rls/h2_session.h, with its reset budget)
// between the socket and an answer of OK per descriptor.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  explicit Connection(tcp::socket socket) : socket_(std::move(socket)) {}

  void start() {
    socket_.set_option(tcp::no_delay(true));
    flush();
    read();
  }

 private:
  void read() {
    socket_.async_read_some(asio::buffer(in_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      if (ec) return;
      const int64_t now = now_ns();
      const bool open = self->session_.receive({self->in_.data(), n}, now);
      for (const rls::H2Call& call : self->session_.take_calls()) self->answer(call, now);
      self->flush();
      if (open && !self->session_.finished()) self->read();
    });
  }

  void answer(const rls::H2Call& call, int64_t now) {
    pb::RateLimitRequest request;
    if (call.method != rls::wire::Method::kShouldRateLimit || !request.ParseFromString(call.request)) {
      return session_.fail(call.stream, rls::wire::Code::kUnimplemented, "the noop answers ShouldRateLimit only", now);
    }
    pb::RateLimitResponse response;
    response.set_overall_code(pb::RateLimitResponse::OK);
    for (int i = 0; i < request.descriptors_size(); ++i) response.add_statuses()->set_code(pb::RateLimitResponse::OK);
    session_.answer(call.stream, response.SerializeAsString(), now);
  }

  // Everything the session has to send, in one write at a time.
  void flush() {
    if (writing_) return;
    out_.clear();
    session_.take_output(out_);
    if (out_.empty()) return;
    writing_ = true;
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
      self->writing_ = false;
      if (!ec) self->flush();
    });
  }

  tcp::socket socket_;
  rls::H2Session session_;
  std::array<char, 16384> in_{};
  std::string out_;
  bool writing_ = false;
};

void accept(tcp::acceptor& acceptor) {
  acceptor.async_accept([&acceptor](boost::system::error_code ec, tcp::socket socket) {
    if (!ec) std::make_shared<Connection>(std::move(socket))->start();
    if (acceptor.is_open()) accept(acceptor);
  });
}

}  // namespace

int serve_nghttp2(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || listen.starts_with("unix:")) {
    std::fprintf(stderr, "tollgate-rls-noop: --engine nghttp2 listens on HOST:PORT only, not %s\n", listen.c_str());
    return 2;
  }
  asio::io_context io(1);
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(listen.substr(0, colon), ec);
  if (ec) {
    std::fprintf(stderr, "tollgate-rls-noop: %s: %s\n", listen.c_str(), ec.message().c_str());
    return 2;
  }
  tcp::acceptor acceptor(io);
  const tcp::endpoint endpoint(address, uint16_t(std::stoi(listen.substr(colon + 1))));
  acceptor.open(endpoint.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  acceptor.bind(endpoint, ec);
  if (ec || (acceptor.listen(asio::socket_base::max_listen_connections, ec), ec)) {
    std::fprintf(stderr, "tollgate-rls-noop: cannot listen on %s: %s\n", listen.c_str(), ec.message().c_str());
    return 1;
  }
  accept(acceptor);
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code, int) { io.stop(); });
  std::printf("serving on %s\n", listen.c_str());
  std::fflush(stdout);
  io.run();
  return 0;
}

}  // namespace tollgate::bench
