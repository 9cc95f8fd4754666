// A tollgate-sim scenario: the cluster, the load and a timeline of faults, read from a YAML file
// in sim/scenarios/ (every field may be overridden on the command line).
//
//   name: partition-halves
//   nodes: 8
//   mode: gossip              # auto (the default: gossip, relay from 128 nodes) | mesh | gossip | relay
//   transport: udp            # udp | tcp (the virtual back end models both as datagrams)
//   front_end: native         # native | rls: how --cluster local sends checks (the client API, or
//                             # Envoy's ShouldRateLimit over gRPC with the rules as an RLS config)
//   membership: static        # static | heartbeat
//   partition_policy: open    # open | proportional
//   interval: 50ms
//   fanout: 3
//   fail_after: 2s            # a member silent this long is suspect/unreachable (>= 2 rounds)
//   member_rows: 64           # membership rows per message, ours included (tollgated --member-rows)
//                             # (every node setting of config/node_settings.h is a key, e.g.
//                             # push_pull_interval, probe_interval, forget_after, max_keys)
//   duration: 60s
//   seed: 1
//   network: {latency: 1ms-5ms, loss: 0%, duplicate: 0%}
//   rules:                    # the rules file's own format, inline
//     rules:
//       - {match: "k*", rate: 100/s, burst: 100}
//   load:
//     rate: 500/s             # checks offered per second, whole cluster
//     keys: 1                 # distinct keys "k0".."k{N-1}"
//     distribution: uniform   # uniform | zipf (popularity of keys; zipf exponent 1.0)
//     spread: uniform         # uniform | skewed (node i gets weight 1/(i+1)) | one (all on node 0)
//     cost: 1
//     kind: checks            # checks | leases: acquire `cost` slots of a `concurrency:` rule,
//     hold: {distribution: exponential, mean: 1s}   # leases: held this long (exponential | fixed)
//     never_release: 0%       # leases: holders that never release (their lease_ttl frees them)
//   timeline:
//     - partition 0-3|4-7 at 10s for 20s
//     - loss 20% from 5s               # (optionally "for 10s")
//     - crash node 3 at 10s, restart at 20s   # SIGKILL
//     - stop node 2 at 12s, restart at 14s    # SIGTERM: the node leaves (and writes its state)
//     - join 2 nodes at 30s
//   state_interval: 10s       # (optional) every node keeps its state as with tollgated --state-dir,
//                             # written this often and when it stops, read back when it restarts
//
// Phases: the timeline cuts the run into named phases, in time order: "steady" before the first
// event, then one per event ("partition", "loss", "crashed", "stopped", "joined"), and after an event with an
// end ("for", "restart at") "healed", "loss-over" or "restarted".
#ifndef TOLLGATE_SIM_SCENARIO_H_
#define TOLLGATE_SIM_SCENARIO_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/node_settings.h"
#include "core/clock.h"
#include "core/membership.h"
#include "core/node.h"

namespace tollgate::sim {

struct LoadSpec {
  double rate_per_sec = 100;
  size_t keys = 1;
  enum class Distribution : uint8_t { kUniform, kZipf } distribution = Distribution::kUniform;
  enum class Spread : uint8_t { kUniform, kSkewed, kOne } spread = Spread::kUniform;
  int64_t cost = 1;
  // kLeases: every arrival acquires `cost` slots of its key's concurrency limit (a rule's
  // `concurrency: N`) and, if granted, releases them after a hold drawn per arrival; a share
  // `never_release` of the holders never release (the TTL frees theirs). Virtual back end only.
  enum class Kind : uint8_t { kChecks, kLeases } kind = Kind::kChecks;
  enum class Hold : uint8_t { kExponential, kFixed } hold = Hold::kExponential;
  int64_t hold_mean_ns = kNanosPerSecond;
  double never_release = 0;
  // Arrivals stop at this time (0: they go on to the end of the run), so that the rest of the
  // run shows what the cluster settles on (top-K's last summaries).
  int64_t until_ns = 0;
};

struct NetworkSpec {
  int64_t latency_min_ns = 1 * kNanosPerMilli;
  int64_t latency_max_ns = 5 * kNanosPerMilli;  // uniform in [min, max]: reorders messages
  double loss = 0;                              // baseline, before any `loss` event
  double duplicate = 0;
};

struct Event {
  enum class Kind : uint8_t { kPartition, kLoss, kCrash, kJoin };
  Kind kind = Kind::kPartition;
  int64_t at_ns = 0;
  std::optional<int64_t> until_ns;          // partition/loss "for D"; crash "restart at T"
  std::vector<std::vector<size_t>> groups;  // kPartition: node indices on each side
  double loss = 0;                          // kLoss: probability
  size_t node = 0;                          // kCrash: which node
  size_t count = 0;                         // kJoin: how many new nodes
  std::string text;                         // as written, for messages
  bool graceful = false;                    // kCrash: "stop" (SIGTERM: leaves, writes its state), not "crash"
};

struct Phase {
  std::string name;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

struct Scenario {
  std::string name;
  size_t nodes = 8;
  // mode, membership, partition_policy, interval, fanout, fail_after, member_rows, ...: the node settings,
  // with tollgated's defaults (config/node_settings.h: every setting is also a scenario key).
  NodeSettings node;
  std::string transport = "udp";
  // How --cluster local sends checks: the native client API, or Envoy's rate limit service (gRPC
  // ShouldRateLimit, domain "sim", one entry {key: K}) with the rules given to every daemon as an
  // RLS config (sim/rls_front_end.h). The virtual back end has no front end and refuses kRls.
  enum class FrontEnd : uint8_t { kNative, kRls } front_end = FrontEnd::kNative;
  int64_t duration_ns = 30 * kNanosPerSecond;
  uint64_t seed = 1;
  NetworkSpec network;
  std::string rules_yaml;  // the `rules:` block, re-serialized in the rules file's format
  LoadSpec load;
  std::vector<Event> timeline;  // sorted by at_ns
  // Balances across restarts, as tollgated --state-dir: each node's state is written every this
  // long and when it stops (not when it crashes), and read back when it restarts. 0: none, so a
  // node that restarts learns balances only from its peers.
  int64_t state_interval_ns = 0;
  // Top-K (issue 41): at the end, this many of the heaviest keys that nodes 0, N/2 and N-1
  // report (Node::top) are checked against the cluster's exact counts (SimResult::top_checks);
  // 0: not checked (nor counted).
  size_t top_check = 0;

  // The phases the timeline cuts [0, duration) into, in order, covering it without gaps.
  std::vector<Phase> phases() const;
};

// Parses a scenario; `source` names it in errors (ConfigError "file:line:col: problem"). Unknown
// fields, bad durations/percentages/rates, node indices out of range and overlapping partition
// groups are errors.
Scenario parse_scenario(std::string_view text, const std::string& source);
Scenario load_scenario_file(const std::string& path);

// Checks the timeline against the cluster's size: `nodes`, plus the joins before each event.
// Every partition must list each node that exists at its start exactly once, and a crash must
// name a node that exists. parse_scenario already checks this; call it again after changing
// `nodes` (tollgate-sim --nodes). Throws std::invalid_argument quoting the event and saying how
// many nodes there are.
void validate(const Scenario& s);

// Parses one timeline line ("partition 0-3|4-7 at 10s for 20s"), for `nodes` nodes. Throws
// std::invalid_argument saying what was expected.
Event parse_event(std::string_view line, size_t nodes);

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_SCENARIO_H_
