// Concurrency leases at one node (issue 40; docs/design.md 6.7): the leases this node granted,
// and per key its own count and the sum of the live members' counts it has heard of.
//
// A lease is `count` slots of one key's concurrency limit (RuleSet::concurrency_match), held
// until it is released or its TTL passes. acquire() grants it when this node's view of the
// cluster's count (own + remote) leaves room for it under the limit. The node seals the own
// counts that changed (take_changes) into batches of counts, and adds what it hears of the
// others through add_remote (InflightView keeps the rows and the liveness behind the sums).
//
// Thread-safe: acquire, release, renew, in_flight and stats from any thread; the rest is the
// node's (its owner thread), while those run. Keys are hashed (a keyed hash: nobody who does not
// know the secret can make keys collide) into 16 shards, each under its own lock, held for one
// operation; a lease lives in its key's shard, whose index is the first byte of its id.
//
// Ids are 16 bytes: the shard, then 15 bytes from the IdSource (the daemon: the operating
// system's randomness), so an id cannot be guessed from others. Bounded: at most max_leases
// leases at once, and keys only while a lease, a remote count or an unsent change holds them.
#ifndef TOLLGATE_SRC_CORE_LEASE_TABLE_H_
#define TOLLGATE_SRC_CORE_LEASE_TABLE_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/consumption.h"

namespace tollgate {

class KeyedHash;
class RuleSet;

struct LeaseId {
  std::array<uint8_t, 16> bytes{};
  // 32 lowercase hex characters.
  std::string hex() const;
  // The inverse of hex(); nullopt for anything else.
  static std::optional<LeaseId> parse(std::string_view hex);
  friend bool operator==(const LeaseId&, const LeaseId&) = default;
};

enum class LeaseOutcome : uint8_t {
  kGranted,
  kUnlimited,      // no concurrency rule governs the key: nothing held, nothing to release
  kOverLimit,      // the cluster holds too many of the key's leases; retry later
  kNever,          // count above the limit: never grantable
  kTooManyLeases,  // this node holds max_leases already
  kInvalid,        // count < 1, or a key too long
};
const char* lease_outcome_name(LeaseOutcome o);

struct LeaseGrant {
  LeaseOutcome outcome = LeaseOutcome::kInvalid;
  LeaseId id;                  // when granted
  MonoNanos expires_ns = 0;    // when granted: when it expires unless renewed
  int64_t ttl_ns = 0;          // when granted: the TTL it got (expires_ns - the time of the grant)
  int64_t in_flight = 0;       // the key's count as this node sees it, this grant included
  int64_t limit = 0;           // the key's concurrency limit (0: none)
  uint32_t rule = UINT32_MAX;  // RuleSet::concurrency_match, or kUnlimited
  bool granted() const { return outcome == LeaseOutcome::kGranted || outcome == LeaseOutcome::kUnlimited; }
};

// A concurrency rule's leases as this node sees them (LeaseTable::rule_leases).
struct RuleLeases {
  int64_t in_flight = 0;  // slots held cluster-wide: this node's and the live members' it heard of
  int64_t held = 0;       // slots this node's leases hold
};

// What release_anonymous() did (Envoy's stream-done call, by key).
struct AnonymousRelease {
  int64_t owed = 0;      // slots of calls that took nothing (owe_release), settled
  int64_t released = 0;  // slots of the key's oldest anonymous leases, freed
  bool matched() const { return owed > 0 || released > 0; }
};

// A release owed by a call that took nothing waits this long for Envoy's stream-done call (which
// comes as the stream ends; a denied stream ends at once).
inline constexpr int64_t kOwedReleaseNs = 10'000'000'000;

struct LeaseTableOptions {
  size_t max_leases = 20'000;                   // held at once by this node (--max-leases)
  int64_t max_ttl_ns = 3600 * kNanosPerSecond;  // a lease never lives longer unrenewed
  size_t max_key_bytes = 256;
  // The secret keys are hashed with (KeyTableOptions::hash_key); unset: a fixed one (tests).
  std::optional<std::array<uint64_t, 2>> hash_key = std::nullopt;
};

struct LeaseStats {
  uint64_t acquired = 0;  // leases granted
  uint64_t denied = 0;    // acquires refused over the limit (kOverLimit, kNever)
  uint64_t refused = 0;   // acquires refused for max_leases or invalid input
  uint64_t released = 0;  // leases released by their holder
  uint64_t expired = 0;   // leases that reached their TTL
  uint64_t renewed = 0;
  uint64_t unknown = 0;              // releases and renewals of no lease held here
  uint64_t anonymous_acquired = 0;   // leases granted by key (Envoy's hits_addend)
  uint64_t anonymous_released = 0;   // of those, freed by key (Envoy's is_negative_hits)
  uint64_t owed_settled = 0;         // releases by key that settled a call that took nothing
  uint64_t anonymous_unmatched = 0;  // releases by key that found nothing to free or settle
  uint64_t owed_dropped = 0;         // owed releases not recorded: too many keys owed already
  size_t queued_keys = 0;            // keys with leases by key or an owed release now
  size_t held = 0;                   // leases held now
  size_t keys = 0;                   // keys with a count now (own or remote)
};

class LeaseTable {
 public:
  // Fills `n` bytes with randomness nobody else can predict.
  using IdSource = std::function<void(uint8_t* out, size_t n)>;
  LeaseTable(LeaseTableOptions options, IdSource ids);
  ~LeaseTable();
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;

  // The rules whose concurrency limits acquire() applies (the node's, on every reload).
  void set_rules(std::shared_ptr<const RuleSet> rules);
  // `--partition-policy proportional` (docs/design.md 6.7): acquire() grants up to
  // floor(limit x reachable / known), the members this node can reach among those it knows (the
  // node's, each round), so the sides of a partition hold the limit together, not each. Not
  // called under `open`: the whole limit.
  void set_share(uint32_t reachable, uint32_t known);

  // Takes `count` slots of `key` for `ttl_ns` (0: the rule's lease_ttl; never above max_ttl_ns).
  LeaseGrant acquire(std::string_view key, int64_t count, int64_t ttl_ns, MonoNanos now_ns);
  // Frees a lease. False when no lease of that id is held here (released, expired, or never).
  bool release(const LeaseId& id);
  // Extends a lease to now + ttl_ns (0: its rule's TTL); its new expiry, or nullopt as release.
  std::optional<MonoNanos> renew(const LeaseId& id, int64_t ttl_ns, MonoNanos now_ns);
  // The key's count as this node sees it: its own leases and the live members' it heard of.
  int64_t in_flight(std::string_view key) const;

  // Leases by key, for Envoy (rls/decide.cc), whose stream-done call names the descriptor and
  // not the lease. acquire_anonymous() is acquire() whose lease joins its key's queue.
  LeaseGrant acquire_anonymous(std::string_view key, int64_t count, int64_t ttl_ns, MonoNanos now_ns);
  // A call that took nothing (denied, or only looked) is still followed by Envoy's release: the
  // key owes `count` slots of release for kOwedReleaseNs, so that release frees nobody's lease.
  void owe_release(std::string_view key, int64_t count, MonoNanos now_ns);
  // Releases `count` slots of `key`: what it owes first, then its oldest anonymous leases (a
  // lease is freed whole).
  AnonymousRelease release_anonymous(std::string_view key, int64_t count, MonoNanos now_ns);

  // The node's. Frees up to `max` leases whose TTL has passed; returns how many.
  size_t expire(MonoNanos now_ns, size_t max);
  // Appends the own count of every key whose count changed since the last call (0 included).
  void take_changes(std::vector<InflightEntry>* out);
  // Every key's own count that is not 0, sorted by key (a refresh).
  std::vector<InflightEntry> own_counts() const;
  // The remote sum of `key` moves by `delta` (InflightView, as rows change and members fail).
  void add_remote(std::string_view key, int64_t delta);
  // True if any concurrency rule is in force or any count is held: the node has something to
  // refresh.
  bool active() const;

  LeaseStats stats() const;
  // The most the table can hold at `options` (the daemon's printed memory bound): max_leases
  // leases over as many keys, owed releases for as many keys again, and `remote_keys` keys
  // whose count comes from other members only (InflightView's rows), each key at its longest.
  static size_t bound_bytes(const LeaseTableOptions& options, size_t remote_keys);
  // Per concurrency rule in force (by its `match`), every one listed: a walk of the keys with a
  // count, each matched once per rules version (for /metrics, not per request).
  std::vector<std::pair<std::string, RuleLeases>> rule_leases() const;

 private:
  struct Shard;
  Shard& shard_of(std::string_view key, uint8_t* index) const;
  // acquire(), and with `by_key` the lease joins its key's queue under the same lock.
  LeaseGrant grant(std::string_view key, int64_t count, int64_t ttl_ns, MonoNanos now_ns, bool by_key);
  // The TTL a lease gets: the one asked for, else its rule's, within [1 ns, max_ttl_ns].
  int64_t ttl_for(int64_t requested_ns, int64_t rule_ns) const;

  LeaseTableOptions options_;
  IdSource ids_;
  std::unique_ptr<KeyedHash> hash_;
  std::vector<std::unique_ptr<Shard>> shards_;
  // The rules under a mutex, copied out by current_rules(): libstdc++ 12's
  // std::atomic<std::shared_ptr> unlocks a load with relaxed order, so a load racing a store is
  // a data race (TSan caught one between acquire() and a reload).
  std::shared_ptr<const RuleSet> current_rules() const;
  mutable std::mutex rules_mu_;
  std::shared_ptr<const RuleSet> rules_;
  std::atomic<uint32_t> rules_version_{1};  // bumped by set_rules: the keys' rule is matched again
  std::atomic<size_t> held_{0};
  std::atomic<size_t> queued_keys_{0};  // Shard::queues' entries, all shards
  std::atomic<uint64_t> share_{0};      // set_share: reachable << 32 | known; 0: the whole limit
  struct Counters;
  std::unique_ptr<Counters> counters_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_LEASE_TABLE_H_
