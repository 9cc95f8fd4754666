#include "config/node_settings.h"

#include "config/setting_text.h"
#include "tollgate/duration.h"

namespace tollgate {
namespace {

template <typename E>
std::string parse_choice(std::string_view text, std::string_view a, E ea, std::string_view b, E eb, E& out) {
  size_t i = 0;
  std::string why = parse_choice_setting(text, {a, b}, i);
  if (why.empty()) out = i == 0 ? ea : eb;
  return why;
}

#define TOLLGATE_DURATION_FIELD(FLAG, MEMBER, MIN_NS, HELP)                      \
  NodeSettingField {                                                             \
    FLAG, HELP, "DURATION",                                                      \
        [](std::string_view t, NodeSettings& s) {                                \
      return parse_duration_setting(t, MIN_NS, kMaxSettingDurationNs, s.MEMBER); \
    },                                                                           \
        [](const NodeSettings& s) { return format_duration(s.MEMBER); }          \
  }
#define TOLLGATE_WHOLE_FIELD(FLAG, MEMBER, MIN, MAX, HELP)                                                      \
  NodeSettingField {                                                                                            \
    FLAG, HELP, #MIN ".." #MAX,                                                                                 \
        [](std::string_view t, NodeSettings& s) { return parse_whole_setting<size_t>(t, MIN, MAX, s.MEMBER); }, \
        [](const NodeSettings& s) { return std::to_string(s.MEMBER); }                                          \
  }

const NodeSettingField kFields[] =
    {
        {"mode",
         "Dissemination: auto (gossip below 128 members, relay from 128), gossip (fan-out to random peers), mesh "
         "(everyone) or relay (two hops over groups of about sqrt(N) members); docs/operations.md 3.1",
         "{auto,mesh,gossip,relay}",
         [](std::string_view t, NodeSettings& s) {
  for (DisseminationMode m :
       {DisseminationMode::kAuto, DisseminationMode::kMesh, DisseminationMode::kGossip, DisseminationMode::kRelay}) {
    if (t == dissemination_mode_name(m)) {
      s.mode = m;
      return std::string();
    }
  }
  return "must be auto, mesh, gossip or relay, got " + quoted(t);
         },
         [](const NodeSettings& s) { return std::string(dissemination_mode_name(s.mode)); }},
        {"membership", "static (--peers-file) or heartbeat (--seeds)", "{static,heartbeat}",
         [](std::string_view t, NodeSettings& s) {
  return parse_choice(t, "static", MembershipKind::kStatic, "heartbeat", MembershipKind::kHeartbeat, s.membership);
         },
         [](const NodeSettings& s) {
  return std::string(s.membership == MembershipKind::kStatic ? "static" : "heartbeat");
        }},
    {"partition-policy",
     "open: every reachable group enforces the full limit; proportional: refill scaled by reachable/known members",
     "{open,proportional}",
     [](std::string_view t, NodeSettings& s) {
  return parse_choice(t, "open", PartitionPolicy::kOpen, "proportional", PartitionPolicy::kProportional,
                      s.partition_policy);
     },
     [](const NodeSettings& s) { return std::string(partition_policy_name(s.partition_policy)); }},
    TOLLGATE_DURATION_FIELD("interval", interval_ns, kNanosPerMilli, "Dissemination round"),
    TOLLGATE_WHOLE_FIELD("fanout", fanout, 1, 64, "Gossip: peers per round"),
    TOLLGATE_WHOLE_FIELD("relay-groups", relay_groups, 0, 65536,
                         "Relay: groups the members are hashed into; 0 chooses from the cluster's size (about "
                         "sqrt(N) groups), and every member must come to the same number"),
    TOLLGATE_WHOLE_FIELD("member-rows", member_rows, 2, 1024,
                         "Membership rows each gossip message carries (this node's included), rotating through the "
                         "members: more spread heartbeats faster in large clusters, at the cost of bytes "
                         "(docs/operations.md)"),
    TOLLGATE_DURATION_FIELD(
        "fail-after", fail_after_ns, 1,
        "A member silent this long is suspect (heartbeat) or unreachable (static); dead after twice that"),
    TOLLGATE_DURATION_FIELD("forget-after", forget_after_ns, 1,
                            "Heartbeat: a dead member is forgotten after this long"),
    TOLLGATE_DURATION_FIELD("probe-interval", probe_interval_ns, 1,
                            "Dead and unreachable members are probed this often"),
    TOLLGATE_DURATION_FIELD("push-pull-interval", push_pull_interval_ns, 1,
                            "Anti-entropy exchange with one random peer this often"),
    TOLLGATE_WHOLE_FIELD("max-keys", max_keys, 1, 100000000,
                         "Buckets held at most (least recently used evicted beyond)"),
    TOLLGATE_WHOLE_FIELD("retransmit-mult", retransmit_mult, 1, 16,
                         "Gossip: each node sends a batch to mult x ceil(log10(N + 1)) peers in all (N members); "
                         "more copies reach every node sooner and under more loss, at the cost of bytes"),
    TOLLGATE_WHOLE_FIELD("near-limit", near_limit, 1, 100,
                         "An allowed check that leaves more than this percent of its limit's burst used counts as "
                         "near the limit (tollgate_rule_near_limit_total; the reference RLS server's "
                         "NEAR_LIMIT_RATIO, 0.8, is 80)"),
    TOLLGATE_DURATION_FIELD(
        "sync-deadline", sync_deadline_ns, 0,
        "At start, learn every bucket that is not full from one live peer (and the consumption "
        "it includes) before answering for keys whose limit refills more slowly than the 10s "
        "repair window (e.g. 100/d): those are denied ('starting: still learning this key's balance "
        "from peers') until it has them, or "
        "until no peer has answered for this long; 0s turns it off (a restarted node would then "
        "hand out a fresh burst of a spent daily limit). docs/design.md 6.5"),
    TOLLGATE_WHOLE_FIELD("top-k", top_k, 0, 4096,
                         "Top-K (GET /v1/top): counters kept per rule and metric (denied checks, tokens admitted) "
                         "for the keys this node decides; more narrow the stated error; 0 turns top-K off. "
                         "docs/design.md 7.8"),
    TOLLGATE_DURATION_FIELD("top-window", top_window_ns, kNanosPerSecond,
                            "Top-K: counts are kept per window of this length; an answer covers the last one to "
                            "two windows"),
    TOLLGATE_WHOLE_FIELD("top-gossip-bytes", top_gossip_bytes, 0, 16777216,
                         "Top-K: bytes per second this node's summaries may cost gossip, every copy counted; they "
                         "are sent every (copies x members x their bytes / this), from 1s up to --top-window, so "
                         "more bytes buy a fresher cluster-wide answer; 0: each node answers for itself"),
    TOLLGATE_WHOLE_FIELD("top-rules", top_rules, 1, 4096,
                         "Top-K: rules tracked at most (a rule's counting starts at its first check; rules beyond "
                         "are counted in top_rules_refused)"),
    TOLLGATE_WHOLE_FIELD("max-leases", max_leases, 1, 10000000,
                         "Concurrency leases this node holds at once, at most (acquires beyond answer 'too many "
                         "leases', counted in leases_refused); part of the memory bound printed at start"),
    TOLLGATE_WHOLE_FIELD("max-lease-rows", max_lease_rows, 1, 100000000,
                         "Other members' lease counts kept, one per (member, key), at most (beyond: counted in "
                         "lease_rows_dropped, and those leases are not counted here); part of the memory bound"),
    };

#undef TOLLGATE_DURATION_FIELD
#undef TOLLGATE_WHOLE_FIELD

const NodeSettingField& field(std::string_view flag) {
  for (const NodeSettingField& f : kFields) {
    if (f.flag == flag) return f;
  }
  return kFields[0];  // not reached: callers name fields of the table
}

}  // namespace

std::string NodeSettingField::name(SettingNames names) const {
  if (names == SettingNames::kFlags) return "--" + std::string(flag);
  std::string key(flag);
  for (char& c : key) c = c == '-' ? '_' : c;
  return key;
}

std::span<const NodeSettingField> node_setting_fields() { return kFields; }

SettingProblem validate(const NodeSettings& s, SettingNames names) {
  auto name = [&](std::string_view flag) { return field(flag).name(names); };
  if (s.fail_after_ns < 2 * s.interval_ns) {
    return {"fail-after", name("fail-after") + " " + format_duration(s.fail_after_ns) + " must be at least two " +
                              name("interval") + " rounds (" + format_duration(s.interval_ns) + ")"};
  }
  if (s.forget_after_ns < 15 * kNanosPerSecond) {
    return {"forget-after", name("forget-after") +
                                " must be at least 15s: consumption is kept 10s for repair, and a member must not be "
                                "forgotten while its batches can still arrive"};
  }
  return {};
}

void NodeSettings::apply_to(NodeOptions& o) const {
  o.mode = mode;
  o.partition_policy = partition_policy;
  o.interval_ns = interval_ns;
  o.fanout = fanout;
  o.relay_groups = uint32_t(relay_groups);
  o.push_pull_interval_ns = push_pull_interval_ns;
  o.membership.kind = membership;
  o.membership.fail_after_ns = fail_after_ns;
  o.membership.dead_after_ns = 2 * fail_after_ns;
  o.membership.forget_after_ns = forget_after_ns;
  o.membership.probe_interval_ns = probe_interval_ns;
  o.membership.member_rows = member_rows;
  o.keys.max_keys = max_keys;
  o.retransmit_mult = static_cast<uint32_t>(retransmit_mult);
  o.sync_deadline_ns = sync_deadline_ns;
  o.keys.near_limit_percent = uint32_t(near_limit);
  o.top.capacity = top_k;
  o.top.window_ns = top_window_ns;
  o.top.max_rules = top_rules;
  o.top_gossip_bytes = top_gossip_bytes;
  o.leases.max_leases = max_leases;
  o.max_lease_rows = max_lease_rows;
}

}  // namespace tollgate
