#include "daemon_options.h"

#include "config/strict_yaml.h"
#include "daemon/memory_bound.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>
#include <thread>

#include "tollgate/config_error.h"
#include "tollgate/duration.h"
#include "retriever/rules_retriever.h"
#include "util/host_port.h"
#include "util/closest.h"

namespace tollgate {
namespace {

// Reads the YAML config file for CLI11: a flat mapping whose keys are the long flag names
// without dashes (`node-id: a`, `seeds: [h:1, h:2]`). Unknown keys and nested mappings are
// errors naming the file, line and column; CLI11 then applies each value unless the flag was
// given on the command line.
class YamlConfig : public CLI::Config {
 public:
  explicit YamlConfig(const CLI::App* app) : app_(app) {}

  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    const std::string file = app_->get_config_ptr()->as<std::string>();
    std::stringstream text;
    text << input.rdbuf();
    const YAML::Node root = yaml::load(text.str(), file);
    std::vector<CLI::ConfigItem> result;
    if (root.IsNull()) return result;
    auto fail = [&](const YAML::Node& at, const std::string& why) { yaml::fail(file, at, why); };
    if (!root.IsMap()) fail(root, "expected a mapping of settings, e.g. `mode: gossip`");
    for (const auto& kv : root) {
      const std::string name = kv.first.Scalar();
      const CLI::Option* opt = app_->get_option_no_throw("--" + name);
      if (name == "config" || name == "help" || opt == nullptr) {
        fail(kv.first, "unknown setting \"" + name + "\" (settings are the long flag names: see tollgated --help)");
      }
      CLI::ConfigItem item;
      item.name = name;
      if (kv.second.IsScalar()) {
        item.inputs.push_back(kv.second.Scalar());
      } else if (kv.second.IsSequence()) {
        for (const auto& v : kv.second) {
          if (!v.IsScalar()) fail(v, "\"" + name + "\": list items must be single values");
          item.inputs.push_back(v.Scalar());
        }
      } else {
        fail(kv.second, "\"" + name + "\" must be a value or a list of values");
      }
      result.push_back(std::move(item));
    }
    return result;
  }

 private:
  const CLI::App* app_;
};


CLI::Validator address_check() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        std::string why;
        return split_host_port(v, nullptr, nullptr, &why) ? std::string() : why;
      },
      "HOST:PORT");
}

}  // namespace

std::optional<int> parse_daemon_options(int argc, char** argv, DaemonOptions* o) {
  CLI::App app{
      "tollgated: one per service host. Answers \"may key K spend N tokens?\" locally in microseconds and keeps\n"
      "one token bucket per key across the cluster by sharing consumption with its peers (gossip or full mesh,\n"
      "over UDP or TCP). Settings can also come from a YAML file (--config) whose keys are the long flag names;\n"
      "flags override the file.",
      "tollgated"};
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", "tollgated " TOLLGATE_VERSION);
  std::string transport = "udp";
  // Each node setting as the text given, defaults formatted: read into o->node after parsing.
  const auto fields = node_setting_fields();
  std::vector<std::string> setting_text;
  for (const NodeSettingField& f : fields) setting_text.push_back(f.format(o->node));

  app.set_config("--config", "", "YAML config file; its keys are the long flag names (e.g. `mode: mesh`)");
  app.config_formatter(std::make_shared<YamlConfig>(&app));
  app.add_option("--node-id", o->node_id, "This node's id in the cluster (default: the --bind address)");
  app.add_option("--bind", o->bind,
                 "Gossip address (an IP peers can reach, never 0.0.0.0): the --transport listens on this port")->check(address_check());
  app.add_option("--listen", o->listen,
                 "Client API endpoint: unix:PATH (mode 0660) or tcp:HOST:PORT (loopback advised); repeatable")
      ->delimiter(',');
  app.add_option("--rules", o->rules_file,
                 "YAML rules file (see config/rules.yaml); reloaded when it changes (checked every second) and on "
                 "SIGHUP; a broken edit leaves the last good rules in force. Required unless --rls-config is given");
  app.add_option("--rules-url", o->rules_url,
                 "Poll a rules service for the rules file instead: https://HOST[:PORT]/PATH (or http://; any web "
                 "server or object store; If-None-Match/ETag). A new version is validated before it replaces the rules in force; a broken "
                 "or unreachable one leaves them in force (logged once, counted). Needs --rules-cache");
  std::string rules_poll = format_duration(o->rules_poll_ns);
  app.add_option("--rules-poll", rules_poll, "How often --rules-url is polled (100ms to 1h)")->type_name("DURATION");
  app.add_option("--rules-cache", o->rules_cache,
                 "With --rules-url: where the last good rules are kept, so that a restart while the rules service is "
                 "down starts with them (written atomically; its directory must be writable, e.g. /var/lib/tollgate)");
  app.add_option("--state-dir", o->state_dir,
                 "Keep the node's balances across restarts: its buckets that are not full, and the ledger positions "
                 "they include, are written to DIR/state every --state-interval and at SIGTERM (atomically, "
                 "authenticated with the cluster key), and read at start with the refill of the time it was down. "
                 "A state file that cannot be used stops the start, naming it. Without it a restarted node starts "
                 "every bucket full: a spent daily limit would pass again (e.g. /var/lib/tollgate, the unit's "
                 "StateDirectory)")
      ->type_name("DIR");
  std::string state_interval = format_duration(o->state_interval_ns);
  app.add_option("--state-interval", state_interval,
                 "How often the state is written with --state-dir (1s to 1h): what a kill -9 (or a power loss) of every "
                 "node at once can lose")
      ->type_name("DURATION");
  app.add_option("--rules-ca", o->rules_ca,
                 "With an https:// --rules-url: a PEM file of the CA certificates to trust for the rules service "
                 "(default: the system's). The certificate must also name the URL's host");
  app.add_option("--rls-listen", o->rls_listen,
                 "Serve Envoy's rate limit service (gRPC envoy.service.ratelimit.v3 and grpc.health.v1) on HOST:PORT "
                 "or unix:PATH (loopback advised: the service has no authentication). Needs --rls-config");
  app.add_option("--rls-config", o->rls_config,
                 "envoyproxy/ratelimit config: a YAML file, or a directory of *.yaml files with one domain each; "
                 "reloaded on SIGHUP and when a file changes (a broken one leaves the last good config in force)");
  app.add_flag("--rls-response-headers", o->rls_response_headers,
               "Answer rate limit calls with the IETF draft RateLimit-Policy and RateLimit headers, and Retry-After "
               "when over the limit, for Envoy to pass to the caller");
  app.add_option("--rls-max-pending", o->rls_max_pending,
                 "Rate limit calls waiting for the node at most; beyond, a call fails at once with "
                 "RESOURCE_EXHAUSTED (Envoy then applies its failure_mode_deny)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--rls-tls-cert", o->rls_tls_cert,
                 "Serve the rate limit service over TLS with this PEM certificate chain (with --rls-tls-key); "
                 "reread every 5 s, so a renewed certificate applies without a restart")
      ->type_name("FILE");
  app.add_option("--rls-tls-key", o->rls_tls_key, "The PEM private key of --rls-tls-cert (not encrypted)")
      ->type_name("FILE");
  app.add_option("--rls-tls-client-ca", o->rls_tls_client_ca,
                 "Mutual TLS: require every client (Envoy) to present a certificate signed by one of these PEM CA "
                 "certificates. Required for a --rls-listen that is not loopback, unless --rls-insecure")
      ->type_name("FILE");
  app.add_flag("--rls-insecure", o->rls_insecure,
               "Serve a non-loopback --rls-listen without mutual TLS: anyone who reaches it can spend any "
               "descriptor's limit");
  app.add_option("--http-listen", o->http_listen,
                 "Serve HTTP on HOST:PORT: GET/POST /v1/check, POST /json (Envoy's RLS as JSON, with --rls-config), "
                 "/metrics (Prometheus), /healthz, /readyz, /v1/members, /v1/stats. Loopback advised: it has no "
                 "authentication, and the daemon warns otherwise. Off unless given");
  app.add_option("--http-max-connections", o->http_max_connections,
                 "HTTP connections open at once. At the limit a newcomer takes the place of the least recently "
                 "active connection waiting for a request (of the client holding most); it is closed at accept only "
                 "when every connection is busy with a request (both counted)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 16));
  app.add_option("--http-max-connections-per-client", o->http_max_connections_per_client,
                 "HTTP connections open at once from one IP address (all local processes are 127.0.0.1); at the "
                 "limit a newcomer takes the place of that client's least recently active waiting connection")
      ->check(CLI::Range(size_t{1}, size_t{1} << 16));
  app.add_option("--http-token-file", o->http_token_file,
                 "A file holding one bearer token (16 to 512 characters of A-Z a-z 0-9 - . _ ~ + /, then = "
                 "padding; read at start and on SIGHUP): every HTTP endpoint but /healthz and /readyz then answers "
                 "401 unless the request carries `Authorization: Bearer TOKEN`. Required for a --http-listen that "
                 "is not loopback, unless --http-insecure")
      ->type_name("FILE");
  app.add_flag("--http-insecure", o->http_insecure,
               "Serve a --http-listen that is not loopback without --http-token-file: anyone who reaches it can "
               "spend any key and read every balance and rule");
  app.add_option("--metrics-listen", o->metrics_listen,
                 "Serve /metrics, /healthz and /readyz (nothing else, no token) on HOST:PORT, so scraping and probes "
                 "need no access to checks. Off unless given");
  app.add_option("--memory-limit", o->memory_limit,
                 "The memory tollgated must stay within: a size (512M, 2G) or `auto`, the limit of its cgroup "
                 "(systemd's MemoryMax=), if any, or `none`. The most memory these settings can take (keys, "
                 "evicted keys, every door at its caps) is printed at start; a daemon whose bound exceeds the "
                 "limit refuses to start, naming the settings to lower")
      ->type_name("SIZE|auto|none");
  std::string http_timeout = format_duration(o->http_timeout_ns);
  app.add_option("--http-timeout", http_timeout,
                 "How long an HTTP client has to send a request (or keep an idle connection), and to take its "
                 "answer; then the connection is closed (counted)")
      ->type_name("DURATION");
  app.add_option("--transport", transport, "Gossip transport: udp or tcp")->check(CLI::IsMember({"udp", "tcp"}));
  app.add_option("--peers-file", o->peers_file, "Static membership: lines of `id host:port`; reloaded when it changes");
  app.add_option("--seeds", o->seeds, "Heartbeat membership: HOST:PORT,... to join through")
      ->delimiter(',')
      ->check(address_check());
  for (size_t i = 0; i < fields.size(); ++i) {
    app.add_option("--" + std::string(fields[i].flag), setting_text[i], std::string(fields[i].help))
        ->type_name(std::string(fields[i].type_name));
  }
  app.add_option("--cluster-key-file", o->cluster_key_file,
                                  "Shared secret(s) authenticating gossip (HMAC-SHA256): one or two hex keys, the first "
                                  "signs; SIGHUP reloads it. Required unless --insecure-gossip. Make one with "
                                  "`(umask 077; tollgate keygen > FILE)`")
      ->check(CLI::ExistingFile);
  app.add_flag("--insecure-gossip", o->insecure_gossip,
               "Run without --cluster-key-file: gossip is neither signed nor checked, so anyone who can send to the "
               "gossip port (any local user, on loopback) can charge, deny or evict at will. For experiments only");
  app.add_option("--log-level", o->log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--max-datagram", o->max_datagram,
                 "Largest UDP datagram sent, in bytes; also sizes sealed batches (use one value cluster-wide)")->check(CLI::Range(1232, 65000));
  app.add_option("--gossip-peer-rate", o->gossip_peer_bytes_per_second,
                 "Gossip bytes per second accepted from one source address (burst: one second's worth); "
                 "the excess is dropped before it is authenticated or parsed, and counted")
      ->check(CLI::Range(int64_t(64 * 1024), int64_t(1) << 40));
  app.add_flag("--enable-fault-injection", o->enable_fault_injection,
               "Accept `tollgate admin faults` (drop, delay, duplicate gossip): for tests and tollgate-sim's local "
               "back end only. Off by default, so no client of the API can cut this node off");
  app.add_option("--api-max-connections", o->api_max_connections,
                 "Client API connections open at once; at the limit a newcomer takes the place of the least "
                 "recently active idle connection of a client holding more (most first), or is refused")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--api-max-connections-per-client", o->api_max_connections_per_client,
                 "Client API connections one client may hold (one uid on a Unix socket, one address over TCP); "
                 "beyond it its own least recently active idle connection makes room, or the newcomer is refused")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--threads", o->threads,
                 "Threads answering the client API (0: one per core but one, left to the local clients; at least 1, at "
                 "most 4). The node's own thread is one of them "
                 "and keeps gossip, rounds and the other front ends; checks are answered on every thread at once, "
                 "connections spread evenly over them, and each thread holds its share of the --api-max-connections "
                 "limits")
      ->check(CLI::Range(size_t{0}, size_t{64}));
  std::string api_idle_timeout = format_duration(o->api_idle_timeout_ns);
  app.add_option("--api-idle-timeout", api_idle_timeout,
                 "Close a client API connection with nothing pending after this long without a request "
                 "(0s: never); the client library reconnects at once")
      ->type_name("DURATION");
  std::string max_message_age = format_duration(o->max_message_age_ns);
  app.add_option("--max-message-age", max_message_age,
                 "Drop gossip stamped further than this from this node's wall clock, either way (counted as "
                 "transport_dropped_stale): a captured message cannot be replayed later. The cluster's clocks "
                 "must agree within it; at most half of --forget-after")
      ->type_name("DURATION");
  app.add_option("--incarnation", o->incarnation, "Override the incarnation (default: microseconds of wall time at start)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every error exits 2, as docs/operations.md section 2 says
    // (CLI11's own codes run from 100 to 120).
    if (app.exit(e) == 0) return 0;
    std::vector<std::string> flags;
    for (const CLI::Option* opt : app.get_options()) {
      for (const std::string& name : opt->get_lnames()) flags.push_back("--" + name);
    }
    for (int i = 1; i < argc; ++i) {
      const std::string_view word = argv[i];
      if (!word.starts_with("--")) continue;
      const std::string flag(word.substr(0, word.find('=')));
      if (std::find(flags.begin(), flags.end(), flag) != flags.end()) continue;
      if (std::string near = closest_name(flag, flags); !near.empty()) {
        std::cerr << "tollgated: unknown flag " << flag << "; did you mean " << near << "?\n";
      }
    }
    return 2;
  } catch (const ConfigError& e) {
    std::cerr << "tollgated: " << e.what() << "\n";
    return 2;
  }
  o->config_file = app.get_config_ptr()->as<std::string>();
  {
    std::string why;
    const auto idle = parse_duration_ns(api_idle_timeout, &why);
    if (idle && *idle > 168 * 3600 * kNanosPerSecond) why = "must be at most 168h";
    if (!idle || !why.empty()) {
      std::cerr << "tollgated: --api-idle-timeout " << why << "\nRun with --help for the flags.\n";
      return 2;
    }
    o->api_idle_timeout_ns = *idle;
    const auto age = parse_duration_ns(max_message_age, &why);
    if (!age) {
      std::cerr << "tollgated: --max-message-age " << why << "\nRun with --help for the flags.\n";
      return 2;
    }
    o->max_message_age_ns = *age;
    why.clear();
    const auto http = parse_duration_ns(http_timeout, &why);
    if (http && (*http < kNanosPerMilli || *http > 3600 * kNanosPerSecond)) why = "must be from 1ms to 1h";
    if (!http || !why.empty()) {
      std::cerr << "tollgated: --http-timeout " << why << "\nRun with --help for the flags.\n";
      return 2;
    }
    o->http_timeout_ns = *http;
    why.clear();
    const auto poll = parse_duration_ns(rules_poll, &why);
    if (poll && (*poll < 100 * kNanosPerMilli || *poll > 3600 * kNanosPerSecond)) why = "must be from 100ms to 1h";
    if (!poll || !why.empty()) {
      std::cerr << "tollgated: --rules-poll " << why << "\nRun with --help for the flags.\n";
      return 2;
    }
    o->rules_poll_ns = *poll;
    why.clear();
    const auto state = parse_duration_ns(state_interval, &why);
    if (state && (*state < kNanosPerSecond || *state > 3600 * kNanosPerSecond)) why = "must be from 1s to 1h";
    if (!state || !why.empty()) {
      std::cerr << "tollgated: --state-interval " << why << "\nRun with --help for the flags.\n";
      return 2;
    }
    o->state_interval_ns = *state;
  }
  o->transport = transport == "tcp" ? TransportKind::kTcp : TransportKind::kUdp;
  // The clients share the host (one daemon per service host): a core is left to them. On two
  // cores a second daemon thread lost a third of the checks a local client got through
  // (docs/results.md, "The daemon on several threads").
  if (o->threads == 0) o->threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 5) - 1;
  if (o->node_id.empty()) o->node_id = o->bind;

  auto usage_error = [](const std::string& why) {
    std::cerr << "tollgated: " << why << "\nRun with --help for the flags.\n";
    return 2;
  };
  // An empty value (`--rules ""`, or `rules: !tag` with nothing after the tag in the config,
  // found by the daemon_config fuzzer) would start a daemon with no rules file to load or reload.
  if (app.count("--rules") > 0 && o->rules_file.empty()) return usage_error("--rules must name a file; the value is empty");
  if (!o->rules_file.empty() && !o->rules_url.empty()) {
    return usage_error("--rules and --rules-url contradict each other: the rules come from a file or from a rules service");
  }
  if (!o->rules_url.empty()) {
    std::string why;
    const auto url = parse_http_url(o->rules_url, &why);
    if (!url) return usage_error("--rules-url " + o->rules_url + " " + why);
    if (!o->rules_ca.empty() && !url->tls) return usage_error("--rules-ca is for an https:// --rules-url");
    if (o->rules_cache.empty()) {
      return usage_error("--rules-url needs --rules-cache FILE: the last good rules, so that a restart while the rules "
                         "service is down still starts with rules");
    }
  } else if (!o->rules_cache.empty() || !o->rules_ca.empty()) {
    return usage_error(std::string(o->rules_cache.empty() ? "--rules-ca" : "--rules-cache") +
                       " is for --rules-url (a --rules file is its own copy)");
  }
  if (o->rules_file.empty() && o->rules_url.empty() && o->rls_config.empty()) {
    return usage_error("--rules FILE or --rules-url URL is required (or --rls-config PATH, to serve Envoy's rate limit "
                       "service only)");
  }
  if (!o->rls_listen.empty() && o->rls_config.empty()) return usage_error("--rls-listen needs --rls-config PATH");
  if (o->memory_limit != "auto" && o->memory_limit != "none") {
    std::string why;
    if (!parse_memory_size(o->memory_limit, &why)) return usage_error("--memory-limit: " + why + ", auto or none");
  }
  const bool rls_tls = !o->rls_tls_cert.empty() || !o->rls_tls_key.empty() || !o->rls_tls_client_ca.empty();
  if (o->rls_listen.empty() && (rls_tls || o->rls_insecure)) {
    return usage_error(std::string(o->rls_insecure ? "--rls-insecure" : "--rls-tls-*") + " is for --rls-listen");
  }
  if (o->rls_tls_cert.empty() != o->rls_tls_key.empty()) {
    return usage_error("--rls-tls-cert and --rls-tls-key go together: a certificate and its private key");
  }
  if (!o->rls_tls_client_ca.empty() && o->rls_tls_cert.empty()) {
    return usage_error("--rls-tls-client-ca (mutual TLS) needs the server's own --rls-tls-cert and --rls-tls-key");
  }
  if (o->rls_insecure && !o->rls_tls_client_ca.empty()) {
    return usage_error("--rls-insecure and --rls-tls-client-ca contradict each other: clients need a certificate or do not");
  }
  if (o->http_listen.empty() && (!o->http_token_file.empty() || o->http_insecure)) {
    return usage_error(std::string(o->http_insecure ? "--http-insecure" : "--http-token-file") + " is for --http-listen");
  }
  if (o->http_insecure && !o->http_token_file.empty()) {
    return usage_error("--http-insecure and --http-token-file contradict each other: HTTP needs a token or does not");
  }
  if (o->rls_listen.empty() && o->http_listen.empty() && !o->rls_config.empty()) {
    return usage_error("--rls-config is used by the rate limit service: give --rls-listen HOST:PORT (gRPC) or "
                       "--http-listen HOST:PORT (POST /json) too");
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    if (std::string why = fields[i].parse(setting_text[i], o->node); !why.empty()) {
      return usage_error(fields[i].name(SettingNames::kFlags) + " " + why);
    }
  }
  if (o->node.membership == MembershipKind::kStatic && o->peers_file.empty()) {
    return usage_error("--membership static needs --peers-file FILE");
  }
  if (o->node.membership == MembershipKind::kHeartbeat && o->seeds.empty()) {
    return usage_error("--membership heartbeat needs --seeds HOST:PORT,... (list this node's own address to start a cluster)");
  }
  if (const SettingProblem p = validate(o->node, SettingNames::kFlags); !p.message.empty()) return usage_error(p.message);
  if (o->listen.empty()) return usage_error("--listen needs at least one endpoint");
  // A departed member is forgotten after --forget-after; a message of its from before must be
  // stale by then, or a replay would bring it back.
  if (o->max_message_age_ns < kNanosPerSecond || 2 * o->max_message_age_ns > o->node.forget_after_ns) {
    return usage_error("--max-message-age " + format_duration(o->max_message_age_ns) +
                       " must be at least 1s and at most half of --forget-after (" +
                       format_duration(o->node.forget_after_ns) + ")");
  }
  if (!o->cluster_key_file.empty() && o->insecure_gossip) {
    return usage_error("--insecure-gossip and --cluster-key-file contradict each other: give one (the flag or the "
                       "config file's key)");
  }
  if (o->cluster_key_file.empty() && !o->insecure_gossip) {
    return usage_error(
        "gossip must be authenticated: give --cluster-key-file FILE, the same key on every node (make one with "
        "`(umask 077; tollgate keygen > FILE)`), or --insecure-gossip to run without (then anyone who can send "
        "to the gossip port controls this node's limits)");
  }
  // 250: a relaying member's batches are named by its id and kRelayOriginSuffix, and an origin
  // on the wire is at most 256 bytes; a NUL would make that name ambiguous.
  if (o->node_id.empty() || o->node_id.size() > 250) return usage_error("--node-id must be 1 to 250 bytes");
  if (o->node_id.find('\0') != std::string::npos) return usage_error("--node-id must not contain a NUL byte");
  if (o->bind.size() > 256) return usage_error("--bind must be at most 256 bytes");
  if (o->incarnation >= kMaxIncarnation) {
    return usage_error("--incarnation must be below 2^62 (" + std::to_string(kMaxIncarnation) +
                       "): peers ignore rows from there on");
  }
  return std::nullopt;
}

NodeHostOptions node_host_options(const DaemonOptions& d) {
  NodeHostOptions h;
  h.node_id = d.node_id;
  h.bind = d.bind;
  h.transport = d.transport;
  h.max_datagram = d.max_datagram;
  h.gossip_peer_bytes_per_second = d.gossip_peer_bytes_per_second;
  h.max_message_age_ns = d.max_message_age_ns;
  h.cluster_key_file = d.cluster_key_file;
  h.peers_file = d.peers_file;
  h.seeds = d.seeds;
  h.rules_file = d.rules_file;
  h.rls_config = d.rls_config;
  h.node = d.node;
  h.incarnation = d.incarnation;
  h.state_dir = d.state_dir;
  h.state_interval_ns = d.state_interval_ns;
  // Checks from every client API thread at once (the node's thread seals what they leave
  // pending when a flood of keys asks for it).
  h.concurrent_checks = d.threads > 1;
  return h;
}

}  // namespace tollgate
