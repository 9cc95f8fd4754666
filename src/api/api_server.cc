#include "api/api_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "api/connection.h"
#include "request/listener.h"

namespace tollgate::api {

namespace asio = boost::asio;
using GenericStream = asio::generic::stream_protocol;
using request::Listener;

namespace {

// Who a client is: for logs, its pid and uid on a Unix socket (the kernel's word, SO_PEERCRED)
// or its address over TCP (without the port, which changes with every connection); and the
// group its connections are counted in for max_connections_per_client.
struct PeerIdentity {
  std::string who;
  std::string group;
};

PeerIdentity identify_peer(GenericStream::socket& socket, bool tcp) {
  if (tcp) {
    boost::system::error_code ec;
    const GenericStream::endpoint ep = socket.remote_endpoint(ec);
    if (ec) return {"tcp client", "tcp"};
    sockaddr_storage storage{};
    std::memcpy(&storage, ep.data(), std::min(sizeof storage, static_cast<size_t>(ep.size())));
    char text[INET6_ADDRSTRLEN] = {};
    const void* addr = storage.ss_family == AF_INET6
                           ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr)
                           : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr);
    if (!::inet_ntop(storage.ss_family, addr, text, sizeof text)) return {"tcp client", "tcp"};
    return {text, std::string("tcp ") + text};
  }
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return {"unix client", "unix"};
  return {"pid " + std::to_string(cred.pid) + " (uid " + std::to_string(cred.uid) + ")",
          "uid " + std::to_string(cred.uid)};
}

// How often open connections are checked for idle_timeout and stalled writes.
std::chrono::milliseconds sweep_interval(const ApiServerOptions& o) {
  auto shortest = o.frame_timeout;
  if (o.idle_timeout.count() > 0) shortest = std::min(shortest, o.idle_timeout);
  return std::clamp<std::chrono::milliseconds>(shortest / 4, std::chrono::milliseconds(10),
                                               std::chrono::milliseconds(1000));
}

// An accepted connection's descriptor on its way to another server's thread: closed if it never
// gets there (that server's io_context is destroyed with the hand-off unrun).
struct HandedSocket {
  int fd = -1;
  GenericStream protocol{AF_UNIX, 0};
  bool tcp = false;
  PeerIdentity peer;
  HandedSocket(int f, GenericStream p, bool t, PeerIdentity id) : fd(f), protocol(p), tcp(t), peer(std::move(id)) {}
  HandedSocket(HandedSocket&& o) noexcept
      : fd(std::exchange(o.fd, -1)), protocol(o.protocol), tcp(o.tcp), peer(std::move(o.peer)) {}
  HandedSocket& operator=(HandedSocket&&) = delete;
  ~HandedSocket() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

class ApiServer::Impl final : public ConnectionHost, public std::enable_shared_from_this<ApiServer::Impl> {
 public:
  Impl(asio::io_context& io, RequestHandler& handler, ApiServerOptions options)
      : io_(io),
        options_(std::move(options)),
        dispatch_(handler, options_.max_checks_per_batch, options_.max_frame_bytes, counters_),
        sweep_timer_(io) {}

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
    schedule_sweep();
    return {};
  }

  void serve_handed() { schedule_sweep(); }

  // Closes the listeners and every connection at once.
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    sweep_timer_.cancel();
    close_listeners();
    others_.clear();  // their io_contexts may go before this server's last handler runs
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

  void share_connections_with(std::vector<std::shared_ptr<Impl>> others) { others_ = std::move(others); }

  // On any thread: serves `handed` on this server's thread.
  void adopt(HandedSocket handed) {
    asio::post(io_, [self = shared_from_this(), handed = std::move(handed)]() mutable {
      if (self->stopped_ || self->draining_) {
        self->load_.fetch_sub(1, std::memory_order_relaxed);
        return;  // ~HandedSocket closes it
      }
      GenericStream::socket peer(self->io_);
      boost::system::error_code ec;
      peer.assign(handed.protocol, handed.fd, ec);
      if (ec) {
        self->load_.fetch_sub(1, std::memory_order_relaxed);
        ++self->counters_.accept_errors;
        return;
      }
      handed.fd = -1;  // the socket owns it now
      self->serve(std::move(peer), handed.tcp, std::move(handed.peer));
    });
  }

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
  void output_changed(size_t before, size_t after) override {
    counters_.pending_output_high_water = std::max<uint64_t>(counters_.pending_output_high_water, after);
    output_bytes_ += after;
    output_bytes_ -= before;
    counters_.output_bytes = output_bytes_;
    counters_.output_high_water = std::max<uint64_t>(counters_.output_high_water, output_bytes_);
    if (output_bytes_ < options_.max_output_bytes && !waiting_for_room_.empty()) {
      // Each goes on in a handler of its own, in the order they waited; one that fills the
      // budget again waits again.
      for (auto& weak : waiting_for_room_) {
        asio::post(io_, [weak = std::move(weak)] {
          if (auto c = weak.lock()) c->resume();
        });
      }
      waiting_for_room_.clear();
    }
  }
  bool output_room() const override { return output_bytes_ < options_.max_output_bytes; }
  void wait_for_output_room(std::shared_ptr<Connection> connection) override {
    ++counters_.output_budget_waits;
    waiting_for_room_.push_back(connection);
  }
  void frame_timed_out() override { ++counters_.connections_timed_out; }
  void offense(std::string_view peer, std::string_view what) override {
    if (options_.on_offense) options_.on_offense(peer, what);
  }
  void connection_closed(Connection* connection) override {
    auto it = connections_.find(connection);
    if (it == connections_.end()) return;
    {
      const std::lock_guard lock(per_client_mu_);
      if (auto group = per_client_.find(it->second.group); group != per_client_.end() && --group->second == 0) {
        per_client_.erase(group);
      }
    }
    connections_.erase(it);
    --counters_.connections_open;
    load_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  void accepted(const Listener& listener, const boost::system::error_code& ec, GenericStream::socket peer) {
    if (stopped_ || draining_) return;
    if (ec) {
      ++counters_.accept_errors;
      return;
    }
    const bool tcp = listener.tcp();
    PeerIdentity peer_id = identify_peer(peer, tcp);
    Impl* target = others_.empty() ? this : pick_server(peer_id.group);
    target->load_.fetch_add(1, std::memory_order_relaxed);
    if (target == this) return serve(std::move(peer), tcp, std::move(peer_id));
    boost::system::error_code protocol_ec;
    const GenericStream protocol = peer.local_endpoint(protocol_ec).protocol();
    const int fd = protocol_ec ? -1 : peer.release(protocol_ec);
    if (protocol_ec || fd < 0) {
      target->load_.fetch_sub(1, std::memory_order_relaxed);
      ++counters_.accept_errors;
      return;
    }
    target->adopt(HandedSocket(fd, protocol, tcp, std::move(peer_id)));
  }

  // Where a connection of client `group` goes: the server with the fewest connections open or on
  // their way among those where the client holds less than its share (each server enforces
  // max_connections_per_client on its own), so a client's connections spread before any is
  // refused; if it holds its share everywhere, the least loaded (which makes room among the
  // client's own or refuses). The others first on a tie, this thread being the one that accepts.
  Impl* pick_server(const std::string& group) {
    Impl* best = nullptr;
    Impl* best_with_room = nullptr;
    int64_t least = 0, least_with_room = 0;
    auto consider = [&](Impl* s) {
      const int64_t l = s->load_.load(std::memory_order_relaxed);
      if (!best || l <= least) {
        best = s;
        least = l;
      }
      if (s->client_count(group) < s->options_.max_connections_per_client &&
          (!best_with_room || l <= least_with_room)) {
        best_with_room = s;
        least_with_room = l;
      }
    };
    consider(this);
    for (const auto& other : others_) consider(other.get());
    return best_with_room ? best_with_room : best;
  }

  // From any thread: the connections client `group` has open here.
  size_t client_count(const std::string& group) const {
    const std::lock_guard lock(per_client_mu_);
    const auto it = per_client_.find(group);
    return it == per_client_.end() ? 0 : it->second;
  }

  // Serves an accepted connection (counted in load_) on this thread, if the limits allow it.
  void serve(GenericStream::socket peer, bool tcp, PeerIdentity peer_id) {
    if (!make_room(peer_id)) {
      ++counters_.connections_rejected;
      offense(peer_id.who, "connection refused: the client connection limits are reached (" +
                               std::to_string(options_.max_connections) + " in all, " +
                               std::to_string(options_.max_connections_per_client) +
                               " per client) and no connection has been idle long enough to make room");
      boost::system::error_code ignored;
      peer.close(ignored);
      load_.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
    ++counters_.connections_accepted;
    ++counters_.connections_open;
    if (tcp) {
      boost::system::error_code ignored;
      peer.set_option(asio::ip::tcp::no_delay(true), ignored);  // answers are tiny and latency-bound
    }
    auto connection = std::make_shared<Connection>(shared_from_this(), std::move(peer), std::move(peer_id.who));
    {
      const std::lock_guard lock(per_client_mu_);
      ++per_client_[peer_id.group];
    }
    connections_.emplace(connection.get(), Entry{connection, std::move(peer_id.group)});
    connection->start();
  }

  // True if a connection from `newcomer` may be added, after evicting an idle one if a limit
  // is reached (ApiServerOptions::max_connections).
  bool make_room(const PeerIdentity& newcomer) {
    const auto own = per_client_.find(newcomer.group);
    const size_t own_count = own == per_client_.end() ? 0 : own->second;
    std::vector<const std::string*> groups;  // whose idle connections may make room, in order
    if (own_count >= options_.max_connections_per_client) {
      groups.push_back(&newcomer.group);
    } else if (connections_.size() >= options_.max_connections) {
      // Clients holding more than the newcomer, most first (a newcomer never displaces a client
      // that holds no more than it does), then the newcomer's own.
      std::vector<std::pair<size_t, const std::string*>> larger;
      for (const auto& [group, count] : per_client_) {
        if (count > own_count) larger.emplace_back(count, &group);
      }
      std::sort(larger.begin(), larger.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      for (const auto& [count, group] : larger) groups.push_back(group);
      if (own_count > 0) groups.push_back(&newcomer.group);
    } else {
      return true;
    }
    for (const std::string* group : groups) {
      if (Connection* victim = least_recently_active_idle(*group)) {
        ++counters_.connections_evicted;
        const std::shared_ptr<Connection> keep = connections_.at(victim).connection;
        keep->close();
        return true;
      }
    }
    return false;
  }

  // The connection of `group` idle for at least evict_idle_after that was active least recently;
  // null if none. A scan: this happens only at a limit, and the limit bounds it.
  Connection* least_recently_active_idle(const std::string& group) const {
    const auto latest = std::chrono::steady_clock::now() - options_.evict_idle_after;
    Connection* victim = nullptr;
    for (const auto& [raw, entry] : connections_) {
      if (entry.group != group || !raw->idle() || raw->last_active() > latest) continue;
      if (!victim || raw->last_active() < victim->last_active()) victim = raw;
    }
    return victim;
  }

  void schedule_sweep() {
    sweep_timer_.expires_after(sweep_interval(options_));
    sweep_timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& ec) {
      if (ec) return;
      if (auto self = weak.lock(); self && !self->stopped_) {
        self->sweep();
        self->schedule_sweep();
      }
    });
  }

  // Closes connections idle for idle_timeout, and those whose client has not taken a write of
  // answers within frame_timeout (it never reads: its answers and buffers would stay for ever).
  void sweep() {
    const auto now = std::chrono::steady_clock::now();
    for (auto& connection : open_connections()) {
      if (const auto since = connection->write_stalled_since(); since && now - *since >= options_.frame_timeout) {
        ++counters_.connections_write_stalled;
        offense(connection->peer(), "did not read its answers within the frame timeout; connection closed");
        connection->close();
      } else if (options_.idle_timeout.count() > 0 && connection->idle() &&
                 now - connection->last_active() >= options_.idle_timeout) {
        ++counters_.connections_idle_closed;
        connection->close();
      }
    }
  }

  void close_listeners() {
    draining_ = true;
    for (auto& listener : listeners_) listener->close();
  }

  // Copies: closing a connection removes it from the set.
  std::vector<std::shared_ptr<Connection>> open_connections() const {
    std::vector<std::shared_ptr<Connection>> open;
    for (const auto& [raw, entry] : connections_) open.push_back(entry.connection);
    return open;
  }

  struct Entry {
    std::shared_ptr<Connection> connection;  // owning: stop() can close it
    std::string group;                       // PeerIdentity::group
  };

  asio::io_context& io_;
  const ApiServerOptions options_;
  ApiServerCounters counters_;
  Dispatch dispatch_;
  bool stopped_ = false;
  bool draining_ = false;                                    // listeners closed: accept nothing more
  bool answered_since_slice_ = false;                        // an answer was written since the last slice began
  size_t output_bytes_ = 0;                                  // answers held by all connections, not yet taken
  std::vector<std::weak_ptr<Connection>> waiting_for_room_;  // for output_bytes_ to fall below the budget
  std::vector<std::shared_ptr<Listener>> listeners_;
  std::unordered_map<Connection*, Entry> connections_;
  // Open connections by PeerIdentity::group. Written on this server's thread under the mutex;
  // the accepting server reads it (client_count) from its own.
  std::unordered_map<std::string, size_t> per_client_;
  mutable std::mutex per_client_mu_;
  // Servers on other threads that this one's accepted connections are shared with, and the
  // connections each server has open or on their way to it (written from any thread).
  std::vector<std::shared_ptr<Impl>> others_;
  std::atomic<int64_t> load_{0};
  asio::steady_timer sweep_timer_;
};

ApiServer::ApiServer(asio::io_context& io, RequestHandler& handler, ApiServerOptions options)
    : impl_(std::make_shared<Impl>(io, handler, std::move(options))) {}

ApiServer::~ApiServer() { stop(); }

std::string ApiServer::start() { return impl_->start(); }

void ApiServer::stop() { impl_->stop(); }
void ApiServer::drain() { impl_->drain(); }

void ApiServer::serve_handed() { impl_->serve_handed(); }

void ApiServer::share_connections_with(const std::vector<ApiServer*>& others) {
  std::vector<std::shared_ptr<Impl>> impls;
  for (ApiServer* other : others) {
    if (other != this) impls.push_back(other->impl_);
  }
  impl_->share_connections_with(std::move(impls));
}

std::vector<Endpoint> ApiServer::bound_endpoints() const { return impl_->bound_endpoints(); }

const ApiServerCounters& ApiServer::counters() const { return impl_->counters(); }

namespace {

using ApiStat = StatField<ApiServerCounters, RelaxedCounter>;

// The client API's stats (docs/operations.md, section 7), each with the counter it reads.
const ApiStat kApiStats[] = {
    {{"api.connections_accepted", StatKind::kCounter, "Client API connections served"},
     &ApiServerCounters::connections_accepted},
    {{"api.connections_rejected", StatKind::kCounter,
      "Connections closed at once: a limit reached, none idle to make room"},
     &ApiServerCounters::connections_rejected},
    {{"api.connections_evicted", StatKind::kCounter, "Idle connections closed to make room for a newcomer"},
     &ApiServerCounters::connections_evicted},
    {{"api.connections_timed_out", StatKind::kCounter,
      "Connections closed: half a frame, then nothing for the frame timeout"},
     &ApiServerCounters::connections_timed_out},
    {{"api.connections_write_stalled", StatKind::kCounter,
      "Connections closed: answers not read for the frame timeout"},
     &ApiServerCounters::connections_write_stalled},
    {{"api.connections_idle_closed", StatKind::kCounter,
      "Connections closed after --api-idle-timeout without a request"},
     &ApiServerCounters::connections_idle_closed},
    {{"api.connections_open", StatKind::kGauge, "Client API connections open"}, &ApiServerCounters::connections_open},
    {{"api.accept_errors", StatKind::kCounter, "accept() failures (e.g. out of descriptors)"},
     &ApiServerCounters::accept_errors},
    {{"api.requests", StatKind::kCounter, "Request frames read, valid or not"}, &ApiServerCounters::requests},
    {{"api.checks", StatKind::kCounter, "Checks answered through the client API"}, &ApiServerCounters::checks},
    {{"api.errors.frame_too_large", StatKind::kCounter, "Frames over the limit (connection closed)"},
     &ApiServerCounters::errors_frame_too_large},
    {{"api.errors.malformed", StatKind::kCounter, "Frames that did not parse (connection closed)"},
     &ApiServerCounters::errors_malformed},
    {{"api.errors.unsupported_version", StatKind::kCounter, "Requests of another protocol version"},
     &ApiServerCounters::errors_unsupported_version},
    {{"api.errors.batch_too_large", StatKind::kCounter, "Batches over the check limit"},
     &ApiServerCounters::errors_batch_too_large},
    {{"api.errors.empty_request", StatKind::kCounter, "Requests with no body or no checks"},
     &ApiServerCounters::errors_empty_request},
    {{"api.errors.internal", StatKind::kCounter, "Requests whose handler threw (answered INTERNAL)"},
     &ApiServerCounters::errors_internal},
    {{"api.busy_yields", StatKind::kCounter,
      "CPU given away before a slice of a large batch, answers having been written"},
     &ApiServerCounters::busy_yields},
    {{"api.pending_output_high_water_bytes", StatKind::kGauge, "Most answer bytes one connection has held",
      StatUnit::kBytes},
     &ApiServerCounters::pending_output_high_water},
    {{"api.output_bytes", StatKind::kGauge, "Answer bytes all connections hold, not yet taken", StatUnit::kBytes},
     &ApiServerCounters::output_bytes},
    {{"api.output_high_water_bytes", StatKind::kGauge, "Most answer bytes all connections have held", StatUnit::kBytes},
     &ApiServerCounters::output_high_water},
    {{"api.output_budget_waits", StatKind::kCounter, "Times a connection waited for the answer budget to have room"},
     &ApiServerCounters::output_budget_waits},
};

}  // namespace

std::vector<StatDef> ApiServer::stat_defs() {
  std::vector<StatDef> defs;
  append_stat_defs(std::span<const ApiStat>(kApiStats), defs);
  return defs;
}

StatsList ApiServer::stats() const {
  const ApiServerCounters& c = impl_->counters();
  StatsList s;
  append_stats(std::span<const ApiStat>(kApiStats), c, s);
  return s;
}

}  // namespace tollgate::api
