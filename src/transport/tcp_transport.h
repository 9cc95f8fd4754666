// Gossip over TCP: length-prefixed frames (the codec's) over persistent connections, one
// outbound connection per peer address, reconnecting with capped exponential backoff and
// jitter. Each side sends on its own outbound connection and reads its inbound ones, so there is
// no connection-sharing protocol to get wrong. Queues are bounded: a peer that cannot keep up
// loses messages (counted), which push-pull repairs; it never grows memory or blocks a check.
#ifndef TOLLGATE_SRC_TRANSPORT_TCP_TRANSPORT_H_
#define TOLLGATE_SRC_TRANSPORT_TCP_TRANSPORT_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>

#include "codec/cluster_key.h"
#include "transport.h"

namespace tollgate {

// Inbound connections are strangers until one delivers an authentic frame (a valid MAC under
// the cluster key): until then it may send only frames of send_frame_bytes, must prove itself
// within auth_timeout, shares its IP's byte budget, and counts against the caps on strangers
// (per IP and in all), at which the oldest stranger makes room. So whoever lacks the key holds
// at most max_unproven_connections x (send_frame_bytes + a read buffer) of memory, for at most
// auth_timeout each, and cannot keep a member from connecting. A connection that opens with an
// authentic, fresh frame is a member's, at most two per sender (the oldest goes), so replaying
// a captured frame on many connections cannot fill the inbound limit either. Every connection's frame must
// complete within frame_timeout of its first byte, and one silent for idle_timeout is closed
// (the peer reconnects when it has something to send).
struct TcpTransportOptions {
  // Largest frame read from a proven connection, and from a stranger (the largest we send, so
  // a member's first frame always fits). A proven connection can still be made by replaying a
  // fresh captured frame, so both stay small: 1,024 connections hold at most ~80 MiB.
  size_t max_frame_bytes = size_t{64} << 10;
  size_t send_frame_bytes = size_t{64} << 10;
  size_t max_queue_bytes = size_t{4} << 20;  // per peer, not yet written
  int64_t backoff_initial_ms = 100;          // first reconnect delay
  int64_t backoff_max_ms = 5000;             // cap; each delay is jittered to [d/2, d]
  size_t max_inbound_connections = 1024;     // beyond: the oldest stranger goes, or the newcomer
  size_t max_unproven_connections = 256;
  size_t max_unproven_per_ip = 32;
  std::chrono::milliseconds auth_timeout{5'000};
  std::chrono::milliseconds frame_timeout{10'000};
  std::chrono::milliseconds idle_timeout{300'000};
};

class TcpTransport final : public Transport {
 public:
  // Listens on `bind` ("host:port", port 0 picks one). Throws std::runtime_error naming the
  // address on failure.
  TcpTransport(boost::asio::io_context& io, const std::string& bind, ClusterKeys keys, TcpTransportOptions options);
  ~TcpTransport() override;

  uint16_t port() const;

  void send(const std::string& address, const GossipMessagePtr& message) override;
  void set_receiver(Receiver receiver) override { receiver_ = std::move(receiver); }
  void set_cluster_keys(ClusterKeys keys) override {
    keys_ = std::move(keys);
    last_message_.reset();  // encoded under the old key
  }
  void stop() override;
  TransportStats stats() const override;

 private:
  class Outbound;
  class Inbound;
  friend class Outbound;
  friend class Inbound;

  void accept();
  // Makes room for a stranger from `ip` (closing the oldest stranger at a cap); false if none
  // can be made.
  bool make_room(const std::string& ip);
  Inbound* oldest_unproven(const std::string* ip) const;
  void sweep();
  void schedule_sweep();
  void forget(Inbound* in);  // closed: drop it from the tables
  // `in` delivered an authentic, fresh frame from `sender`; at most kMaxConnectionsPerSender
  // proven connections per sender (the oldest goes).
  void proven(Inbound* in, NodeId sender);
  static constexpr size_t kMaxConnectionsPerSender = 2;
  enum class Delivery : uint8_t { kDelivered, kNotAuthentic, kStale };
  // Decodes and delivers one frame (its sender in *sender), unless it is not authentic or stale.
  Delivery deliver(std::string_view frame, const std::string& from, NodeId* sender);
  std::shared_ptr<const std::vector<std::string>> encoded(const GossipMessagePtr& message);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  ClusterKeys keys_;
  TcpTransportOptions options_;
  Receiver receiver_;
  std::unordered_map<std::string, std::shared_ptr<Outbound>> outbound_;  // by peer address
  std::unordered_map<Inbound*, std::shared_ptr<Inbound>> inbound_;
  std::unordered_map<std::string, size_t> unproven_by_ip_;
  size_t unproven_ = 0;
  boost::asio::steady_timer sweep_timer_;
  GossipMessagePtr last_message_;
  std::shared_ptr<const std::vector<std::string>> last_encoded_;
  std::minstd_rand jitter_;
  TransportStats stats_;
  std::map<std::string, uint64_t> dropped_;
  bool stopped_ = false;
  // Shared with every handler (connections, accept, timers): false once stopped, so a handler
  // that runs after the transport is gone (its io_context still running) touches nothing.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_TRANSPORT_TCP_TRANSPORT_H_
