// tollgated's settings: every command-line flag, the YAML config file that mirrors them (flags
// override the file), and validation that names the offending flag or file line.
//
// A setting is one field of DaemonOptions (its default beside it) and one row of the table in
// daemon_settings.cc: the row gives the flag (which is also the config file's key), the help, and
// how the text is read and printed. --help, the config file, the error messages and the fuzz
// dictionary (tests/fuzz/dicts/daemon_config.dict, written by tollgate-fuzz-corpus) all come
// from the table; the node's settings (config/node_settings.h) are rows of it too. A check across
// settings ("--rls-listen needs --rls-config") goes in parse_daemon_options().
#ifndef TOLLGATE_SRC_DAEMON_DAEMON_OPTIONS_H_
#define TOLLGATE_SRC_DAEMON_DAEMON_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/node_settings.h"
#include "core/node.h"
#include "host/node_host_options.h"

namespace tollgate {

struct DaemonOptions {
  std::string node_id;                  // default: the bind address
  std::string bind = "127.0.0.1:7946";  // gossip address: UDP and TCP on this port
  // Client API endpoints; the default is the client library's (tollgate::kDefaultEndpoint).
  std::vector<std::string> listen = {"unix:/run/tollgate/tollgated.sock"};
  std::string rules_file;  // required unless rls_config is given
  // The rules retriever: polls rules_url instead of reading rules_file (one or the other), and
  // keeps the last good copy in rules_cache (required with rules_url).
  std::string rules_url;  // http://HOST[:PORT]/PATH
  int64_t rules_poll_ns = 10 * kNanosPerSecond;
  std::string rules_cache;
  std::string state_dir;                             // balances across restarts: DIR/state; "" none
  int64_t state_interval_ns = 10 * kNanosPerSecond;  // how often the state is written
  std::string rules_ca;                              // https: the CAs to trust (PEM); empty: the system's
  std::string config_file;
  NodeSettings node;  // mode, membership, interval, ... (config/node_settings.h)
  TransportKind transport = TransportKind::kUdp;
  std::string peers_file;          // static membership
  std::vector<std::string> seeds;  // heartbeat membership
  std::string cluster_key_file;
  std::string log_level = "info";
  size_t max_datagram = 1400;                      // bytes per UDP datagram, MAC included
  int64_t gossip_peer_bytes_per_second = 4 << 20;  // per source address, before decoding
  uint64_t incarnation = 0;                        // 0: derived from the wall clock at start-up
  bool enable_fault_injection = false;             // admin faults requests are refused unless set
  bool insecure_gossip = false;                    // run without --cluster-key-file (refused unless set)
  // The client API's connection limits (api::ApiServerOptions).
  size_t api_max_connections = 1024;
  size_t api_max_connections_per_client = 512;
  int64_t api_idle_timeout_ns = 300'000'000'000;
  // Threads answering the client API, the node's included (0 on the command line: one per core
  // but one, at least 1 and at most 4). Above 1 the key table is concurrent (KeyTableOptions::concurrent).
  size_t threads = 0;
  // The Envoy rate limit service (gRPC): off unless rls_listen is given, which needs rls_config.
  std::string rls_listen;              // "HOST:PORT" or "unix:PATH"
  bool rls_native = true;              // --rls-server native (the default): our own HTTP/2, not gRPC C++
  std::string rls_config;              // envoyproxy/ratelimit YAML: a file or a directory
  bool rls_merge_domains = false;      // a domain may span several files of rls_config
  bool rls_shadow_mode = false;        // every descriptor in shadow mode: always OK, counted
  bool rls_config_optional = false;    // start without --rls-config while it does not exist
  bool rls_quota_mode = false;         // every descriptor in quota mode: over only when all are
  bool rls_response_metadata = false;  // the request and passed descriptors' metadata in responses
  size_t rls_value_metrics = 100;      // detailed_metric / value_to_metric series per limit (0: none)
  bool rls_limit_headers = false;      // the reference's RateLimit-Limit/-Remaining/-Reset headers
  std::vector<std::string> rls_limit_header_names = {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"};
  bool rls_response_headers = false;            // RateLimit-Policy, RateLimit, Retry-After in responses
  size_t rls_max_pending = 4096;                // calls waiting for the node at most
  size_t rls_max_connections = 1024;            // TCP connections open at once (RlsServerOptions)
  size_t rls_max_connections_per_client = 256;  // from one IP address
  std::string rls_tls_cert, rls_tls_key;        // PEM: serve TLS
  std::string rls_tls_client_ca;                // PEM: and require client certificates it signed (mTLS)
  bool rls_insecure = false;                    // allow a non-loopback --rls-listen without mutual TLS
  // The RLS config from an xDS management server instead of rls_config (XdsClientOptions).
  std::string rls_xds;  // HOST:PORT
  std::string rls_xds_node_id = "default";
  std::vector<std::string> rls_xds_node_metadata;  // KEY=VALUE
  std::vector<std::string> rls_xds_headers;        // NAME:VALUE
  std::string rls_xds_tls_ca, rls_xds_tls_cert, rls_xds_tls_key, rls_xds_tls_server_name;
  bool rls_xds_insecure = false;  // allow a non-loopback --rls-xds without TLS
  // The HTTP front end: off unless http_listen is given.
  std::string http_listen;                         // "HOST:PORT"
  size_t http_max_connections = 512;               // open at once (HttpServerOptions)
  size_t http_max_connections_per_client = 256;    // from one IP address
  int64_t http_timeout_ns = 10 * kNanosPerSecond;  // to read a request (or wait for the next), or write an answer
  std::string http_token_file;                     // a bearer token every HTTP endpoint but health needs; "" none
  bool http_insecure = false;                      // allow a non-loopback --http-listen without a token
  std::string memory_limit = "auto";               // SIZE, auto (the cgroup's memory.max) or none
  std::string metrics_listen;                      // "HOST:PORT": /metrics, /healthz, /readyz only; "" none
  // Gossip further than this from our wall clock is dropped as stale (replays; Transport).
  int64_t max_message_age_ns = 30'000'000'000;
};

// How a setting is given: a value, a list of values (`--seeds a,b` or a YAML list), or a switch
// (`--http-insecure`, `http-insecure: true`).
enum class SettingShape : uint8_t { kValue, kList, kSwitch };

// One row of the settings table.
struct DaemonSetting {
  std::string flag;  // "rules-poll": the flag --rules-poll and the config file's key
  SettingShape shape = SettingShape::kValue;
  std::string type_name;  // for --help: "DURATION", "FILE", "{udp,tcp}" (the fuzz dictionary takes the choices)
  std::string help;
  // Reads the text given into `o`; returns "" or why not, as a phrase that follows the flag
  // ("must be from 100ms to 1h"). A list comes as its items joined by ','; a switch as "true"
  // or "false". Called only for a setting that was given.
  std::function<std::string(std::string_view text, DaemonOptions& o)> parse;
  // The text that reads back to o's value (the default in --help).
  std::function<std::string(const DaemonOptions& o)> format;
};

// Every setting, in the order --help lists them.
const std::vector<DaemonSetting>& daemon_settings();

// Parses argv (flags, then the --config file for whatever the flags did not set) and validates.
// Returns nullopt to run, or the code to exit with after printing the help or the error.
std::optional<int> parse_daemon_options(int argc, char** argv, DaemonOptions* options);

// Whether checks come from other threads than the node's: client API threads (--threads above 1),
// or a door with threads of its own that decides where it reads (HTTP, the rate limit service's
// gRPC threads), rather than hopping to the node's thread and back for every check. The key
// table is then concurrent (docs/design.md 4.3).
bool checks_from_any_thread(const DaemonOptions& options);

// What these settings give the node's host (its log and round hooks are the daemon's to set).
NodeHostOptions node_host_options(const DaemonOptions& options);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_DAEMON_OPTIONS_H_
