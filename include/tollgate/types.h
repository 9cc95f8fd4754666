// The value types of the client API, shared by the client library (tollgate/client.h), the
// daemon's request path that every front end calls, and the core that fills them.
#ifndef TOLLGATE_TYPES_H_
#define TOLLGATE_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tollgate/decision.h"

namespace tollgate {

// One check of a request: `cost` tokens of `key` (0 = query without taking).
struct CheckItem {
  std::string_view key;
  int64_t cost = 1;
};

// An all-or-nothing request (check_all) is decided in one go, holding every shard it touches,
// so every door caps it at this many checks.
inline constexpr size_t kMaxAllOrNothingChecks = 64;

// Keys whose first byte is 0x1E name the buckets of Envoy's rate limit service (RLS bucket keys,
// tollgate/rls_config.h): only that front end (and Member::should_rate_limit) may charge them.
// Every other door refuses such a key (DenyReason::kReservedKey, HTTP 400), so that a caller of
// /v1/check or the client API cannot spend Envoy's limits.
inline constexpr char kReservedKeyByte = '\x1e';
inline bool is_reserved_key(std::string_view key) { return !key.empty() && key.front() == kReservedKeyByte; }
// What a door answers for such a key: denied, never retried, no bucket touched.
Decision reserved_key_denial();

// How a member is seen by the node that reports it.
enum class MemberState : uint8_t {
  kAlive,        // heartbeat advancing
  kSuspect,      // heartbeat stalled for fail_after (heartbeat membership)
  kDead,         // stalled for twice fail_after; still probed now and then, forgotten later
  kUnreachable,  // static membership: listed in the peers file, not heard for fail_after
  kLeft,         // announced that it leaves
};
// "alive", "suspect", "dead", "unreachable", "left". Never null.
const char* member_state_name(MemberState s);
// The inverse of member_state_name; false if `name` is none of them.
bool parse_member_state(std::string_view name, MemberState* out);

// One member as a node sees it (`tollgate members`, Membership::view()).
struct MemberInfo {
  std::string id;
  std::string address;  // gossip address, "host:port"
  MemberState state = MemberState::kAlive;
  uint64_t incarnation = 0;
  uint64_t heartbeat = 0;
  int64_t last_heard_ns = 0;  // how long since its heartbeat last advanced (0 for the node itself)
  bool self = false;
};

// Named counters and gauges, in the daemon's stable order (`tollgate stats`).
using StatsList = std::vector<std::pair<std::string, int64_t>>;

// What a reset did (`tollgate reset KEY`, `POST /v1/reset`, Member::reset; docs/design.md 6.6):
// the key's bucket is full again at the node that made it, and at every node within a round or
// two; consumption admitted anywhere before a node learned of the reset charges no fresh bucket.
struct ResetReply {
  std::string error;      // "" when the reset was made
  bool limited = false;   // a rule governs the key where it was made
  int64_t remaining = 0;  // when limited: the tokens its bucket holds now (its burst)
};

// Network faults a daemon injects into its own gossip (tests and tollgate-sim, through the admin
// API). All defaults: no faults.
struct FaultSettings {
  std::vector<std::string> drop_to;    // node ids (or gossip addresses) it stops sending to
  std::vector<std::string> drop_from;  // node ids whose messages it drops on arrival
  double loss = 0;                     // probability in [0, 1] that an outgoing message is lost
  int64_t delay_ms = 0;                // added to every outgoing message
  double duplicate = 0;                // probability in [0, 1] that an outgoing message goes twice
  int64_t jitter_ms = 0;               // plus a uniform random [0, jitter_ms] each: messages reorder

  bool empty() const {
    return drop_to.empty() && drop_from.empty() && loss == 0 && delay_ms == 0 && duplicate == 0 && jitter_ms == 0;
  }
  // "" if usable, else what is wrong ("loss must be between 0 and 1").
  std::string validate() const;
};

}  // namespace tollgate

#endif  // TOLLGATE_TYPES_H_
