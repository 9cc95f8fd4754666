// What serves the rate limit service's calls for an RlsServer (rls_server.h): gRPC C++
// (grpc_engine.cc, the default) or our own HTTP/2 on libnghttp2 (native_engine.cc,
// --rls-server native; docs/rls-h2-plan.md). Both take calls through the same CallPath.
#ifndef TOLLGATE_SRC_RLS_ENGINE_H_
#define TOLLGATE_SRC_RLS_ENGINE_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <optional>
#include <string>

#include "api/endpoint.h"

#include "rls/call_path.h"
#include "rls/connection_gate.h"
#include "rls/rls_server.h"

namespace tollgate::rls {

// RlsServer's methods of the same names (rls_server.h says what each does).
class RlsEngine {
 public:
  virtual ~RlsEngine() = default;
  virtual std::string start() = 0;
  virtual const std::string& address() const = 0;
  virtual bool is_loopback() const = 0;
  virtual bool is_tls() const = 0;
  virtual bool is_mutual_tls() const = 0;
  virtual void drain() = 0;
  virtual void stop() = 0;
  virtual void shutdown() = 0;
};

// --rls-listen's "HOST:PORT", "tcp:HOST:PORT" or "unix:PATH"; nullopt and why not.
std::optional<api::Endpoint> parse_listen(const std::string& listen, std::string* why);
// "127.0.0.1:8081" or "[::1]:8081": a bound TCP endpoint as address() reports it.
std::string tcp_address(const api::Endpoint& bound);

// Both engines' TCP connection gate (connection_gate.h) on the io_context that accepts: each
// admission and the sweep of closed connections (every second) counted in the call path's
// rls_connections_* stats. That io_context's thread only.
class CountedGate {
 public:
  CountedGate(const RlsServerOptions& options, CallPath& path, boost::asio::io_context& io);
  // A TCP connection just accepted (the descriptor stays the caller's): made ready and admitted,
  // another one ended if a cap says so. False when it is gone already.
  bool admit(int fd);
  void start_sweeping();
  void stop_sweeping() { timer_.cancel(); }
  // Releases the gate's duplicates (once the connections are closed).
  void reset() { gate_.reset(); }

 private:
  CallPath& path_;
  boost::asio::steady_timer timer_;
  std::unique_ptr<ConnectionGate> gate_;
};

// `options` and `path` outlive the engine.
std::unique_ptr<RlsEngine> make_grpc_engine(boost::asio::io_context& node_io, const RlsServerOptions& options,
                                            CallPath& path);
std::unique_ptr<RlsEngine> make_native_engine(const RlsServerOptions& options, CallPath& path);

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_ENGINE_H_
