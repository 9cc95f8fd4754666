// tollgate-rls-noop --engine nghttp2: the same do-nothing rate limit service served on one thread
// of our own by the daemon's HTTP/2 session (src/rls/h2_session.h, on libnghttp2) instead of by
// gRPC C++ (docs/rls-h2-plan.md, phase 0). It answers ShouldRateLimit with one OK status per
// descriptor, as the grpc++ engine does, so that scripts/rls-latency can put the two side by
// side, and scripts/rls-rapid-reset can attack it. TCP only, no TLS, no deadlines, no health.
#include "rls_noop_h2.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "rls/h2_connection.h"

namespace tollgate::bench {
namespace {

namespace asio = boost::asio;
namespace pb = envoy::service::ratelimit::v3;
using tcp = asio::ip::tcp;

// An answer of OK per descriptor, on the daemon's own HTTP/2 connection (rls/h2_connection.h,
// with its reset budget and bounds).
class NoopCalls final : public rls::CallServer {
 public:
  void serve(const rls::H2Call& call, rls::H2Session& session, int64_t now) override {
    pb::RateLimitRequest request;
    if (call.method != rls::wire::Method::kShouldRateLimit || !request.ParseFromString(call.request)) {
      return session.fail(call.stream, rls::wire::Code::kUnimplemented, "the noop answers ShouldRateLimit only", now);
    }
    pb::RateLimitResponse response;
    response.set_overall_code(pb::RateLimitResponse::OK);
    for (int i = 0; i < request.descriptors_size(); ++i) response.add_statuses()->set_code(pb::RateLimitResponse::OK);
    session.answer(call.stream, response.SerializeAsString(), now);
  }
};

NoopCalls noop_calls;
const rls::H2ConnectionOptions connection_options;

void accept(tcp::acceptor& acceptor) {
  acceptor.async_accept([&acceptor](boost::system::error_code ec, tcp::socket socket) {
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      const auto protocol = socket.local_endpoint().protocol();
      rls::H2Connection::Socket generic(acceptor.get_executor(),
                                        asio::generic::stream_protocol(protocol.family(), protocol.protocol()),
                                        socket.release());
      rls::make_h2_connection(std::move(generic), noop_calls, connection_options, nullptr)->start();
    }
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
