// One client API endpoint being listened on: binds it (a Unix socket file with the configured
// mode, replacing a stale one left by a crash but never a live one or a non-socket; or TCP),
// accepts in the background, and on close removes the socket file it created unless another
// process has replaced it since. Runs on the io_context passed in.
#ifndef TOLLGATE_SRC_REQUEST_LISTENER_H_
#define TOLLGATE_SRC_REQUEST_LISTENER_H_

#include <sys/types.h>

#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "api/endpoint.h"

namespace tollgate::request {

using api::Endpoint;

// Before binding a Unix socket at `path`: "" when the path is free or holds a stale socket (one
// nobody accepts on any more, left by a crash: removed), else why not to bind there (a live
// socket, which another process serves, or a file that is not a socket).
std::string prepare_unix_socket_path(const std::string& path);

// Held by shared_ptr: its pending accept and retry handlers keep it alive until they run.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;
  // Called with each accepted socket, or (with an empty socket) after accept() failed, before
  // the listener waits a moment and accepts again.
  using OnAccept = std::function<void(const boost::system::error_code& ec, Socket socket)>;

  Listener(boost::asio::io_context& io, Endpoint endpoint);

  // Binds and listens. Returns "" or why not (without the endpoint's name).
  std::string listen(uint32_t unix_socket_mode);
  // Accepts until close(), calling `on_accept` for each connection.
  void accept(OnAccept on_accept);
  // Stops accepting and removes the socket file this listener created. Idempotent.
  void close();

  bool is_open() const { return acceptor_.is_open(); }
  bool tcp() const { return requested_.kind == Endpoint::Kind::kTcp; }
  const Endpoint& requested() const { return requested_; }
  // As requested, with a TCP port 0 replaced by the port the kernel chose.
  const Endpoint& bound() const { return bound_; }

 private:
  Endpoint requested_;
  Endpoint bound_;
  boost::asio::basic_socket_acceptor<boost::asio::generic::stream_protocol> acceptor_;
  boost::asio::steady_timer retry_timer_;
  OnAccept on_accept_;
  bool closed_ = false;
  // The socket file we created, identified by device and inode so that close() never removes a
  // file another process has put there since.
  bool owns_file_ = false;
  dev_t file_device_ = 0;
  ino_t file_inode_ = 0;
};

}  // namespace tollgate::request

#endif  // TOLLGATE_SRC_REQUEST_LISTENER_H_
