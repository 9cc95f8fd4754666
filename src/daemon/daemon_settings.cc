// tollgated's settings table (daemon_options.h says how a row is used). Rows read text into a
// DaemonOptions field and print it back; the checks across settings are in daemon_options.cc.
#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "config/setting_text.h"
#include "daemon/daemon_options.h"
#include "daemon/memory_bound.h"
#include "util/host_port.h"

namespace tollgate {
namespace {

using Text = std::string DaemonOptions::*;
using Check = std::string (*)(std::string_view text);

std::string any_text(std::string_view) { return {}; }

// The rules file, named on purpose: an empty value (`--rules ""`, or `rules: !tag` with nothing
// after the tag, found by the daemon_config fuzzer) would leave nothing to load. (Other paths
// may be given empty: "none", e.g. `--state-dir ""` to turn off what the shipped config sets.)
std::string a_file(std::string_view text) {
  return text.empty() ? "must name a file; the value is empty" : std::string();
}

// Anything that exists and is not a directory: a file, a FIFO or /dev/fd/N (`<(vault read ...)`).
std::string an_existing_file(std::string_view text) {
  if (text.empty()) return a_file(text);
  std::error_code ec;
  const std::filesystem::path path(text);
  if (!std::filesystem::exists(path, ec) || std::filesystem::is_directory(path, ec)) {
    return "names no file: " + quoted(text);
  }
  return {};
}

std::string an_address(std::string_view text) {
  std::string why;
  return split_host_port(std::string(text), nullptr, nullptr, &why) ? std::string() : why;
}

std::string a_memory_limit(std::string_view text) {
  std::string why;
  if (text == "auto" || text == "none" || parse_memory_size(std::string(text), &why)) return {};
  return why + ", auto or none";
}

// An HTTP field name (RFC 9110's token).
std::string a_header_name(std::string_view text) {
  static constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  const bool ok = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           kSpecials.find(c) != std::string_view::npos;
  });
  return ok ? std::string() : "not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)";
}

// KEY=VALUE of --rls-xds-node-metadata.
std::string a_metadata_pair(std::string_view text) {
  const size_t eq = text.find('=');
  if (eq == 0 || eq == std::string_view::npos) return "not KEY=VALUE";
  const bool printable = std::all_of(text.begin(), text.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  return printable ? std::string() : "not printable ASCII";
}

// NAME:VALUE of --rls-xds-header: a gRPC metadata name (lower case: gRPC refuses others) and a
// printable ASCII value.
std::string a_grpc_header(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == 0 || colon == std::string_view::npos) return "not NAME:VALUE";
  const std::string_view name = text.substr(0, colon);
  const bool name_ok = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '_' || c == '.';
  });
  if (!name_ok) return "the name must be lower-case letters, digits and - _ . (gRPC metadata)";
  if (name.starts_with("grpc-") || name.ends_with("-bin")) return "names starting grpc- or ending -bin are gRPC's own";
  const std::string_view value = text.substr(colon + 1);
  const bool printable = std::all_of(value.begin(), value.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  return printable ? std::string() : "the value must be printable ASCII";
}

DaemonSetting text(std::string flag, Text member, std::string type_name, std::string help, Check check = any_text) {
  return {std::move(flag),
          SettingShape::kValue,
          std::move(type_name),
          std::move(help),
          [member, check](std::string_view t, DaemonOptions& o) {
    std::string why = check(t);
    if (why.empty()) o.*member = std::string(t);
    return why;
          },
          [member](const DaemonOptions& o) { return o.*member; }};
}

DaemonSetting list(std::string flag, std::vector<std::string> DaemonOptions::*member, std::string type_name,
                   std::string help, Check check = any_text) {
  return {std::move(flag),
          SettingShape::kList,
          std::move(type_name),
          std::move(help),
          [member, check](std::string_view t, DaemonOptions& o) {
    std::vector<std::string> items;
    for (size_t start = 0;;) {
      const size_t comma = t.find(',', start);
      const std::string_view item = t.substr(start, comma == std::string_view::npos ? t.npos : comma - start);
      if (std::string why = check(item); !why.empty()) return quoted(item) + ": " + why;
      items.emplace_back(item);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    o.*member = std::move(items);
    return std::string();
          },
          [member](const DaemonOptions& o) {
    std::string joined;
    for (const std::string& item : o.*member) joined += (joined.empty() ? "" : ",") + item;
    return joined;
  }};
}

DaemonSetting on_off(std::string flag, bool DaemonOptions::*member, std::string help) {
  return {std::move(flag),
          SettingShape::kSwitch,
          "",
          std::move(help),
          [member](std::string_view t, DaemonOptions& o) {
    o.*member = t == "true";
    return std::string();
          },
          [member](const DaemonOptions& o) { return std::string(o.*member ? "true" : "false"); }};
}

template <class T>
DaemonSetting whole(std::string flag, T DaemonOptions::*member, T min, T max, std::string help) {
  std::string type_name = std::to_string(min) + ".." + std::to_string(max);
  return {
      std::move(flag),
      SettingShape::kValue,
      std::move(type_name),
      std::move(help),
      [member, min, max](std::string_view t, DaemonOptions& o) { return parse_whole_setting(t, min, max, o.*member); },
      [member](const DaemonOptions& o) { return std::to_string(o.*member); }};
}

DaemonSetting duration(std::string flag, int64_t DaemonOptions::*member, int64_t min_ns, int64_t max_ns,
                       std::string help) {
  return {std::move(flag),
          SettingShape::kValue,
          "DURATION",
          std::move(help),
          [member, min_ns, max_ns](std::string_view t, DaemonOptions& o) {
    return parse_duration_setting(t, min_ns, max_ns, o.*member);
          },
          [member](const DaemonOptions& o) { return format_duration(o.*member); }};
}

// A node setting (config/node_settings.h) as a row of this table.
DaemonSetting node_row(const NodeSettingField& f) {
  return {std::string(f.flag),
          SettingShape::kValue,
          std::string(f.type_name),
          std::string(f.help),
          [&f](std::string_view t, DaemonOptions& o) { return f.parse(t, o.node); },
          [&f](const DaemonOptions& o) { return f.format(o.node); }};
}

std::vector<DaemonSetting> make_rows() {
  std::vector<DaemonSetting> rows;
  auto add = [&](DaemonSetting row) { rows.push_back(std::move(row)); };
  // --- the node: who it is, how it gossips, with whom ---
  add(text("node-id", &DaemonOptions::node_id, "TEXT", "This node's id in the cluster (default: the --bind address)"));
  add(text("bind", &DaemonOptions::bind, "HOST:PORT",
           "Gossip address (an IP peers can reach, never 0.0.0.0): the --transport listens on this port", an_address));
  add({"transport", SettingShape::kValue, "{udp,tcp}", "Gossip transport: udp or tcp",
       [](std::string_view t, DaemonOptions& o) {
    size_t i = 0;
    std::string why = parse_choice_setting(t, {"udp", "tcp"}, i);
    if (why.empty()) o.transport = i == 0 ? TransportKind::kUdp : TransportKind::kTcp;
    return why;
       },
       [](const DaemonOptions& o) { return std::string(o.transport == TransportKind::kTcp ? "tcp" : "udp"); }});
  add(text("peers-file", &DaemonOptions::peers_file, "FILE",
           "Static membership: lines of `id host:port`; reloaded when it changes"));
  add(list("seeds", &DaemonOptions::seeds, "HOST:PORT", "Heartbeat membership: HOST:PORT,... to join through",
           an_address));
  for (const NodeSettingField& f : node_setting_fields()) add(node_row(f));
  add(text("cluster-key-file", &DaemonOptions::cluster_key_file, "FILE",
           "Shared secret(s) authenticating gossip (HMAC-SHA256): one or two hex keys, the first signs; SIGHUP "
           "reloads it. Required unless --insecure-gossip. Make one with `(umask 077; tollgate keygen > FILE)`",
           an_existing_file));
  add(on_off("insecure-gossip", &DaemonOptions::insecure_gossip,
             "Run without --cluster-key-file: gossip is neither signed nor checked, so anyone who can send to the "
             "gossip port (any local user, on loopback) can charge, deny or evict at will. For experiments only"));
  add(whole("max-datagram", &DaemonOptions::max_datagram, size_t{1232}, size_t{65000},
            "Largest UDP datagram sent, in bytes; also sizes sealed batches (use one value cluster-wide)"));
  add(whole("gossip-peer-rate", &DaemonOptions::gossip_peer_bytes_per_second, int64_t{64 * 1024}, int64_t{1} << 40,
            "Gossip bytes per second accepted from one source address (burst: one second's worth); the excess is "
            "dropped before it is authenticated or parsed, and counted"));
  add(duration("max-message-age", &DaemonOptions::max_message_age_ns, kNanosPerSecond, kMaxSettingDurationNs,
               "Drop gossip stamped further than this from this node's wall clock, either way (counted as "
               "transport_dropped_stale): a captured message cannot be replayed later. The cluster's clocks must "
               "agree within it; at most half of --forget-after"));
  add(whole("incarnation", &DaemonOptions::incarnation, uint64_t{0}, kMaxIncarnation - 1,
            "Override the incarnation (default: microseconds of wall time at start; peers ignore rows from 2^62 on)"));
  add(on_off("enable-fault-injection", &DaemonOptions::enable_fault_injection,
             "Accept `tollgate admin faults` (drop, delay, duplicate gossip): for tests and tollgate-sim's local back "
             "end only. Off by default, so no client of the API can cut this node off"));

  // --- the client API ---
  add(list("listen", &DaemonOptions::listen, "ENDPOINT",
           "Client API endpoint: unix:PATH (mode 0660) or tcp:HOST:PORT (loopback advised); repeatable"));
  add(whole("api-max-connections", &DaemonOptions::api_max_connections, size_t{1}, size_t{1} << 20,
            "Client API connections open at once; at the limit a newcomer takes the place of the least recently "
            "active idle connection of a client holding more (most first), or is refused"));
  add(whole("api-max-connections-per-client", &DaemonOptions::api_max_connections_per_client, size_t{1},
            size_t{1} << 20,
            "Client API connections one client may hold (one uid on a Unix socket, one address over TCP); beyond it "
            "its own least recently active idle connection makes room, or the newcomer is refused"));
  add(duration("api-idle-timeout", &DaemonOptions::api_idle_timeout_ns, 0, kMaxSettingDurationNs,
               "Close a client API connection with nothing pending after this long without a request (0s: never); "
               "the client library reconnects at once"));
  add(whole("threads", &DaemonOptions::threads, size_t{0}, size_t{64},
            "Threads answering the client API (0: one per core but one, left to the local clients; at least 1, at "
            "most 4). The node's own thread is one of them and keeps gossip, rounds and the other front ends; "
            "checks are answered on every thread at once, connections spread evenly over them, and each thread "
            "holds its share of the --api-max-connections limits"));

  // --- rules, and balances across restarts ---
  add(text("rules", &DaemonOptions::rules_file, "FILE",
           "YAML rules file (see config/rules.yaml); reloaded when it changes (checked every second) and on SIGHUP; "
           "a broken edit leaves the last good rules in force. Required unless --rls-config is given",
           a_file));
  add(text("rules-url", &DaemonOptions::rules_url, "URL",
           "Poll a rules service for the rules file instead: https://HOST[:PORT]/PATH (or http://; any web server or "
           "object store; If-None-Match/ETag). A new version is validated before it replaces the rules in force; a "
           "broken or unreachable one leaves them in force (logged once, counted). Needs --rules-cache"));
  add(duration("rules-poll", &DaemonOptions::rules_poll_ns, 100 * kNanosPerMilli, 3600 * kNanosPerSecond,
               "How often --rules-url is polled (100ms to 1h)"));
  add(text("rules-cache", &DaemonOptions::rules_cache, "FILE",
           "With --rules-url: where the last good rules are kept, so that a restart while the rules service is down "
           "starts with them (written atomically; its directory must be writable, e.g. /var/lib/tollgate)"));
  add(text("rules-ca", &DaemonOptions::rules_ca, "FILE",
           "With an https:// --rules-url: a PEM file of the CA certificates to trust for the rules service "
           "(default: the system's). The certificate must also name the URL's host"));
  add(text("state-dir", &DaemonOptions::state_dir, "DIR",
           "Keep the node's balances across restarts: its buckets that are not full, and the ledger positions they "
           "include, are written to DIR/state every --state-interval and at SIGTERM (atomically, authenticated with "
           "the cluster key), and read at start with the refill of the time it was down. A state file that cannot "
           "be used stops the start, naming it. Without it a restarted node starts every bucket full: a spent daily "
           "limit would pass again (e.g. /var/lib/tollgate, the unit's StateDirectory)"));
  add(duration("state-interval", &DaemonOptions::state_interval_ns, kNanosPerSecond, 3600 * kNanosPerSecond,
               "How often the state is written with --state-dir (1s to 1h): what a kill -9 (or a power loss) of every "
               "node at once can lose"));

  // --- Envoy's rate limit service (gRPC) ---
  add(text("rls-listen", &DaemonOptions::rls_listen, "HOST:PORT|unix:PATH",
           "Serve Envoy's rate limit service (gRPC envoy.service.ratelimit.v3 and grpc.health.v1) on HOST:PORT or "
           "unix:PATH (loopback advised: the service has no authentication). Needs --rls-config"));
  add({"rls-server", SettingShape::kValue, "{grpc,native}",
       "What serves --rls-listen: native (the default), tollgate's own HTTP/2 on libnghttp2, which sees every frame "
       "before any work (it holds against HTTP/2 rapid reset) and decides each call on the --threads thread that read "
       "it; or grpc, gRPC C++ 1.51 (Debian 12's), which rapid reset stalls. Both serve ShouldRateLimit, health Check "
       "and Watch, and --rls-tls-* alike",
       [](std::string_view t, DaemonOptions& o) {
    size_t i = 0;
    std::string why = parse_choice_setting(t, {"grpc", "native"}, i);
    if (why.empty()) o.rls_native = i == 1;
    return why;
       },
       [](const DaemonOptions& o) { return std::string(o.rls_native ? "native" : "grpc"); }});
  add(text("rls-config", &DaemonOptions::rls_config, "PATH",
           "envoyproxy/ratelimit config: a YAML file, or a directory of *.yaml files with one domain each; reloaded "
           "on SIGHUP and when a file changes (a broken one leaves the last good config in force)"));
  add(on_off("rls-merge-domains", &DaemonOptions::rls_merge_domains,
             "Let one domain span several files of the --rls-config directory, their top-level descriptors "
             "joined (the reference server's MERGE_DOMAIN_CONFIG); a key and value defined twice at one level is "
             "still an error. Off: a domain in two files is an error"));
  add(on_off("rls-shadow-mode", &DaemonOptions::rls_shadow_mode,
             "Every RLS descriptor in shadow mode (the reference server's SHADOW_MODE): each call is counted as "
             "usual and answered OK, what would have been over counted in rls_shadow_over_limit"));
  add(on_off("rls-config-optional", &DaemonOptions::rls_config_optional,
             "Start when --rls-config does not exist yet (a file not written, or a directory with no *.yaml): "
             "every rate limit call is answered OK, unlimited, /readyz and rls_config_missing say so, and the "
             "config is read as soon as it appears. A config that exists but is broken still stops the start"));
  add(on_off("rls-quota-mode", &DaemonOptions::rls_quota_mode,
             "Every RLS descriptor in quota mode (the reference server's QUOTA_MODE): a call is over only when all "
             "its descriptors are; one that is over alone answers OVER_LIMIT in its status and is not charged"));
  add(on_off("rls-response-metadata", &DaemonOptions::rls_response_metadata,
             "Answer rate limit calls with the reference server's RESPONSE_DYNAMIC_METADATA: the domain, each "
             "descriptor's entries and hits, and the `metadata` of the descriptors that passed, merged"));
  add(whole("rls-value-metrics", &DaemonOptions::rls_value_metrics, size_t{0}, size_t{10000},
            "Series per RLS limit for descriptors with detailed_metric or value_to_metric "
            "(tollgate_rls_value_hits_total, one per value): values beyond it are not counted, and "
            "rls_value_metrics_dropped counts them (10,000 series at most in all; 0: none)"));
  add(on_off("rls-limit-headers", &DaemonOptions::rls_limit_headers,
             "Answer rate limit calls with the reference server's headers (its LIMIT_RESPONSE_HEADERS_ENABLED): the "
             "limit, the tokens left and the seconds until full of the descriptor closest to its limit, as plain "
             "numbers, named by --rls-limit-header-names"));
  add(list("rls-limit-header-names", &DaemonOptions::rls_limit_header_names, "LIMIT,REMAINING,RESET",
           "The three header names of --rls-limit-headers (the reference's LIMIT_LIMIT_HEADER, "
           "LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER)",
           a_header_name));
  add(on_off("rls-response-headers", &DaemonOptions::rls_response_headers,
             "Answer rate limit calls with the IETF draft RateLimit-Policy and RateLimit headers, and Retry-After "
             "when over the limit, for Envoy to pass to the caller"));
  add(whole("rls-max-pending", &DaemonOptions::rls_max_pending, size_t{1}, size_t{1} << 20,
            "Rate limit calls waiting for the node at most; beyond, a call fails at once with RESOURCE_EXHAUSTED "
            "(Envoy then applies its failure_mode_deny)"));
  add(whole("rls-max-connections", &DaemonOptions::rls_max_connections, size_t{1}, size_t{1} << 16,
            "Rate limit service TCP connections open at once. At the limit a newcomer takes the place of a "
            "connection of the client holding most: one that has carried no call yet, else its least recently "
            "active (counted in rls_connections_evicted)"));
  add(whole("rls-max-connections-per-client", &DaemonOptions::rls_max_connections_per_client, size_t{1},
            size_t{1} << 16,
            "Rate limit service TCP connections open at once from one IP address (all local processes are "
            "127.0.0.1); at the limit a newcomer takes the place of one of that client's, chosen likewise"));
  add(text("rls-tls-cert", &DaemonOptions::rls_tls_cert, "FILE",
           "Serve the rate limit service over TLS with this PEM certificate chain (with --rls-tls-key); reread every "
           "5 s, so a renewed certificate applies without a restart"));
  add(text("rls-tls-key", &DaemonOptions::rls_tls_key, "FILE",
           "The PEM private key of --rls-tls-cert (not encrypted)"));
  add(text("rls-tls-client-ca", &DaemonOptions::rls_tls_client_ca, "FILE",
           "Mutual TLS: require every client (Envoy) to present a certificate signed by one of these PEM CA "
           "certificates. Required for a --rls-listen that is not loopback, unless --rls-insecure"));
  add(on_off("rls-insecure", &DaemonOptions::rls_insecure,
             "Serve a non-loopback --rls-listen without mutual TLS: anyone who reaches it can spend any descriptor's "
             "limit"));
  add(text("rls-xds", &DaemonOptions::rls_xds, "HOST:PORT",
           "Take the RLS config from this xDS management server (Envoy Gateway's, or any serving "
           "envoyproxy/ratelimit's RateLimitConfig resources over ADS, state of the world) instead of "
           "--rls-config. Every rate limit call is answered OK until its first config; a config that does not "
           "load is refused (NACKed) and the one in force stays",
           an_address));
  add(text("rls-xds-node-id", &DaemonOptions::rls_xds_node_id, "ID",
           "The node id the xDS server knows this service by (Envoy Gateway: envoy-ratelimit)"));
  add(list("rls-xds-node-metadata", &DaemonOptions::rls_xds_node_metadata, "KEY=VALUE,...",
           "Metadata sent with the node id (string values)", a_metadata_pair));
  add(list("rls-xds-header", &DaemonOptions::rls_xds_headers, "NAME:VALUE,...",
           "gRPC metadata sent when the stream opens (an authorization header, say)", a_grpc_header));
  add(text("rls-xds-tls-ca", &DaemonOptions::rls_xds_tls_ca, "FILE",
           "Connect to the xDS server over TLS, its certificate signed by one of these PEM CA certificates; the files "
           "are read again at each connection. Required for a --rls-xds that is not loopback, unless "
           "--rls-xds-insecure"));
  add(text("rls-xds-tls-cert", &DaemonOptions::rls_xds_tls_cert, "FILE",
           "A PEM client certificate for the xDS server (with --rls-xds-tls-key and --rls-xds-tls-ca)"));
  add(text("rls-xds-tls-key", &DaemonOptions::rls_xds_tls_key, "FILE",
           "The PEM private key of --rls-xds-tls-cert (not encrypted)"));
  add(text("rls-xds-tls-server-name", &DaemonOptions::rls_xds_tls_server_name, "NAME",
           "The name the xDS server's certificate must have, when not its --rls-xds host"));
  add(on_off("rls-xds-insecure", &DaemonOptions::rls_xds_insecure,
             "Take the RLS config from a non-loopback --rls-xds without TLS: whoever can answer for that address "
             "sets every limit"));

  // --- HTTP, metrics, memory, logs ---
  add(text("http-listen", &DaemonOptions::http_listen, "HOST:PORT",
           "Serve HTTP on HOST:PORT: GET/POST /v1/check, POST /json (Envoy's RLS as JSON, with --rls-config), "
           "/metrics (Prometheus), /healthz, /readyz, /v1/members, /v1/stats. Loopback advised: it has no "
           "authentication, and the daemon warns otherwise. Off unless given"));
  add(whole("http-max-connections", &DaemonOptions::http_max_connections, size_t{1}, size_t{1} << 16,
            "HTTP connections open at once. At the limit a newcomer takes the place of the least recently active "
            "connection waiting for a request (of the client holding most); it is closed at accept only when every "
            "connection is busy with a request (both counted)"));
  add(whole("http-max-connections-per-client", &DaemonOptions::http_max_connections_per_client, size_t{1},
            size_t{1} << 16,
            "HTTP connections open at once from one IP address (all local processes are 127.0.0.1); at the limit a "
            "newcomer takes the place of that client's least recently active waiting connection"));
  add(duration("http-timeout", &DaemonOptions::http_timeout_ns, kNanosPerMilli, 3600 * kNanosPerSecond,
               "How long an HTTP client has to send a request (or keep an idle connection), and to take its answer; "
               "then the connection is closed (counted)"));
  add(text("http-token-file", &DaemonOptions::http_token_file, "FILE",
           "A file holding one bearer token (16 to 512 characters of A-Z a-z 0-9 - . _ ~ + /, then = padding; read "
           "at start and on SIGHUP): every HTTP endpoint but /healthz and /readyz then answers 401 unless the "
           "request carries `Authorization: Bearer TOKEN`. Required for a --http-listen that is not loopback, "
           "unless --http-insecure"));
  add(on_off("http-insecure", &DaemonOptions::http_insecure,
             "Serve a --http-listen that is not loopback without --http-token-file: anyone who reaches it can spend "
             "any key and read every balance and rule"));
  add(text("metrics-listen", &DaemonOptions::metrics_listen, "HOST:PORT",
           "Serve /metrics, /healthz and /readyz (nothing else, no token) on HOST:PORT, so scraping and probes need "
           "no access to checks. Off unless given"));
  add(text("memory-limit", &DaemonOptions::memory_limit, "SIZE|auto|none",
           "The memory tollgated must stay within: a size (512M, 2G) or `auto`, the limit of its cgroup (systemd's "
           "MemoryMax=), if any, or `none`. The most memory these settings can take (keys, evicted keys, every door "
           "at its caps) is printed at start; a daemon whose bound exceeds the limit refuses to start, naming the "
           "settings to lower",
           a_memory_limit));
  add({"log-level", SettingShape::kValue, "{trace,debug,info,warn,error,critical,off}",
       "trace, debug, info, warn, error, critical or off",
       [](std::string_view t, DaemonOptions& o) {
    size_t i = 0;
    std::string why = parse_choice_setting(t, {"trace", "debug", "info", "warn", "error", "critical", "off"}, i);
    if (why.empty()) o.log_level = std::string(t);
    return why;
       },
       [](const DaemonOptions& o) { return o.log_level; }});
  return rows;
}

}  // namespace

const std::vector<DaemonSetting>& daemon_settings() {
  static const std::vector<DaemonSetting> rows = make_rows();
  return rows;
}

}  // namespace tollgate
