#include "rls/connection_gate.h"

// linux/tcp.h, not netinet/tcp.h: glibc's struct tcp_info has no tcpi_bytes_received.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <tuple>

namespace tollgate::rls {

ConnectionGate::~ConnectionGate() {
  for (const Held& c : held_) sockets_.release(c);
}

size_t ConnectionGate::held_by(const std::string& client) const {
  auto it = per_client_.find(client);
  return it == per_client_.end() ? 0 : it->second;
}

void ConnectionGate::forget(List::iterator it) {
  sockets_.release(*it);
  if (auto n = per_client_.find(it->client); n != per_client_.end() && --n->second == 0) per_client_.erase(n);
  held_.erase(it);
}

void ConnectionGate::sweep_client(const std::string& client) {
  for (auto it = held_.begin(); it != held_.end();) {
    auto next = std::next(it);
    if ((client.empty() || it->client == client) && !sockets_.held_by_grpc(*it)) forget(it);
    it = next;
  }
}

void ConnectionGate::sweep() { sweep_client({}); }

bool ConnectionGate::evict_from(const std::string& client) {
  auto victim = held_.end();
  // Larger is more expendable: not carrying calls yet, then idle longer.
  std::tuple<bool, int64_t> worst{};
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (it->client != client) continue;
    const Sockets::Activity a = sockets_.activity(*it);
    const std::tuple<bool, int64_t> rank{a.bytes_received < kCarryingCallsBytes, a.idle_ms};
    if (victim == held_.end() || rank > worst) victim = it, worst = rank;
  }
  if (victim == held_.end()) return false;
  sockets_.end(*victim);
  forget(victim);
  ++evicted_;
  return true;
}

void ConnectionGate::admit(const Held& c) {
  // What gRPC has closed since no longer counts: the newcomer's client's at once (its cap is
  // the one most likely reached), everyone's when the total is.
  sweep_client(c.client);
  if (held_.size() >= options_.max_connections) sweep();
  const size_t own = held_by(c.client);
  if (own >= options_.max_per_client) {
    evict_from(c.client);
  } else if (held_.size() >= options_.max_connections) {
    std::string biggest = c.client;
    size_t most = own;
    for (const auto& [who, n] : per_client_) {
      if (n > most) most = n, biggest = who;
    }
    evict_from(biggest);
  }
  held_.push_back(c);
  ++per_client_[c.client];
}

namespace {

class KernelSockets final : public ConnectionGate::Sockets {
 public:
  bool held_by_grpc(const ConnectionGate::Held& c) override {
    uint64_t cookie = 0;
    socklen_t len = sizeof cookie;
    return ::getsockopt(c.fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) == 0 && cookie == c.cookie;
  }
  Activity activity(const ConnectionGate::Held& c) override {
    struct tcp_info info {};
    socklen_t len = sizeof info;
    if (::getsockopt(c.duplicate, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return {};
    return {int64_t(info.tcpi_last_data_recv), uint64_t(info.tcpi_bytes_received)};
  }
  void end(const ConnectionGate::Held& c) override { ::shutdown(c.duplicate, SHUT_RDWR); }
  void release(const ConnectionGate::Held& c) override { ::close(c.duplicate); }
};

}  // namespace

ConnectionGate::Sockets& kernel_sockets() {
  static KernelSockets sockets;
  return sockets;
}

std::string describe_for_gate(int fd, ConnectionGate::Held& out) {
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof peer;
  char ip[INET6_ADDRSTRLEN] = {};
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return std::strerror(errno);
  const void* addr = peer.ss_family == AF_INET6
                         ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr)
                         : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr);
  if ((peer.ss_family != AF_INET && peer.ss_family != AF_INET6) || !::inet_ntop(peer.ss_family, addr, ip, sizeof ip)) {
    return "not an IP connection";
  }
  const int flags = ::fcntl(fd, F_GETFL);
  const int one = 1;
  uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 || ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0) {
    return std::strerror(errno);
  }
  const int duplicate = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (duplicate < 0) return std::strerror(errno);
  out = {fd, duplicate, cookie, ip};
  return {};
}

}  // namespace tollgate::rls
