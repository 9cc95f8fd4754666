// tollgated's RLS config from an xDS management server (--rls-xds), as envoyproxy/ratelimit's
// CONFIG_TYPE=GRPC_XDS_SOTW: one aggregated discovery stream (ADS, state of the world) asking for
// every RateLimitConfig resource, each response the whole config. A response that makes a valid
// config is handed on (on_config) and ACKed; one that does not is NACKed with why, and the config
// in force stays. A stream that ends is opened again after a jittered, doubling wait (reset once a
// response came), asking with the version in force and no nonce.
//
// One thread of its own, gRPC's synchronous client. No gRPC header leaks from here.
#ifndef TOLLGATE_SRC_RLS_XDS_CLIENT_H_
#define TOLLGATE_SRC_RLS_XDS_CLIENT_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tollgate/rls_config.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/types.h"
#include "util/stat_def.h"

namespace tollgate::rls {

struct XdsClientOptions {
  std::string server;  // HOST:PORT of the management server
  std::string node_id = "default";
  std::vector<std::pair<std::string, std::string>> node_metadata;  // sent as string values
  std::vector<std::pair<std::string, std::string>> headers;        // the stream's initial metadata
  // TLS when tls_ca is given: the server's certificate must chain to it (and name tls_server_name,
  // else the server's host); with tls_cert and tls_key, a client certificate too. The files are
  // read again at each connection, so renewed certificates apply from the next one.
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  std::chrono::milliseconds backoff_initial{std::chrono::seconds(1)};
  std::chrono::milliseconds backoff_max{std::chrono::seconds(30)};
  size_t max_message_bytes = 4u << 20;  // a larger response ends the stream (RESOURCE_EXHAUSTED)
  RlsLoadOptions load;                  // merge, shadow and quota modes, as for files
};

class XdsClient {
 public:
  // `on_config` gets each accepted config and its version, on the client's thread; `log` gets what
  // happens (connected, NACKs, stream ends), on it too.
  using OnConfig = std::function<void(std::shared_ptr<const RlsConfig> config, const std::string& version)>;
  using Log = std::function<void(bool error, const std::string& line)>;
  XdsClient(XdsClientOptions options, OnConfig on_config, Log log);
  ~XdsClient();  // stop()
  XdsClient(const XdsClient&) = delete;
  XdsClient& operator=(const XdsClient&) = delete;

  // Checks the TLS files (a missing or unreadable one stops the start, named) and starts the
  // thread. Returns "" or what is wrong.
  std::string start();
  // Cancels the stream and joins the thread. Idempotent; any thread but the client's.
  void stop();

  // rls_xds_connected (gauge: a response came on the open stream), rls_xds_streams, rls_xds_acks,
  // rls_xds_nacks.
  StatsList stats() const;
  static std::vector<StatDef> stat_defs();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_XDS_CLIENT_H_
