// tollgate inside a service's own process (the design material's first option): a full cluster
// member, on a background thread, that speaks the same gossip as tollgated over UDP or TCP:
// dissemination, membership, push-pull repair. A cluster may mix daemons and members; they share
// every limit. Checks are answered on the caller's thread, from any number of threads at once,
// with no inter-process call and without waiting for the background thread: if it stalls or the
// network is gone, checks go on answering from local state (and over-admit, as a partition
// does).
//
//   tollgate::MemberOptions o;
//   o.node_id = "api-7";
//   o.bind = "10.0.0.7:7946";
//   o.cluster_key_file = "/etc/tollgate/cluster.key";
//   o.peers_file = "/etc/tollgate/peers.txt";  // the daemons' peers file, this member listed
//   o.rules_file = "/etc/tollgate/rules.yaml";
//   tollgate::Member member(o);                 // joins the cluster
//   if (!member.check("user:42").allowed) return 429;
//   tollgate::MemberLease lease = member.acquire("db");  // a slot of `concurrency: N`
//   if (!lease) return 429;                               // released when `lease` goes
//
// Link tollgate::embedded (find_package(tollgate)). docs/operations.md, "Embedded or daemon".
#ifndef TOLLGATE_MEMBER_H_
#define TOLLGATE_MEMBER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tollgate/decision.h"
#include "tollgate/lease.h"
#include "tollgate/rls_config.h"
#include "tollgate/types.h"

namespace tollgate {

enum class MemberLogLevel : uint8_t { kInfo, kWarn, kError };

// The settings a daemon takes, under tollgated's names (docs/operations.md, section 2).
struct MemberOptions {
  std::string node_id;                  // unique in the cluster; default: `bind`
  std::string bind = "127.0.0.1:7946";  // gossip address, host:port (port 0: any free one)
  std::string transport = "udp";        // "udp" or "tcp"
  // Gossip is authenticated: the cluster's key file (as --cluster-key-file), required unless
  // insecure_gossip is set.
  std::string cluster_key_file;
  bool insecure_gossip = false;
  // Static membership (the default): the peers file the daemons use, this member listed in it;
  // re-read when it changes. Heartbeat membership ({"membership", "heartbeat"} in settings):
  // seeds to join through.
  std::string peers_file;
  std::vector<std::string> seeds;
  // The rules: a rules file (as --rules, re-read within two seconds of an edit; a broken edit
  // leaves the rules in force), or the same YAML as text; at most one of the two, and one of
  // them or rls_config.
  std::string rules_file;
  std::string rules_yaml;
  // Envoy's rate limit config (as --rls-config: an envoyproxy/ratelimit YAML file, or a
  // directory of them): its limits join the rules, under the bucket keys tollgated's rate limit
  // service uses, so a member and the daemons share them; should_rate_limit() answers
  // descriptors against it. Re-read when its files change.
  std::string rls_config;
  bool rls_merge_domains = false;  // as --rls-merge-domains: a domain may span several files
  bool rls_shadow_mode = false;    // as --rls-shadow-mode: every descriptor in shadow mode
  bool rls_quota_mode = false;     // as --rls-quota-mode: every descriptor in quota mode
  // Any node setting by tollgated's flag name, without the dashes: {"interval", "50ms"},
  // {"mode", "gossip"}, {"fail-after", "3s"}, {"max-keys", "200000"}, ... A cluster's members
  // should agree on interval, mode and membership.
  std::vector<std::pair<std::string, std::string>> settings;
  size_t max_datagram = 1400;  // as --max-datagram
  // A key flood: once this many keys have consumption not yet sealed, the member's thread seals
  // them before the round does (0: only rounds seal). Checks never wait for sealing, so this only
  // splits a flood's round into parts and bounds what waits for it; but each part takes the
  // entries it seals from the checking threads' caches, and a key checked again after an early
  // seal is sealed again in the same round (one more entry on the wire). At tollgated's 256 a
  // check on Zipf keys cost 1.6x the bare key table's; on uniform keys over 100k, 1.29x at
  // 16,384, 1.23x at 65,536 and 1.19x with no early sealing (docs/results.md).
  size_t early_seal_keys = 65'536;
  uint64_t incarnation = 0;  // 0: from the wall clock, as tollgated
  // As tollgated's --state-dir: balances that are not full are kept in STATE_DIR/state (every 10 s
  // and when the member is destroyed) and read back when a member of the same node_id starts, so a
  // spent daily limit stays spent across the service's restarts. A state file that cannot be
  // used makes create() fail, naming it. Empty: none.
  std::string state_dir;
  // Where the member's log lines go (reloads, refused files, misbehaving peers); none if empty.
  // Called on the member's background thread, and during construction on the constructing one.
  std::function<void(MemberLogLevel level, const std::string& line)> log;
};

// What a member has done, for the service's own metrics. Safe to read from any thread.
struct MemberStats {
  uint64_t checks = 0, allowed = 0, denied = 0;
  uint64_t rounds = 0;
  size_t members_alive = 0;  // other members this one sees alive (as of its last round)
  // True while the member, just created, waits for a peer's balances (the setting
  // {"sync-deadline", "5s"}, docs/design.md 6.5): until then it denies checks of keys whose limit
  // refills more slowly than 10 s (DenyReason::kSyncing), so as not to hand out a fresh burst of
  // a key the cluster has spent. Ready for them once false.
  bool syncing = false;
  uint64_t messages_sent = 0, messages_received = 0;
  uint64_t early_seals = 0;  // times a flood of keys was sealed between rounds
  // Evicted keys whose consumption was dropped before the background thread sealed it (stuck,
  // or behind a key flood by more than max(max-keys, 2 x early_seal_keys, 4,096 per shard)
  // keys): the cluster never counts it. Worth an alert.
  uint64_t pending_dropped = 0;
  // Files read again (rules, RLS config, cluster key, peers; on an edit or on reload()), and
  // those refused (the previous one stays in force), as of the last round or reload().
  uint64_t reloads = 0, reload_failures = 0;
  int64_t rules_version = 0;  // the rules in force: as tollgated's rules_version (0: none)
  // Gossip dropped before the node saw it: not authenticated by the cluster key (another key,
  // a key rotation not yet done everywhere), malformed, stale or over a sender's byte budget.
  uint64_t gossip_rejected = 0;
  // Empty while the background thread runs; what stopped it otherwise (an exception: checks
  // still answer, from local state only). Worth an alert in the service.
  std::string stopped_by;
};

// One descriptor of an Envoy rate limit request: its entries in order, its own hits_addend if it
// has one (has_hits; 0 then only looks), and Envoy's limit override if it carries one (the
// override wins over the config, RlsConfig::match_override). The entries are views: the strings
// they point to must outlive the call (`{{"ip", request.ip()}}` dangles if ip() returns a string
// by value).
struct RateLimitDescriptor {
  std::vector<RlsEntry> entries;
  bool has_hits = false;
  uint64_t hits = 0;
  std::optional<RlsLimitOverride> limit = std::nullopt;
  bool is_negative_hits = false;  // a refund: the hits are given back (never above burst), not charged
};

// One descriptor's answer, as tollgated's rate limit service gives it (docs/operations.md 10.3).
struct RateLimitStatus {
  bool over_limit = false;
  const RlsLimit* limit = nullptr;  // the governing limit; null for none or unlimited
  uint32_t remaining = 0;           // limit_remaining
  int64_t until_full_ns = -1;       // duration_until_reset; -1: none
  int64_t retry_after_ns = 0;       // when over: until the same cost would pass (kRetryNever)
  bool shadow_over = false;         // a shadow_mode descriptor that would have denied
};

class Member;

// A concurrency lease a Member granted (Member::acquire): a slot of a key's `concurrency: N`,
// counted at every member and daemon until released, renewed past its TTL, or its member is
// marked failed. Released by its destructor; must not outlive its Member. Move-only.
class MemberLease : public LeaseFacts {
 public:
  MemberLease() = default;
  MemberLease(MemberLease&& other) noexcept;
  MemberLease& operator=(MemberLease&& other) noexcept;
  ~MemberLease();

  // True when the caller may go ahead: granted, or no concurrency rule governs the key.
  bool granted() const { return granted_; }
  explicit operator bool() const { return granted_; }
  // The lease's id (32 hex digits); empty when nothing is held.
  const std::string& id() const { return id_; }
  // Frees the lease now; true if it was held. Afterwards this holds nothing.
  bool release();
  // Extends it to `ttl` from now (0: the rule's lease_ttl); false if it is no longer held.
  bool renew(std::chrono::nanoseconds ttl = {});

 private:
  friend class Member;
  Member* member_ = nullptr;
  bool granted_ = false;
  std::string id_;
};

class Member {
 public:
  // Reads the files, validates the settings, binds the gossip socket and starts the background
  // thread. Throws ConfigError (tollgate/config_error.h) for a bad file, naming it and the line,
  // std::invalid_argument for a bad setting, and std::runtime_error for a socket it cannot bind.
  explicit Member(MemberOptions options);
  // Sends what it admitted since its last round with its departure, then stops the thread: the
  // others mark it left at once instead of suspecting it. Takes about 0.1 s.
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  // May key `key` spend `cost` tokens? Thread-safe; decided from this member's buckets.
  Decision check(std::string_view key, int64_t cost = 1);
  // Several checks, all or nothing (the Envoy rate limit service's several descriptors): true if
  // every one passed and all were charged; false if none was. `out` holds items.size().
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out);
  // Envoy's ShouldRateLimit, in process: `domain`'s descriptors resolved against rls_config and
  // decided together by tollgated's rate limit service's own code (all or nothing; shadow mode,
  // replaces, hits_addend; the same buckets). One difference: the daemon decides one request at
  // a time, while here other threads' checks may come between this request's steps (its
  // zero-cost looks, its all-or-nothing charge, its shadow charges), each of which is still
  // whole. Returns true if the request is over
  // the limit; `out` gets one status per descriptor (its `limit` lives as long as the member).
  // Thread-safe. Throws std::invalid_argument for a request the service answers with
  // INVALID_ARGUMENT (an empty domain, no descriptors, more than 64, an entry without a key, ...)
  // and when the member has no rls_config.
  bool should_rate_limit(std::string_view domain, std::span<const RateLimitDescriptor> descriptors,
                         std::vector<RateLimitStatus>& out, uint32_t hits_addend = 1);

  // What SIGHUP does to tollgated: the rules file, the RLS config and the cluster key file are
  // read again (a step of a key rotation is a reload() on every member and a SIGHUP on every
  // daemon). A broken file is logged and counted (stats().reload_failures), and the one in force
  // stays. Rules and RLS config are parsed on a thread of their own, so checks never wait for a
  // large document. Waits up to 10 s for the outcome (called from the background thread, e.g.
  // from the log callback, it only starts the reload): false when that thread has stopped
  // (stats().stopped_by) or did not get to it in time, true once done. Thread-safe.
  bool reload();
  // Makes `key` full again at every member and daemon of the cluster within a round or two, as
  // `tollgate reset KEY` does (docs/design.md 6.6): consumption admitted before a node heard of
  // the reset does not count against the fresh bucket. Made on the member's thread; waits up to
  // 10 s for it (the reply's error says so when the thread has stopped or did not get to it:
  // it resets when it gets to it, if it ever does). Thread-safe.
  ResetReply reset(std::string_view key);

  // Takes `count` slots of `key`'s concurrency limit (a rule's `concurrency: N`, docs/design.md
  // 6.7) for `ttl` (0: the rule's lease_ttl), decided on the caller's thread from what this
  // member has heard of every member's count. Thread-safe. Keys only should_rate_limit may
  // charge (first byte 0x1E) are refused.
  MemberLease acquire(std::string_view key, int64_t count = 1, std::chrono::nanoseconds ttl = {});
  // By id (MemberLease::id): for a lease handed to another part of the service. Thread-safe.
  bool release_lease(std::string_view id);
  bool renew_lease(std::string_view id, std::chrono::nanoseconds ttl = {});

  uint16_t gossip_port() const;  // the bound port (with port 0 in `bind`)
  MemberStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate

#endif  // TOLLGATE_MEMBER_H_
