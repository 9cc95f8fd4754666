#include "http/http_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <list>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>

#include "api/endpoint.h"
#include "request/decision_gate.h"
#include "request/node_queue.h"

namespace tollgate::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

class HttpServer::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& node_io, RequestHandler& handler, HttpServerOptions options)
      : node_io_(node_io),
        handler_(handler),
        options_(std::move(options)),
        routes_([this](NodeJob job, const Reply& reply) { return run_on_node(std::move(job), reply); }, options_.routes,
                options_.decide_on_http_thread
                    ? NodeRunner([this](NodeJob job, const Reply& reply) { return run_here(std::move(job), reply); })
                    : nullptr),
        queue_(node_io_, options_.max_pending),
        acceptor_(io_),
        retry_timer_(io_),
        sweep_timer_(io_) {}

  ~Impl() { shutdown(); }

  std::string start(std::shared_ptr<const RlsConfig> config) {
    routes_.set_rls_config(std::move(config));
    std::string why;
    std::string text = options_.listen;
    if (!text.starts_with("tcp:")) text = "tcp:" + text;
    const auto endpoint = api::parse_endpoint(text, &why);
    if (!endpoint) return why;
    if (endpoint->kind != api::Endpoint::Kind::kTcp) return "the HTTP front end listens on TCP only: HOST:PORT";
    loopback_ = endpoint->is_loopback();
    boost::system::error_code ec;
    const tcp::endpoint at(asio::ip::make_address(endpoint->host, ec), endpoint->port);
    if (ec) return "not an IP address: " + endpoint->host;
    acceptor_.open(at.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(at, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return "cannot listen on " + options_.listen + ": " + ec.message();
    const tcp::endpoint bound = acceptor_.local_endpoint();
    const std::string host = bound.address().to_string();
    address_ = (bound.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(bound.port());
    accept();
    sweep();
    thread_ = std::thread([this] { io_.run(); });
    return {};
  }

  void shutdown() {
    if (shut_down_.exchange(true)) return;
    io_.stop();  // connections close when the io_context goes, with the last holder of this
    if (thread_.joinable()) thread_.join();
    boost::system::error_code ignored;
    acceptor_.close(ignored);  // the HTTP thread has stopped: no handler of it runs now
    queue_.shutdown();         // jobs the node never reached: dropped, with the server they hold
  }

  void drain() { routes_.drain(); }
  // No check is decided from now on (on the node's thread or this one); those under way end first.
  void stop() {
    queue_.stop();
    gate_.close();
  }
  void set_rls_config(std::shared_ptr<const RlsConfig> config) { routes_.set_rls_config(std::move(config)); }
  void set_token(std::string token) { routes_.set_token(std::move(token)); }
  const std::string& address() const { return address_; }
  bool is_loopback() const { return loopback_; }

  using Stat = StatField<Impl, std::atomic<int64_t>>;
  // The server's own stats (docs/operations.md, section 7), after the routes'.
  static std::span<const Stat> stat_table() {
    static const Stat kStats[] = {
        {{"http.connections_accepted", StatKind::kCounter, "HTTP connections served"}, &Impl::accepted_},
        {{"http.connections_rejected", StatKind::kCounter, "HTTP connections refused: every one busy with a request"},
         &Impl::rejected_},
        {{"http.connections_timed_out", StatKind::kCounter, "HTTP connections closed after --http-timeout"},
         &Impl::timed_out_},
        {{"http.connections_open", StatKind::kGauge, "HTTP connections open"}, &Impl::open_},
        {{"http.connections_evicted", StatKind::kCounter, "HTTP connections closed to make room for a newcomer"},
         &Impl::evicted_},
        {{"http.requests_too_large", StatKind::kCounter, "Requests refused 413 or 431 by the parser"},
         &Impl::too_large_},
        {{"http.requests_malformed", StatKind::kCounter, "Requests refused 400 by the parser"}, &Impl::malformed_},
        {{"http.node_busy", StatKind::kCounter,
          "Requests for the node's thread answered 503 at once: its queue full (checks too, unless decided on the "
          "HTTP thread)"},
         &Impl::busy_},
        {{"http.node_wait_expired", StatKind::kCounter,
          "Requests for the node's thread answered 503 after waiting too long for it (checks: not charged)"},
         &Impl::wait_expired_},
    };
    return kStats;
  }
  StatsList stats() const {
    StatsList s = routes_.stats();
    append_stats(stat_table(), *this, s);
    return s;
  }

 private:
  class Session;

  void accept();
  // Ends the reads and writes past their deadline, then again a sweep_period() later.
  void sweep();
  // A tenth of the I/O timeout, from 10 ms to 250 ms: a timeout ends within a tenth of itself.
  std::chrono::milliseconds sweep_period() const {
    return std::clamp(options_.io_timeout / 10, std::chrono::milliseconds(10), std::chrono::milliseconds(250));
  }
  // At a connection limit: frees a place for a newcomer from `client` (see the header), or false.
  bool make_room_for(const std::string& client);

  // Routes' runner of checks with decide_on_http_thread (HTTP thread): decide now, and answer.
  // Once stop() began, nothing is charged (request/decision_gate.h).
  bool run_here(NodeJob job, const Reply& reply) {
    std::function<void()> finish;
    {
      request::DecisionGate::Pass pass(gate_);
      if (!pass.open()) {
        finish = [reply] { reply(error_response(503, "tollgated is shutting down; the check was not decided")); };
      } else {
        try {
          finish = job(handler_);
        } catch (const std::exception& e) {  // (an allocation failing in the table, say)
          finish = [reply, why = std::string(e.what())] { reply(error_response(500, "the check failed: " + why)); };
        }
      }
    }
    finish();
    return true;
  }

  // Routes' NodeRunner (HTTP thread): queue `job` for the node (request/node_queue.h), or refuse.
  bool run_on_node(NodeJob job, const Reply& reply) {
    // The ticket holds the server (declared first, so released last) while the queue holds the
    // job; the continuation and `reply` go back to the HTTP io_context.
    struct Ticket {
      std::shared_ptr<Impl> server;
      NodeJob job;
      Reply reply;
    };
    auto ticket = std::make_shared<Ticket>(Ticket{shared_from_this(), std::move(job), reply});
    using Outcome = request::NodeQueue::Outcome;
    const bool queued = queue_.submit(
        [ticket](Outcome outcome) mutable {
      // kShutDown: the HTTP thread has stopped too; nothing is answered, and the ticket
      // goes here (no HTTP handler runs any more).
      if (outcome == Outcome::kShutDown) return;
      Impl& self = *ticket->server;
      std::function<void()> finish;
      if (outcome == Outcome::kStopped) {
        finish = [reply = ticket->reply] {
          reply(error_response(503, "tollgated is shutting down; the check was not decided"));
        };
      } else if (outcome == Outcome::kExpired) {
        ++self.wait_expired_;
        finish = [reply = ticket->reply] {
          reply(error_response(503, "tollgated is overloaded; the check was not decided"));
        };
      } else {
        finish = ticket->job(self.handler_);
      }
      // The ticket goes with the continuation: every copy of `reply` (each holds the
      // connection) is then dropped on the HTTP thread, where a connection's counts live.
      asio::post(self.io_, [ticket = std::move(ticket), finish = std::move(finish)] { finish(); });
        },
        request::NodeQueue::Clock::now() + options_.node_wait);
    if (!queued) ++busy_;
    return queued;
  }

  asio::io_context& node_io_;
  RequestHandler& handler_;
  const HttpServerOptions options_;
  Routes routes_;
  std::string address_;
  bool loopback_ = true;
  std::atomic<bool> shut_down_{false};
  request::NodeQueue queue_;    // node jobs: at most max_pending; one waiting past node_wait is answered 503
  request::DecisionGate gate_;  // decide_on_http_thread: shut by stop()
  // Before io_: sessions still in its handlers count themselves out when it is destroyed.
  std::atomic<int64_t> accepted_{0}, rejected_{0}, timed_out_{0}, open_{0}, too_large_{0}, malformed_{0}, busy_{0},
      wait_expired_{0}, evicted_{0};
  // The HTTP thread's: connections waiting for (or reading) a request, least recently active
  // first (the ones a newcomer may take the place of), and connections per client.
  std::list<Session*> waiting_;
  std::list<Session*> all_;  // every session alive, for the sweep
  std::unordered_map<std::string, size_t> per_client_;
  size_t live_ = 0;  // connections neither closed nor evicted
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  asio::steady_timer sweep_timer_;
  std::thread thread_;
};

// What a connection's read buffer may hold: the whole request line and headers (the parser needs
// them in one piece) plus one read of 64 KiB, Beast's read size. A body is moved out of the buffer
// as it is parsed, so the body limit does not add to this.
namespace {
size_t read_buffer_bytes(const HttpServerOptions& options) { return options.max_header_bytes + 64 * 1024; }
}  // namespace

// One connection: a request at a time (HTTP/1.1 keep-alive; no pipelining in flight).
class HttpServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Impl& server, tcp::socket socket, std::string client)
      : server_(server),
        socket_(std::move(socket)),
        buffer_(read_buffer_bytes(server.options_)),
        client_(std::move(client)) {
    ++server_.open_;
    ++server_.live_;
    ++server_.per_client_[client_];
    all_at_ = server_.all_.insert(server_.all_.end(), this);
  }
  ~Session() {
    leave_counts();
    server_.all_.erase(all_at_);
    --server_.open_;
  }

  // The server's sweep (HTTP thread): a read or write that has run past its deadline ends the
  // connection (counted). One timer for the server, not one per read and write: re-arming a
  // timer per operation cost two timerfd_settime calls a request (issue 38).
  void expire_if_late(Clock::time_point now) {
    if (!timing_ || now < deadline_) return;
    timing_ = false;
    if (!lingering_) ++server_.timed_out_;
    beast::error_code ignored;
    socket_.cancel(ignored);
    socket_.close(ignored);
  }

  void start() { read(); }

  const std::string& client() const { return client_; }
  // Closed to make room for a newcomer: no longer counted; its handlers end with an error.
  void evict() {
    leave_counts();
    evicted_ = true;
    ++server_.evicted_;
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  void time_out_after(std::chrono::milliseconds d) {
    deadline_ = Clock::now() + d;
    timing_ = true;
  }
  // Out of the waiting list and the counts, once (closed, evicted or destroyed).
  void leave_counts() {
    if (counted_out_) return;
    counted_out_ = true;
    stop_waiting();
    --server_.live_;
    if (auto it = server_.per_client_.find(client_); it != server_.per_client_.end() && --it->second == 0) {
      server_.per_client_.erase(it);
    }
  }
  // Waiting for (or reading) a request: at the back of the list, the most recently active.
  void start_waiting() {
    if (counted_out_) return;
    stop_waiting();
    waiting_at_ = server_.waiting_.insert(server_.waiting_.end(), this);
    waiting_now_ = true;
  }
  void stop_waiting() {
    if (!waiting_now_) return;
    server_.waiting_.erase(waiting_at_);
    waiting_now_ = false;
  }

  void read() {
    start_waiting();
    parser_.emplace();
    parser_->header_limit(uint32_t(server_.options_.max_header_bytes));
    parser_->body_limit(server_.options_.max_body_bytes);
    time_out_after(server_.options_.io_timeout);
    bhttp::async_read(socket_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    timing_ = false;
    // Evicted to make room for a newcomer (its read may have completed just before), or timed
    // out by the sweep: nothing more is read, decided or counted for it.
    if (evicted_ || ec == asio::error::operation_aborted || !socket_.is_open()) return close();
    if (ec == bhttp::error::end_of_stream || ec == asio::error::connection_reset || ec == asio::error::eof)
      return close();
    if (ec == bhttp::error::body_limit) {
      ++server_.too_large_;
      return answer_and_close(
          error_response(413, "the body is larger than " + std::to_string(server_.options_.max_body_bytes) + " bytes"));
    }
    if (ec == bhttp::error::buffer_overflow) {
      // A line the parser must see whole (the request line or a header before the header limit
      // is reached, a chunk-size line or its extensions, a trailer) grew past the read buffer.
      ++server_.too_large_;
      if (!parser_->is_header_done()) {
        return answer_and_close(error_response(431, "the request line and headers are larger than " +
                                                        std::to_string(server_.options_.max_header_bytes) + " bytes"));
      }
      return answer_and_close(error_response(400, "a chunk-size line, chunk extension or trailer is longer than the " +
                                                      std::to_string(buffer_.max_size()) + "-byte read buffer"));
    }
    if (ec == bhttp::error::header_limit) {
      ++server_.too_large_;
      return answer_and_close(error_response(431, "the request line and headers are larger than " +
                                                      std::to_string(server_.options_.max_header_bytes) + " bytes"));
    }
    if (ec) {
      ++server_.malformed_;
      return answer_and_close(error_response(400, "malformed HTTP request: " + ec.message()));
    }
    stop_waiting();  // busy with a request until it is answered
    bhttp::request<bhttp::string_body> request = parser_->release();
    keep_alive_ = request.keep_alive();
    version_ = request.version();
    HttpRequest r{std::string(request.method_string()), std::string(request.target()), std::move(request.body()),
                  std::string(request[boost::beast::http::field::authorization])};
    server_.routes_.handle(r, [self = shared_from_this()](HttpResponse response) { self->write(std::move(response)); });
  }

  // A request the parser refused: answered, counted, and the connection closed (what follows
  // on it cannot be trusted to start a request).
  void answer_and_close(HttpResponse response) {
    server_.routes_.count_response(response.status);
    keep_alive_ = false;
    refused_ = true;
    write(std::move(response));
  }

  // After refusing a request whose body the client may still be sending: stop writing, then read
  // and discard for a while before closing. Closing with unread data would send a reset, which
  // can destroy the answer before the client reads it.
  void linger() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    lingering_ = true;  // its end by the sweep is the plan, not a timeout
    time_out_after(std::chrono::seconds(1));
    discard(0);
  }

  void discard(size_t so_far) {
    constexpr size_t kMaxDiscard = 1 << 20;
    beast::error_code ignored;
    if (so_far >= kMaxDiscard) return (void)socket_.close(ignored);
    socket_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this(), so_far](beast::error_code ec, size_t n) {
      beast::error_code closing;
      if (ec) return (void)self->socket_.close(closing);
      self->discard(so_far + n);
    });
  }

  void write(HttpResponse r) {
    auto response =
        std::make_shared<bhttp::response<bhttp::string_body>>(bhttp::status(r.status), version_ ? version_ : 11);
    response->set(bhttp::field::server, "tollgated");
    response->set(bhttp::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) response->set(name, value);
    response->body() = std::move(r.body);
    response->keep_alive(keep_alive_);
    response->prepare_payload();
    time_out_after(server_.options_.io_timeout);
    bhttp::async_write(socket_, *response, [self = shared_from_this(), response](beast::error_code ec, size_t) {
      self->timing_ = false;
      if (!ec && self->refused_) return self->linger();
      if (ec || !self->keep_alive_) return self->close();
      self->read();
    });
  }

  void close() {
    leave_counts();  // at once: a closed connection holds no place a newcomer could take
    timing_ = false;
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
  }

  Impl& server_;
  tcp::socket socket_;
  // Bounded: Beast's parser keeps asking for more while a chunk-size line, a chunk extension or
  // the trailers never end, and neither the header nor the body limit stops that (finding 1 of
  // issue 34: one connection grew the daemon by gigabytes). Beyond it: buffer_overflow, 400.
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool keep_alive_ = true;
  bool refused_ = false;  // the parser refused the request: linger, then close
  unsigned version_ = 11;
  std::array<char, 4096> scratch_{};
  std::string client_;  // the peer's IP address
  std::list<Session*>::iterator waiting_at_;
  std::list<Session*>::iterator all_at_;
  bool waiting_now_ = false;
  bool counted_out_ = false;
  bool evicted_ = false;
  bool timing_ = false;     // a read or write under way, due by deadline_
  bool lingering_ = false;  // discarding before the close: its deadline is not a timeout
  Clock::time_point deadline_{};
};

void HttpServer::Impl::sweep() {
  const auto now = Clock::now();
  // A session may be destroyed by what its closing starts, but only in a later handler.
  for (Session* s : all_) s->expire_if_late(now);
  sweep_timer_.expires_after(sweep_period());
  sweep_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) sweep();
  });
}

void HttpServer::Impl::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {  // typically out of descriptors: wait rather than spin
      retry_timer_.expires_after(std::chrono::milliseconds(100));
      retry_timer_.async_wait([this](boost::system::error_code e) {
        if (!e) accept();
      });
      return;
    }
    boost::system::error_code peer_error;
    const auto peer = socket.remote_endpoint(peer_error);
    std::string client = peer_error ? std::string("?") : peer.address().to_string();
    if (!make_room_for(client)) {
      ++rejected_;
      boost::system::error_code ignored;
      socket.close(ignored);
    } else {
      ++accepted_;
      std::make_shared<Session>(*this, std::move(socket), std::move(client))->start();
    }
    accept();
  });
}

bool HttpServer::Impl::make_room_for(const std::string& client) {
  const auto mine = per_client_.find(client);
  const size_t held = mine == per_client_.end() ? 0 : mine->second;
  const bool client_full = held >= options_.max_connections_per_client;
  if (!client_full && live_ < options_.max_connections) return true;
  // The victim: at the client's own limit, its least recently active waiting connection; else
  // that of the client holding the most connections, the newcomer's own client on a tie.
  std::string victim_client = client;
  if (!client_full) {
    size_t most = held;
    for (const auto& [who, count] : per_client_) {
      if (count > most) most = count, victim_client = who;
    }
  }
  for (Session* s : waiting_) {
    if (s->client() == victim_client) {
      s->evict();
      return true;
    }
  }
  return false;
}

HttpServer::HttpServer(asio::io_context& node_io, RequestHandler& handler, HttpServerOptions options)
    : impl_(std::make_shared<Impl>(node_io, handler, std::move(options))) {}
HttpServer::~HttpServer() { impl_->shutdown(); }
std::string HttpServer::start(std::shared_ptr<const RlsConfig> config) { return impl_->start(std::move(config)); }
const std::string& HttpServer::address() const { return impl_->address(); }
bool HttpServer::is_loopback() const { return impl_->is_loopback(); }
std::vector<StatDef> HttpServer::stat_defs() {
  std::vector<StatDef> defs;
  append_stat_defs(Routes::stat_table(), defs);
  append_stat_defs(Impl::stat_table(), defs);
  return defs;
}
void HttpServer::set_rls_config(std::shared_ptr<const RlsConfig> config) { impl_->set_rls_config(std::move(config)); }
void HttpServer::set_token(std::string token) { impl_->set_token(std::move(token)); }
void HttpServer::drain() { impl_->drain(); }
void HttpServer::stop() { impl_->stop(); }
void HttpServer::shutdown() { impl_->shutdown(); }
StatsList HttpServer::stats() const { return impl_->stats(); }

}  // namespace tollgate::http
