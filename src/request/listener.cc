#include "request/listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/local/stream_protocol.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "api/socket_address.h"

namespace tollgate::request {

namespace asio = boost::asio;

namespace {

// After accept() fails (typically EMFILE), wait this long before accepting again rather than
// spinning on the error.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);

uint16_t port_of(const asio::generic::stream_protocol::endpoint& ep) {
  sockaddr_storage storage{};
  std::memcpy(&storage, ep.data(), std::min(sizeof storage, static_cast<size_t>(ep.size())));
  if (storage.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (storage.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

}  // namespace

Listener::Listener(asio::io_context& io, Endpoint endpoint)
    : requested_(std::move(endpoint)), bound_(requested_), acceptor_(io), retry_timer_(io) {}

std::string prepare_unix_socket_path(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return std::string("cannot inspect the socket path: ") + std::strerror(errno);
  }
  if (!S_ISSOCK(st.st_mode)) return "the path exists and is not a socket; not replacing it";
  // A socket file outlives the process that made it. If connecting is refused, nobody accepts on
  // it any more (a crashed daemon): replace it. If it is accepted, another daemon is live.
  asio::io_context io;
  asio::local::stream_protocol::socket probe(io);
  boost::system::error_code ec;
  probe.connect(asio::local::stream_protocol::endpoint(path), ec);
  if (!ec) return "another process is listening on this socket";
  if (ec != asio::error::connection_refused) {
    return "cannot tell whether the existing socket is in use: " + ec.message();
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return std::string("cannot remove the stale socket file: ") + std::strerror(errno);
  }
  return {};
}

std::string Listener::listen(uint32_t unix_socket_mode) {
  const Endpoint& ep = requested_;
  boost::system::error_code ec;
  if (ep.kind == Endpoint::Kind::kUnix) {
    if (std::string error = prepare_unix_socket_path(ep.path); !error.empty()) return error;
  }
  std::string bad_address;
  const auto target = socket_address(ep, &bad_address);
  if (!target) return bad_address;
  if (acceptor_.open(target->protocol(), ec)) return "cannot open a socket: " + ec.message();
  if (ep.kind == Endpoint::Kind::kTcp) {
    // Lets a restarted daemon bind while connections of its previous life are in TIME_WAIT.
    acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  }
  if (acceptor_.bind(*target, ec)) return "cannot bind: " + ec.message();
  if (ep.kind == Endpoint::Kind::kUnix) {
    // bind() created the file with the process umask; set the documented mode now, before
    // listen(), so no client can connect through a wider mode.
    struct stat st {};
    if (::chmod(ep.path.c_str(), static_cast<mode_t>(unix_socket_mode)) != 0 || ::stat(ep.path.c_str(), &st) != 0) {
      const std::string error = std::string("cannot set the socket file mode: ") + std::strerror(errno);
      ::unlink(ep.path.c_str());
      return error;
    }
    owns_file_ = true;
    file_device_ = st.st_dev;
    file_inode_ = st.st_ino;
  } else {
    bound_.port = port_of(acceptor_.local_endpoint(ec));
  }
  if (acceptor_.listen(asio::socket_base::max_listen_connections, ec)) return "cannot listen: " + ec.message();
  return {};
}

void Listener::accept(OnAccept on_accept) {
  if (on_accept) on_accept_ = std::move(on_accept);
  if (closed_) return;
  acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& ec, Socket peer) {
    if (ec == asio::error::operation_aborted || self->closed_) return;
    self->on_accept_(ec, std::move(peer));
    if (self->closed_) return;
    if (ec) {
      self->retry_timer_.expires_after(kAcceptRetryDelay);
      self->retry_timer_.async_wait([self](const boost::system::error_code& timer_ec) {
        if (!timer_ec) self->accept(nullptr);
      });
      return;
    }
    self->accept(nullptr);
  });
}

void Listener::close() {
  closed_ = true;
  on_accept_ = nullptr;  // what it captured is released now, not when the last handler runs
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_timer_.cancel();
  if (owns_file_) {
    struct stat st {};
    const std::string& path = requested_.path;
    if (::stat(path.c_str(), &st) == 0 && st.st_dev == file_device_ && st.st_ino == file_inode_) {
      ::unlink(path.c_str());
    }
    owns_file_ = false;
  }
}

}  // namespace tollgate::request
