// TcpTransport over real loopback sockets: messages between two transports, queues and
// reconnects, and what a stranger without the cluster key can and cannot do to the listener
// (issue #15, finding 3: stalled half frames used to hold 1 MiB each, for ever).
#include "tcp_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "support/net_test_util.h"
#include "udp_transport.h"
#include "util/big_endian.h"

namespace tollgate {
namespace {

using testing::wait_until;

using namespace std::chrono_literals;

ClusterKeys cluster_key() { return ClusterKeys({std::string(32, 'K')}); }

uint64_t count(const TransportStats& s, const std::string& reason) {
  for (const auto& [name, n] : s.dropped) {
    if (name == reason) return n;
  }
  return 0;
}

GossipMessagePtr message(const std::string& sender, uint64_t incarnation = 1) {
  auto m = std::make_shared<GossipMessage>();
  m->sender = sender;
  m->sender_incarnation = incarnation;
  m->sender_address = sender;
  return m;
}

// An io_context on its own thread; transports live and are used on it.
class Io {
 public:
  Io() : work_(boost::asio::make_work_guard(io_)) {
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Io() {
    on_io([this] {
      for (auto& t : transports_) t->stop();
      transports_.clear();
    });
    work_.reset();
    thread_.join();
  }
  template <typename F>
  auto on_io(F f) -> decltype(f()) {
    return testing::run_on(io_, std::move(f));
  }

  // A transport on 127.0.0.1 (port 0: the kernel picks) that counts what it receives.
  TcpTransport* listen(TcpTransportOptions options, uint16_t port = 0, ClusterKeys keys = cluster_key()) {
    return on_io([&] {
      transports_.push_back(std::make_unique<TcpTransport>(io_, "127.0.0.1:" + std::to_string(port), keys, options));
      TcpTransport* t = transports_.back().get();
      t->set_receiver([this](GossipMessage&& m) {
        std::lock_guard lock(mu_);
        received_.push_back(m.sender);
      });
      return t;
    });
  }
  TransportStats stats(TcpTransport* t) {
    return on_io([t] { return t->stats(); });
  }
  std::vector<std::string> received() {
    std::lock_guard lock(mu_);
    return received_;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::vector<std::unique_ptr<TcpTransport>> transports_;
  std::mutex mu_;
  std::vector<std::string> received_;
  std::thread thread_;
};

// A raw TCP connection from `source_ip` to 127.0.0.1:port: a stranger without the key.
class Stranger {
 public:
  Stranger(uint16_t port, const char* source_ip = "127.0.0.1") {
    fd_ = testing::tcp_connect_from(source_ip, port);
    connected_ = fd_ >= 0;
    timeval tv{};
    tv.tv_sec = 20;  // a listener that wrongly keeps the connection fails the test, never hangs it
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Stranger() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size());
  }
  // A frame header announcing `length` bytes, followed by `sent` of them.
  bool send_partial_frame(uint32_t length, size_t sent) {
    std::string bytes(4 + sent, 'x');
    store_be32(length, bytes.data());
    return send(bytes);
  }
  // True once the listener has closed the connection (EOF or reset).
  bool closed_by_listener() {
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

TEST(TcpTransport, MessagesQueuedForAPeerThatIsNotUpYetArriveOnceItListens) {
  Io io;
  TcpTransportOptions options;
  options.backoff_initial_ms = 10;
  options.backoff_max_ms = 50;
  // A port that nothing listens on yet (taken from a transport that is then stopped).
  TcpTransport* placeholder = io.listen(options);
  const uint16_t port = io.on_io([&] { return placeholder->port(); });
  io.on_io([&] { placeholder->stop(); });
  TcpTransport* sender = io.listen(options);
  for (int i = 0; i < 3; ++i)
    io.on_io([&] { sender->send("127.0.0.1:" + std::to_string(port), message("s" + std::to_string(i))); });
  TcpTransport* receiver = io.listen(options, port);
  ASSERT_NE(receiver, nullptr);
  ASSERT_TRUE(wait_until([&] { return io.received().size() == 3; })) << io.received().size();
  EXPECT_EQ(io.received(), (std::vector<std::string>{"s0", "s1", "s2"}));
  EXPECT_EQ(io.stats(sender).send_dropped, 0u);
}

TEST(TcpTransport, AQueueOverItsCapDropsAndCounts) {
  Io io;
  TcpTransportOptions options;
  options.max_queue_bytes = 1000;  // a message with one member row is ~100 bytes framed
  TcpTransport* placeholder = io.listen(options);
  const uint16_t port = io.on_io([&] { return placeholder->port(); });
  io.on_io([&] { placeholder->stop(); });  // nothing listens: everything stays queued
  TcpTransport* sender = io.listen(options);
  io.on_io([&] {
    for (int i = 0; i < 100; ++i) sender->send("127.0.0.1:" + std::to_string(port), message("s" + std::to_string(i)));
    return 0;
  });
  const TransportStats s = io.stats(sender);
  EXPECT_GT(s.send_dropped, 80u);
  EXPECT_LT(s.send_dropped, 100u);
}

TEST(TcpTransport, StrangersThatNeverAuthenticateAreClosedAfterTheAuthTimeout) {
  Io io;
  TcpTransportOptions options;
  options.auth_timeout = 200ms;
  TcpTransport* t = io.listen(options);
  const uint16_t port = io.on_io([&] { return t->port(); });
  std::vector<std::unique_ptr<Stranger>> strangers;
  for (int i = 0; i < 10; ++i) {
    strangers.push_back(std::make_unique<Stranger>(port));
    ASSERT_TRUE(strangers.back()->connected());
    ASSERT_TRUE(strangers.back()->send_partial_frame(60'000, 1000));  // half a frame, then nothing
  }
  for (auto& s : strangers) EXPECT_TRUE(s->closed_by_listener());
  EXPECT_EQ(count(io.stats(t), "inbound_unproven_timeout"), 10u);
}

TEST(TcpTransport, AStrangerMaySendOnlySmallFramesAndMustAuthenticateTheFirst) {
  Io io;
  TcpTransport* t = io.listen({});
  const uint16_t port = io.on_io([&] { return t->port(); });
  Stranger big(port);
  ASSERT_TRUE(big.send_partial_frame(1 << 20, 0));  // 1 MiB: over the 64 KiB limit
  EXPECT_TRUE(big.closed_by_listener());
  Stranger forger(port);
  std::string junk(4 + 200, 'j');
  store_be32(200, junk.data());
  ASSERT_TRUE(forger.send(junk));
  EXPECT_TRUE(forger.closed_by_listener());
  const TransportStats s = io.stats(t);
  EXPECT_EQ(count(s, "frame_too_large"), 1u);
  EXPECT_EQ(s.messages_received, 0u);
}

// 400 strangers each holding a stalled half frame: at most max_unproven_per_ip of them stay
// open (the oldest make room for the newest), and a member connecting meanwhile is heard.
TEST(TcpTransport, StrangersAreCappedPerIpAndAMemberStillGetsIn) {
  Io io;
  TcpTransportOptions options;
  options.max_unproven_per_ip = 16;
  TcpTransport* t = io.listen(options);
  const uint16_t port = io.on_io([&] { return t->port(); });
  std::vector<std::unique_ptr<Stranger>> strangers;
  for (int i = 0; i < 400; ++i) {
    strangers.push_back(std::make_unique<Stranger>(port, "127.0.0.2"));
    ASSERT_TRUE(strangers.back()->connected());
    // 1 KB each: 400 KB in all, within the IP's byte budget (which would close them too).
    ASSERT_TRUE(strangers.back()->send_partial_frame(60'000, 1000));
  }
  // Accepted in connect order: the first 384 are closed to make room, the last 16 stay.
  for (int i = 0; i < 384; ++i) ASSERT_TRUE(strangers[i]->closed_by_listener()) << i;
  EXPECT_EQ(count(io.stats(t), "inbound_unproven_evicted"), 384u);
  TcpTransport* member = io.listen({});
  io.on_io([&] { member->send("127.0.0.1:" + std::to_string(port), message("member")); });
  ASSERT_TRUE(wait_until([&] { return io.received().size() == 1; }));
  EXPECT_EQ(io.received()[0], "member");
}

// A stranger's bytes are charged to its IP's budget as they arrive, whole frame or not.
TEST(TcpTransport, AStrangersBytesAreChargedAsTheyArrive) {
  Io io;
  TcpTransport* t = io.listen({});
  io.on_io([&] {
    SourceLimiterOptions tight;
    tight.bytes_per_second = 1000;
    tight.burst_bytes = 10'000;
    t->set_source_limits(tight);
    return 0;
  });
  const uint16_t port = io.on_io([&] { return t->port(); });
  Stranger s(port);
  ASSERT_TRUE(s.send_partial_frame(60'000, 30'000));  // never a whole frame
  EXPECT_TRUE(s.closed_by_listener());
  EXPECT_GE(count(io.stats(t), "rate_limited"), 1u);
}

// An authentic frame stamped 100 s ago (a capture, replayed) proves nothing: the stranger is
// closed, the message counted as stale and never delivered; the same message stamped now is.
TEST(TcpTransport, AStaleAuthenticFrameIsDroppedAndProvesNothing) {
  Io io;
  TcpTransport* t = io.listen({});
  const uint16_t port = io.on_io([&] { return t->port(); });
  const auto m = message("replayer");
  Stranger old(port);
  ASSERT_TRUE(old.send(encode_frames(*m, cluster_key(), 64 << 10, nullptr, Transport::wall_now_s() - 100).at(0)));
  EXPECT_TRUE(old.closed_by_listener());
  EXPECT_EQ(count(io.stats(t), "stale"), 1u);
  EXPECT_TRUE(io.received().empty());
  Stranger fresh(port);
  ASSERT_TRUE(fresh.send(encode_frames(*m, cluster_key(), 64 << 10, nullptr, Transport::wall_now_s()).at(0)));
  ASSERT_TRUE(wait_until([&] { return io.received().size() == 1; }));
}

// One fresh authentic frame, captured and replayed on ten connections: each opens as the
// sender's, but a sender has at most two; the older ones are closed, so the replays cannot fill
// the inbound limit in a member's name.
TEST(TcpTransport, AReplayedFreshFrameHoldsAtMostTwoConnectionsInItsSendersName) {
  Io io;
  TcpTransport* t = io.listen({});
  const uint16_t port = io.on_io([&] { return t->port(); });
  const std::string frame =
      encode_frames(*message("m1"), cluster_key(), 64 << 10, nullptr, Transport::wall_now_s()).at(0);
  std::vector<std::unique_ptr<Stranger>> replays;
  for (int i = 0; i < 10; ++i) {
    replays.push_back(std::make_unique<Stranger>(port));
    ASSERT_TRUE(replays.back()->send(frame));
    ASSERT_TRUE(wait_until([&] { return io.received().size() == size_t(i + 1); }));  // proven in order
  }
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(replays[i]->closed_by_listener()) << i;
  EXPECT_EQ(count(io.stats(t), "inbound_sender_replaced"), 8u);
}

// UDP: a stale datagram is dropped; a fresh one is delivered marked with where it came from,
// which is how the node tells a sender's own datagram from one replayed by another host.
TEST(UdpTransport, StaleDatagramsAreDroppedAndFreshOnesCarryTheirSource) {
  boost::asio::io_context io;
  UdpTransport t(io, "127.0.0.1:0", cluster_key(), 1400);
  std::vector<GossipMessage> got;
  t.set_receiver([&](GossipMessage&& m) { got.push_back(std::move(m)); });
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
  socklen_t len = sizeof from;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&from), &len), 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(t.port());
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto m = message("peer");
  auto send = [&](uint64_t sent_at) {
    const std::string d = encode_datagrams(*m, cluster_key(), 1400, nullptr, sent_at).at(0);
    ASSERT_EQ(::sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to), ssize_t(d.size()));
  };
  send(Transport::wall_now_s() - 100);
  send(Transport::wall_now_s() + 100);
  send(Transport::wall_now_s());
  while (got.empty()) io.run_one();  // each datagram is one receive; the fresh one ends it
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].received_from, "127.0.0.1:" + std::to_string(ntohs(from.sin_port)));
  EXPECT_EQ(count(t.stats(), "stale"), 2u);
  ::close(fd);
  t.stop();
}

}  // namespace
}  // namespace tollgate
