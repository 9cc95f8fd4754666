#include "client/io_connection.h"

#include <algorithm>
#include <array>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <unordered_map>

#include "api/framing.h"
#include "api/socket_address.h"
#include "util/frame_reader.h"

namespace tollgate::client {

namespace asio = boost::asio;
using GenericStream = asio::generic::stream_protocol;
using SteadyClock = std::chrono::steady_clock;

namespace {
constexpr size_t kReadChunkBytes = 16 * 1024;
// A connection the daemon closes while idle is replaced at once if it lived at least this long.
constexpr auto kQuickReconnectAfter = std::chrono::seconds(1);
}  // namespace

class IoConnection::Impl {
 public:
  Impl(IoConnection& owner, const ClientOptions& options, api::Endpoint endpoint, SharedCounters& counters)
      : owner_(owner),
        options_(options),
        counters_(counters),
        work_(asio::make_work_guard(io_)),
        endpoint_(std::move(endpoint)),
        socket_(io_),
        reconnect_timer_(io_),
        connect_timer_(io_),
        deadline_timer_(io_),
        decoder_(api::kMaxResponseFrameBytes),
        rng_(std::random_device{}()) {
    backoff_ = first_backoff();
    asio::post(io_, [this] { start_connect(); });
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    asio::post(io_, [this] { shut_down(); });
    work_.reset();
    thread_.join();
  }

  void submit(uint64_t id, TimePoint deadline, std::string frame, Completion done) {
    asio::post(io_, [this, id, deadline, frame = std::move(frame), done = std::move(done)]() mutable {
      enqueue(id, deadline, std::move(frame), std::move(done));
    });
  }
  void fail(Completion done, std::string error) {
    asio::post(io_, [done = std::move(done), error = std::move(error)] { done(nullptr, error); });
  }
  bool on_io_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  enum class State : uint8_t {
    kWaiting,     // not connected; a reconnect is scheduled. Calls fail at once.
    kConnecting,  // a connect is in flight. Calls queue and are sent once it succeeds.
    kConnected,
    kStopped,  // the Client is being destroyed
  };

  void enqueue(uint64_t id, TimePoint deadline, std::string frame, Completion done) {
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
    outstanding_.emplace(id, std::move(done));
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
      if (response != nullptr) counters_.late_replies.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    Completion done = std::move(it->second);
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
    connected_at_ = SteadyClock::now();
    backoff_ = first_backoff();
    if (endpoint_.kind == api::Endpoint::Kind::kTcp) {
      boost::system::error_code ignored;
      socket_.set_option(asio::ip::tcp::no_delay(true), ignored);  // requests are tiny and latency-bound
    }
    counters_.connects.fetch_add(1, std::memory_order_relaxed);
    set_connected(true);
    read();
    flush();
  }

  void set_connected(bool value) {
    {
      std::lock_guard lock(owner_.connected_mutex_);
      owner_.connected_.store(value);
    }
    if (value) owner_.connected_cv_.notify_all();
  }

  // Drops the connection (or the attempt): every outstanding call fails with `error`, and a
  // reconnect is scheduled after a jittered, growing backoff.
  void connection_failed(const std::string& error) {
    const bool was_connected = state_ == State::kConnected;
    (was_connected ? counters_.disconnects : counters_.connect_failures).fetch_add(1, std::memory_order_relaxed);
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
    for (auto& [id, done] : outstanding) done(nullptr, error);
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
    if (ec == asio::error::eof && outstanding_.empty() && unsent_.empty() &&
        SteadyClock::now() - connected_at_ >= kQuickReconnectAfter) {
      // The daemon closed a connection with nothing in flight (its idle timeout, or it made room
      // for a newcomer): connect again at once, calls queueing meanwhile, rather than failing
      // calls through a backoff. Only for a connection that lived a while, so a daemon that
      // closes every connection at once still meets the backoff.
      counters_.disconnects.fetch_add(1, std::memory_order_relaxed);
      drop_connection();
      start_connect();
      return;
    }
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
        connection_failed(oversized_frame_error(decoder_.rejected_length()));
        return;
      }
      pb::Response response;
      const ResponseCheck check = validate_response(payload, &response);
      if (check.kind == ResponseCheck::Kind::kConnectionError) {
        connection_failed(check.error);
        return;
      }
      if (check.kind == ResponseCheck::Kind::kCallError) {
        complete(response.id(), nullptr, check.error);
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

  IoConnection& owner_;
  const ClientOptions& options_;
  SharedCounters& counters_;
  // Construction order matters: io_ must outlive every I/O object below it.
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  api::Endpoint endpoint_;
  std::thread thread_;

  // Everything below is touched only on the io thread.
  State state_ = State::kConnecting;
  uint64_t generation_ = 0;
  GenericStream::socket socket_;
  asio::steady_timer reconnect_timer_;
  asio::steady_timer connect_timer_;
  asio::steady_timer deadline_timer_;
  std::unordered_map<uint64_t, Completion> outstanding_;
  std::multimap<TimePoint, uint64_t> deadlines_;
  std::deque<std::pair<uint64_t, std::string>> unsent_;  // queued while connecting or writing
  std::string writing_;
  bool write_in_flight_ = false;
  bool reading_ = false;
  FrameReader decoder_;
  std::array<char, kReadChunkBytes> read_buffer_{};
  std::chrono::nanoseconds backoff_{0};
  TimePoint connected_at_{};
  std::string last_error_;
  std::minstd_rand rng_;
};

IoConnection::IoConnection(const ClientOptions& options, api::Endpoint endpoint, SharedCounters& counters)
    : impl_(std::make_unique<Impl>(*this, options, std::move(endpoint), counters)) {}

IoConnection::~IoConnection() = default;

void IoConnection::submit(uint64_t id, TimePoint deadline, std::string frame, Completion done) {
  impl_->submit(id, deadline, std::move(frame), std::move(done));
}

void IoConnection::fail(Completion done, std::string error) { impl_->fail(std::move(done), std::move(error)); }

bool IoConnection::wait_connected(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(connected_mutex_);
  return connected_cv_.wait_until(lock, deadline_after(timeout), [this] { return connected_.load(); });
}

bool IoConnection::on_io_thread() const { return impl_->on_io_thread(); }

}  // namespace tollgate::client
