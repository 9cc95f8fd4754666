#include "api/api_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "api/connection.h"
#include "api/listener.h"

namespace tollgate::api {

namespace asio = boost::asio;
using GenericStream = asio::generic::stream_protocol;

namespace {

// Names the client for logs: its pid and uid on a Unix socket (the kernel's word, SO_PEERCRED),
// its address over TCP (without the port, which changes with every connection).
std::string describe_peer(GenericStream::socket& socket, bool tcp) {
  if (tcp) {
    boost::system::error_code ec;
    const GenericStream::endpoint ep = socket.remote_endpoint(ec);
    if (ec) return "tcp client";
    sockaddr_storage storage{};
    std::memcpy(&storage, ep.data(), std::min(sizeof storage, static_cast<size_t>(ep.size())));
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr = storage.ss_family == AF_INET6
                           ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr)
                           : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr);
    if (!::inet_ntop(storage.ss_family, addr, text, sizeof text)) return "tcp client";
    return text;
  }
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return "unix client";
  return "pid " + std::to_string(cred.pid) + " (uid " + std::to_string(cred.uid) + ")";
}

}  // namespace

class ApiServer::Impl final : public ConnectionHost, public std::enable_shared_from_this<ApiServer::Impl> {
 public:
  Impl(asio::io_context& io, RequestHandler& handler, ApiServerOptions options)
      : io_(io),
        options_(std::move(options)),
        dispatch_(handler, options_.max_checks_per_batch, options_.max_frame_bytes, counters_) {}

  std::string start() {
    if (options_.listen.empty()) return "no endpoint to listen on";
    for (const Endpoint& ep : options_.listen) {
      listeners_.push_back(std::make_shared<Listener>(io_, ep));
      if (std::string error = listeners_.back()->listen(options_.unix_socket_mode); !error.empty()) {
        stop();
        return ep.to_string() + ": " + error;
      }
    }
    for (auto& listener : listeners_) {
      Listener* l = listener.get();
      // Weak: the server owns its listeners, and may be gone before a listener's last handler runs.
      listener->accept([weak = weak_from_this(), l](const boost::system::error_code& ec, GenericStream::socket peer) {
        if (auto self = weak.lock()) self->accepted(*l, ec, std::move(peer));
      });
    }
    return {};
  }

  // Closes the listeners and every connection at once.
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    close_listeners();
    for (auto& connection : open_connections()) connection->close();
  }

  void drain() {
    if (stopped_) return;
    close_listeners();
    for (auto& connection : open_connections()) connection->drain();
  }

  std::vector<Endpoint> bound_endpoints() const {
    std::vector<Endpoint> out;
    for (const auto& listener : listeners_) {
      if (listener->is_open()) out.push_back(listener->bound());
    }
    return out;
  }

  const ApiServerCounters& counters() const { return counters_; }

  // ConnectionHost
  asio::io_context& io() override { return io_; }
  Dispatch& dispatch() override { return dispatch_; }
  bool stopped() const override { return stopped_; }
  size_t max_pending_output_bytes() const override { return options_.max_pending_output_bytes; }
  std::chrono::milliseconds frame_timeout() const override { return options_.frame_timeout; }
  void before_slice() override {
    if (!answered_since_slice_) return;
    answered_since_slice_ = false;
    if (!options_.yield_after_answer_when_busy) return;
    ++counters_.busy_yields;
    ::sched_yield();
  }
  void answered() override { answered_since_slice_ = true; }
  void frame_timed_out() override { ++counters_.connections_timed_out; }
  void offense(std::string_view peer, std::string_view what) override {
    if (options_.on_offense) options_.on_offense(peer, what);
  }
  void connection_closed(Connection* connection) override {
    if (connections_.erase(connection) > 0) --counters_.connections_open;
  }

 private:
  void accepted(const Listener& listener, const boost::system::error_code& ec, GenericStream::socket peer) {
    if (stopped_ || draining_) return;
    if (ec) {
      ++counters_.accept_errors;
      return;
    }
    const bool tcp = listener.tcp();
    if (connections_.size() >= options_.max_connections) {
      ++counters_.connections_rejected;
      offense(describe_peer(peer, tcp), "connection refused: " + std::to_string(options_.max_connections) +
                                            " client connections are open (the limit)");
      boost::system::error_code ignored;
      peer.close(ignored);
      return;
    }
    ++counters_.connections_accepted;
    ++counters_.connections_open;
    if (tcp) {
      boost::system::error_code ignored;
      peer.set_option(asio::ip::tcp::no_delay(true), ignored);  // answers are tiny and latency-bound
    }
    std::string who = describe_peer(peer, tcp);
    auto connection = std::make_shared<Connection>(shared_from_this(), std::move(peer), std::move(who));
    connections_.emplace(connection.get(), connection);
    connection->start();
  }

  void close_listeners() {
    draining_ = true;
    for (auto& listener : listeners_) listener->close();
  }

  // Copies: closing a connection removes it from the set.
  std::vector<std::shared_ptr<Connection>> open_connections() const {
    std::vector<std::shared_ptr<Connection>> open;
    for (const auto& [raw, connection] : connections_) open.push_back(connection);
    return open;
  }

  asio::io_context& io_;
  const ApiServerOptions options_;
  ApiServerCounters counters_;
  Dispatch dispatch_;
  bool stopped_ = false;
  bool draining_ = false;              // listeners closed: accept nothing more
  bool answered_since_slice_ = false;  // an answer was written since the last slice began
  std::vector<std::shared_ptr<Listener>> listeners_;
  // Owning references to open connections, so that stop() can close them.
  std::unordered_map<Connection*, std::shared_ptr<Connection>> connections_;
};

ApiServer::ApiServer(asio::io_context& io, RequestHandler& handler, ApiServerOptions options)
    : impl_(std::make_shared<Impl>(io, handler, std::move(options))) {}

ApiServer::~ApiServer() { stop(); }

std::string ApiServer::start() { return impl_->start(); }

void ApiServer::stop() { impl_->stop(); }
void ApiServer::drain() { impl_->drain(); }

std::vector<Endpoint> ApiServer::bound_endpoints() const { return impl_->bound_endpoints(); }

const ApiServerCounters& ApiServer::counters() const { return impl_->counters(); }

StatsList ApiServer::stats() const {
  const ApiServerCounters& c = impl_->counters();
  auto v = [](uint64_t x) { return static_cast<int64_t>(x); };
  return {
      {"api.connections_accepted", v(c.connections_accepted)},
      {"api.connections_rejected", v(c.connections_rejected)},
      {"api.connections_timed_out", v(c.connections_timed_out)},
      {"api.connections_open", v(c.connections_open)},
      {"api.accept_errors", v(c.accept_errors)},
      {"api.requests", v(c.requests)},
      {"api.checks", v(c.checks)},
      {"api.errors.frame_too_large", v(c.errors_frame_too_large)},
      {"api.errors.malformed", v(c.errors_malformed)},
      {"api.errors.unsupported_version", v(c.errors_unsupported_version)},
      {"api.errors.batch_too_large", v(c.errors_batch_too_large)},
      {"api.errors.empty_request", v(c.errors_empty_request)},
      {"api.errors.internal", v(c.errors_internal)},
      {"api.busy_yields", v(c.busy_yields)},
  };
}

}  // namespace tollgate::api
