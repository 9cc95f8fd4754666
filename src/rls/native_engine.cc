// The rate limit service on our own HTTP/2 (--rls-server native; docs/rls-h2-plan.md): threads
// of its own (native_threads; the first also accepts) each read their connections
// (h2_connection.h) and decide each whole call right there through the call path, the node's
// checks being safe from any thread. No
// queue and no hop: a call costs its frames, its proto and the decision. TCP connections pass
// the same gate as the gRPC engine's (connection_gate.h). grpc.health.v1 Check and Watch are
// served ("" only, as gRPC's default service). TLS and mutual TLS from tls_context.h, the
// files read again every tls_reload_seconds when they changed.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/endpoint.h"
#include "grpc/health/v1/health.pb.h"
#include "request/listener.h"
#include "rls/connection_gate.h"
#include "rls/engine.h"
#include "rls/h2_connection.h"
#include "rls/tls_context.h"

namespace tollgate::rls {
namespace {

namespace pb = envoy::service::ratelimit::v3;
namespace health = grpc::health::v1;

// `buffered`: the request bytes every connection holds, capped at max_pending_bytes.
H2ConnectionOptions connection_options(const RlsServerOptions& o, std::atomic<int64_t>* buffered) {
  H2ConnectionOptions c;
  c.session.shared_buffered = buffered;
  c.session.max_shared_buffered = int64_t(o.max_pending_bytes);
  c.session.max_header_list_bytes = o.max_metadata_bytes;
  c.session.max_message_bytes = o.max_request_bytes;
  c.session.max_concurrent_streams = o.max_streams_per_connection;
  c.session.budget.max_in_flight = o.max_streams_per_connection;
  c.handshake_timeout = o.handshake_timeout;
  c.idle_timeout = o.max_connection_idle;
  c.max_age = o.max_connection_age;
  c.age_grace = o.max_connection_age_grace;
  c.keepalive_time = o.keepalive_time;
  c.keepalive_timeout = o.keepalive_timeout;
  return c;
}

class NativeEngine;

// One thread of the engine: its io_context, the connections it serves and their Watches, and the
// messages it reuses from call to call. Worker 0 also accepts (and gates) and reloads TLS.
struct Worker final : public CallServer {
  explicit Worker(NativeEngine& e) : engine(e) {}
  void serve(const H2Call& call, H2Session& session, int64_t now_ns) override;

  NativeEngine& engine;
  boost::asio::io_context io{1};
  boost::asio::steady_timer shutdown_timer{io};
  std::thread thread;
  std::unordered_map<H2Connection*, std::weak_ptr<H2Connection>> connections;
  std::unordered_map<const H2Session*, std::vector<int32_t>> watches;  // each connection's open Watch streams
  std::atomic<size_t> watch_count{0};                                  // in `watches`, as last pruned
  pb::RateLimitRequest request;
  pb::RateLimitResponse response;
  std::string bytes;
};

class NativeEngine final : public RlsEngine {
 public:
  NativeEngine(const RlsServerOptions& options, CallPath& path)
      : options_(options),
        path_(path),
        connection_options_(connection_options(options, &buffered_)),
        workers_(make_workers()) {}
  ~NativeEngine() override { shutdown(); }

  std::string start() override {
    const RlsServerOptions& o = options_;
    if (o.tls_cert.empty() != o.tls_key.empty()) return "TLS needs both a certificate and its private key";
    if (o.tls_cert.empty() && !o.tls_client_ca.empty()) {
      return "a client CA (mutual TLS) needs a certificate and key of the server's own";
    }
    if (!o.tls_cert.empty()) {
      tls_ = std::make_unique<TlsFiles>(o.tls_cert, o.tls_key, o.tls_client_ca);
      if (std::string error = tls_->load(); !error.empty()) return error;
    }
    if (!options_.decide_on_grpc_threads) {
      return "--rls-server native decides on its own threads: the node's checks must be safe from any thread";
    }
    std::string why;
    const auto endpoint = parse_listen(options_.listen, &why);
    if (!endpoint) return why;
    loopback_ = endpoint->is_loopback();
    listener_ = std::make_shared<request::Listener>(accept_io(), *endpoint);
    if (std::string error = listener_->listen(options_.unix_socket_mode); !error.empty()) {
      listener_.reset();
      if (endpoint->kind == api::Endpoint::Kind::kUnix) return endpoint->path + ": " + error;
      return "cannot serve the rate limit service on " + options_.listen + ": " + error;
    }
    tcp_ = listener_->tcp();
    address_ = tcp_ ? tcp_address(listener_->bound()) : "unix:" + listener_->bound().path;
    listener_->accept([this](const boost::system::error_code& ec, request::Listener::Socket socket) {
      if (!ec) admit(std::move(socket));
    });
    gate_.start_sweeping();
    if (tls_) reload_soon();
    // Each worker's io_context runs until its connections are gone and shutdown() let it go.
    for (auto& w : workers_) {
      guards_.emplace_back(w->io.get_executor());
      w->thread = std::thread([&io = w->io] { io.run(); });
    }
    started_ = true;
    return {};
  }

  const std::string& address() const override { return address_; }
  bool is_loopback() const override { return loopback_; }
  bool is_tls() const override { return tls_ != nullptr; }
  bool is_mutual_tls() const override { return tls_ && tls_->mutual(); }
  // NOT_SERVING from now on, told to every Watch.
  void drain() override {
    serving_.store(false);
    if (!started_) return;
    for (auto& w : workers_) {
      boost::asio::post(w->io, [this, &w = *w] {
        for_each_watch(w, [this](H2Session& s, int32_t id) { s.push(id, status_message()); });
      });
    }
  }
  void stop() override { path_.stop(); }

  // Closes the listener, sends every connection GOAWAY and gives them a second to read their
  // answers, then closes what is left.
  void shutdown() override {
    if (shut_down_.exchange(true) || !started_) return;
    boost::asio::post(accept_io(), [this] {
      listener_->close();
      gate_.stop_sweeping();
      reload_timer_.cancel();
    });
    for (auto& w : workers_) {
      boost::asio::post(w->io, [this, &w = *w] {
        for_each_watch(
            w, [](H2Session& s, int32_t id) { s.end(id, wire::Code::kUnavailable, "tollgated is shutting down"); });
        const auto live = w.connections;  // a connection that ends erases itself
        for (const auto& [raw, weak] : live) {
          if (auto c = weak.lock()) c->goaway();
        }
        if (w.connections.empty()) return;
        w.shutdown_timer.expires_after(std::chrono::seconds(1));
        w.shutdown_timer.async_wait([&w](const boost::system::error_code& ec) {
          if (ec) return;
          const auto left = w.connections;  // close() erases from connections
          for (const auto& [raw, weak] : left) {
            if (auto c = weak.lock()) c->close();
          }
        });
      });
    }
    guards_.clear();  // each io_context returns once its work is done
    for (auto& w : workers_) w->thread.join();
    gate_.reset();
  }

  // A worker's thread: one whole call, answered now.
  void serve(Worker& w, const H2Call& call, H2Session& session, int64_t now_ns) {
    switch (call.method) {
      case wire::Method::kShouldRateLimit:
        return rate_limit(w, call, session, now_ns);
      case wire::Method::kHealthCheck:
        return health_check(call, session, now_ns);
      case wire::Method::kHealthWatch:
        return health_watch(w, call, session, now_ns);
      default:  // H2Session refuses the others before they are calls
        return session.fail(call.stream, wire::Code::kUnimplemented, "unknown method", now_ns);
    }
  }

  // A Watch holds a stream for ever: at most this many per connection, and in all.
  static constexpr size_t kWatchesPerConnection = 16;
  static constexpr size_t kWatches = 1024;

 private:
  boost::asio::io_context& accept_io() { return workers_.front()->io; }

  // Before the members that run on worker 0's io_context (declared after workers_).
  std::vector<std::unique_ptr<Worker>> make_workers() {
    std::vector<std::unique_ptr<Worker>> w;
    for (unsigned i = 0; i < std::max(1u, options_.native_threads); ++i) w.push_back(std::make_unique<Worker>(*this));
    return w;
  }

  void rate_limit(Worker& w, const H2Call& call, H2Session& session, int64_t now_ns) {
    ++path_.calls;
    if (call.timeout && now_ns - call.opened_ns >= call.timeout->count()) {
      ++path_.deadline_expired;
      return session.fail(call.stream, wire::Code::kDeadlineExceeded, "the deadline passed before the check ran",
                          now_ns);
    }
    if (!w.request.ParseFromString(call.request)) {
      return session.fail(call.stream, wire::Code::kInternal, "the request is not a RateLimitRequest", now_ns);
    }
    Plan plan;
    if (std::string why = path_.plan(w.request, plan); !why.empty()) {
      return session.fail(call.stream, wire::Code::kInvalidArgument, why, now_ns);
    }
    Decided decided;
    path_.decide_here(plan, decided);
    if (decided.status != wire::Code::kOk) return session.fail(call.stream, decided.status, decided.message, now_ns);
    w.response.Clear();
    path_.respond(w.request, plan, decided, w.response);
    w.response.SerializeToString(&w.bytes);
    session.answer(call.stream, w.bytes, now_ns);
  }

  // grpc.health.v1 Check: "" is the server as a whole, SERVING until drain(); nothing else is known.
  void health_check(const H2Call& call, H2Session& session, int64_t now_ns) {
    health::HealthCheckRequest request;
    if (!health_request(call, session, now_ns, request)) return;
    if (!request.service().empty()) return session.fail(call.stream, wire::Code::kNotFound, "unknown service", now_ns);
    session.answer(call.stream, status_message(), now_ns);
  }

  // A Check's or Watch's request, counted; false when it does not parse (answered INTERNAL).
  bool health_request(const H2Call& call, H2Session& session, int64_t now_ns, health::HealthCheckRequest& out) {
    ++path_.health_checks;
    if (out.ParseFromString(call.request)) return true;
    session.fail(call.stream, wire::Code::kInternal, "the request is not a HealthCheckRequest", now_ns);
    return false;
  }

  std::string status_message(bool known = true) const {
    health::HealthCheckResponse response;
    response.set_status(!known            ? health::HealthCheckResponse::SERVICE_UNKNOWN
                        : serving_.load() ? health::HealthCheckResponse::SERVING
                                          : health::HealthCheckResponse::NOT_SERVING);
    return response.SerializeAsString();
  }

  // grpc.health.v1 Watch: the status now, then at each change (drain), on a stream left open.
  // An unknown service is told SERVICE_UNKNOWN and the stream stays open, as the protocol says.
  void health_watch(Worker& w, const H2Call& call, H2Session& session, int64_t now_ns) {
    health::HealthCheckRequest request;
    if (!health_request(call, session, now_ns, request)) return;
    prune_watches(w);
    std::vector<int32_t>& mine = w.watches[&session];
    size_t all = 0;
    for (const auto& other : workers_) all += other->watch_count.load();
    if (mine.size() >= kWatchesPerConnection || all >= kWatches) {
      return session.fail(call.stream, wire::Code::kResourceExhausted, "too many health watches", now_ns);
    }
    if (session.open_stream(call.stream, status_message(request.service().empty()), now_ns)) {
      mine.push_back(call.stream);
      ++w.watch_count;
    }
  }

  // A worker's thread: its Watches that have ended forgotten, and counted again.
  void prune_watches(Worker& w) {
    size_t n = 0;
    for (auto& [raw, weak] : w.connections) {
      auto c = weak.lock();
      if (!c) continue;
      auto it = w.watches.find(&c->session());
      if (it == w.watches.end()) continue;
      std::erase_if(it->second, [&](int32_t id) { return !c->session().streaming(id); });
      n += it->second.size();
    }
    w.watch_count.store(n);
  }

  // A worker's thread: `fn(session, stream)` for every Watch still open, each connection's output sent.
  template <typename Fn>
  void for_each_watch(Worker& w, Fn fn) {
    for (const auto& [raw, weak] : w.connections) {
      auto c = weak.lock();
      if (!c) continue;
      auto it = w.watches.find(&c->session());
      if (it == w.watches.end()) continue;
      c->update([&](H2Session& s) {
        for (int32_t id : it->second) {
          if (s.streaming(id)) fn(s, id);
        }
      });
    }
  }

  // Worker 0: a new connection, through the gate (TCP), then handed to the next worker in turn.
  void admit(request::Listener::Socket socket) {
    if (shut_down_.load()) return;
    if (tcp_ && !gate_.admit(socket.native_handle())) return;  // closed with the socket
    Worker& w = *workers_[next_worker_++ % workers_.size()];
    std::shared_ptr<boost::asio::ssl::context> tls = tls_ ? tls_->current() : nullptr;
    if (&w.io == &accept_io()) return serve_on(w, std::move(socket), std::move(tls));
    // The descriptor moves to the worker's io_context.
    const auto protocol = socket.local_endpoint().protocol();
    boost::system::error_code ec;
    const int fd = socket.release(ec);
    if (ec) return;
    boost::asio::post(w.io, [this, &w, fd, protocol, tls = std::move(tls)]() mutable {
      serve_on(w, H2Connection::Socket(w.io, protocol, fd), std::move(tls));
    });
  }

  // A worker's thread: the connection served there.
  void serve_on(Worker& w, H2Connection::Socket socket, std::shared_ptr<boost::asio::ssl::context> tls) {
    auto on_end = [this, &w](H2Connection& ended, H2End how, const H2SessionStats& stats) {
      path_.streams_refused += int64_t(stats.refused);
      if (auto it = w.watches.find(&ended.session()); it != w.watches.end()) {
        w.watch_count -= std::min(w.watch_count.load(), it->second.size());
        w.watches.erase(it);
      }
      if (how == H2End::kCut) ++path_.connections_cut;
      w.connections.erase(&ended);
      if (shut_down_.load() && w.connections.empty()) w.shutdown_timer.cancel();
    };
    auto c = tls ? make_h2_connection(std::move(socket), std::move(tls), w, connection_options_, on_end)
                 : make_h2_connection(std::move(socket), w, connection_options_, on_end);
    w.connections.emplace(c.get(), c);
    c->start();
  }

  // Worker 0: the TLS files read again when they changed; new connections take them.
  void reload_soon() {
    reload_timer_.expires_after(std::chrono::seconds(std::max(1u, options_.tls_reload_seconds)));
    reload_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      const int before = tls_->reloads();
      if (!tls_->reload_if_changed().empty()) ++path_.tls_reload_failures;
      if (tls_->reloads() > before) ++path_.tls_reloads;
      reload_soon();
    });
  }

  const RlsServerOptions& options_;
  CallPath& path_;
  std::atomic<int64_t> buffered_{0};  // request bytes held by every connection (H2SessionOptions)
  const H2ConnectionOptions connection_options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards_;
  std::shared_ptr<request::Listener> listener_;
  boost::asio::steady_timer reload_timer_{accept_io()};
  std::unique_ptr<TlsFiles> tls_;
  CountedGate gate_{options_, path_, accept_io()};
  size_t next_worker_ = 0;  // worker 0's
  std::string address_;
  bool started_ = false, loopback_ = true, tcp_ = true;
  std::atomic<bool> serving_{true}, shut_down_{false};
};

void Worker::serve(const H2Call& call, H2Session& session, int64_t now_ns) {
  engine.serve(*this, call, session, now_ns);
}

}  // namespace

std::unique_ptr<RlsEngine> make_native_engine(const RlsServerOptions& options, CallPath& path) {
  return std::make_unique<NativeEngine>(options, path);
}

}  // namespace tollgate::rls
