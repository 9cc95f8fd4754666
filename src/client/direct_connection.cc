#include "client/direct_connection.h"

#include "api/socket_address.h"
#include "client/protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <cerrno>
#include <cstring>

namespace tollgate::client {

namespace asio = boost::asio;

namespace {

std::string system_error(const char* what, int error) { return std::string(what) + ": " + std::strerror(error); }

// Connects the non-blocking `fd` to `address`, by `deadline` (a Unix socket connects at once or
// not at all; TCP may be in progress).
bool connect_by(int fd, const boost::asio::generic::stream_protocol::endpoint& address,
                DirectConnection::TimePoint deadline, std::string* error) {
  if (::connect(fd, address.data(), static_cast<socklen_t>(address.size())) == 0) return true;
  if (errno != EINPROGRESS) {
    *error = system_error("cannot connect", errno);
    return false;
  }
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds(0)) {
      *error = "connecting timed out";
      return false;
    }
    pollfd p{fd, POLLOUT, 0};
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    const int n = ::ppoll(&p, 1, &ts, nullptr);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;  // re-checks the deadline
    int so_error = 0;
    socklen_t len = sizeof so_error;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
    if (so_error == 0) return true;
    *error = system_error("cannot connect", so_error);
    return false;
  }
}

}  // namespace

std::unique_ptr<DirectConnection> DirectConnection::open(const api::Endpoint& endpoint, TimePoint deadline,
                                                         std::string* error) {
  const bool unix_socket = endpoint.kind == api::Endpoint::Kind::kUnix;
  const auto address = api::socket_address(endpoint, error);
  if (!address) return nullptr;
  const int family = address->protocol().family();
  const int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = system_error("cannot create a socket", errno);
    return nullptr;
  }
  std::unique_ptr<DirectConnection> c(new DirectConnection(fd));
  if (!connect_by(fd, *address, deadline, error)) {
    return nullptr;
  }
  if (!unix_socket) {
    const int one = 1;  // requests are tiny and latency-bound
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return c;
}

DirectConnection::~DirectConnection() { ::close(fd_); }

bool DirectConnection::wait(short events, TimePoint deadline) {
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds(0)) return false;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    pollfd p{fd_, events, 0};
    const int n = ::ppoll(&p, 1, &ts, nullptr);
    if (n > 0) return true;                    // ready, or an error the next send/recv reports
    if (n < 0 && errno != EINTR) return true;  // let the send/recv say what is wrong
  }
}

DirectConnection::Outcome DirectConnection::exchange(std::string_view frame, TimePoint deadline,
                                                     std::string_view* payload, std::string* error) {
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait(POLLOUT, deadline)) return Outcome::kTimedOut;
      continue;
    }
    *error = system_error("write failed", n < 0 ? errno : EPIPE);
    return sent == 0 ? Outcome::kNotSent : Outcome::kFailed;
  }
  for (;;) {
    switch (decoder_.next(payload)) {
      case FrameReader::Status::kFrame:
        return Outcome::kAnswered;
      case FrameReader::Status::kTooLarge:
        *error = oversized_frame_error(decoder_.rejected_length());
        return Outcome::kFailed;
      case FrameReader::Status::kNeedMore:
        break;
    }
    const ssize_t n = ::recv(fd_, read_buffer_.data(), read_buffer_.size(), MSG_DONTWAIT);
    if (n > 0) {
      decoder_.append(std::string_view(read_buffer_.data(), size_t(n)));
      continue;
    }
    if (n == 0) {
      *error = "the daemon closed the connection";
      return Outcome::kFailed;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait(POLLIN, deadline)) return Outcome::kTimedOut;
      continue;
    }
    *error = system_error("read failed", errno);
    return Outcome::kFailed;
  }
}

bool DirectConnection::closed_by_daemon() const {
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::unique_ptr<DirectConnection> DirectPool::take(DirectConnection::TimePoint deadline) {
  {
    std::unique_ptr<DirectConnection> stale;  // closed after the lock is released
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      if (std::chrono::steady_clock::now() - c->idle_since() < kCheckAfterIdle || !c->closed_by_daemon()) return c;
      stale = std::move(c);  // its slot goes to a new connection, below
    } else {
      if (open_ >= max_open_) return nullptr;
      ++open_;
    }
  }
  std::string error;
  auto c = DirectConnection::open(endpoint_, deadline, &error);
  if (!c) discard();
  return c;
}

void DirectPool::give_back(std::unique_ptr<DirectConnection> connection) {
  connection->set_idle_since(std::chrono::steady_clock::now());
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(connection));
}

void DirectPool::discard() {
  std::lock_guard lock(mutex_);
  --open_;
}

}  // namespace tollgate::client
