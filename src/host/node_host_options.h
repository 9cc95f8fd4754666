// What a node's host (host/node_host.h) is given: every setting of a node that the daemon's
// flags and the embedded member's options both map to, in one struct with its defaults. Light to
// include: no Asio.
#ifndef TOLLGATE_SRC_HOST_NODE_HOST_OPTIONS_H_
#define TOLLGATE_SRC_HOST_NODE_HOST_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/node_settings.h"
#include "core/clock.h"
#include "host/transport_kind.h"

namespace tollgate {

enum class LogLevel : uint8_t { kInfo, kWarn, kError };
// Where the host's log lines go (tollgated: spdlog; a member: the service's, or nowhere).
using HostLog = std::function<void(LogLevel, const std::string&)>;

struct NodeHostOptions {
  std::string node_id;  // default: `bind`, with the port the transport chose for port 0
  std::string bind = "127.0.0.1:7946";
  TransportKind transport = TransportKind::kUdp;
  size_t max_datagram = 1400;                      // bytes per UDP datagram, MAC included
  int64_t gossip_peer_bytes_per_second = 4 << 20;  // per source address, before decoding
  int64_t max_message_age_ns = 30 * kNanosPerSecond;
  // Empty: gossip is not authenticated (the caller decides whether that is allowed).
  std::string cluster_key_file;
  std::string peers_file;          // static membership; watched
  std::vector<std::string> seeds;  // heartbeat membership
  // The rules: a file (watched, reloaded), or text fixed at start (named `rules_origin` in
  // errors), or neither (no rules of its own; the RLS config's limits still apply).
  std::string rules_file;
  std::string rules_text;
  std::string rules_origin = "rules";
  std::string rls_config;            // envoyproxy/ratelimit YAML, a file or a directory; watched
  bool rls_merge_domains = false;    // a domain may span several of its files (RlsLoadOptions)
  bool rls_shadow_mode = false;      // every descriptor in shadow mode (RlsLoadOptions)
  bool rls_quota_mode = false;       // every descriptor in quota mode (RlsLoadOptions)
  bool rls_config_optional = false;  // start without rls_config when it does not exist yet
  // The RLS config comes from elsewhere (an xDS server, through offer_rls_config): start with no
  // domain, in the state rls_config_optional starts in without its file.
  bool rls_dynamic = false;
  NodeSettings node;
  uint64_t incarnation = 0;  // 0: the wall clock's microseconds, higher at every restart
  // Checks come from other threads than the owner's (the key table is concurrent); the owner
  // seals early when they pile up (NodeOptions::seal_wanted).
  bool concurrent_checks = false;
  size_t early_seal_keys = 256;  // NodeOptions::early_seal_keys
  // Checks are decided at a time up to coarse_lag_ns behind this clock (KeyTableOptions).
  const Clock* precise_clock = nullptr;
  int64_t coarse_lag_ns = 0;
  // Balances across restarts (issue 35): the node's state is written to STATE_DIR/state every
  // state_interval_ns and when it leaves, and read back at start. Empty: none.
  std::string state_dir;
  int64_t state_interval_ns = 10 * kNanosPerSecond;
  HostLog log;
  // Tests: runs on the loader's thread as each load of rules or RLS config starts (they are
  // parsed there, never on the owner's).
  std::function<void()> on_load_start;
  // After each round, on the owner's thread, with the time the round took.
  std::function<void(int64_t round_ns)> on_round;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_HOST_NODE_HOST_OPTIONS_H_
