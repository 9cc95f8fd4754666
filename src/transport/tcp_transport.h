// Gossip over TCP: length-prefixed frames (the codec's) over persistent connections, one
// outbound connection per peer address, reconnecting with capped exponential backoff and
// jitter. Each side sends on its own outbound connection and reads its inbound ones, so there is
// no connection-sharing protocol to get wrong. Queues are bounded: a peer that cannot keep up
// loses messages (counted), which push-pull repairs; it never grows memory or blocks a check.
#ifndef TOLLGATE_SRC_TRANSPORT_TCP_TRANSPORT_H_
#define TOLLGATE_SRC_TRANSPORT_TCP_TRANSPORT_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>

#include "codec/cluster_key.h"
#include "transport.h"

namespace tollgate {

struct TcpTransportOptions {
  size_t max_frame_bytes = size_t{1} << 20;       // envelope bytes per frame, both directions
  size_t max_queue_bytes = size_t{4} << 20;       // per peer, not yet written
  int64_t backoff_initial_ms = 100;               // first reconnect delay
  int64_t backoff_max_ms = 5000;                  // cap; each delay is jittered to [d/2, d]
  size_t max_inbound_connections = 1024;          // more are accepted and closed at once
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
  void deliver(std::string_view frame, const std::string& from);
  std::shared_ptr<const std::vector<std::string>> encoded(const GossipMessagePtr& message);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  ClusterKeys keys_;
  TcpTransportOptions options_;
  Receiver receiver_;
  std::unordered_map<std::string, std::shared_ptr<Outbound>> outbound_;  // by peer address
  std::unordered_map<Inbound*, std::shared_ptr<Inbound>> inbound_;
  GossipMessagePtr last_message_;
  std::shared_ptr<const std::vector<std::string>> last_encoded_;
  std::minstd_rand jitter_;
  TransportStats stats_;
  std::map<std::string, uint64_t> dropped_;
  uint64_t inbound_rejected_ = 0;
  bool stopped_ = false;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_TRANSPORT_TCP_TRANSPORT_H_
