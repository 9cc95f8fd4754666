#include "tcp_transport.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <deque>
#include <optional>
#include <stdexcept>

#include "bind_address.h"
#include "codec/codec.h"
#include "util/host_port.h"

namespace tollgate {

using boost::asio::ip::tcp;

// Our connection to one peer: a bounded queue of frames, written one at a time; on any error
// the connection is dropped and retried after a jittered, growing delay.
class TcpTransport::Outbound : public std::enable_shared_from_this<Outbound> {
 public:
  Outbound(TcpTransport& t, std::string address)
      : t_(t),
        alive_(t.alive_),
        address_(std::move(address)),
        socket_(t.io_),
        timer_(t.io_),
        resolver_(t.io_),
        backoff_ms_(t.options_.backoff_initial_ms) {}

  // False once the transport is stopped or gone: handlers check this before touching t_.
  bool live() const { return *alive_; }

  void enqueue(const std::shared_ptr<const std::vector<std::string>>& frames) {
    for (size_t i = 0; i < frames->size(); ++i) {
      const size_t size = (*frames)[i].size();
      if (queued_bytes_ + size > t_.options_.max_queue_bytes) {
        ++t_.stats_.send_dropped;
        continue;
      }
      queue_.push_back({frames, i, std::chrono::steady_clock::now()});
      queued_bytes_ += size;
    }
    if (state_ == State::kIdle) connect();
    if (state_ == State::kConnected && !writing_) write();
  }

  void stop() {
    boost::system::error_code ec;
    socket_.close(ec);
    timer_.cancel();
    resolver_.cancel();
  }

 private:
  enum class State { kIdle, kConnecting, kConnected, kWaiting };
  struct Frame {
    std::shared_ptr<const std::vector<std::string>> frames;
    size_t index;
    std::chrono::steady_clock::time_point queued_at;
    const std::string& bytes() const { return (*frames)[index]; }
  };

  void connect() {
    state_ = State::kConnecting;
    std::string host, why;
    uint16_t port = 0;
    if (!split_host_port(address_, &host, &port, &why)) {
      ++t_.stats_.unresolved;
      return retry_later();
    }
    resolver_.async_resolve(
        host, std::to_string(port),
        [self = shared_from_this()](const boost::system::error_code& ec, tcp::resolver::results_type r) {
      if (!self->live()) return;
      if (ec) {
        ++self->t_.stats_.unresolved;
        return self->retry_later();
      }
      boost::asio::async_connect(self->socket_, r, [self](const boost::system::error_code& cec, const tcp::endpoint&) {
        if (!self->live()) return;
        if (cec) return self->retry_later();
        boost::system::error_code ignored;
        self->socket_.set_option(tcp::no_delay(true), ignored);
        self->state_ = State::kConnected;
        self->backoff_ms_ = self->t_.options_.backoff_initial_ms;
        self->write();
      });
        });
  }

  void retry_later() {
    boost::system::error_code ec;
    socket_.close(ec);
    state_ = State::kWaiting;
    writing_ = false;
    // Jitter in [d/2, d] so peers that lost the same node do not reconnect in lockstep.
    const int64_t d = backoff_ms_;
    const int64_t delay = d / 2 + int64_t(t_.jitter_() % uint64_t(d / 2 + 1));
    backoff_ms_ = std::min(backoff_ms_ * 2, t_.options_.backoff_max_ms);
    timer_.expires_after(std::chrono::milliseconds(delay));
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& tec) {
      if (tec || !self->live()) return;
      self->connect();
    });
  }

  void write() {
    // Frames queued through an outage would arrive stale (the receiver drops them): drop them
    // here, counted, once older than half --max-message-age.
    const auto too_old = std::chrono::steady_clock::now() - t_.stale_after();
    while (!queue_.empty() && queue_.front().queued_at < too_old) {
      ++t_.stats_.send_dropped;
      queued_bytes_ -= queue_.front().bytes().size();
      queue_.pop_front();
    }
    if (queue_.empty()) {
      writing_ = false;
      return;
    }
    writing_ = true;
    const Frame& f = queue_.front();
    boost::asio::async_write(socket_, boost::asio::buffer(f.bytes()),
                             [self = shared_from_this()](const boost::system::error_code& ec, size_t bytes) {
      if (!self->live()) return;
      if (ec) {
        ++self->t_.stats_.send_errors;
        return self->retry_later();  // the frame stays queued and goes again
      }
      ++self->t_.stats_.messages_sent;
      self->t_.stats_.bytes_sent += bytes;
      self->queued_bytes_ -= self->queue_.front().bytes().size();
      self->queue_.pop_front();
      self->write();
    });
  }

  TcpTransport& t_;
  std::shared_ptr<bool> alive_;
  std::string address_;
  tcp::socket socket_;
  boost::asio::steady_timer timer_;
  tcp::resolver resolver_;
  State state_ = State::kIdle;
  bool writing_ = false;
  std::deque<Frame> queue_;
  size_t queued_bytes_ = 0;
  int64_t backoff_ms_;
};

// A peer's connection to us: frames in, decoded and delivered. A stranger until its first
// authentic frame (TcpTransportOptions); an oversize length prefix, a read error, a stranger's
// unauthentic frame or bytes over the budget close it.
class TcpTransport::Inbound : public std::enable_shared_from_this<Inbound> {
 public:
  using Clock = std::chrono::steady_clock;

  Inbound(TcpTransport& t, tcp::socket socket, std::string ip, std::string peer)
      : t_(t),
        alive_(t.alive_),
        socket_(std::move(socket)),
        reader_(gossip_frame_reader(t.options_.send_frame_bytes)),
        ip_(std::move(ip)),
        peer_(std::move(peer)),
        accepted_at_(Clock::now()),
        last_read_(accepted_at_) {}

  void read() {
    socket_.async_read_some(boost::asio::buffer(buffer_),
                            [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
      if (!*self->alive_ || self->closed_) return;
      if (ec) return self->close();
      self->on_bytes(n);
    });
  }

  void on_bytes(size_t n) {
    t_.stats_.bytes_received += n;
    last_read_ = Clock::now();
    // Charged as the bytes arrive, not per whole frame: a stalled half frame has paid for itself.
    // A proven connection's budget is its sender's (authenticated, and at most two connections
    // per sender), so replays on new ports cannot fill the members' table.
    if (!t_.admit_source(proven_ ? "sender " + sender_ : ip_, proven_ ? SourceKind::kMember : SourceKind::kOther, n,
                         t_.dropped_)) {
      return close();
    }
    reader_.append(std::string_view(buffer_, n));
    std::string_view frame;
    bool completed = false;
    for (;;) {
      const FrameReader::Status s = reader_.next(&frame);
      if (s == FrameReader::Status::kNeedMore) break;
      if (s == FrameReader::Status::kTooLarge) {
        ++t_.dropped_["frame_too_large"];
        t_.report_offense(peer_, "gossip frame over the size limit; connection closed");
        return close();
      }
      completed = true;
      NodeId sender;
      const Delivery d = t_.deliver(frame, peer_, &sender);
      if (d == Delivery::kDelivered) {
        if (!proven_) t_.proven(this, std::move(sender));
      } else if (d == Delivery::kNotAuthentic && !proven_) {
        t_.report_offense(peer_, "first gossip frame not authentic; connection closed");
        return close();
      }
      // A stale frame (counted) proves nothing, and closes nothing: a member's queue may hold
      // old frames after an outage; auth_timeout still bounds a stranger that sends only those.
      if (closed_ || !*alive_) return;  // closed, or the receiver stopped the transport
    }
    // The frame timeout counts from the first byte of the frame now incomplete: the start of this
    // read if a frame completed in it, else when the pending frame began.
    if (reader_.buffered() == 0) {
      partial_since_.reset();
    } else if (completed || !partial_since_) {
      partial_since_ = last_read_;
    }
    read();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    close_socket();
    t_.forget(this);  // the running handler holds `self`, so this is not destroyed yet
  }
  void close_socket() {
    boost::system::error_code ec;
    socket_.close(ec);
  }
  void prove(NodeId sender) {
    proven_ = true;
    proven_at_ = Clock::now();
    sender_ = std::move(sender);
    reader_.set_max_frame_bytes(static_cast<uint32_t>(t_.options_.max_frame_bytes));
  }

  bool proven() const { return proven_; }
  const NodeId& sender() const { return sender_; }
  Clock::time_point proven_at() const { return proven_at_; }
  const std::string& ip() const { return ip_; }
  const std::string& peer() const { return peer_; }
  Clock::time_point accepted_at() const { return accepted_at_; }
  Clock::time_point last_read() const { return last_read_; }
  std::optional<Clock::time_point> partial_since() const { return partial_since_; }

 private:
  TcpTransport& t_;
  std::shared_ptr<bool> alive_;  // false once the transport is stopped or gone
  tcp::socket socket_;
  FrameReader reader_;
  std::string ip_;    // the budget and the caps of a stranger are its IP's
  std::string peer_;  // address:port, for offense reports and a proven connection's own budget
  bool proven_ = false;
  bool closed_ = false;
  NodeId sender_;  // of the first authentic frame
  Clock::time_point proven_at_{};
  Clock::time_point accepted_at_;
  Clock::time_point last_read_;
  std::optional<Clock::time_point> partial_since_;  // a frame has begun and not completed
  char buffer_[16384];
};

TcpTransport::TcpTransport(boost::asio::io_context& io, const std::string& bind, ClusterKeys keys,
                           TcpTransportOptions options)
    : io_(io),
      acceptor_(io),
      keys_(std::move(keys)),
      options_(options),
      sweep_timer_(io),
      jitter_(std::random_device{}()) {
  const auto [ip, port] = parse_bind_address(bind);
  const tcp::endpoint ep(ip, port);
  boost::system::error_code ec;
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(boost::asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot listen on TCP " + bind + ": " + ec.message());
  accept();
  schedule_sweep();
}

TcpTransport::~TcpTransport() { stop(); }

uint16_t TcpTransport::port() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec).port();
}

void TcpTransport::stop() {
  if (stopped_) return;
  stopped_ = true;
  *alive_ = false;
  sweep_timer_.cancel();
  boost::system::error_code ec;
  acceptor_.close(ec);
  for (auto& [address, out] : outbound_) out->stop();
  auto inbound = std::move(inbound_);
  inbound_.clear();
  for (auto& entry : inbound) entry.second->close_socket();
}

void TcpTransport::accept() {
  acceptor_.async_accept([this, alive = alive_](const boost::system::error_code& ec, tcp::socket socket) {
    if (!*alive || ec == boost::asio::error::operation_aborted) return;
    if (!ec) {
      boost::system::error_code rec;
      const tcp::endpoint remote = socket.remote_endpoint(rec);
      std::string ip = rec ? std::string("unknown") : remote.address().to_string();
      std::string peer = rec ? std::string("unknown peer") : ip + ":" + std::to_string(remote.port());
      if (!make_room(ip)) {
        ++dropped_["inbound_connection_limit"];
        report_offense(peer, "gossip connection refused: the inbound connection limit is reached");
        boost::system::error_code ignored;
        socket.close(ignored);
      } else {
        auto in = std::make_shared<Inbound>(*this, std::move(socket), std::move(ip), std::move(peer));
        inbound_.emplace(in.get(), in);
        ++unproven_;
        ++unproven_by_ip_[in->ip()];
        in->read();
      }
    }
    accept();
  });
}

TcpTransport::Inbound* TcpTransport::oldest_unproven(const std::string* ip) const {
  Inbound* oldest = nullptr;
  for (const auto& [raw, in] : inbound_) {
    if (raw->proven() || (ip && raw->ip() != *ip)) continue;
    if (!oldest || raw->accepted_at() < oldest->accepted_at()) oldest = raw;
  }
  return oldest;
}

bool TcpTransport::make_room(const std::string& ip) {
  auto evict = [this](Inbound* victim) {
    if (!victim) return false;
    ++dropped_["inbound_unproven_evicted"];
    report_offense(victim->peer(), "unauthenticated gossip connection closed to make room for another");
    const std::shared_ptr<Inbound> keep = inbound_.at(victim);  // close() drops the table's reference
    keep->close();
    return true;
  };
  auto by_ip = unproven_by_ip_.find(ip);
  if (by_ip != unproven_by_ip_.end() && by_ip->second >= options_.max_unproven_per_ip) {
    if (!evict(oldest_unproven(&ip))) return false;
  }
  if (unproven_ >= options_.max_unproven_connections || inbound_.size() >= options_.max_inbound_connections) {
    if (!evict(oldest_unproven(nullptr))) return false;
  }
  return inbound_.size() < options_.max_inbound_connections;
}

void TcpTransport::proven(Inbound* in, NodeId sender) {
  // A member needs one connection to us (two while it reconnects). More in the name of one
  // sender are replays of a captured fresh frame, holding slots a member needs: the oldest goes.
  std::vector<Inbound*> same;
  for (const auto& [raw, conn] : inbound_) {
    if (raw != in && raw->proven() && raw->sender() == sender) same.push_back(raw);
  }
  if (same.size() >= kMaxConnectionsPerSender) {
    Inbound* oldest = *std::min_element(
        same.begin(), same.end(), [](const Inbound* a, const Inbound* b) { return a->proven_at() < b->proven_at(); });
    ++dropped_["inbound_sender_replaced"];
    const std::shared_ptr<Inbound> keep = inbound_.at(oldest);
    keep->close();
  }
  in->prove(std::move(sender));
  --unproven_;
  if (auto it = unproven_by_ip_.find(in->ip()); it != unproven_by_ip_.end() && --it->second == 0)
    unproven_by_ip_.erase(it);
}

void TcpTransport::forget(Inbound* in) {
  auto it = inbound_.find(in);
  if (it == inbound_.end()) return;
  if (!in->proven()) {
    --unproven_;
    if (auto ip = unproven_by_ip_.find(in->ip()); ip != unproven_by_ip_.end() && --ip->second == 0)
      unproven_by_ip_.erase(ip);
  }
  inbound_.erase(it);
}

void TcpTransport::schedule_sweep() {
  const auto shortest = std::min({options_.auth_timeout, options_.frame_timeout, options_.idle_timeout});
  sweep_timer_.expires_after(std::clamp<std::chrono::milliseconds>(shortest / 4, std::chrono::milliseconds(10),
                                                                   std::chrono::milliseconds(1000)));
  sweep_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (ec || !*alive) return;
    sweep();
    schedule_sweep();
  });
}

void TcpTransport::sweep() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Inbound>> expired;
  for (const auto& [raw, in] : inbound_) {
    const char* reason = nullptr;
    if (!in->proven() && now - in->accepted_at() >= options_.auth_timeout) {
      reason = "inbound_unproven_timeout";
    } else if (const auto since = in->partial_since(); since && now - *since >= options_.frame_timeout) {
      reason = "inbound_frame_timeout";
    } else if (now - in->last_read() >= options_.idle_timeout) {
      reason = "inbound_idle";
    }
    if (!reason) continue;
    ++dropped_[reason];
    expired.push_back(in);
  }
  for (auto& in : expired) in->close();
}

TcpTransport::Delivery TcpTransport::deliver(std::string_view frame, const std::string& from, NodeId* sender) {
  DecodeResult r = decode(frame, keys_);
  if (!r.message) {
    ++dropped_[decode_error_name(r.error)];
    report_offense(from, std::string("gossip frame dropped: ") + decode_error_name(r.error));
    return Delivery::kNotAuthentic;
  }
  if (!fresh(*r.message, from, dropped_)) return Delivery::kStale;
  ++stats_.messages_received;
  *sender = r.message->sender;
  r.message->digest_from = r.digest_range.from;
  r.message->digest_until = r.digest_range.until;
  if (receiver_) receiver_(std::move(*r.message));
  return Delivery::kDelivered;
}

std::shared_ptr<const std::vector<std::string>> TcpTransport::encoded(const GossipMessagePtr& message) {
  if (message != last_message_) {
    last_message_ = message;
    EncodeStats encode_stats;
    last_encoded_ = std::make_shared<const std::vector<std::string>>(
        encode_frames(*message, keys_, options_.send_frame_bytes, &encode_stats, wall_now_s()));
    stats_.encode_dropped +=
        encode_stats.dropped_batches + encode_stats.dropped_members + encode_stats.dropped_digest_origins;
  }
  return last_encoded_;
}

void TcpTransport::send(const std::string& address, const GossipMessagePtr& message) {
  if (stopped_) return;
  auto& out = outbound_[address];
  if (!out) out = std::make_shared<Outbound>(*this, address);
  out->enqueue(encoded(message));
}

TransportStats TcpTransport::stats() const {
  TransportStats s = stats_;
  s.dropped.assign(dropped_.begin(), dropped_.end());
  return s;
}

}  // namespace tollgate
