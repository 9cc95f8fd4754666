// The settings of a node that an operator or a scenario chooses, in one place: the struct with its
// defaults, the text form of each setting, the checks across settings, and the NodeOptions they
// imply. tollgated's flags and config-file keys, tollgate-sim's scenario keys and override flags,
// and the flags the simulator's local back end passes to tollgated are all made from
// node_setting_fields(), so a new setting is one field here, one row in node_settings.cc, and
// its use in the core.
#ifndef TOLLGATE_SRC_CONFIG_NODE_SETTINGS_H_
#define TOLLGATE_SRC_CONFIG_NODE_SETTINGS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/node.h"

namespace tollgate {

struct NodeSettings {
  DisseminationMode mode = DisseminationMode::kAuto;
  MembershipKind membership = MembershipKind::kStatic;
  PartitionPolicy partition_policy = PartitionPolicy::kOpen;
  int64_t interval_ns = 50 * kNanosPerMilli;            // one dissemination round
  size_t fanout = 3;                                    // gossip: peers per round
  size_t relay_groups = 0;                              // relay: groups (0: from the cluster's size)
  size_t member_rows = 64;                              // membership rows per message, ours included
  int64_t fail_after_ns = 2 * kNanosPerSecond;          // silent this long: suspect / unreachable
  int64_t forget_after_ns = 60 * kNanosPerSecond;       // heartbeat: a dead member is forgotten
  int64_t probe_interval_ns = 1 * kNanosPerSecond;      // dead and unreachable members are probed
  int64_t push_pull_interval_ns = 1 * kNanosPerSecond;  // anti-entropy with one random peer
  size_t max_keys = 1'000'000;                          // buckets held at most
  size_t retransmit_mult = 4;                           // gossip: copies of a batch = mult x ceil(log10(N + 1))
  int64_t sync_deadline_ns = 5 * kNanosPerSecond;       // balances from a peer on start (0: off)
  size_t near_limit = 80;                               // percent of a burst used that counts as near
  size_t top_k = 128;                                   // top-K: counters per rule and metric (0: off)
  int64_t top_window_ns = 60 * kNanosPerSecond;         // top-K: an answer covers one to two windows
  size_t top_gossip_bytes = 32768;                      // top-K: bytes/s units may cost gossip (0: none)
  size_t top_rules = 64;                                // top-K: rules tracked at most
  size_t max_leases = 20'000;                           // leases held by this node at most
  size_t max_lease_rows = 100'000;                      // other members' (member, key) lease counts at most

  // Sets these settings' part of `o` (a member dead after twice fail_after, ...).
  void apply_to(NodeOptions& o) const;
  friend bool operator==(const NodeSettings&, const NodeSettings&) = default;
};

// How a setting is named: tollgated's flag ("fail-after", as --fail-after and as the config
// file's key) or the scenario's key ("fail_after"): one name, in each file's style.
enum class SettingNames : uint8_t { kFlags, kScenario };

// One setting as text.
struct NodeSettingField {
  std::string_view flag;  // "fail-after"; the scenario key is the same with '_' for '-': "fail_after"
  std::string_view help;
  std::string_view type_name;  // for --help: "DURATION", "1..64", "{mesh,gossip}"
  // Reads `text` into `s`; returns "" or why not, as a phrase that follows the setting's name
  // ("must be a whole number from 1 to 64, got \"0\"").
  std::string (*parse)(std::string_view text, NodeSettings& s);
  std::string (*format)(const NodeSettings& s);

  std::string name(SettingNames names) const;  // "--fail-after" or "fail_after"
  std::string key() const { return name(SettingNames::kScenario); }
};

// Every setting, in the order --help and scenarios list them.
std::span<const NodeSettingField> node_setting_fields();

// A check across settings that failed: the setting to blame (its flag) and why, naming settings
// in the style of `names` ("--fail-after 99ms must be at least two --interval rounds (50ms)").
struct SettingProblem {
  std::string_view flag;
  std::string message;
};
// Empty message when the settings go together.
SettingProblem validate(const NodeSettings& s, SettingNames names);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_NODE_SETTINGS_H_
