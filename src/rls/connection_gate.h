// Caps on the rate limit service's TCP connections, in all and per client (IP address).
//
// gRPC 1.51 has no server argument for either, so the daemon accepts TCP connections itself and
// hands each one gRPC (the ServerBuilder's external connection acceptor) once this gate let it
// in. gRPC then owns the descriptor; the gate keeps a duplicate of it, for two things only:
//   - to learn that gRPC has closed it: gRPC's descriptor number no longer names the same socket
//     (its SO_COOKIE differs, or it is closed), checked at each admission and by sweep();
//   - to make room for a newcomer, as the HTTP and client API doors do: shutdown() on the
//     duplicate ends the connection for gRPC too, which sees the peer's end and closes it.
// At a client's own cap one of its connections goes; at the total cap, one of the client holding
// the most (the newcomer's own on a tie). Which one: first those that have received under 1 KiB
// (a half-open connection, a TLS handshake never finished, no call yet), then the least recently
// active (the kernel's time since the connection last received data), so a connection carrying
// Envoy's calls is the last to go. The newcomer is always let in: a client cannot lock others
// out by holding connections, only make its own, or the biggest holder's, go first.
//
// The kernel's side is behind Sockets, so the policy is tested without sockets. One thread.
#ifndef TOLLGATE_SRC_RLS_CONNECTION_GATE_H_
#define TOLLGATE_SRC_RLS_CONNECTION_GATE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>

namespace tollgate::rls {

class ConnectionGate {
 public:
  struct Options {
    size_t max_connections = 1024;
    size_t max_per_client = 256;
  };
  // One admitted connection, as the gate knows it.
  struct Held {
    int fd = -1;          // gRPC's descriptor (the gate never closes it)
    int duplicate = -1;   // the gate's own
    uint64_t cookie = 0;  // the socket's SO_COOKIE, to tell it from a later socket with fd's number
    std::string client;   // the peer's IP address
  };
  // What the gate asks of the kernel.
  class Sockets {
   public:
    virtual ~Sockets() = default;
    // Whether gRPC still holds the connection (fd still names the socket of `cookie`).
    virtual bool held_by_grpc(const Held& c) = 0;
    struct Activity {
      int64_t idle_ms = 0;          // since the connection last received data (its age, if never)
      uint64_t bytes_received = 0;  // in all
    };
    virtual Activity activity(const Held& c) = 0;
    // End the connection (shutdown both ways through the duplicate).
    virtual void end(const Held& c) = 0;
    // Close the gate's duplicate: the gate forgets the connection.
    virtual void release(const Held& c) = 0;
  };

  ConnectionGate(Options options, Sockets& sockets) : options_(options), sockets_(sockets) {}
  ~ConnectionGate();  // releases every duplicate
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  // Under 1 KiB received: not carrying calls yet (the first to go).
  static constexpr uint64_t kCarryingCallsBytes = 1024;

  // A new connection, to be handed to gRPC: the gate holds it from now on, and may have ended
  // another to make room.
  void admit(const Held& c);
  // Forgets the connections gRPC has closed.
  void sweep();

  size_t open() const { return held_.size(); }
  size_t held_by(const std::string& client) const;
  int64_t evicted() const { return evicted_; }

 private:
  using List = std::list<Held>;
  void forget(List::iterator it);
  // Forgets `client`'s closed connections (all clients' when empty).
  void sweep_client(const std::string& client);
  // Ends and forgets the least recently active connection of `client`; false if it holds none.
  bool evict_from(const std::string& client);

  Options options_;
  Sockets& sockets_;
  List held_;
  std::unordered_map<std::string, size_t> per_client_;
  int64_t evicted_ = 0;
};

// The kernel's side: SO_COOKIE on gRPC's descriptor, TCP_INFO, shutdown() and close() on the
// duplicate. Stateless: one for the whole process.
ConnectionGate::Sockets& kernel_sockets();

// An accepted TCP socket made ready for gRPC (non-blocking, close-on-exec, TCP_NODELAY as gRPC's
// own listener does) and described for the gate: its peer's IP address, duplicate and cookie.
// "" or why not (then nothing is left open but `fd`).
std::string describe_for_gate(int fd, ConnectionGate::Held& out);

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_CONNECTION_GATE_H_
