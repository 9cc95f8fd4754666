#include "udp_transport.h"

#include <boost/asio/ip/udp.hpp>
#include <stdexcept>

#include "bind_address.h"
#include "codec/codec.h"
#include "util/host_port.h"

namespace tollgate {
namespace {

constexpr size_t kReceiveBuffer = 65536;  // the largest UDP payload
constexpr size_t kMaxInFlight = 8192;     // datagrams handed to the kernel, not yet completed

std::string source_key(const boost::asio::ip::udp::endpoint& ep) {
  const std::string ip = ep.address().to_string();
  return (ep.address().is_v6() ? "[" + ip + "]" : ip) + ":" + std::to_string(ep.port());
}

}  // namespace

using boost::asio::ip::udp;

UdpTransport::UdpTransport(boost::asio::io_context& io, const std::string& bind, ClusterKeys keys, size_t max_datagram)
    : io_(io), socket_(io), keys_(std::move(keys)), max_datagram_(max_datagram), buffer_(new char[kReceiveBuffer]) {
  const auto [address, port] = parse_bind_address(bind);
  boost::system::error_code ec;
  const udp::endpoint ep(address, port);
  socket_.open(ep.protocol(), ec);
  if (!ec) {
    // A push-pull answer is a burst of up to max_repair_batches datagrams (~700 KB); with the
    // default 208 KB buffer, a receiver busy for a moment loses most of it, and the loss is only
    // seen as seqs_abandoned. Ask for 4 MiB; the kernel caps it at net.core.rmem_max.
    boost::system::error_code ignored;
    socket_.set_option(boost::asio::socket_base::receive_buffer_size(4 << 20), ignored);
    socket_.bind(ep, ec);
  }
  if (ec) throw std::runtime_error("cannot bind UDP " + bind + ": " + ec.message());
  receive();
}

UdpTransport::~UdpTransport() { *alive_ = false; }

uint16_t UdpTransport::port() const {
  boost::system::error_code ec;
  return socket_.local_endpoint(ec).port();
}

void UdpTransport::stop() {
  *alive_ = false;
  boost::system::error_code ec;
  socket_.close(ec);
}

bool UdpTransport::endpoint_for(const std::string& address, udp::endpoint* out) {
  if (auto it = endpoints_.find(address); it != endpoints_.end()) {
    *out = it->second;
    return true;
  }
  std::string host, why;
  uint16_t port = 0;
  if (!split_host_port(address, &host, &port, &why)) return false;
  boost::system::error_code ec;
  const auto ip = boost::asio::ip::make_address(host, ec);
  if (!ec) {
    *out = endpoints_[address] = udp::endpoint(ip, port);
    member_sources_.insert(source_key(*out));
    return true;
  }
  // A host name: resolve in the background (never on the node's path), drop until then.
  if (!resolving_[address]) {
    resolving_[address] = true;
    auto resolver = std::make_shared<udp::resolver>(io_);
    resolver->async_resolve(host, std::to_string(port),
                            [this, resolver, address, alive = alive_](const boost::system::error_code& rec,
                                                                      udp::resolver::results_type results) {
      if (!*alive) return;
      resolving_[address] = false;
      if (!rec && !results.empty()) {
        endpoints_[address] = results.begin()->endpoint();
        member_sources_.insert(source_key(results.begin()->endpoint()));
      }
    });
  }
  return false;
}

std::shared_ptr<const std::vector<std::string>> UdpTransport::encoded(const GossipMessagePtr& message) {
  if (message != last_message_) {
    last_message_ = message;
    EncodeStats encode_stats;
    last_encoded_ = std::make_shared<const std::vector<std::string>>(
        encode_datagrams(*message, keys_, max_datagram_, &encode_stats, wall_now_s()));
    stats_.encode_dropped +=
        encode_stats.dropped_batches + encode_stats.dropped_members + encode_stats.dropped_digest_origins;
  }
  return last_encoded_;
}

void UdpTransport::send(const std::string& address, const GossipMessagePtr& message) {
  udp::endpoint to;
  if (!endpoint_for(address, &to)) {
    ++stats_.unresolved;
    return;
  }
  const auto datagrams = encoded(message);
  for (const std::string& d : *datagrams) {
    if (in_flight_ >= kMaxInFlight) {
      ++stats_.send_dropped;
      continue;
    }
    ++in_flight_;
    socket_.async_send_to(boost::asio::buffer(d), to,
                          [this, datagrams, alive = alive_](const boost::system::error_code& ec, size_t bytes) {
      if (!*alive) return;
      --in_flight_;
      if (ec) {
        ++stats_.send_errors;
      } else {
        ++stats_.messages_sent;
        stats_.bytes_sent += bytes;
      }
    });
  }
}

void UdpTransport::receive() {
  socket_.async_receive_from(boost::asio::buffer(buffer_.get(), kReceiveBuffer), from_,
                             [this, alive = alive_](const boost::system::error_code& ec, size_t bytes) {
    if (!*alive || ec == boost::asio::error::operation_aborted) return;
    const std::string from = source_key(from_);
    const bool member = member_sources_.count(from) != 0;
    const std::string ip = member ? std::string() : from_.address().to_string();
    if (!ec && admit_source(member ? from : ip, member ? SourceKind::kMember : SourceKind::kOther, bytes, dropped_)) {
      stats_.bytes_received += bytes;
      DecodeResult r = decode(std::string_view(buffer_.get(), bytes), keys_);
      if (r.message && fresh(*r.message, from, dropped_)) {
        ++stats_.messages_received;
        r.message->digest_from = r.digest_range.from;
        r.message->digest_until = r.digest_range.until;
        r.message->received_from = received_from(from_, from, *r.message);
        if (receiver_) receiver_(std::move(*r.message));
      } else if (!r.message) {
        ++dropped_[decode_error_name(r.error)];
        report_offense(from, std::string("gossip datagram dropped: ") + decode_error_name(r.error));
      }
    }
    receive();
  });
}

std::string UdpTransport::received_from(const udp::endpoint& source, const std::string& key,
                                        const GossipMessage& m) const {
  // The address the sender gives for itself, as it wrote it, when the datagram came from there
  // (compared as endpoints: "10.0.0.2:7946" and a peers file's host name are the same place).
  std::string host, why;
  uint16_t port = 0;
  if (split_host_port(m.sender_address, &host, &port, &why)) {
    boost::system::error_code ec;
    const auto ip = boost::asio::ip::make_address(host, ec);
    if (!ec && udp::endpoint(ip, port) == source) return m.sender_address;
  }
  return key;  // somewhere else: "ip:port"
}

TransportStats UdpTransport::stats() const {
  TransportStats s = stats_;
  s.dropped.assign(dropped_.begin(), dropped_.end());
  return s;
}

}  // namespace tollgate
