// The Envoy rate limit service front end: gRPC ShouldRateLimit (envoy.service.ratelimit.v3) and
// the standard grpc.health.v1 service, on gRPC's own threads.
//
// Threading: a call is read and resolved against the RLS config on a gRPC thread, queued (bounded)
// for the node's thread, decided there through the daemon's request path (RequestHandler), and
// answered from a finisher thread that builds the response and finishes the call. The node's
// thread does no gRPC work, and a slow or dead client never holds it: gRPC writes on its own.
// A call whose deadline passed or that was cancelled before its turn is not charged.
// With decide_on_grpc_threads (tollgated always sets it: the key table is concurrent), a call is
// instead decided and answered on the gRPC thread that read it: no queue and no hop.
//
// The handlers it posts to the node's io_context hold the server: that io_context must not run
// them once the server is destroyed (the daemon runs it no more after shutdown()).
//
// No gRPC header leaks from here: the daemon includes this file only.
#ifndef TOLLGATE_SRC_RLS_RLS_SERVER_H_
#define TOLLGATE_SRC_RLS_RLS_SERVER_H_

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "request/request_handler.h"
#include "rls/value_metrics.h"
#include "tollgate/rls_config.h"
#include "tollgate/types.h"
#include "util/stat_def.h"

namespace tollgate::rls {

struct RlsServerOptions {
  // What serves the calls: gRPC C++ 1.51 (the default), or our own HTTP/2 on libnghttp2, every
  // frame seen before any work (docs/rls-h2-plan.md; no keepalive PINGs yet), its calls
  // decided on a thread of its own (decide_on_grpc_threads must be set).
  enum class Engine { kGrpc, kNative };
  Engine engine = Engine::kGrpc;
  unsigned native_threads = 1;           // kNative: threads serving connections (each its own; the first accepts)
  std::string listen;                    // "HOST:PORT", "tcp:HOST:PORT" or "unix:PATH"
  size_t max_pending = 4096;             // calls queued for the node at most; beyond: RESOURCE_EXHAUSTED
  size_t max_pending_bytes = 16u << 20;  // and their requests' bytes (as serialized) at most, likewise
                                         // (native: request bytes held until whole, all connections)
  size_t max_key_bytes = 256;            // the key table's; longer bucket keys are digested
  size_t max_request_bytes = 64 * 1024;  // a larger request is refused by gRPC (RESOURCE_EXHAUSTED)
  bool response_headers = false;         // add RateLimit-Policy, RateLimit and Retry-After
  bool response_metadata = false;        // the reference's RESPONSE_DYNAMIC_METADATA (add_request_metadata)
  size_t value_metrics_per_rule = 100;   // detailed_metric / value_to_metric series per limit (0: none)
  bool limit_headers = false;            // the reference's LIMIT_RESPONSE_HEADERS_ENABLED (add_limit_headers)
  std::string limit_header = "RateLimit-Limit";
  std::string remaining_header = "RateLimit-Remaining";
  std::string reset_header = "RateLimit-Reset";
  uint32_t unix_socket_mode = 0660;  // a unix: listener's file, whatever the umask (as the client API's)
  // The handler's check and check_all are safe from any thread: decide on gRPC's threads.
  bool decide_on_grpc_threads = false;

  // TLS: a PEM certificate chain and its private key (both, or neither: plaintext). With a
  // client CA bundle too, mutual TLS: a client must present a certificate it signed. The files
  // are read again every tls_reload_seconds, and a renewed certificate serves new connections
  // (gRPC's FileWatcherCertificateProvider; a broken file keeps the last good one).
  std::string tls_cert, tls_key, tls_client_ca;
  unsigned tls_reload_seconds = 5;

  // What one client can hold (Debian's gRPC 1.51 has the HTTP/2 rapid-reset and HPACK issues;
  // these bound them): streams open at once on one connection, the request headers' size, and
  // all of gRPC's buffers together (a call beyond them fails RESOURCE_EXHAUSTED).
  uint32_t max_streams_per_connection = 100;
  size_t max_metadata_bytes = 16 * 1024;
  size_t memory_quota_bytes = 64u << 20;
  // A connection without calls for this long is closed (GOAWAY); one older than max_connection_age
  // is asked to reconnect, its calls given max_connection_age_grace to finish. Keepalive pings
  // find dead peers; a client pinging more often than every 10 s without calls is cut off.
  std::chrono::milliseconds max_connection_idle{std::chrono::minutes(5)};
  std::chrono::milliseconds max_connection_age{std::chrono::hours(1)};
  std::chrono::milliseconds max_connection_age_grace{std::chrono::seconds(30)};
  std::chrono::milliseconds keepalive_time{std::chrono::minutes(1)};
  std::chrono::milliseconds keepalive_timeout{std::chrono::seconds(20)};
  // TCP connections open at once, in all and from one IP address (connection_gate.h: at a cap,
  // a newcomer takes the place of the least active connection of the client holding most), and
  // how long a new connection has to finish its handshake (TLS, HTTP/2's preface).
  size_t max_connections = 1024;
  size_t max_connections_per_client = 256;
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
};

class RlsServer {
 public:
  // `handler` is called on `node_io`'s thread only (its check and check_all on gRPC's threads
  // too with decide_on_grpc_threads).
  RlsServer(boost::asio::io_context& node_io, RequestHandler& handler, RlsServerOptions options);
  ~RlsServer();  // shutdown() if not done
  RlsServer(const RlsServer&) = delete;
  RlsServer& operator=(const RlsServer&) = delete;

  // Parses the address, binds and starts serving (health: SERVING). Returns "" or what is wrong.
  std::string start(std::shared_ptr<const RlsConfig> config);
  // "127.0.0.1:8081" or "unix:/run/x.sock", the port chosen if 0 was asked; valid after start().
  const std::string& address() const;
  bool is_loopback() const;
  bool is_tls() const;         // serves TLS (tls_cert given)
  bool is_mutual_tls() const;  // and requires a client certificate (tls_client_ca given)

  // The config later calls resolve against (any thread).
  void set_config(std::shared_ptr<const RlsConfig> config);
  // Health: NOT_SERVING from now on (SIGTERM's drain). Calls are still answered.
  void drain();
  // On the node's thread: calls not yet decided, and every later one, answer UNAVAILABLE
  // without being charged (the node is leaving). With decide_on_grpc_threads it returns once
  // the decisions already under way on gRPC's threads are made (a few microseconds).
  void stop();
  // Off the node's thread, once it no longer runs: answers what is still queued, shuts the
  // server down and waits for the finisher. Idempotent.
  void shutdown();

  // Counters: rls_calls, rls_calls_over_limit, rls_invalid_argument, rls_busy, rls_deadline_expired,
  // rls_cancelled, rls_unavailable, rls_shadow_over_limit, ..., rls_connections_accepted,
  // rls_connections_evicted, rls_connections_open (stat_table() in the .cc has them all).
  StatsList stats() const;
  // Their declarations (util/stat_def.h).
  static std::vector<StatDef> stat_defs();
  // The per-value counts (detailed_metric, value_to_metric), each value's as counted so far.
  std::vector<ValueMetrics::Series> value_metrics() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_RLS_SERVER_H_
