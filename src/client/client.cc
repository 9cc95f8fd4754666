// Client implementation: one background thread runs an io_context that owns the connection.
// Callers build and frame their request on their own thread, post it to the io thread with a
// fresh id and a completion, and (sync calls) wait on a future until their deadline. The io
// thread keeps outstanding calls by id, matches answers by id (so an answer that arrives after
// its caller gave up is recognised and dropped), and completes calls whose deadline passes or
// whose connection is lost.
//
// Synchronous checks skip the io thread when they can (see ClientOptions::direct_connections):
// the caller takes a connection of its own from a small pool and writes and reads it itself,
// bounded by its deadline (client/direct_connection.h). The io thread's connection stays the
// path for async and admin calls, for sync calls while the pool is busy, and it is the one that
// notices the daemon going and coming back: the pool is used only while it is connected.
#include "tollgate/client.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "api/endpoint.h"
#include "api/framing.h"
#include "api/socket_address.h"
#include "client/direct_connection.h"
#include "tollgate/duration.h"
#include "tollgate/v1/api.pb.h"

namespace tollgate {

namespace asio = boost::asio;
using GenericStream = asio::generic::stream_protocol;
using SteadyClock = std::chrono::steady_clock;
namespace pb = ::tollgate::v1::api;

const char* reply_source_name(ReplySource source) {
  switch (source) {
    case ReplySource::kDaemon: return "daemon";
    case ReplySource::kFailOpen: return "fail-open";
    case ReplySource::kFailClosed: return "fail-closed";
  }
  return "unknown";
}

namespace {

constexpr size_t kReadChunkBytes = 16 * 1024;
// Waits longer than this are treated as this (so that now + timeout cannot overflow).
constexpr std::chrono::nanoseconds kLongestWait = std::chrono::hours(24 * 365);

SteadyClock::time_point deadline_after(std::chrono::nanoseconds timeout) {
  return SteadyClock::now() + std::min(timeout, kLongestWait);
}

// A call's completion: `response` is the daemon's answer (never an id-0 connection error), or
// null with `error` saying why there is none. Runs on the io thread (or, for calls that fail
// before being posted, on the caller's).
using Completion = std::function<void(const pb::Response* response, const std::string& error)>;

DenyReason from_proto(pb::DenyReason reason, bool allowed) {
  switch (reason) {
    case pb::DENY_REASON_NONE: return DenyReason::kNone;
    case pb::DENY_REASON_INSUFFICIENT_TOKENS: return DenyReason::kInsufficientTokens;
    case pb::DENY_REASON_COST_EXCEEDS_BURST: return DenyReason::kCostExceedsBurst;
    case pb::DENY_REASON_INVALID_COST: return DenyReason::kInvalidCost;
    case pb::DENY_REASON_KEY_TOO_LONG: return DenyReason::kKeyTooLong;
    default: break;
  }
  // A reason added by a newer daemon: the closest thing this client knows.
  return allowed ? DenyReason::kNone : DenyReason::kInsufficientTokens;
}

CheckReply from_proto(const pb::Result& r) {
  CheckReply reply;
  reply.allowed = r.allowed();
  reply.remaining = r.remaining();
  reply.retry_after_ns = r.retry_after_ns();
  reply.reason = from_proto(r.reason_code(), r.allowed());
  reply.limited = r.limited();
  if (r.has_limit()) {
    const pb::Limit& l = r.limit();
    reply.limit = Limit{Rate{l.rate_tokens(), l.rate_period_ns()}, l.burst(), l.max_debt()};
  }
  reply.source = ReplySource::kDaemon;
  return reply;
}

// The error text of a response that is not the expected kind.
std::string unexpected_body(const pb::Response& response, const char* expected) {
  if (response.has_error()) return "daemon error: " + response.error().message();
  return std::string("daemon sent an unexpected answer (expected ") + expected + ")";
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(ClientOptions options)
      : options_(std::move(options)),
        work_(asio::make_work_guard(io_)),
        socket_(io_),
        reconnect_timer_(io_),
        connect_timer_(io_),
        deadline_timer_(io_),
        decoder_(api::kMaxResponseFrameBytes),
        rng_(std::random_device{}()) {
    std::string error;
    auto endpoint = api::parse_endpoint(options_.endpoint, &error);
    if (!endpoint) throw std::invalid_argument(error);
    endpoint_ = *endpoint;
    backoff_ = first_backoff();
    asio::post(io_, [this] { start_connect(); });
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    asio::post(io_, [this] { shut_down(); });
    work_.reset();
    thread_.join();
  }

  // --- caller side (any thread) ------------------------------------------------------------

  // Frames `request` (giving it an id) and submits it; `done` runs on the io thread.
  void submit(pb::Request& request, SteadyClock::time_point deadline, Completion done) {
    const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    request.set_version(api::kApiVersion);
    request.set_id(id);
    std::string frame;
    if (!api::append_frame(request, options_.max_request_bytes, frame)) {
      std::string error = "request of " + std::to_string(request.ByteSizeLong()) +
                          " bytes exceeds max_request_bytes (" + std::to_string(options_.max_request_bytes) + ")";
      asio::post(io_, [done = std::move(done), error = std::move(error)] { done(nullptr, error); });
      return;
    }
    asio::post(io_, [this, id, deadline, frame = std::move(frame), done = std::move(done)]() mutable {
      enqueue(id, deadline, std::move(frame), std::move(done));
    });
  }

  // A synchronous call: `convert(response, error)` turns the outcome into the caller's result (on
  // whichever thread completes it: the io thread, or the caller when it gives up at the
  // deadline). The caller waits until `timeout` at most.
  // With `direct`, the call first tries the caller-thread path (call_direct).
  template <typename Result, typename Convert>
  Result call(pb::Request& request, std::chrono::nanoseconds timeout, Convert convert, bool direct = false) {
    if (std::this_thread::get_id() == thread_.get_id()) {
      return convert(nullptr, "synchronous client call from a client callback (it would wait on itself)");
    }
    const auto deadline = deadline_after(timeout);
    if (direct) {
      if (std::optional<Result> result = call_direct<Result>(request, deadline, convert)) return std::move(*result);
    }
    struct Shared {
      std::promise<Result> promise;
      std::atomic<bool> abandoned{false};  // the caller stopped waiting
    };
    auto shared = std::make_shared<Shared>();
    std::future<Result> future = shared->promise.get_future();
    submit(request, deadline, [this, shared, convert](const pb::Response* response, const std::string& error) {
      if (shared->abandoned.load()) {
        if (response != nullptr) late_replies_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      shared->promise.set_value(convert(response, error));
    });
    if (future.wait_until(deadline) == std::future_status::ready) return future.get();
    shared->abandoned.store(true);
    // The answer may have landed between the wait and the flag; prefer it.
    if (future.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return future.get();
    return convert(nullptr, "no answer from the daemon within " + format_duration(timeout.count()));
  }

  // The caller-thread path: nullopt when it cannot be taken (the io connection is down, every
  // pooled connection is in use and the pool is full, or a new one cannot be opened), and the
  // caller goes through the io thread instead. Otherwise the call's outcome: the daemon's
  // answer, or a failure (deadline, broken connection) that the io path could not have avoided.
  template <typename Result, typename Convert>
  std::optional<Result> call_direct(pb::Request& request, SteadyClock::time_point deadline, Convert& convert) {
    if (options_.direct_connections == 0 || !connected_.load(std::memory_order_relaxed)) return std::nullopt;
    const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    request.set_version(api::kApiVersion);
    request.set_id(id);
    std::string frame;
    if (!api::append_frame(request, options_.max_request_bytes, frame)) return std::nullopt;  // the io path says why
    // A pooled connection the daemon closed while it sat idle (it restarted) fails before
    // anything is sent: then one more, perhaps fresh, connection is tried.
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::unique_ptr<client::DirectConnection> connection = take_direct(deadline);
      if (!connection) return std::nullopt;
      std::string_view payload;
      std::string error;
      switch (connection->exchange(frame, deadline, &payload, &error)) {
        case client::DirectConnection::Outcome::kNotSent:
          discard_direct();
          continue;
        case client::DirectConnection::Outcome::kTimedOut:
          // Its answer may still come: the connection is out of step, so it goes, answer and all.
          discard_direct();
          return convert(nullptr, "no answer from the daemon within the deadline");
        case client::DirectConnection::Outcome::kFailed:
          discard_direct();
          return convert(nullptr, "lost the connection to " + endpoint_.to_string() + ": " + error);
        case client::DirectConnection::Outcome::kAnswered: break;
      }
      pb::Response response;
      if (!response.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
        discard_direct();
        return convert(nullptr, "the daemon sent a malformed response");
      }
      if (response.id() != id) {
        // id 0 with an error is about the connection (the daemon closes it); anything else is
        // a daemon out of step with us. Either way this connection is done.
        discard_direct();
        return convert(nullptr, response.id() == 0 && response.has_error()
                                    ? "daemon error: " + response.error().message()
                                    : "the daemon answered request " + std::to_string(response.id()) +
                                          " when asked " + std::to_string(id));
      }
      give_back_direct(std::move(connection));
      direct_calls_.fetch_add(1, std::memory_order_relaxed);
      if (response.version() != api::kApiVersion) {
        return convert(nullptr, "the daemon answered with API version " + std::to_string(response.version()) +
                                    "; this client speaks version " + std::to_string(api::kApiVersion));
      }
      return convert(&response, std::string());
    }
    return std::nullopt;
  }

  // An idle pooled connection, or a new one while the pool has room; null otherwise.
  std::unique_ptr<client::DirectConnection> take_direct(SteadyClock::time_point deadline) {
    {
      std::lock_guard lock(direct_mutex_);
      if (!direct_idle_.empty()) {
        auto c = std::move(direct_idle_.back());
        direct_idle_.pop_back();
        return c;
      }
      if (direct_open_ >= options_.direct_connections) return nullptr;
      ++direct_open_;
    }
    std::string error;
    auto c = client::DirectConnection::open(endpoint_, deadline, &error);
    if (!c) discard_direct();
    return c;
  }
  void give_back_direct(std::unique_ptr<client::DirectConnection> c) {
    std::lock_guard lock(direct_mutex_);
    direct_idle_.push_back(std::move(c));
  }
  // Accounts for a taken connection that the caller destroys (or that failed to open).
  void discard_direct() {
    std::lock_guard lock(direct_mutex_);
    --direct_open_;
  }

  CheckReply fallback(std::string error) {
    CheckReply reply;
    reply.allowed = options_.fail_open;
    reply.limited = false;
    reply.source = options_.fail_open ? ReplySource::kFailOpen : ReplySource::kFailClosed;
    reply.error = std::move(error);
    return reply;
  }

  // Replies for a batch of `count` checks from an outcome.
  std::vector<CheckReply> check_replies(const pb::Response* response, const std::string& error, size_t count) {
    std::vector<CheckReply> replies;
    replies.reserve(count);
    std::string why = error;
    if (response != nullptr) {
      if (response->has_check() && static_cast<size_t>(response->check().results_size()) == count) {
        for (const pb::Result& r : response->check().results()) replies.push_back(from_proto(r));
        return replies;
      }
      why = response->has_check() ? "daemon answered " + std::to_string(response->check().results_size()) +
                                        " results for " + std::to_string(count) + " checks"
                                  : unexpected_body(*response, "check results");
    }
    for (size_t i = 0; i < count; ++i) replies.push_back(fallback(why));
    return replies;
  }

  // Counts replies handed to a caller.
  void count(const std::vector<CheckReply>& replies) {
    if (replies.empty()) return;
    auto& counter = replies.front().from_daemon() ? daemon_replies_ : fallback_replies_;
    counter.fetch_add(replies.size(), std::memory_order_relaxed);
  }

  bool wait_connected(std::chrono::nanoseconds timeout) {
    std::unique_lock lock(connected_mutex_);
    return connected_cv_.wait_until(lock, deadline_after(timeout), [this] { return connected_.load(); });
  }

  ClientCounters counters() const {
    ClientCounters c;
    c.daemon_replies = daemon_replies_.load(std::memory_order_relaxed);
    c.fallback_replies = fallback_replies_.load(std::memory_order_relaxed);
    c.late_replies = late_replies_.load(std::memory_order_relaxed);
    c.connects = connects_.load(std::memory_order_relaxed);
    c.connect_failures = connect_failures_.load(std::memory_order_relaxed);
    c.disconnects = disconnects_.load(std::memory_order_relaxed);
    c.direct_calls = direct_calls_.load(std::memory_order_relaxed);
    return c;
  }

  const ClientOptions options_;
  std::atomic<bool> connected_{false};

 private:
  enum class State : uint8_t {
    kWaiting,     // not connected; a reconnect is scheduled. Calls fail at once.
    kConnecting,  // a connect is in flight. Calls queue and are sent once it succeeds.
    kConnected,
    kStopped,     // the Client is being destroyed
  };

  struct Outstanding {
    Completion done;
  };

  // --- io thread ----------------------------------------------------------------------------

  void enqueue(uint64_t id, SteadyClock::time_point deadline, std::string frame, Completion done) {
    if (state_ == State::kStopped) {
      done(nullptr, "the client is shutting down");
      return;
    }
    if (state_ == State::kWaiting) {
      done(nullptr, "not connected to " + endpoint_.to_string() + ": " + last_error_);
      return;
    }
    if (SteadyClock::now() >= deadline) {
      done(nullptr, "deadline passed before the request could be sent");
      return;
    }
    outstanding_.emplace(id, Outstanding{std::move(done)});
    unsent_.emplace_back(id, std::move(frame));
    const bool earliest = deadlines_.empty() || deadline < deadlines_.begin()->first;
    deadlines_.emplace(deadline, id);
    if (earliest) arm_deadline_timer();
    flush();
  }

  void arm_deadline_timer() {
    if (deadlines_.empty()) return;
    deadline_timer_.expires_at(deadlines_.begin()->first);
    deadline_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;  // re-armed for an earlier deadline, or shutting down
      expire_deadlines();
    });
  }

  void expire_deadlines() {
    const auto now = SteadyClock::now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      const uint64_t id = deadlines_.begin()->second;
      deadlines_.erase(deadlines_.begin());
      // Already answered calls are simply absent. An expired call's frame, if still unsent, is
      // skipped by flush(); if already sent, its answer is dropped as late.
      complete(id, nullptr, "no answer from the daemon before the deadline");
    }
    arm_deadline_timer();
  }

  void complete(uint64_t id, const pb::Response* response, const std::string& error) {
    auto it = outstanding_.find(id);
    if (it == outstanding_.end()) {
      if (response != nullptr) late_replies_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Completion done = std::move(it->second.done);
    outstanding_.erase(it);
    done(response, error);
  }

  void start_connect() {
    if (state_ == State::kStopped) return;
    state_ = State::kConnecting;
    const uint64_t generation = ++generation_;
    socket_ = GenericStream::socket(io_);
    std::string bad_address;
    const std::optional<GenericStream::endpoint> target = api::socket_address(endpoint_, &bad_address);
    if (!target) {
      connection_failed(bad_address);
      return;
    }
    connect_timer_.expires_after(options_.connect_timeout);
    connect_timer_.async_wait([this, generation](const boost::system::error_code& ec) {
      if (ec || generation != generation_ || state_ != State::kConnecting) return;
      connection_failed("connecting timed out");
    });
    socket_.async_connect(*target, [this, generation](const boost::system::error_code& ec) {
      if (generation != generation_ || state_ != State::kConnecting) return;
      connect_timer_.cancel();
      if (ec) {
        connection_failed("cannot connect: " + ec.message());
        return;
      }
      on_connected();
    });
  }

  void on_connected() {
    state_ = State::kConnected;
    backoff_ = first_backoff();
    if (endpoint_.kind == api::Endpoint::Kind::kTcp) {
      boost::system::error_code ignored;
      socket_.set_option(asio::ip::tcp::no_delay(true), ignored);  // requests are tiny and latency-bound
    }
    connects_.fetch_add(1, std::memory_order_relaxed);
    set_connected(true);
    read();
    flush();
  }

  void set_connected(bool value) {
    {
      std::lock_guard lock(connected_mutex_);
      connected_.store(value);
    }
    if (value) connected_cv_.notify_all();
  }

  // Drops the connection (or the attempt): every outstanding call fails with `error`, and a
  // reconnect is scheduled after a jittered, growing backoff.
  void connection_failed(const std::string& error) {
    if (state_ == State::kConnected) {
      disconnects_.fetch_add(1, std::memory_order_relaxed);
    } else {
      connect_failures_.fetch_add(1, std::memory_order_relaxed);
    }
    const bool was_connected = state_ == State::kConnected;
    drop_connection();
    last_error_ = error;
    fail_all((was_connected ? "lost the connection to " : "cannot reach ") + endpoint_.to_string() + ": " + error);
    state_ = State::kWaiting;
    reconnect_timer_.expires_after(next_backoff());
    reconnect_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) start_connect();
    });
  }

  void drop_connection() {
    ++generation_;  // handlers of the old socket see a different generation and do nothing
    boost::system::error_code ignored;
    socket_.close(ignored);
    connect_timer_.cancel();
    set_connected(false);
    decoder_.reset();
    unsent_.clear();
    writing_.clear();
    write_in_flight_ = false;
    reading_ = false;
  }

  void fail_all(const std::string& error) {
    // Completions may post new calls, never run them inline, so this loop sees a stable map;
    // still, take it out first so nothing can observe it half-failed.
    auto outstanding = std::move(outstanding_);
    outstanding_.clear();
    deadlines_.clear();
    deadline_timer_.cancel();
    for (auto& [id, call] : outstanding) call.done(nullptr, error);
  }

  // At least 1 ms, so that a zero option cannot turn reconnecting into a busy loop.
  std::chrono::nanoseconds first_backoff() const {
    return std::max<std::chrono::nanoseconds>(options_.reconnect_initial, std::chrono::milliseconds(1));
  }

  std::chrono::nanoseconds next_backoff() {
    const std::chrono::nanoseconds current = std::min(backoff_, options_.reconnect_max);
    backoff_ = std::min(current * 2, options_.reconnect_max);
    const int64_t high = std::max<int64_t>(current.count(), 1);
    std::uniform_int_distribution<int64_t> pick(high / 2, high);
    return std::chrono::nanoseconds(pick(rng_));
  }

  void flush() {
    if (state_ != State::kConnected || write_in_flight_) return;
    writing_.clear();
    for (auto& [id, frame] : unsent_) {
      if (outstanding_.count(id) != 0) writing_ += frame;  // skip calls whose deadline passed
    }
    unsent_.clear();
    if (writing_.empty()) return;
    write_in_flight_ = true;
    asio::async_write(socket_, asio::buffer(writing_),
                      [this, generation = generation_](const boost::system::error_code& ec, size_t) {
                        if (generation != generation_) return;
                        write_in_flight_ = false;
                        if (ec) {
                          connection_failed("write failed: " + ec.message());
                          return;
                        }
                        flush();
                      });
  }

  void read() {
    if (reading_) return;
    reading_ = true;
    socket_.async_read_some(asio::buffer(read_buffer_),
                            [this, generation = generation_](const boost::system::error_code& ec, size_t n) {
                              if (generation != generation_) return;
                              reading_ = false;
                              on_read(ec, n);
                            });
  }

  void on_read(const boost::system::error_code& ec, size_t n) {
    if (ec) {
      connection_failed(ec == asio::error::eof ? "the daemon closed the connection" : "read failed: " + ec.message());
      return;
    }
    decoder_.append(std::string_view(read_buffer_.data(), n));
    std::string_view payload;
    for (;;) {
      const auto status = decoder_.next(&payload);
      if (status == FrameReader::Status::kNeedMore) break;
      if (status == FrameReader::Status::kTooLarge) {
        connection_failed("the daemon sent a frame of " + std::to_string(decoder_.rejected_length()) + " bytes");
        return;
      }
      pb::Response response;
      if (!response.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
        connection_failed("the daemon sent a malformed response");
        return;
      }
      if (response.id() == 0 && response.has_error()) {
        // About the connection, not one call (e.g. our frame was too large): the daemon closes.
        connection_failed("daemon error: " + response.error().message());
        return;
      }
      if (response.version() != api::kApiVersion) {
        complete(response.id(), nullptr,
                 "the daemon answered with API version " + std::to_string(response.version()) +
                     "; this client speaks version " + std::to_string(api::kApiVersion));
        continue;
      }
      complete(response.id(), &response, std::string());
    }
    read();
  }

  void shut_down() {
    state_ = State::kStopped;
    reconnect_timer_.cancel();
    drop_connection();
    fail_all("the client is shutting down");
  }

  // Construction order matters: io_ must outlive every I/O object below it.
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  api::Endpoint endpoint_;
  std::thread thread_;
  std::atomic<uint64_t> next_id_{1};  // 0 is the daemon's "no request" id

  std::mutex connected_mutex_;
  std::condition_variable connected_cv_;
  std::atomic<uint64_t> daemon_replies_{0};
  std::atomic<uint64_t> fallback_replies_{0};
  std::atomic<uint64_t> late_replies_{0};
  std::atomic<uint64_t> connects_{0};
  std::atomic<uint64_t> connect_failures_{0};
  std::atomic<uint64_t> disconnects_{0};
  std::atomic<uint64_t> direct_calls_{0};

  // The caller-thread connections (call_direct): idle ones, and how many exist (idle + taken).
  std::mutex direct_mutex_;
  std::vector<std::unique_ptr<client::DirectConnection>> direct_idle_;
  uint32_t direct_open_ = 0;

  // Everything below is touched only on the io thread.
  State state_ = State::kConnecting;
  uint64_t generation_ = 0;
  GenericStream::socket socket_;
  asio::steady_timer reconnect_timer_;
  asio::steady_timer connect_timer_;
  asio::steady_timer deadline_timer_;
  std::unordered_map<uint64_t, Outstanding> outstanding_;
  std::multimap<SteadyClock::time_point, uint64_t> deadlines_;
  std::deque<std::pair<uint64_t, std::string>> unsent_;  // queued while connecting or writing
  std::string writing_;
  bool write_in_flight_ = false;
  bool reading_ = false;
  FrameReader decoder_;
  std::array<char, kReadChunkBytes> read_buffer_{};
  std::chrono::nanoseconds backoff_{0};
  std::string last_error_;
  std::minstd_rand rng_;
};

// --- Client ----------------------------------------------------------------------------------

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Client::~Client() = default;

CheckReply Client::check(std::string_view key, int64_t cost) { return check(key, cost, impl_->options_.deadline); }

CheckReply Client::check(std::string_view key, int64_t cost, std::chrono::nanoseconds deadline) {
  const CheckItem item{key, cost};
  return std::move(check_batch(std::span<const CheckItem>(&item, 1), deadline).front());
}

std::vector<CheckReply> Client::check_batch(std::span<const CheckItem> items) {
  return check_batch(items, impl_->options_.deadline);
}

std::vector<CheckReply> Client::check_batch(std::span<const CheckItem> items, std::chrono::nanoseconds deadline) {
  if (items.empty()) return {};
  pb::Request request;
  auto& checks = *request.mutable_check()->mutable_checks();
  checks.Reserve(static_cast<int>(items.size()));
  for (const CheckItem& item : items) {
    pb::Check& c = *checks.Add();
    c.set_key(item.key.data(), item.key.size());
    c.set_cost(item.cost);
  }
  const size_t count = items.size();
  Impl* impl = impl_.get();
  std::vector<CheckReply> replies = impl->call<std::vector<CheckReply>>(
      request, deadline, [impl, count](const pb::Response* response, const std::string& error) {
        return impl->check_replies(response, error, count);
      },
      /*direct=*/true);
  impl->count(replies);
  return replies;
}

void Client::check_async(std::string_view key, int64_t cost, CheckCallback done) {
  pb::Request request;
  pb::Check& c = *request.mutable_check()->mutable_checks()->Add();
  c.set_key(key.data(), key.size());
  c.set_cost(cost);
  Impl* impl = impl_.get();
  impl->submit(request, deadline_after(impl->options_.deadline),
               [impl, done = std::move(done)](const pb::Response* response, const std::string& error) {
                 std::vector<CheckReply> replies = impl->check_replies(response, error, 1);
                 impl->count(replies);
                 done(std::move(replies.front()));
               });
}

std::optional<std::vector<MemberInfo>> Client::members(std::string* error) {
  pb::Request request;
  request.mutable_members();
  using Result = std::pair<std::optional<std::vector<MemberInfo>>, std::string>;
  Result result = impl_->call<Result>(
      request, impl_->options_.admin_timeout, [](const pb::Response* response, const std::string& why) -> Result {
        if (response == nullptr) return {std::nullopt, why};
        if (!response->has_members()) return {std::nullopt, unexpected_body(*response, "members")};
        std::vector<MemberInfo> members;
        for (const pb::Member& m : response->members().members()) {
          MemberInfo info;
          info.id = m.id();
          info.address = m.address();
          // A state added by a newer daemon reads as unreachable: not known to be alive.
          if (!parse_member_state(m.state(), &info.state)) info.state = MemberState::kUnreachable;
          info.incarnation = m.incarnation();
          info.heartbeat = m.heartbeat();
          // Clamped first: the value comes off the wire, and * 10^6 must not overflow.
          info.last_heard_ns = std::clamp<int64_t>(m.last_heard_ms(), 0, INT64_MAX / 1'000'000) * 1'000'000;
          info.self = m.self();
          members.push_back(std::move(info));
        }
        return {std::move(members), std::string()};
      });
  if (!result.first && error) *error = std::move(result.second);
  return std::move(result.first);
}

std::optional<StatsList> Client::stats(std::string* error) {
  pb::Request request;
  request.mutable_stats();
  using Result = std::pair<std::optional<StatsList>, std::string>;
  Result result = impl_->call<Result>(
      request, impl_->options_.admin_timeout, [](const pb::Response* response, const std::string& why) -> Result {
        if (response == nullptr) return {std::nullopt, why};
        if (!response->has_stats()) return {std::nullopt, unexpected_body(*response, "stats")};
        StatsList stats;
        for (const pb::Counter& c : response->stats().counters()) stats.emplace_back(c.name(), c.value());
        return {std::move(stats), std::string()};
      });
  if (!result.first && error) *error = std::move(result.second);
  return std::move(result.first);
}

std::string Client::set_faults(const FaultSettings& faults) {
  pb::Request request;
  pb::FaultsRequest& f = *request.mutable_faults();
  for (const std::string& id : faults.drop_to) f.add_drop_to(id);
  for (const std::string& id : faults.drop_from) f.add_drop_from(id);
  f.set_loss(faults.loss);
  f.set_delay_ms(faults.delay_ms);
  f.set_duplicate(faults.duplicate);
  f.set_jitter_ms(faults.jitter_ms);
  return impl_->call<std::string>(
      request, impl_->options_.admin_timeout, [](const pb::Response* response, const std::string& why) -> std::string {
        if (response == nullptr) return why;
        if (!response->has_faults()) return unexpected_body(*response, "faults result");
        return response->faults().error();
      });
}

bool Client::connected() const { return impl_->connected_.load(); }

bool Client::wait_connected(std::chrono::nanoseconds timeout) { return impl_->wait_connected(timeout); }

ClientCounters Client::counters() const { return impl_->counters(); }

const ClientOptions& Client::options() const { return impl_->options_; }

}  // namespace tollgate
