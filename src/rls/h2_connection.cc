#include "rls/h2_connection.h"

#include <algorithm>
#include <boost/asio/write.hpp>
#include <utility>

namespace tollgate::rls {
namespace {

using Clock = std::chrono::steady_clock;

int64_t ns_of(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The client's connection preface ("PRI * HTTP/2.0..."): 24 bytes.
constexpr size_t kPrefaceBytes = 24;

}  // namespace

H2Connection::H2Connection(Socket socket, CallServer& server, const H2ConnectionOptions& options, OnEnd on_end)
    : socket_(std::move(socket)),
      server_(server),
      options_(options),
      on_end_(std::move(on_end)),
      session_(options.session),
      timer_(socket_.get_executor()),
      in_(options.read_bytes) {}

void H2Connection::start() {
  opened_ = last_call_ = Clock::now();
  flush();  // our SETTINGS
  read();
  arm_timer();
}

void H2Connection::read() {
  if (reading_ || writing_ || closing_ || ended_) return;
  reading_ = true;
  socket_.async_read_some(boost::asio::buffer(in_), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                                size_t n) { self->on_read(ec, n); });
}

void H2Connection::on_read(const boost::system::error_code& ec, size_t n) {
  reading_ = false;
  if (ended_) return;
  if (ec) return end(H2End::kPeerClosed);
  const Clock::time_point now = Clock::now();
  const int64_t now_ns = ns_of(now);
  received_ += n;
  const bool open = session_.receive({in_.data(), n}, now_ns);
  if (open && received_ >= kPrefaceBytes) handshaken_ = true;
  std::vector<H2Call> calls = session_.take_calls();
  for (const H2Call& call : calls) server_.serve(call, session_, now_ns);
  if (!calls.empty()) last_call_ = now;
  if (!open) closing_ = true;  // a protocol error or the reset budget spent: GOAWAY, then closed
  flush();
  read();  // unless a write is under way: then once it is done
}

void H2Connection::flush() {
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
  boost::asio::async_write(socket_, boost::asio::buffer(out_),
                           [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
    self->writing_ = false;
    if (self->ended_) return;
    if (ec) return self->end(H2End::kPeerClosed);
    self->flush();
    self->read();
  });
}

// At the earliest deadline that applies, and at least every second (a write started since is
// timed from then).
void H2Connection::arm_timer() {
  if (ended_) return;
  const Clock::time_point now = Clock::now();
  Clock::time_point at = now + std::chrono::seconds(1);
  if (!handshaken_) at = std::min(at, opened_ + options_.handshake_timeout);
  if (writing_) at = std::min(at, write_started_ + options_.write_timeout);
  if (goaway_sent_) {
    at = std::min(at, goaway_at_ + options_.age_grace);
  } else {
    at = std::min({at, last_call_ + options_.idle_timeout, opened_ + options_.max_age});
  }
  timer_.expires_at(at);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (!ec) self->on_timer();
  });
}

void H2Connection::on_timer() {
  if (ended_) return;
  const Clock::time_point now = Clock::now();
  if ((writing_ && now - write_started_ >= options_.write_timeout) ||
      (!handshaken_ && now - opened_ >= options_.handshake_timeout)) {
    return end(H2End::kCut);
  }
  if (goaway_sent_ && now - goaway_at_ >= options_.age_grace) return end(H2End::kGoaway);
  // Idle: no call for idle_timeout and none open (a health Watch holds its stream, and is not idle).
  if (session_.open_streams() > 0) last_call_ = now;
  if (!goaway_sent_ && (now - last_call_ >= options_.idle_timeout || now - opened_ >= options_.max_age)) goaway();
  arm_timer();
}

void H2Connection::goaway() {
  if (goaway_sent_ || closing_ || ended_) return;
  goaway_sent_ = true;
  goaway_at_ = Clock::now();
  session_.goaway();
  flush();
}

void H2Connection::close() { end(goaway_sent_ ? H2End::kGoaway : H2End::kCut); }

void H2Connection::end(H2End how) {
  if (ended_) return;
  ended_ = true;
  timer_.cancel();
  boost::system::error_code ignored;
  socket_.shutdown(Socket::shutdown_both, ignored);
  socket_.close(ignored);
  if (on_end_) on_end_(*this, how, session_.stats());
}

}  // namespace tollgate::rls
