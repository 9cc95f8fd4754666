// Gossip over UDP: each message is packed into datagrams of at most max_datagram bytes (split
// across several when needed, each decodable alone), signed when a cluster key is set.
#ifndef TOLLGATE_SRC_TRANSPORT_UDP_TRANSPORT_H_
#define TOLLGATE_SRC_TRANSPORT_UDP_TRANSPORT_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "codec/cluster_key.h"
#include "transport.h"

namespace tollgate {

class UdpTransport final : public Transport {
 public:
  // Binds `bind` ("host:port"; port 0 picks a free one). Throws std::runtime_error naming the
  // address on failure.
  UdpTransport(boost::asio::io_context& io, const std::string& bind, ClusterKeys keys, size_t max_datagram);
  ~UdpTransport() override;

  // The bound port (useful with port 0).
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
  void receive();
  std::shared_ptr<const std::vector<std::string>> encoded(const GossipMessagePtr& message);
  bool endpoint_for(const std::string& address, boost::asio::ip::udp::endpoint* out);

  boost::asio::io_context& io_;
  boost::asio::ip::udp::socket socket_;
  ClusterKeys keys_;
  size_t max_datagram_;
  Receiver receiver_;
  std::unique_ptr<char[]> buffer_;
  boost::asio::ip::udp::endpoint from_;
  std::unordered_map<std::string, boost::asio::ip::udp::endpoint> endpoints_;  // resolved addresses
  std::unordered_map<std::string, bool> resolving_;
  // "ip:port" of every address gossiped to: a datagram from one of these is a member's, with a
  // budget of its own (SourceLimiter); any other source's budget is its IP's.
  std::unordered_set<std::string> member_sources_;
  // What GossipMessage::received_from says for a datagram from `source` carrying `m`: its
  // sender_address when it came from there, else the source's "ip:port".
  std::string received_from(const boost::asio::ip::udp::endpoint& source, const std::string& key,
                            const GossipMessage& m) const;
  // The node sends one message to several peers in a row: encode it once.
  GossipMessagePtr last_message_;  // held, so its address cannot be reused while cached
  std::shared_ptr<const std::vector<std::string>> last_encoded_;
  size_t in_flight_ = 0;
  TransportStats stats_;
  std::map<std::string, uint64_t> dropped_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_TRANSPORT_UDP_TRANSPORT_H_
