// tollgate-rls-noop --engine nghttp2: the same do-nothing rate limit service served by libnghttp2
// on one thread of our own instead of by gRPC C++ (docs/rls-h2-plan.md, phase 0). It answers
// ShouldRateLimit with one OK status per descriptor, as the grpc++ engine does, so that
// scripts/rls-latency can put the two side by side, and scripts/rls-rapid-reset can attack it.
// A spike, not a server: TCP only, no TLS, no deadlines, no health service.
#include "rls_noop_h2.h"

#include <nghttp2/nghttp2.h>

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/write.hpp>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "envoy/service/ratelimit/v3/rls.pb.h"

namespace tollgate::bench {
namespace {

namespace asio = boost::asio;
namespace pb = envoy::service::ratelimit::v3;
using tcp = asio::ip::tcp;

constexpr std::string_view kMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

struct Stream {
  bool ours = false;    // :path is ShouldRateLimit
  std::string request;  // the length-prefixed message, as it arrives
  std::string answer;   // the length-prefixed response, being sent
  size_t sent = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  explicit Connection(tcp::socket socket) : socket_(std::move(socket)) {}
  ~Connection() {
    if (session_) nghttp2_session_del(session_);
  }

  void start(const nghttp2_option* option) {
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &Connection::on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, &Connection::on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &Connection::on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &Connection::on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, &Connection::on_close);
    nghttp2_session_server_new2(&session_, cb, this, option);
    nghttp2_session_callbacks_del(cb);
    const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
                                               {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384}};
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 2);
    socket_.set_option(tcp::no_delay(true));
    flush();
    read();
  }

 private:
  void read() {
    socket_.async_read_some(asio::buffer(in_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
      if (ec) return;
      if (nghttp2_session_mem_recv(self->session_, self->in_.data(), n) < 0) return;  // a fatal error: drop it
      self->flush();
      if (nghttp2_session_want_read(self->session_) || nghttp2_session_want_write(self->session_)) self->read();
    });
  }

  // Everything nghttp2 has to send, in one write at a time.
  void flush() {
    if (writing_) return;
    out_.clear();
    for (;;) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n <= 0) break;
      out_.append(reinterpret_cast<const char*>(data), size_t(n));
    }
    if (out_.empty()) return;
    writing_ = true;
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
      self->writing_ = false;
      if (!ec) self->flush();
    });
  }

  void answer(int32_t id, Stream& s) {
    pb::RateLimitRequest request;
    pb::RateLimitResponse response;
    const bool whole = s.request.size() >= 5 && s.request[0] == 0;
    if (whole && request.ParseFromArray(s.request.data() + 5, int(s.request.size() - 5))) {
      response.set_overall_code(pb::RateLimitResponse::OK);
      for (int i = 0; i < request.descriptors_size(); ++i) response.add_statuses()->set_code(pb::RateLimitResponse::OK);
    }
    const std::string body = response.SerializeAsString();
    s.answer.assign(5, '\0');
    const uint32_t len = uint32_t(body.size());
    for (int i = 0; i < 4; ++i) s.answer[1 + i] = char((len >> (24 - 8 * i)) & 0xff);
    s.answer += body;
    static const nghttp2_nv headers[] = {
        {(uint8_t*)":status", (uint8_t*)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
        {(uint8_t*)"content-type", (uint8_t*)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
    };
    nghttp2_data_provider provider{};
    provider.read_callback = &Connection::read_answer;
    nghttp2_submit_response(session_, id, headers, 2, &provider);
  }

  static ssize_t read_answer(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length, uint32_t* flags,
                             nghttp2_data_source*, void*) {
    auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, id));
    if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    const size_t n = std::min(length, s->answer.size() - s->sent);
    std::memcpy(buf, s->answer.data() + s->sent, n);
    s->sent += n;
    if (s->sent == s->answer.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      static const nghttp2_nv trailers[] = {{(uint8_t*)"grpc-status", (uint8_t*)"0", 11, 1, NGHTTP2_NV_FLAG_NONE}};
      nghttp2_submit_trailer(session, id, trailers, 1);
    }
    return ssize_t(n);
  }

  static int on_begin_headers(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    auto* c = static_cast<Connection*>(user);
    Stream& s = c->streams_[frame->hd.stream_id];
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, &s);
    return 0;
  }
  static int on_header(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                       const uint8_t* value, size_t valuelen, uint8_t, void*) {
    auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
    if (s && std::string_view((const char*)name, namelen) == ":path") {
      s->ours = std::string_view((const char*)value, valuelen) == kMethod;
    }
    return 0;
  }
  static int on_data(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data, size_t len, void*) {
    auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, id));
    if (s && s->request.size() + len <= 64 * 1024) s->request.append((const char*)data, len);
    return 0;
  }
  static int on_frame(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
    if (frame->hd.type != NGHTTP2_DATA && frame->hd.type != NGHTTP2_HEADERS) return 0;
    auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
    if (!s) return 0;
    if (!s->ours) {
      static const nghttp2_nv unimplemented[] = {
          {(uint8_t*)":status", (uint8_t*)"200", 7, 3, NGHTTP2_NV_FLAG_NONE},
          {(uint8_t*)"content-type", (uint8_t*)"application/grpc", 12, 16, NGHTTP2_NV_FLAG_NONE},
          {(uint8_t*)"grpc-status", (uint8_t*)"12", 11, 2, NGHTTP2_NV_FLAG_NONE},
      };
      nghttp2_submit_response(session, frame->hd.stream_id, unimplemented, 3, nullptr);
      return 0;
    }
    static_cast<Connection*>(user)->answer(frame->hd.stream_id, *s);
    return 0;
  }
  static int on_close(nghttp2_session*, int32_t id, uint32_t, void* user) {
    static_cast<Connection*>(user)->streams_.erase(id);
    return 0;
  }

  tcp::socket socket_;
  nghttp2_session* session_ = nullptr;
  std::array<uint8_t, 16384> in_{};
  std::string out_;
  bool writing_ = false;
  std::map<int32_t, Stream> streams_;  // node-based: the stream user data pointers stay valid
};

void accept(tcp::acceptor& acceptor, const nghttp2_option* option) {
  acceptor.async_accept([&acceptor, option](boost::system::error_code ec, tcp::socket socket) {
    if (!ec) std::make_shared<Connection>(std::move(socket))->start(option);
    if (acceptor.is_open()) accept(acceptor, option);
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
  // nghttp2's own defence against rapid reset (Debian's 1.52.0-1+deb12u1 backport): a token bucket
  // of received RST_STREAMs, GOAWAY when empty. The plan's R3: burst 1,000, 100 a second.
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  nghttp2_option_set_stream_reset_rate_limit(option, 1000, 100);
  accept(acceptor, option);
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code, int) { io.stop(); });
  std::printf("serving on %s\n", listen.c_str());
  std::fflush(stdout);
  io.run();
  nghttp2_option_del(option);
  return 0;
}

}  // namespace tollgate::bench
