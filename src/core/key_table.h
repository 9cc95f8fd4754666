// Per-key buckets with bounded memory: the state a node decides against.
//
// Each key that a rule governs gets a TokenBucket, created full on first use. Memory is bounded
// by max_keys: inserting past it evicts a key not used recently, chosen by CLOCK (second chance),
// the O(1) approximation of LRU: a key used since the clock hand last passed it is never evicted
// before one that was not, and a check costs no list relinking. An evicted bucket that had
// not refilled (in debt, or partly spent) is remembered by its key's hash in a small bounded
// side table, so the key comes back at its remembered balance instead of full. Keys whose
// bucket has refilled carry no information and are removed by sweep_idle().
//
// The table also records the cost it admitted per key since the last take_pending(): that is
// this node's consumption, which the Ledger seals into batches for the other nodes. Evicted
// keys' consumption waits for it too, up to a bound (KeyTableOptions::min_pending_evicted); beyond
// that (nothing took it during a key flood) it is dropped and counted:
// KeyTableStats::pending_dropped.
//
// By default single-owner: one thread (the daemon's node loop, or the simulator) and no locks.
// With KeyTableOptions::concurrent, checks (allow, allow_all), remote charges, sweep_idle,
// balances, limits and stats may be called from any number of threads at once: the keys are
// hashed into up to 64 shards, each with its own lock, held for one key's operation (allow_all:
// the request's shards, in ascending order, for the whole decision). Everything above holds per
// shard (max_keys and max_remembered are split evenly, adding up to the table's exactly, with at
// least one each: only more shards than max_keys go beyond it). take_pending, replace_rules, set_rate_scale, rules()
// and rule_counters() belong to one owner thread at a time (the node's), though checks may run meanwhile: take_pending
// holds a lock for at most 32 keys, sweep_idle for max_scan / shards, and replace_rules and set_rate_scale visit every
// key, one shard at a time. pending_keys() is then approximate (each shard adds its changes 16 at a time; 0 once
// drained).
#ifndef TOLLGATE_SRC_CORE_KEY_TABLE_H_
#define TOLLGATE_SRC_CORE_KEY_TABLE_H_

#include <array>
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

#include "core/clock.h"
#include "core/consumption.h"
#include "core/token_bucket.h"
#include "tollgate/types.h"

namespace tollgate {

class RuleSet;

struct KeyTableOptions {
  size_t max_keys = 1'000'000;  // buckets held at most; a least recently used key is evicted beyond this
  size_t max_key_bytes = 256;   // longer keys are denied with DenyReason::kKeyTooLong
  // RuleCounters::near_limit counts an allowed check that leaves more than this percent of its
  // burst used (the reference RLS server's NEAR_LIMIT_RATIO, 0.8).
  uint32_t near_limit_percent = 80;
  // Evicted, not yet refilled balances remembered (about 100 bytes each). 0 disables it.
  size_t max_remembered = 65'536;
  // Evicted keys whose consumption take_pending has not taken yet are kept up to the largest of
  // max_keys, 4,096 per shard and this many (in all, split over the shards like max_keys);
  // beyond, their consumption is dropped and counted (KeyTableStats::pending_dropped). A Node
  // that seals early sets it to twice its early_seal_keys, so that only a sealer stuck or far
  // behind loses any.
  size_t min_pending_evicted = 0;
  // Safe for concurrent use (see above); costs an uncontended lock per check.
  bool concurrent = false;
  // Concurrent: shards (a power of two up to 64; rounded down). 0: 64, fewer for a table too
  // small to give each shard 1,024 keys.
  size_t shards = 0;
  // Checks (allow, allow_all) may be given a time that is cheaper to read than precise_clock's
  // but behind it by up to coarse_lag_ns (never ahead): CLOCK_MONOTONIC_COARSE against
  // CLOCK_MONOTONIC, whose lag is up to two ticks while the kernel's ticks come on time. An
  // admitted check reads no clock: refill only grows with time, so the precise time admits it
  // too. A denied one is decided again at
  // precise_clock->now_ns() when its limit refills its whole burst within the lag (a pacing
  // limit such as 1,000/s with burst 1, which coarse times would hold to one burst per tick) or
  // charges when over (the charge is the precise time's); any other denial stands, and the
  // tokens that refilled during the lag are there for the next check: never lost, only up to
  // one lag late (the denial's retry_after_ns is the coarse time's, up to the lag too long, and an
  // admitted check's remaining up to rate x lag low). A cost above the burst is denied at any time
  // and not decided again. allow_all decides the whole request again at the precise time when any
  // of its denials would be, or when it is denied and charges a charge_when_over cost.
  // A check stamped early may also spend tokens before refill would have capped them at the
  // burst, so a key may pass up to rate x lag more over a window than at the precise time
  // (1,000/s and 8 ms: 8 tokens). The clock must outlive the table and be safe to read from
  // every thread that checks.
  const Clock* precise_clock = nullptr;
  int64_t coarse_lag_ns = 0;
  // The secret keys are hashed with, so that nobody who does not know it can choose keys that
  // collide in the table (hash flooding). Unset: a fixed, public key, for tests and benches
  // only; a Node sets it from its Random unless given one, and tollgated and the embedded
  // member from the operating system's randomness, per process.
  std::optional<std::array<uint64_t, 2>> hash_key = std::nullopt;
};

struct KeyTableStats {
  size_t keys = 0;               // buckets held now
  size_t bytes = 0;              // estimated heap bytes held by the table, remembered balances included
  uint64_t evictions = 0;        // keys evicted (CLOCK) because the table was at max_keys
  uint64_t idle_removed = 0;     // keys removed by sweep_idle() because their bucket had refilled
  uint64_t rejected_keys = 0;    // checks refused because the key was too long
  size_t remembered = 0;         // evicted balances remembered now
  uint64_t restored = 0;         // keys re-created at a remembered balance rather than full
  uint64_t forgotten_debts = 0;  // remembered balances dropped before refilling (memory bound)
  uint64_t remote_ignored = 0;   // remote charges ignored: no rule governs the key here, or too long
  // Evicted keys whose consumption was dropped unreported: too many evicted keys were waiting
  // for take_pending (see above; a member's thread stuck under a key flood).
  uint64_t pending_dropped = 0;
  // Denials by a key's own bucket that top-K never heard of: the key was evicted before
  // take_pending, or an all-or-nothing request denied a key that has no entry yet.
  uint64_t denials_unharvested = 0;
  // The most index slots a lookup of a key reads now (a shard's, the largest): a few unless keys
  // collide in their keyed hash, which nobody without the process's secret can make them do.
  size_t longest_probe = 0;
};

// What take_pending hands over for a key beside its tokens, for top-K (issue 41).
struct KeyActivity {
  uint32_t denied = 0;  // checks its own bucket denied (not shadow mode, not another check's)
  // The rule (index into rules()) that governed it; RuleSet::kUnlimited when not known (a key
  // that left the table: match it again).
  uint32_t rule = UINT32_MAX;
};

// One rule's checks at this node, for metrics (envoyproxy/ratelimit's per-rule stats).
struct RuleCounters {
  uint64_t checks = 0, allowed = 0, denied = 0;
  uint64_t shadow_denied = 0;  // allowed (and counted so) only because the limit is in shadow mode
  uint64_t near_limit = 0;     // allowed, leaving more than near_limit_percent of the burst used
};

// Every check decided by the table (allow and allow_all; each item of a request counts).
struct CheckCounts {
  uint64_t checks = 0, allowed = 0, denied = 0;
};

class KeyTable {
 public:
  explicit KeyTable(std::shared_ptr<const RuleSet> rules, KeyTableOptions options = {});
  // The most heap a table of these options can hold, whatever keys it is given: max_keys keys of
  // max_key_bytes, as many evicted keys waiting for take_pending, max_remembered balances, and
  // the index at its largest (growing). KeyTableStats::bytes is what it holds now.
  static size_t memory_bound(const KeyTableOptions& options);
  ~KeyTable();
  KeyTable(KeyTable&&) noexcept;
  KeyTable& operator=(KeyTable&&) noexcept;

  // The local admission check. Finds or creates the key's bucket and calls try_acquire; an
  // admitted cost is recorded as this node's consumption. Under a charge_when_over limit a denied
  // cost is charged and recorded all the same (into debt down to -max_debt). A key no rule governs is admitted with
  // Decision::limited == false and no bucket. The Decision carries the governing limit (rate
  // scale applied), from the same probe. On an existing key: no heap allocation.
  Decision allow(std::string_view key, int64_t cost, MonoNanos now_ns);

  // Several checks decided together, all or nothing: if every one is allowed, all are charged
  // (as allow() would, in order; the same key twice adds up) and true is returned; if any is
  // denied, none is charged and false is returned. Then a check that would have passed alone is
  // denied with DenyReason::kOtherCheckDenied and the retry_after_ns of the slowest denied check,
  // and every `remaining` is the balance untouched by this request. A key no rule governs is
  // allowed either way. `out` must hold items.size() decisions. So a request over several limits
  // never spends the limits that allowed it when another denies it. The exception: a limit with
  // charge_when_over is charged whatever the outcome (Decision::charged_anyway when denied).
  bool allow_all(std::span<const CheckItem> items, std::span<Decision> out, MonoNanos now_ns);

  // Gives `tokens` back to the key's bucket, never above burst (Envoy's is_negative_hits: a cost
  // charged earlier and refunded), and records them as this node's negative consumption, which
  // take_pending reports (summed with the key's consumption of the same round) so that every node
  // gives them back. Not counted as a check. The Decision is the bucket after it, as a cost-0
  // query reports it; a key no rule governs has no bucket (limited == false), and a refund of 0 or
  // fewer tokens changes nothing.
  Decision refund(std::string_view key, int64_t tokens, MonoNanos now_ns);

  // Charges `tokens` that another node admitted (see TokenBucket::consume_remote), creating the
  // bucket if a rule governs the key. Returns false if the charge was ignored (no rule, or the
  // key is too long). Not recorded as this node's consumption.
  bool charge_remote(std::string_view key, int64_t tokens, MonoNanos now_ns);

  // Appends to `out` the cost admitted locally since the previous call (net of refunds: an entry
  // may be negative, and a key whose refunds cancel its cost is left out), one entry per key
  // (keys evicted in between included), and resets it. Nothing is lost or reported twice. With
  // `max_keys`, takes at most that many keys' consumption and leaves the rest for later calls.
  // With `activity`, also hands over each key's denials (KeyActivity), one item appended per entry
  // appended to `out`, and then a key whose only news is denials is in `out` with 0 tokens.
  void take_pending(std::vector<ConsumptionEntry>& out, size_t max_keys = SIZE_MAX,
                    std::vector<KeyActivity>* activity = nullptr);
  // Keys (evicted ones included) with consumption take_pending() has not taken yet, at most.
  size_t pending_keys() const;
  // KeyTableStats::pending_dropped alone, without stats()' walk over every key.
  uint64_t pending_dropped() const;
  // KeyTableStats::denials_unharvested alone, the same way.
  uint64_t denials_unharvested() const;

  // Examines up to `max_scan` keys, round-robin from where the previous call stopped, and removes
  // those whose bucket has refilled to burst (their pending consumption is kept and still
  // reported by take_pending); also drops remembered balances that have refilled. Returns the
  // number of keys removed. Call it a few hundred keys at a time so no call is long.
  size_t sweep_idle(MonoNanos now_ns, size_t max_scan);

  // Calls f(key, balance in microtokens) for every bucket that is not full at `now_ns`, among
  // up to `max_entries` entries from `*cursor` on (0: the first), and moves the cursor on;
  // returns true once every entry has been visited. The owner's; each shard locked for its part
  // only, so a large table can be walked a slice at a time with checks in between (a key
  // inserted meanwhile may be missed, one that moved visited twice). Evicted balances,
  // remembered by hash only, are not visited.
  bool for_each_unfull(MonoNanos now_ns, uint64_t* cursor, size_t max_entries,
                       const std::function<void(std::string_view, int64_t)>& f);
  // Creates `key`'s bucket at `balance_microtokens` as of `at_ns` (refill from then on is
  // counted at its next use), clamped to its limit. False, and nothing done, when no rule
  // governs the key, it is too long, or it is in the table already.
  bool restore(std::string_view key, int64_t balance_microtokens, MonoNanos at_ns);
  // A reset (docs/design.md 6.6): the key's bucket is full from `now_ns`, and its consumption not
  // yet taken by take_pending is dropped; an evicted key's remembered balance is forgotten.
  // True if the table held the key.
  bool reset(std::string_view key, MonoNanos now_ns);
  // Balances from a peer (Node's sync on start): the bucket a peer held at `balance_microtokens`
  // as of `at_ns`, refilled to `now_ns` and less `minus_tokens` (consumption we hold that the
  // peer's balance does not include), replaces ours when it is lower; a missing bucket is
  // created first. Never raises a balance. True if it lowered one; false for a key no rule
  // governs or that is too long.
  bool lower(std::string_view key, int64_t balance_microtokens, MonoNanos at_ns, int64_t minus_tokens,
             MonoNanos now_ns);

  // Installs new rules. A key whose governing limit is unchanged keeps its bucket untouched; a
  // key whose limit changed keeps its balance clamped into the new [-max_debt, burst]; a key no
  // rule governs any more is dropped.
  void replace_rules(std::shared_ptr<const RuleSet> rules, MonoNanos now_ns);

  // The key's balance in microtokens after refilling to `now_ns`; nullopt if the table has no
  // bucket for it. Does not count as a use for eviction.
  std::optional<int64_t> balance_microtokens(std::string_view key, MonoNanos now_ns);

  // The limit that governs `key` (the bucket's if the table has one, else the rules'), with the
  // rate scale applied; nullopt if the key is not limited.
  std::optional<Limit> limit_for(std::string_view key) const;

  // Makes every bucket refill at num/den (<= 1) of its rule's rate from `now_ns` on: the
  // proportional partition policy, where num/den = reachable / known members. Buckets are
  // settled at the old rate first. 1/1 restores the rules' rates. num 0 is treated as 1/1000 of
  // den so a bucket always refills eventually.
  void set_rate_scale(uint32_t num, uint32_t den, MonoNanos now_ns);

  // The checks decided, in all and by rule: counted where they are decided, under the shard's
  // lock, so a concurrent table counts without a lock or shared cache line of its own. Rules
  // are counted by RuleSet::label: two rules that label alike are summed, and a rule keeps its
  // counts across replace_rules under the same label (those of up to 1,024 labels no longer in
  // force are kept too, for a rule that comes back). Unlimited keys count in check_counts only.
  CheckCounts check_counts() const;
  std::vector<std::pair<std::string, RuleCounters>> rule_counters() const;

  const RuleSet& rules() const;
  size_t size() const;
  size_t shards() const;  // 1 unless concurrent
  KeyTableStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_KEY_TABLE_H_
