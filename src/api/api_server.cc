#include "api/api_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <unordered_map>
#include <utility>

#include <google/protobuf/arena.h>

#include "tollgate/v1/api.pb.h"

namespace tollgate::api {

namespace asio = boost::asio;
using GenericStream = asio::generic::stream_protocol;
namespace pb = ::tollgate::v1::api;

namespace {

// Bytes read from a socket at a time. Requests are small (a one-check request is ~20 bytes), so
// one read usually carries many pipelined requests.
constexpr size_t kReadChunkBytes = 16 * 1024;
// A check batch larger than this is answered a slice of this many checks at a time, yielding to
// the other connections in between: one client's 1,000-check request (a few ms of work) must not
// hold up every other client's single check (head-of-line blocking) on the daemon's one thread.
constexpr int kChecksPerSlice = 16;
// After accept() fails (typically EMFILE), wait this long before accepting again rather than
// spinning on the error.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);

pb::DenyReason to_proto(DenyReason reason) {
  switch (reason) {
    case DenyReason::kNone: return pb::DENY_REASON_NONE;
    case DenyReason::kInsufficientTokens: return pb::DENY_REASON_INSUFFICIENT_TOKENS;
    case DenyReason::kCostExceedsBurst: return pb::DENY_REASON_COST_EXCEEDS_BURST;
    case DenyReason::kInvalidCost: return pb::DENY_REASON_INVALID_COST;
    case DenyReason::kKeyTooLong: return pb::DENY_REASON_KEY_TOO_LONG;
  }
  return pb::DENY_REASON_NONE;
}

void fill_result(const CheckResult& in, pb::Result& out) {
  const Decision& d = in.decision;
  out.set_allowed(d.allowed);
  out.set_remaining(d.remaining);
  out.set_retry_after_ns(d.retry_after_ns);
  out.set_reason_code(to_proto(d.reason));
  out.set_reason(deny_reason_name(d.reason));
  out.set_limited(d.limited);
  if (in.limit) {
    pb::Limit& limit = *out.mutable_limit();
    limit.set_rate_tokens(in.limit->rate.tokens);
    limit.set_rate_period_ns(in.limit->rate.period_ns);
    limit.set_burst(in.limit->burst);
    limit.set_max_debt(in.limit->max_debt);
  }
}

pb::Response error_response(uint64_t id, pb::Error::Code code, std::string message) {
  pb::Response response;
  response.set_version(kApiVersion);
  response.set_id(id);
  pb::Error& error = *response.mutable_error();
  error.set_code(code);
  error.set_message(std::move(message));
  return response;
}

GenericStream::endpoint to_asio(const Endpoint& ep) {
  if (ep.kind == Endpoint::Kind::kUnix) return asio::local::stream_protocol::endpoint(ep.path);
  return asio::ip::tcp::endpoint(asio::ip::make_address(ep.host), ep.port);
}

uint16_t port_of(const GenericStream::endpoint& ep) {
  sockaddr_storage storage{};
  std::memcpy(&storage, ep.data(), std::min(sizeof storage, static_cast<size_t>(ep.size())));
  if (storage.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (storage.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

class Connection;

}  // namespace

// A request and its response live on an arena of their own: a 1,000-check batch is then a few
// block allocations, not thousands of small ones. Under a key flood (300,000 new keys/s in
// 1,000-check requests) those small frees kept glibc's malloc_consolidate busy, 10% of the
// daemon's time in stalls of the one thread that answers everyone (perf, scripts/flood-latency).
static std::unique_ptr<google::protobuf::Arena> request_arena() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = 4096;
  o.max_block_size = 32768;  // blocks well below the 64 KiB frees at which glibc consolidates
  return std::make_unique<google::protobuf::Arena>(o);
}

// A check batch being answered a slice at a time (see kChecksPerSlice).
struct SlicedCheck {
  std::unique_ptr<google::protobuf::Arena> arena;  // owns request and response
  pb::Request* request = nullptr;
  pb::Response* response = nullptr;
  int next = 0;  // the first check not answered yet
};

class ApiServer::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, ApiHandler& handler, ApiServerOptions options)
      : io_(io), handler_(handler), options_(std::move(options)) {}

  std::string start();
  void stop();
  void drain();
  void close_listeners();
  std::vector<Endpoint> bound_endpoints() const;

  // Answers one request frame: appends the framed Response to `out`. Returns false when the
  // connection must be closed after `out` is written (the frame was not a Request). A valid check
  // batch of more than kChecksPerSlice checks is not answered here when `sliced` is given: it is
  // handed over in *sliced, to be finished by answer_slice().
  bool answer(std::string_view payload, std::string& out, std::unique_ptr<SlicedCheck>* sliced = nullptr);
  // Answers the next slice of `s`; when the batch is complete, appends its Response to `out` and
  // returns true.
  bool answer_slice(SlicedCheck& s, std::string& out);
  // Appends a FRAME_TOO_LARGE error for a length header of `length` bytes.
  void answer_too_large(uint64_t length, std::string& out);

  void connection_closed(Connection* connection);
  void offense(std::string_view peer, std::string_view what) {
    if (options_.on_offense) options_.on_offense(peer, what);
  }

  asio::io_context& io_;
  ApiHandler& handler_;
  const ApiServerOptions options_;
  ApiServerCounters counters_;
  bool stopped_ = false;
  bool draining_ = false;  // listeners closed: accept nothing more
  bool answered_since_slice_ = false;  // an answer was written since the last slice began

  // Called before each slice of a large batch: see ApiServerOptions::yield_after_answer_when_busy.
  void yield_if_answered() {
    if (!answered_since_slice_) return;
    answered_since_slice_ = false;
    if (!options_.yield_after_answer_when_busy) return;
    ++counters_.busy_yields;
    ::sched_yield();
  }

 private:
  struct Listener {
    Listener(asio::io_context& io, Endpoint ep) : requested(std::move(ep)), acceptor(io), retry_timer(io) {}
    Endpoint requested;
    Endpoint bound;
    asio::basic_socket_acceptor<GenericStream> acceptor;
    asio::steady_timer retry_timer;
    // The socket file we created, identified by device and inode so that stop() never removes a
    // file another process has put there since.
    bool owns_file = false;
    dev_t file_device = 0;
    ino_t file_inode = 0;
  };

  std::string listen_on(Listener& listener);
  std::string prepare_unix_path(const std::string& path);
  void accept(Listener& listener);
  void write_frame(const pb::Response& response, std::string& out);

  std::vector<std::unique_ptr<Listener>> listeners_;
  // Owning references to open connections, so that stop() can close them.
  std::unordered_map<Connection*, std::shared_ptr<Connection>> connections_;
};

namespace {

// One accepted connection. Reads frames, answers each synchronously through the server, and
// writes answers in order. Owned by the server's connection set and by its in-flight handlers.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ApiServer::Impl> server, GenericStream::socket socket, std::string peer)
      : server_(std::move(server)),
        socket_(std::move(socket)),
        decoder_(server_->options_.max_frame_bytes),
        frame_timer_(server_->io_),
        peer_(std::move(peer)) {}

  void start() { read(); }

  // Answers what has been read, then closes (the graceful stop). A batch being answered in
  // slices is finished first, and so are the whole requests read behind it.
  void drain() {
    if (closed_) return;
    draining_ = true;
    frame_timer_.cancel();
    if (sliced_) return;  // continue_slice() finishes, then answers the rest and closes
    close_after_flush_ = true;
    flush();
  }

  // Closes the socket at once; pending answers are dropped. Idempotent.
  void close() {
    if (closed_) return;
    closed_ = true;
    frame_timer_.cancel();
    boost::system::error_code ignored;
    socket_.shutdown(GenericStream::socket::shutdown_both, ignored);
    socket_.close(ignored);
    server_->connection_closed(this);
  }

 private:
  size_t output_bytes() const { return pending_out_.size() + writing_.size(); }

  void read() {
    if (reading_ || closed_ || close_after_flush_ || draining_ || sliced_) return;
    if (output_bytes() >= server_->options_.max_pending_output_bytes) return;  // resumed by on_write
    reading_ = true;
    socket_.async_read_some(asio::buffer(read_buffer_),
                            [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
                              self->on_read(ec, n);
                            });
  }

  void on_read(const boost::system::error_code& ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (ec == asio::error::eof && !server_->stopped_) {
      // The client has finished sending (it may have half-closed): answer what it sent, then close.
      close_after_flush_ = true;
      flush();
      return;
    }
    if (ec || server_->stopped_) {
      close();  // reset, or the server is stopping: nothing more to answer
      return;
    }
    decoder_.feed(read_buffer_.data(), n);
    process_frames();
  }

  // Answers the whole frames buffered, in order, until one is a large check batch (answered in
  // slices by continue_slice(), which comes back here) or a protocol error ends the connection.
  void process_frames() {
    std::string_view payload;
    while (!close_after_flush_ && !sliced_) {
      const FrameDecoder::Status status = decoder_.next(&payload);
      if (status == FrameDecoder::Status::kNeedMore) break;
      if (status == FrameDecoder::Status::kTooLarge) {
        server_->answer_too_large(decoder_.rejected_length(), pending_out_);
        server_->offense(peer_, "request frame of " + std::to_string(decoder_.rejected_length()) +
                                    " bytes exceeds the limit; connection closed");
        close_after_flush_ = true;
        break;
      }
      partial_since_.reset();  // a whole frame: the next one's clock starts with its first byte
      if (!server_->answer(payload, pending_out_, &sliced_)) {
        server_->offense(peer_, "malformed request frame; connection closed");
        close_after_flush_ = true;
      }
    }
    if (sliced_) {
      flush();  // the answers before the batch need not wait for it
      asio::post(server_->io_, [self = shared_from_this()] { self->continue_slice(); });
      return;
    }
    if (draining_) close_after_flush_ = true;
    watch_partial_frame();
    flush();
    read();
  }

  void continue_slice() {
    if (closed_ || !sliced_) return;
    server_->yield_if_answered();
    if (!server_->answer_slice(*sliced_, pending_out_)) {
      asio::post(server_->io_, [self = shared_from_this()] { self->continue_slice(); });
      return;
    }
    sliced_.reset();
    process_frames();
  }

  // Arms the frame deadline when part of a frame is buffered, and disarms it when none is.
  void watch_partial_frame() {
    if (close_after_flush_ || decoder_.buffered_bytes() == 0) {
      partial_since_.reset();
      frame_timer_.cancel();
      return;
    }
    if (partial_since_) return;  // already counting down for this frame
    partial_since_ = std::chrono::steady_clock::now();
    frame_timer_.expires_after(server_->options_.frame_timeout);
    frame_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->closed_ || !self->partial_since_) return;
      ++self->server_->counters_.connections_timed_out;
      self->server_->offense(self->peer_, "sent part of a request frame and then nothing within the frame "
                                          "timeout; connection closed");
      self->close();
    });
  }

  void flush() {
    if (writing_in_flight_ || closed_) return;
    if (pending_out_.empty()) {
      if (close_after_flush_) close();
      return;
    }
    writing_.swap(pending_out_);
    writing_in_flight_ = true;
    // Asio writes at once when the socket can take it (a speculative write): the reader has
    // been woken by the time async_write returns.
    asio::async_write(socket_, asio::buffer(writing_),
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                        self->on_write(ec);
                      });
    server_->answered_since_slice_ = true;
  }

  void on_write(const boost::system::error_code& ec) {
    writing_in_flight_ = false;
    writing_.clear();
    if (closed_) return;
    if (ec) {
      close();
      return;
    }
    flush();
    read();
  }

  std::shared_ptr<ApiServer::Impl> server_;
  GenericStream::socket socket_;
  FrameDecoder decoder_;
  std::array<char, kReadChunkBytes> read_buffer_{};
  std::string pending_out_;  // framed responses not yet handed to a write
  std::string writing_;      // the buffer of the write in flight
  bool reading_ = false;
  bool writing_in_flight_ = false;
  bool close_after_flush_ = false;  // a protocol error: answer it, then close
  bool closed_ = false;
  asio::steady_timer frame_timer_;
  std::optional<std::chrono::steady_clock::time_point> partial_since_;  // a frame has begun
  std::unique_ptr<SlicedCheck> sliced_;  // a large check batch being answered (no reading meanwhile)
  bool draining_ = false;                // drain(): answer what has been read, read no more
  std::string peer_;  // who the client is, for offense reports
};

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

std::string ApiServer::Impl::start() {
  if (options_.listen.empty()) return "no endpoint to listen on";
  for (const Endpoint& ep : options_.listen) {
    listeners_.push_back(std::make_unique<Listener>(io_, ep));
    std::string error = listen_on(*listeners_.back());
    if (!error.empty()) {
      stop();
      return ep.to_string() + ": " + error;
    }
  }
  for (auto& listener : listeners_) accept(*listener);
  return {};
}

std::string ApiServer::Impl::prepare_unix_path(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return {};
    return std::string("cannot inspect the socket path: ") + std::strerror(errno);
  }
  if (!S_ISSOCK(st.st_mode)) return "the path exists and is not a socket; not replacing it";
  // A socket file outlives the process that made it. If connecting is refused, nobody accepts on
  // it any more (a crashed daemon): replace it. If it is accepted, another daemon is live.
  asio::local::stream_protocol::socket probe(io_);
  boost::system::error_code ec;
  probe.connect(asio::local::stream_protocol::endpoint(path), ec);
  if (!ec) return "another daemon is listening on this socket";
  if (ec != asio::error::connection_refused) {
    return "cannot tell whether the existing socket is in use: " + ec.message();
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return std::string("cannot remove the stale socket file: ") + std::strerror(errno);
  }
  return {};
}

std::string ApiServer::Impl::listen_on(Listener& listener) {
  const Endpoint& ep = listener.requested;
  boost::system::error_code ec;
  if (ep.kind == Endpoint::Kind::kUnix) {
    if (std::string error = prepare_unix_path(ep.path); !error.empty()) return error;
  }
  GenericStream::endpoint target;
  try {
    target = to_asio(ep);
  } catch (const std::exception& e) {
    return std::string("bad address: ") + e.what();
  }
  auto& acceptor = listener.acceptor;
  if (acceptor.open(target.protocol(), ec)) return "cannot open a socket: " + ec.message();
  if (ep.kind == Endpoint::Kind::kTcp) {
    // Lets a restarted daemon bind while connections of its previous life are in TIME_WAIT.
    acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  }
  if (acceptor.bind(target, ec)) return "cannot bind: " + ec.message();
  listener.bound = ep;
  if (ep.kind == Endpoint::Kind::kUnix) {
    // bind() created the file with the process umask; set the documented mode now, before
    // listen(), so no client can connect through a wider mode.
    struct stat st {};
    if (::chmod(ep.path.c_str(), static_cast<mode_t>(options_.unix_socket_mode)) != 0 ||
        ::stat(ep.path.c_str(), &st) != 0) {
      const std::string error = std::string("cannot set the socket file mode: ") + std::strerror(errno);
      ::unlink(ep.path.c_str());
      return error;
    }
    listener.owns_file = true;
    listener.file_device = st.st_dev;
    listener.file_inode = st.st_ino;
  } else {
    listener.bound.port = port_of(acceptor.local_endpoint(ec));
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec)) return "cannot listen: " + ec.message();
  return {};
}

void ApiServer::Impl::accept(Listener& listener) {
  if (stopped_ || draining_) return;
  const bool tcp = listener.requested.kind == Endpoint::Kind::kTcp;
  listener.acceptor.async_accept(
      [self = shared_from_this(), &listener, tcp](const boost::system::error_code& ec, GenericStream::socket peer) {
        if (self->stopped_ || self->draining_ || ec == asio::error::operation_aborted) return;
        if (ec) {
          ++self->counters_.accept_errors;
          listener.retry_timer.expires_after(kAcceptRetryDelay);
          listener.retry_timer.async_wait([self, &listener](const boost::system::error_code& timer_ec) {
            if (!timer_ec) self->accept(listener);
          });
          return;
        }
        if (self->connections_.size() >= self->options_.max_connections) {
          ++self->counters_.connections_rejected;
          self->offense(describe_peer(peer, tcp), "connection refused: " + std::to_string(self->options_.max_connections) +
                                                     " client connections are open (the limit)");
          boost::system::error_code ignored;
          peer.close(ignored);
        } else {
          ++self->counters_.connections_accepted;
          ++self->counters_.connections_open;
          if (tcp) {
            boost::system::error_code ignored;
            peer.set_option(asio::ip::tcp::no_delay(true), ignored);  // answers are tiny and latency-bound
          }
          std::string who = describe_peer(peer, tcp);
          auto connection = std::make_shared<Connection>(self, std::move(peer), std::move(who));
          self->connections_.emplace(connection.get(), connection);
          connection->start();
        }
        self->accept(listener);
      });
}

void ApiServer::Impl::connection_closed(Connection* connection) {
  // The caller (a handler of the connection, or stop()) still holds a reference.
  if (connections_.erase(connection) > 0) --counters_.connections_open;
}

void ApiServer::Impl::drain() {
  if (stopped_) return;
  close_listeners();
  std::vector<std::shared_ptr<Connection>> open;
  for (auto& [raw, connection] : connections_) open.push_back(connection);
  for (auto& connection : open) connection->drain();
}

void ApiServer::Impl::stop() {
  if (stopped_) return;
  stopped_ = true;
  close_listeners();
  // Copy first: close() removes the connection from the set.
  std::vector<std::shared_ptr<Connection>> open;
  for (auto& [raw, connection] : connections_) open.push_back(connection);
  for (auto& connection : open) connection->close();
}

void ApiServer::Impl::close_listeners() {
  draining_ = true;
  for (auto& listener : listeners_) {
    boost::system::error_code ignored;
    listener->acceptor.close(ignored);
    listener->retry_timer.cancel();
    if (listener->owns_file) {
      struct stat st {};
      const std::string& path = listener->requested.path;
      if (::stat(path.c_str(), &st) == 0 && st.st_dev == listener->file_device &&
          st.st_ino == listener->file_inode) {
        ::unlink(path.c_str());
      }
      listener->owns_file = false;
    }
  }
}

std::vector<Endpoint> ApiServer::Impl::bound_endpoints() const {
  std::vector<Endpoint> out;
  for (const auto& listener : listeners_) {
    if (listener->acceptor.is_open()) out.push_back(listener->bound);
  }
  return out;
}

bool ApiServer::Impl::answer_slice(SlicedCheck& s, std::string& out) {
  const auto& checks = s.request->check().checks();
  auto& results = *s.response->mutable_check()->mutable_results();
  const int end = std::min(checks.size(), s.next + kChecksPerSlice);
  try {
    for (; s.next < end; ++s.next) {
      fill_result(handler_.check(checks[s.next].key(), checks[s.next].cost()), *results.Add());
      ++counters_.checks;
    }
  } catch (const std::exception& e) {
    ++counters_.errors_internal;
    write_frame(error_response(s.request->id(), pb::Error::INTERNAL, std::string("daemon error: ") + e.what()), out);
    return true;
  } catch (...) {
    ++counters_.errors_internal;
    write_frame(error_response(s.request->id(), pb::Error::INTERNAL, "daemon error"), out);
    return true;
  }
  if (s.next < checks.size()) return false;
  write_frame(*s.response, out);
  return true;
}

void ApiServer::Impl::write_frame(const pb::Response& response, std::string& out) {
  // Responses are not held to the request limit (see kMaxResponseFrameBytes); one that does not
  // fit even that is replaced by an error rather than sent truncated.
  if (!append_frame(response, kMaxResponseFrameBytes, out)) {
    ++counters_.errors_internal;
    append_frame(error_response(response.id(), pb::Error::INTERNAL, "response too large to send"),
                 kMaxResponseFrameBytes, out);
  }
}

void ApiServer::Impl::answer_too_large(uint64_t length, std::string& out) {
  ++counters_.requests;
  ++counters_.errors_frame_too_large;
  write_frame(error_response(0, pb::Error::FRAME_TOO_LARGE,
                             "request frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                                 std::to_string(options_.max_frame_bytes) + " bytes; closing the connection"),
              out);
}

bool ApiServer::Impl::answer(std::string_view payload, std::string& out, std::unique_ptr<SlicedCheck>* sliced) {
  ++counters_.requests;
  std::unique_ptr<google::protobuf::Arena> arena = request_arena();
  pb::Request& request = *google::protobuf::Arena::CreateMessage<pb::Request>(arena.get());
  if (!request.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    ++counters_.errors_malformed;
    write_frame(error_response(0, pb::Error::MALFORMED,
                               "frame is not a tollgate.v1.api.Request; closing the connection"),
                out);
    return false;
  }
  const uint64_t id = request.id();
  if (request.version() != kApiVersion) {
    ++counters_.errors_unsupported_version;
    write_frame(error_response(id, pb::Error::UNSUPPORTED_VERSION,
                               "unsupported API version " + std::to_string(request.version()) +
                                   "; this daemon speaks version " + std::to_string(kApiVersion)),
                out);
    return true;
  }
  pb::Response& response = *google::protobuf::Arena::CreateMessage<pb::Response>(arena.get());
  response.set_version(kApiVersion);
  response.set_id(id);
  try {
    switch (request.body_case()) {
      case pb::Request::kCheck: {
        const auto& checks = request.check().checks();
        if (checks.empty()) {
          ++counters_.errors_empty_request;
          write_frame(error_response(id, pb::Error::EMPTY_REQUEST, "check batch has no checks"), out);
          return true;
        }
        if (static_cast<size_t>(checks.size()) > options_.max_checks_per_batch) {
          ++counters_.errors_batch_too_large;
          write_frame(error_response(id, pb::Error::BATCH_TOO_LARGE,
                                     "check batch of " + std::to_string(checks.size()) +
                                         " checks exceeds the limit of " +
                                         std::to_string(options_.max_checks_per_batch)),
                      out);
          return true;
        }
        if (sliced && checks.size() > kChecksPerSlice) {
          auto s = std::make_unique<SlicedCheck>();
          s->request = &request;
          s->response = &response;
          s->response->mutable_check()->mutable_results()->Reserve(checks.size());
          s->arena = std::move(arena);
          *sliced = std::move(s);
          return true;
        }
        auto& results = *response.mutable_check()->mutable_results();
        results.Reserve(checks.size());
        for (const pb::Check& check : checks) {
          fill_result(handler_.check(check.key(), check.cost()), *results.Add());
          ++counters_.checks;
        }
        break;
      }
      case pb::Request::kMembers: {
        auto& members = *response.mutable_members()->mutable_members();
        for (const MemberReport& report : handler_.members()) {
          pb::Member& m = *members.Add();
          m.set_id(report.id);
          m.set_address(report.address);
          m.set_state(report.state);
          m.set_incarnation(report.incarnation);
          m.set_last_heard_ms(report.last_heard_ms);
          m.set_self(report.self);
        }
        break;
      }
      case pb::Request::kStats: {
        auto& counters = *response.mutable_stats()->mutable_counters();
        for (const auto& [name, value] : handler_.stats()) {
          pb::Counter& c = *counters.Add();
          c.set_name(name);
          c.set_value(value);
        }
        break;
      }
      case pb::Request::kFaults: {
        const pb::FaultsRequest& in = request.faults();
        FaultSpec spec;
        spec.drop_to.assign(in.drop_to().begin(), in.drop_to().end());
        spec.drop_from.assign(in.drop_from().begin(), in.drop_from().end());
        spec.loss = in.loss();
        spec.delay_ms = in.delay_ms();
        spec.duplicate = in.duplicate();
        spec.jitter_ms = in.jitter_ms();
        response.mutable_faults()->set_error(handler_.set_faults(spec));
        break;
      }
      case pb::Request::BODY_NOT_SET:
        ++counters_.errors_empty_request;
        write_frame(error_response(id, pb::Error::EMPTY_REQUEST, "request has no body"), out);
        return true;
    }
  } catch (const std::exception& e) {
    ++counters_.errors_internal;
    write_frame(error_response(id, pb::Error::INTERNAL, std::string("daemon error: ") + e.what()), out);
    return true;
  } catch (...) {
    ++counters_.errors_internal;
    write_frame(error_response(id, pb::Error::INTERNAL, "daemon error"), out);
    return true;
  }
  write_frame(response, out);
  return true;
}

ApiServer::ApiServer(asio::io_context& io, ApiHandler& handler, ApiServerOptions options)
    : impl_(std::make_shared<Impl>(io, handler, std::move(options))) {}

ApiServer::~ApiServer() { stop(); }

std::string ApiServer::start() { return impl_->start(); }

void ApiServer::stop() { impl_->stop(); }
void ApiServer::drain() { impl_->drain(); }

std::vector<Endpoint> ApiServer::bound_endpoints() const { return impl_->bound_endpoints(); }

const ApiServerCounters& ApiServer::counters() const { return impl_->counters_; }

StatsReport ApiServer::stats() const {
  const ApiServerCounters& c = impl_->counters_;
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
