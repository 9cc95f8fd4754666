#include "rls/h2_connection.h"

#include <algorithm>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tollgate::rls {
namespace {

using Clock = std::chrono::steady_clock;
using Socket = H2Connection::Socket;
using TlsStream = boost::asio::ssl::stream<Socket>;

int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The client's connection preface ("PRI * HTTP/2.0..."): 24 bytes.
constexpr size_t kPrefaceBytes = 24;

// One connection on `Stream`: the socket itself, or a TLS stream over it.
template <typename Stream>
class Connection final : public H2Connection, public std::enable_shared_from_this<Connection<Stream>> {
 public:
  Connection(Stream stream, std::shared_ptr<boost::asio::ssl::context> tls, CallServer& server,
             const H2ConnectionOptions& options, OnEnd on_end)
      : tls_(std::move(tls)),
        stream_(std::move(stream)),
        server_(server),
        options_(options),
        on_end_(std::move(on_end)),
        session_(options.session),
        timer_(stream_.get_executor()),
        in_(options.read_bytes) {}

  void start() override {
    opened_ = last_call_ = last_read_ = Clock::now();
    arm_timer();
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      stream_.async_handshake(boost::asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](const boost::system::error_code& ec) {
        if (self->ended_) return;
        if (ec) return self->end(H2End::kCut);  // not TLS, not h2, no client certificate
        self->begin();
      });
    } else {
      begin();
    }
  }

  void goaway() override {
    if (goaway_sent_ || closing_ || ended_) return;
    goaway_sent_ = true;
    goaway_at_ = Clock::now();
    session_.goaway();
    if (began_) flush();
  }

  void close() override { end(goaway_sent_ ? H2End::kGoaway : H2End::kCut); }

  void update(const std::function<void(H2Session&)>& change) override {
    if (ended_ || !began_) return;
    change(session_);
    flush();
  }

  const H2Session& session() const override { return session_; }

 private:
  auto& socket() { return stream_.lowest_layer(); }

  // After the handshake (TLS) or at once: our SETTINGS, then reading.
  void begin() {
    began_ = true;
    flush();
    read();
  }

  void read() {
    if (reading_ || writing_ || closing_ || ended_) return;
    reading_ = true;
    stream_.async_read_some(
        boost::asio::buffer(in_),
        [self = this->shared_from_this()](const boost::system::error_code& ec, size_t n) { self->on_read(ec, n); });
  }

  void on_read(const boost::system::error_code& ec, size_t n) {
    reading_ = false;
    if (ended_) return;
    if (ec) return end(H2End::kPeerClosed);
    const Clock::time_point now = Clock::now();
    const int64_t now_ns = ns_of(now);
    received_ += n;
    last_read_ = now;
    ping_sent_ = false;  // anything from the peer shows it is there
    const bool open = session_.receive({in_.data(), n}, now_ns);
    if (open && received_ >= kPrefaceBytes) handshaken_ = true;
    std::vector<H2Call> calls = session_.take_calls();
    for (const H2Call& call : calls) server_.serve(call, session_, now_ns);
    if (!calls.empty()) last_call_ = now;
    if (!open) closing_ = true;  // a protocol error or the reset budget spent: GOAWAY, then closed
    flush();
    read();  // unless a write is under way: then once it is done
  }

  void flush() {
    if (writing_ || ended_) return;
    out_.clear();
    session_.take_output(out_);
    if (out_.empty()) {
      if (closing_) return end(H2End::kCut);
      if (session_.finished()) return end(goaway_sent_ ? H2End::kGoaway : H2End::kPeerClosed);
      return;
    }
    writing_ = true;
    write_started_ = Clock::now();
    boost::asio::async_write(stream_, boost::asio::buffer(out_),
                             [self = this->shared_from_this()](const boost::system::error_code& ec, size_t) {
      self->writing_ = false;
      if (self->ended_) return;
      if (ec) return self->end(H2End::kPeerClosed);
      self->flush();
      self->read();
    });
  }

  // At the earliest deadline that applies, and at least every second (a write started since is
  // timed from then).
  void arm_timer() {
    if (ended_) return;
    const Clock::time_point now = Clock::now();
    Clock::time_point at = now + std::chrono::seconds(1);
    if (!handshaken_) at = std::min(at, opened_ + options_.handshake_timeout);
    if (writing_) at = std::min(at, write_started_ + options_.write_timeout);
    at = std::min(at, ping_sent_ ? ping_at_ + options_.keepalive_timeout : last_read_ + options_.keepalive_time);
    if (goaway_sent_) {
      at = std::min(at, goaway_at_ + options_.age_grace);
    } else {
      at = std::min({at, last_call_ + options_.idle_timeout, opened_ + options_.max_age});
    }
    timer_.expires_at(at);
    timer_.async_wait([self = this->shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->on_timer();
    });
  }

  void on_timer() {
    if (ended_) return;
    const Clock::time_point now = Clock::now();
    if ((writing_ && now - write_started_ >= options_.write_timeout) ||
        (!handshaken_ && now - opened_ >= options_.handshake_timeout)) {
      return end(H2End::kCut);
    }
    if (goaway_sent_ && now - goaway_at_ >= options_.age_grace) return end(H2End::kGoaway);
    if (ping_sent_ && now - ping_at_ >= options_.keepalive_timeout) return end(H2End::kCut);  // gone
    if (!ping_sent_ && began_ && now - last_read_ >= options_.keepalive_time) {
      ping_sent_ = true;
      ping_at_ = now;
      session_.ping();
      flush();
    }
    // Idle: no call for idle_timeout and none open (a health Watch holds its stream: not idle).
    if (session_.open_streams() > 0) last_call_ = now;
    if (!goaway_sent_ && (now - last_call_ >= options_.idle_timeout || now - opened_ >= options_.max_age)) goaway();
    arm_timer();
  }

  void end(H2End how) {
    if (ended_) return;
    ended_ = true;
    timer_.cancel();
    boost::system::error_code ignored;
    socket().shutdown(boost::asio::socket_base::shutdown_both, ignored);
    socket().close(ignored);
    if (on_end_) on_end_(*this, how, session_.stats());
  }

  std::shared_ptr<boost::asio::ssl::context> tls_;  // kept for the stream's life
  Stream stream_;
  CallServer& server_;
  const H2ConnectionOptions& options_;
  OnEnd on_end_;
  H2Session session_;
  boost::asio::steady_timer timer_;
  std::vector<char> in_;
  std::string out_;
  bool began_ = false, reading_ = false, writing_ = false, closing_ = false, ended_ = false;
  bool handshaken_ = false, goaway_sent_ = false, ping_sent_ = false;
  size_t received_ = 0;
  Clock::time_point opened_, last_call_, last_read_, write_started_, goaway_at_{}, ping_at_{};
};

}  // namespace

std::shared_ptr<H2Connection> make_h2_connection(Socket socket, CallServer& server, const H2ConnectionOptions& options,
                                                 H2Connection::OnEnd on_end) {
  return std::make_shared<Connection<Socket>>(std::move(socket), nullptr, server, options, std::move(on_end));
}

std::shared_ptr<H2Connection> make_h2_connection(Socket socket, std::shared_ptr<boost::asio::ssl::context> tls,
                                                 CallServer& server, const H2ConnectionOptions& options,
                                                 H2Connection::OnEnd on_end) {
  TlsStream stream(std::move(socket), *tls);
  return std::make_shared<Connection<TlsStream>>(std::move(stream), std::move(tls), server, options, std::move(on_end));
}

}  // namespace tollgate::rls
