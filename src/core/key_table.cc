#include "core/key_table.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/key_table/entry_store.h"
#include "core/key_table/pending_orphans.h"
#include "core/key_table/probes.h"
#include "core/key_table/rate_scale.h"
#include "core/key_table/remembered_balances.h"
#include "core/key_table/shard_mutex.h"
#include "tollgate/rules.h"
#include "util/flat_table.h"
#include "util/heap_bytes.h"
#include "util/keyed_hash.h"

namespace tollgate {
namespace {

// The key table's parts (core/key_table/), each with its own tests.
using key_table::Entry;
using key_table::EntryStore;
using key_table::PendingOrphans;
using key_table::Probe;
using key_table::Probes;
using key_table::RateScale;
using key_table::Remembered;
using key_table::RememberedBalances;
using key_table::ShardLock;
using key_table::ShardMutex;

constexpr uint32_t kNil = UINT32_MAX;
// __extension__ keeps -Wpedantic quiet about the GCC/Clang builtin type.
__extension__ typedef __int128 Wide;

void add_to(RuleCounters& into, const RuleCounters& c) {
  into.checks += c.checks;
  into.allowed += c.allowed;
  into.denied += c.denied;
  into.shadow_denied += c.shadow_denied;
  into.near_limit += c.near_limit;
}

// A limit in shadow mode denies nothing: what it would deny passes, uncharged, and says so.
void pass_in_shadow(Decision& d) {
  if (d.allowed || !d.limit.shadow) return;
  if (d.reason != DenyReason::kInsufficientTokens && d.reason != DenyReason::kCostExceedsBurst) return;
  d.allowed = true;
  d.shadow_denied = true;
  d.reason = DenyReason::kNone;
  d.retry_after_ns = 0;
}

// Whether a check denied at a time that may lag the precise clock is decided again at the
// precise time (KeyTableOptions::precise_clock): when its limit would lose tokens to the lag (it
// refills its whole burst within it), or charges a denied cost (at the decision's time). Other
// denials stand: the tokens that arrived during the lag are there for the next check.
struct Refine {
  const Clock* clock = nullptr;
  int64_t lag_ns = 0;
  bool wanted(const Decision& d, const Limit& limit) const {
    if (clock == nullptr || d.allowed || d.reason == DenyReason::kInvalidCost) return false;
    if (limit.charge_when_over) return true;
    // A cost above the burst is denied at any time.
    return d.reason != DenyReason::kCostExceedsBurst &&
           Wide(limit.rate.tokens) * lag_ns >= Wide(limit.burst) * limit.rate.period_ns;
  }
};

// The single-owner table: every key of one shard (KeyTable::Impl holds one, or several behind
// locks). Lookups take the key's hash, computed once by the caller.
class Shard {
 public:
  Shard(std::shared_ptr<const RuleSet> rules, KeyTableOptions options, const KeyedHash& hash)
      : index_(std::clamp<size_t>(options.max_keys, 1, 512) * 2),
        rules_(std::move(rules)),
        orphans_(orphan_capacity(options)),
        refine_{options.precise_clock, options.coarse_lag_ns},
        options_(options),
        hash_(hash),
        remembered_(options.max_remembered) {
    if (options_.max_keys == 0) options_.max_keys = 1;
    options_.max_key_bytes = std::min<size_t>(options_.max_key_bytes, UINT16_MAX);
  }

  size_t hash_key(std::string_view key) const { return hash_(key); }

  // The most heap a shard of these options can hold, from the sizes of what it keeps (the
  // KeyTable::memory_bound test measures the heap against it).
  static size_t bound_bytes(const KeyTableOptions& o) {
    const size_t keys = std::max<size_t>(o.max_keys, 1);
    const size_t key_bytes = std::min<size_t>(o.max_key_bytes, UINT16_MAX);
    // A heap block of n bytes (util/heap_bytes.h).
    auto block = heap_block_bytes;
    // Open addressing at most half full, grown early (from a quarter full) when a run gets long:
    // at most 8 slots per entry, and 12 while the old array is copied into the new.
    constexpr size_t kSlotsPerEntry = 12;
    size_t b = EntryStore::bound_bytes(keys);
    if (key_bytes > Entry::kInlineKey) b += keys * block(key_bytes);  // keys too long to live inline
    b += keys * kSlotsPerEntry * sizeof(IndexSlot);
    b += keys * 2 * 2 * sizeof(uint32_t);  // free_ and dirty_, each up to twice what they hold
    b += PendingOrphans::bound_bytes(orphan_capacity(o), key_bytes);
    b += RememberedBalances::bound_bytes(o.max_remembered);
    return b;
  }

  // A check, counted (see count()).
  Decision allow(std::string_view key, size_t hash, int64_t cost, MonoNanos now) {
    const Decision d = decide(key, hash, cost, now);
    count(d, d.allowed);
    return d;
  }

  // One check's decision in the counts: in all as allowed or denied (a request of several
  // counts each item as the request went), and under its rule by its own outcome.
  void count(const Decision& d, bool allowed) {
    ++totals_.checks;
    ++(allowed ? totals_.allowed : totals_.denied);
    if (d.rule == RuleSet::kUnlimited) return;
    if (d.rule >= counts_.size()) counts_.resize(d.rule + 1);
    RuleCounters& c = counts_[d.rule];
    ++c.checks;
    if (!d.allowed) {
      ++c.denied;
      return;
    }
    ++c.allowed;
    if (d.shadow_denied) ++c.shadow_denied;
    if (d.has_limit() && d.remaining * 100 < d.limit.burst * int64_t(100 - options_.near_limit_percent)) {
      ++c.near_limit;
    }
  }
  const CheckCounts& totals() const { return totals_; }
  const std::vector<RuleCounters>& counts() const { return counts_; }
  std::vector<RuleCounters>& counts() { return counts_; }

  // A check, not counted.
  Decision decide(std::string_view key, size_t hash, int64_t cost, MonoNanos now) {
    uint32_t slot = find(key, hash);
    if (slot == kNil) {
      if (key.size() > options_.max_key_bytes) {
        ++stats_.rejected_keys;
        Decision d;
        d.reason = DenyReason::kKeyTooLong;
        d.retry_after_ns = kRetryNever;
        return d;
      }
      const uint32_t rule = rules_->match(key);
      if (rule == RuleSet::kUnlimited) {
        Decision d;
        d.allowed = true;
        d.limited = false;
        d.remaining = INT64_MAX;
        return d;
      }
      slot = insert(key, hash, rule, now);
    } else {
      touch(slot);
    }
    Entry& e = slots_[slot];
    const Limit limit = limit_of(e.rule);
    Decision d = e.bucket.try_acquire(limit, cost, now);
    if (refine_.wanted(d, limit)) {
      // The refill to `now` above and on to the later time adds what one refill would.
      if (const MonoNanos later = refine_.clock->now_ns(); later > now) {
        now = later;
        d = e.bucket.try_acquire(limit, cost, now);
      }
    }
    d.limit = limit;
    d.rule = e.rule;
    pass_in_shadow(d);
    if (d.allowed && !d.shadow_denied && cost > 0) {
      record(slot, cost);
    } else if (!d.allowed && cost > 0) {
      if (limit.charge_when_over) charge_anyway(slot, limit, cost, now, d);
      note_denied(slot);
    }
    return d;
  }

  // A check the key's own bucket denied (not shadow mode, not another check of the request):
  // counted in the entry for take_pending, which hands it to top-K (issue 41).
  void note_denied(uint32_t slot) {
    Entry& e = slots_[slot];
    if (e.denied != UINT32_MAX) ++e.denied;
    mark_dirty(slot);
  }

  // allow_all, denied: the check at `key` was denied by its own bucket. The entry may not exist
  // (phase 1 probed a copy): then the denial is not counted for top-K, and counted so.
  void note_denied(std::string_view key) {
    if (const uint32_t slot = find(key, hash_key(key)); slot != kNil) {
      note_denied(slot);
    } else {
      ++stats_.denials_unharvested;
    }
  }

  // Gives `tokens` back to the key's bucket (never above burst) and records them as this node's
  // refund (negative consumption), for take_pending: every node gives them back. Not counted as
  // a check. The Decision is the bucket's state after it, as a query (cost 0) reports it.
  Decision refund(std::string_view key, size_t hash, int64_t tokens, MonoNanos now) {
    const Decision before = decide(key, hash, 0, now);  // finds or creates the bucket
    if (!before.limited || tokens <= 0) return before;
    const uint32_t slot = find(key, hash);
    Entry& e = slots_[slot];
    e.bucket.refund(limit_of(e.rule), tokens, now);
    record(slot, -tokens);
    return decide(key, hash, 0, now);
  }

  // This node's consumption of `cost` on the key at `slot` (a refund when negative), for
  // take_pending.
  void record(uint32_t slot, int64_t cost) {
    slots_[slot].pending += cost;
    mark_dirty(slot);
  }

  void mark_dirty(uint32_t slot) {
    Entry& e = slots_[slot];
    if (!e.dirty) {
      e.dirty = true;
      dirty_.push_back(slot);  // never allocates: its capacity covers every slot (insert)
    }
  }

  // A denied cost under charge_when_over: taken all the same, into debt down to -max_debt (as a
  // remote charge would be), and recorded whole: every other node charges it too, each within
  // its own floor.
  void charge_anyway(uint32_t slot, const Limit& limit, int64_t cost, MonoNanos now, Decision& d) {
    Entry& e = slots_[slot];
    e.bucket.consume_remote(limit, cost, now);
    record(slot, cost);
    d.charged_anyway = true;
    d.remaining = e.bucket.try_acquire(limit, 0, now).remaining;
    // When the same cost could pass again, from the balance it left.
    d.retry_after_ns = cost > limit.burst ? kRetryNever : e.bucket.nanos_until(limit, cost * kMicrotokensPerToken);
  }

  // allow_all's phase 1 for a key not probed yet in the request: true with `q` set to what
  // the key's bucket is now (or what insert() would make of it: a full bucket, or its
  // remembered balance); false with `d` the final decision for a key too long or not limited.
  bool probe(std::string_view key, MonoNanos now, Probe& q, Decision& d) {
    const size_t hash = hash_key(key);
    q.key = key;
    if (const uint32_t slot = find(key, hash); slot != kNil) {
      q.limit = limit_of(slots_[slot].rule);
      q.rule = slots_[slot].rule;
      q.bucket = slots_[slot].bucket;
    } else if (key.size() > options_.max_key_bytes) {
      ++stats_.rejected_keys;
      d = Decision{};
      d.reason = DenyReason::kKeyTooLong;
      d.retry_after_ns = kRetryNever;
      return false;
    } else if (const uint32_t rule = rules_->match(key); rule == RuleSet::kUnlimited) {
      d = Decision{true, INT64_MAX, 0, DenyReason::kNone, false, {}};
      return false;
    } else {
      q.limit = limit_of(rule);
      q.rule = rule;
      q.bucket = TokenBucket(q.limit, now);
      if (const Remembered* r = remembered_.find(hash)) {
        q.bucket = r->bucket;
        q.bucket.balance_microtokens(r->limit, now);
        if (!(r->limit == q.limit)) q.bucket.clamp_to(q.limit);
      }
    }
    q.before = q.bucket;
    return true;
  }

  // allow_all, denied: a limited check's cost under charge_when_over, taken all the same.
  void charge_denied(std::string_view key, int64_t cost, MonoNanos now, Decision& d) {
    const size_t hash = hash_key(key);
    uint32_t slot = find(key, hash);
    if (slot == kNil) slot = insert(key, hash, rules_->match(key), now);
    charge_anyway(slot, limit_of(slots_[slot].rule), cost, now, d);
  }

  // KeyTable::restore.
  bool restore(std::string_view key, size_t hash, int64_t balance, MonoNanos at) {
    if (find(key, hash) != kNil || key.size() > options_.max_key_bytes) return false;
    const uint32_t rule = rules_->match(key);
    if (rule == RuleSet::kUnlimited) return false;
    const uint32_t slot = insert(key, hash, rule, at);
    Entry& e = slots_[slot];
    e.bucket = TokenBucket::with_balance(limit_of(rule), balance, at);
    return true;
  }

  // KeyTable::reset.
  bool reset(std::string_view key, size_t hash, MonoNanos now) {
    const uint32_t slot = find(key, hash);
    if (slot == kNil) {
      remembered_.take(hash);  // an evicted balance must not come back
      return false;
    }
    Entry& e = slots_[slot];
    e.bucket = TokenBucket(limit_of(e.rule), now);
    e.pending = 0;  // admitted before the reset: it charges no fresh bucket anywhere
    return true;
  }

  // KeyTable::lower.
  bool lower(std::string_view key, size_t hash, int64_t balance, MonoNanos at, int64_t minus_tokens, MonoNanos now) {
    if (key.size() > options_.max_key_bytes) return false;
    uint32_t slot = find(key, hash);
    const uint32_t rule = slot != kNil ? slots_[slot].rule : rules_->match(key);
    if (rule == RuleSet::kUnlimited) return false;
    if (slot == kNil) slot = insert(key, hash, rule, now);
    const Limit limit = limit_of(rule);
    TokenBucket theirs = TokenBucket::with_balance(limit, balance, std::min(at, now));
    const Wide wide = Wide(theirs.balance_microtokens(limit, now)) - Wide(minus_tokens) * kMicrotokensPerToken;
    const int64_t target = int64_t(
        std::clamp<Wide>(wide, std::numeric_limits<int64_t>::min() / 2, std::numeric_limits<int64_t>::max() / 2));
    Entry& e = slots_[slot];
    if (target >= e.bucket.balance_microtokens(limit, now)) return false;
    e.bucket = TokenBucket::with_balance(limit, target, now);
    return true;
  }

  // KeyTable::for_each_unfull over entries [from, from + max): the next entry to visit, or
  // the entry count once all are. Entries keep their place until evicted, so a walk in
  // slices sees each key that stays.
  size_t for_each_unfull(MonoNanos now, size_t from, size_t max,
                         const std::function<void(std::string_view, int64_t)>& f) {
    const size_t to = std::min(slots_.size(), from + max);
    for (size_t i = from; i < to; ++i) {
      Entry& e = slots_[i];
      if (!e.live) continue;
      const Limit limit = limit_of(e.rule);
      const int64_t balance = e.bucket.balance_microtokens(limit, now);
      if (balance < limit.burst * kMicrotokensPerToken) f(e.key(), balance);
    }
    return to;
  }
  size_t entry_count() const { return slots_.size(); }

  bool charge_remote(std::string_view key, size_t hash, int64_t tokens, MonoNanos now) {
    uint32_t slot = find(key, hash);
    if (slot == kNil) {
      const uint32_t rule = key.size() > options_.max_key_bytes ? RuleSet::kUnlimited : rules_->match(key);
      if (rule == RuleSet::kUnlimited) {
        ++stats_.remote_ignored;
        return false;
      }
      slot = insert(key, hash, rule, now);
    } else {
      touch(slot);
    }
    Entry& e = slots_[slot];
    e.bucket.consume_remote(limit_of(e.rule), tokens, now);
    return true;
  }

  void take_pending(std::vector<ConsumptionEntry>& out, size_t max_keys, std::vector<KeyActivity>* activity) {
    take_pending_each(max_keys, [&](std::string_view key, int64_t tokens, KeyActivity a) {
      if (activity == nullptr && tokens == 0) return;
      out.push_back({std::string(key), tokens});
      if (activity != nullptr) activity->push_back(a);
    });
  }

  // The same, each key handed to `take(key, tokens, activity)`: a concurrent table copies the
  // keys' bytes under the lock and makes the strings after releasing it.
  template <class Take>
  void take_pending_each(size_t max_keys, Take take) {
    // Keys that left the table first (their pending is already out of the list), then the most
    // recently dirtied keys: what is left stays dirty, for the next call.
    const size_t orphans =
        orphans_.take(max_keys, [&](std::string_view key, int64_t tokens) { take(key, tokens, KeyActivity{}); });
    size_t budget = max_keys - orphans;
    for (; !dirty_.empty() && budget > 0; --budget) {
      Entry& e = slots_[dirty_.back()];
      // (off the list only once taken: take may throw)
      if (e.pending != 0 || e.denied != 0) take(e.key(), e.pending, KeyActivity{e.denied, e.rule});
      e.pending = 0;
      e.denied = 0;
      e.dirty = false;
      dirty_.pop_back();
    }
  }

  size_t pending_keys() const { return dirty_.size() + orphans_.size(); }

  // Starts loading the entries the next take_pending_each(n) takes (the last n dirty keys; fewer
  // when keys that left the table come first) into this core's cache, with intent to write.
  // Called under the lock before it is released, so that the next hold finds them there instead
  // of taking one cache miss after another while checks wait for it. A prefetch is only a hint:
  // the entries may change meanwhile.
  void prefetch_pending(size_t n) const {
    for (size_t i = dirty_.size() - std::min(n, dirty_.size()); i < dirty_.size(); ++i) {
      const char* e = reinterpret_cast<const char*>(&slots_[dirty_[i]]);
      __builtin_prefetch(e, 1, 3);
      __builtin_prefetch(e + 64, 0, 3);
    }
  }

  size_t sweep_idle(MonoNanos now, size_t max_scan) {
    size_t removed = 0;
    // A cursor of its own walks the slots round-robin, so every key is examined in turn.
    const size_t scan = std::min(max_scan, slots_.size());
    for (size_t n = 0; n < scan; ++n) {
      if (sweep_hand_ >= slots_.size()) sweep_hand_ = 0;
      const uint32_t s = uint32_t(sweep_hand_++);
      Entry& e = slots_[s];
      if (e.live && e.bucket.full_at(limit_of(e.rule), now)) {
        erase(s);
        ++stats_.idle_removed;
        ++removed;
      }
    }
    // Remembered balances are dropped oldest first once refilled.
    remembered_.expire(now, max_scan);
    return removed;
  }

  // `index`: the new rules' indices by label. Counts move to their label's new index; those of
  // labels no longer in force are added to `gone`.
  void replace_rules(std::shared_ptr<const RuleSet> rules, MonoNanos now,
                     const std::unordered_map<std::string, uint32_t>& index,
                     std::vector<std::pair<std::string, RuleCounters>>& gone) {
    std::shared_ptr<const RuleSet> old = std::move(rules_);
    rules_ = std::move(rules);
    std::vector<RuleCounters> moved(rules_->size());
    for (uint32_t i = 0; i < counts_.size(); ++i) {
      if (counts_[i].checks == 0) continue;
      std::string label = old->label(i);
      if (auto it = index.find(label); it != index.end()) {
        add_to(moved[it->second], counts_[i]);
      } else {
        gone.emplace_back(std::move(label), counts_[i]);
      }
    }
    counts_ = std::move(moved);
    for (uint32_t s = 0; s < slots_.size(); ++s) {
      Entry& e = slots_[s];
      if (!e.live) continue;
      const uint32_t rule = rules_->match(e.key());
      if (rule == RuleSet::kUnlimited) {
        erase(s);
      } else {
        const Limit before = scale_.apply(old->limit(e.rule));
        const Limit after = scale_.apply(rules_->limit(rule));
        if (!(before == after)) {
          e.bucket.balance_microtokens(before, now);  // settle refill under the old rate first
          e.bucket.clamp_to(after);
        }
        e.rule = rule;
      }
    }
  }

  std::optional<Limit> limit_for(std::string_view key) const {
    const uint32_t slot = find(key, hash_key(key));
    if (slot != kNil) return limit_of(slots_[slot].rule);
    const uint32_t rule = key.size() > options_.max_key_bytes ? RuleSet::kUnlimited : rules_->match(key);
    if (rule == RuleSet::kUnlimited) return std::nullopt;
    return limit_of(rule);
  }

  void set_rate_scale(uint32_t num, uint32_t den, MonoNanos now) {
    const RateScale scale = RateScale::of(num, den);
    if (scale == scale_) return;
    // Settle every bucket's refill at the old rate first, so the new rate applies from now on.
    for (uint32_t s = 0; s < slots_.size(); ++s) {
      Entry& e = slots_[s];
      if (e.live) e.bucket.balance_microtokens(limit_of(e.rule), now);
    }
    scale_ = scale;
    for (uint32_t s = 0; s < slots_.size(); ++s) {
      Entry& e = slots_[s];
      if (e.live) e.bucket.clamp_to(limit_of(e.rule));  // the carry belongs to the old period
    }
  }

  std::optional<int64_t> balance(std::string_view key, MonoNanos now) {
    const uint32_t slot = find(key, hash_key(key));
    if (slot == kNil) return std::nullopt;
    Entry& e = slots_[slot];
    return e.bucket.balance_microtokens(limit_of(e.rule), now);
  }

  uint64_t pending_dropped() const { return orphans_.dropped(); }
  uint64_t denials_unharvested() const { return stats_.denials_unharvested; }

  KeyTableStats stats() const {
    KeyTableStats s = stats_;
    s.keys = index_.size();
    s.longest_probe = index_.longest_probe();
    s.remembered = remembered_.size();
    s.pending_dropped = orphans_.dropped();
    size_t bytes = slots_.bytes() + (free_.capacity() + dirty_.capacity()) * sizeof(uint32_t);
    // Long keys' buffers and the orphans, kept as they change: stats are asked for by every
    // `tollgate stats`, /v1/stats and /metrics, and walking a million keys on the node's thread
    // (under the shard's lock) for them held checks up (issue 34, finding 4).
#ifndef NDEBUG
    size_t walked_heap = 0;
    for (size_t i = 0; i < slots_.size(); ++i) walked_heap += slots_[i].key_heap_bytes();
    assert(walked_heap == heap_key_bytes_ && orphans_.walked_bytes() == orphans_.bytes());
#endif
    bytes += heap_key_bytes_ + orphans_.bytes();
    bytes += index_.bytes();
    bytes += remembered_.bytes();
    s.bytes = bytes;
    return s;
  }

  const RuleSet& rules() const { return *rules_; }
  size_t size() const { return index_.size(); }

 private:
  // Keys that left the table with consumption not yet taken, kept at least: more than
  // tollgated's early sealing (256) lets wait, however small max_keys is.
  static constexpr size_t kMinOrphans = 4096;
  // Evicted keys whose consumption waits for take_pending, at most.
  static size_t orphan_capacity(const KeyTableOptions& o) {
    return std::max({o.max_keys, kMinOrphans, o.min_pending_evicted});
  }
  // The index: open addressing with linear probing over a power-of-two array, at most half
  // full. Each slot holds 32 bits of the key's hash (its home position is tag & mask) and the
  // entry number, so a lookup costs one cache line of index and, almost always, one key
  // comparison. Chosen over std::unordered_map, whose per-key heap node adds a dependent cache
  // miss to every check (see bench/key_table_bench.cc).
  struct IndexSlot {
    uint32_t tag = 0;
    uint32_t slot = kNil;  // kNil: empty
  };
  struct IndexPolicy {
    static bool empty(const IndexSlot& x) { return x.slot == kNil; }
    static size_t hash(const IndexSlot& x) { return x.tag; }
  };
  using Index = FlatTable<IndexSlot, IndexPolicy>;

  // The limit a bucket is held to: the rule's, with the refill rate scaled (key_table/rate_scale.h).
  Limit limit_of(uint32_t rule) const { return scale_.apply(rules_->limit(rule)); }

  uint32_t find(std::string_view key, size_t hash) const {
    const uint32_t tag = uint32_t(hash);
    const size_t i = index_.find(tag, [&](const IndexSlot& x) { return x.tag == tag && slots_[x.slot].key() == key; });
    return i == Index::kNone ? kNil : index_.slot(i).slot;
  }

  void index_insert(uint32_t tag, uint32_t slot) { index_.slot(index_.claim(tag)) = {tag, slot}; }

  // Removes `slot` (whose key hashes to `tag`) from the index.
  void index_erase(uint32_t tag, uint32_t slot) {
    index_.erase(index_.find(tag, [slot](const IndexSlot& x) { return x.slot == slot; }));
  }

  uint32_t insert(std::string_view key, size_t hash, uint32_t rule, MonoNanos now) {
    // Take the key's remembered balance out first: the eviction that makes room for it may
    // remember another balance and push this one out.
    const std::optional<Remembered> restored = remembered_.take(hash);
    if (index_.size() >= options_.max_keys) evict_lru();
    uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = uint32_t(slots_.size());
      // The dirty list holds each slot at most once: with room for every slot, record() (a check
      // on an existing key) never allocates.
      if (dirty_.capacity() < slots_.size() + 1) dirty_.reserve(std::max<size_t>(2 * dirty_.capacity(), 64));
      slots_.emplace_back();
    }
    Entry& e = slots_[slot];
    heap_key_bytes_ -= e.key_heap_bytes();
    e.set_key(key);
    heap_key_bytes_ += e.key_heap_bytes();
    e.live = true;
    e.referenced = false;  // a new key earns its second chance by being used again
    e.rule = rule;
    e.pending = 0;  // dirty is left alone: a reused slot may still be on the dirty list
    e.denied = 0;
    const Limit limit = limit_of(rule);
    e.bucket = TokenBucket(limit, now);
    if (restored) {
      e.bucket = restored->bucket;
      e.bucket.balance_microtokens(restored->limit, now);  // refill while it was away
      if (!(restored->limit == limit)) e.bucket.clamp_to(limit);
      ++stats_.restored;
    }
    index_insert(uint32_t(hash), slot);
    return slot;
  }

  void evict_lru() {
    // CLOCK (second chance), the O(1) approximation of LRU: the hand skips, and clears, keys
    // used since it last passed, and evicts the first that was not. A key used since the last
    // pass is never evicted before one that was not, and a check only sets a flag in its own
    // entry instead of relinking list neighbours (two more cache misses per check).
    if (index_.size() == 0) return;
    uint32_t victim;
    for (;;) {
      if (clock_hand_ >= slots_.size()) clock_hand_ = 0;
      Entry& e = slots_[clock_hand_++];
      if (!e.live) continue;
      if (e.referenced) {
        e.referenced = false;
        continue;
      }
      victim = uint32_t(clock_hand_ - 1);
      break;
    }
    Entry& e = slots_[victim];
    const Limit limit = limit_of(e.rule);
    // The victim's bucket was last refilled when it was last used: judge whether it was full as
    // of then, which needs no clock. One that has refilled since is dropped by sweep_idle().
    if (options_.max_remembered > 0 && e.bucket.raw_balance_microtokens() < limit.burst * kMicrotokensPerToken) {
      stats_.forgotten_debts += remembered_.remember(hash_key(e.key()), e.bucket, limit);
    }
    erase(victim);
    ++stats_.evictions;
  }

  // Removes a key. Its pending consumption moves to orphans_ so it is still reported. The
  // slot stays on the dirty list if it is on it (take_pending skips it while it has nothing
  // pending), which keeps removal O(1).
  void erase(uint32_t slot) {
    Entry& e = slots_[slot];
    if (e.pending != 0) orphans_.add(e.key(), e.pending);
    stats_.denials_unharvested += e.denied;  // the orphan keeps tokens only
    index_erase(uint32_t(hash_key(e.key())), slot);
    heap_key_bytes_ -= e.key_heap_bytes();
    e.clear_key();
    e.live = false;
    e.pending = 0;
    e.denied = 0;
    free_.push_back(slot);
  }

  void touch(uint32_t slot) { slots_[slot].referenced = true; }

  // What every check reads comes first, together (four cache lines; it was spread over the
  // object): a concurrent table's checks visit up to 64 shards, each with its own copy of these,
  // which must share the core's L1 and L2 with the entries. Then, on a line of its own, what every
  // check writes: not on the lock's line (LockedShard), which waiting threads read while the
  // holder would be writing it, and not among what checks only read, which threads on one hot
  // key can then all keep. What only inserts and the owner use follows, from the next line.
  //
  // The index starts small (8 KiB) and doubles as keys arrive: a node with few keys (or one of
  // the simulator's thousand) stays small. It never holds more than max_keys, so it stops growing
  // at 2 * max_keys slots (4 * if a long probe run made it double early: util/flat_table.h).
  Index index_;
  EntryStore slots_;
  std::shared_ptr<const RuleSet> rules_;
  RateScale scale_;                   // every rule's refill rate scaled by it
  std::vector<RuleCounters> counts_;  // by the rules' index (the counts themselves on the heap)
  PendingOrphans orphans_;            // pending of keys that left the table
  size_t heap_key_bytes_ = 0;         // the buffers of keys longer than Entry::kInlineKey (stats)
  Refine refine_;                     // read by every check (is there a precise clock?)
  alignas(64) CheckCounts totals_;
  std::vector<uint32_t> dirty_;  // slots with pending (or left dirty by erase), most recent last
  alignas(64) KeyTableOptions options_;
  std::vector<uint32_t> free_;
  size_t clock_hand_ = 0;          // next slot evict_lru() examines
  size_t sweep_hand_ = 0;          // next slot sweep_idle() examines
  const KeyedHash& hash_;          // the table's (KeyTable::Impl::hash_)
  RememberedBalances remembered_;  // balances of evicted keys, by key hash
  KeyTableStats stats_;
};

// One shard and the lock that guards it (taken only in a concurrent table), a cache line of
// its own so that checks on neighbouring shards do not share one.
struct alignas(64) LockedShard {
  LockedShard(std::shared_ptr<const RuleSet> rules, KeyTableOptions options, const KeyedHash& hash)
      : shard(std::move(rules), options, hash) {}
  mutable ShardMutex mutex;  // const: stats and limits lock too
  // Under the lock: the shard's pending keys as last added to the table's count
  // (Impl::note_pending).
  int64_t published = 0;
  Shard shard;
};

// Shards of a concurrent table at most, and keys per shard at least (a small table has fewer).
constexpr size_t kMaxShards = 64;
constexpr size_t kMinKeysPerShard = 1024;
// A concurrent table's take_pending holds a shard's lock for at most this many keys at a time,
// so sealing a flood of keys never holds a check up for longer than that.
constexpr size_t kTakePerLock = 32;

}  // namespace

// The shards. A single-owner table has one and never locks; a concurrent one hashes each key to
// one of up to 64 shards (by the high half of its hash: the low half places it in the shard's
// index) and takes that shard's lock for the key's operation.
class KeyTable::Impl {
 public:
  Impl(std::shared_ptr<const RuleSet> rules, KeyTableOptions options)
      : rules_(rules),
        concurrent_(options.concurrent),
        refine_{options.precise_clock, options.coarse_lag_ns},
        hash_(options.hash_key.value_or(KeyedHash::Key{})) {
    const size_t n = shard_count(options);
    for (size_t i = 0; i < n; ++i)
      shards_.push_back(std::make_unique<LockedShard>(rules, shard_options(options, n, i), hash_));
  }

  static size_t shard_count(const KeyTableOptions& options) {
    size_t n = 1;
    if (options.concurrent && options.shards > 0) {
      n = std::bit_floor(std::min(options.shards, kMaxShards));
    } else if (options.concurrent) {
      n = kMaxShards;
      while (n > 1 && options.max_keys / n < kMinKeysPerShard) n /= 2;
    }
    return n;
  }
  // Split so that the shards' bounds add up to the table's exactly (--max-keys is a promise),
  // except that each shard holds at least one key, and remembers at least one balance if any is
  // to be remembered (a shard remembering none would bring keys back full from debt).
  static KeyTableOptions shard_options(const KeyTableOptions& options, size_t n, size_t i) {
    auto share = [n, i](size_t total) { return total / n + (i < total % n ? 1 : 0); };
    KeyTableOptions each = options;
    each.max_keys = std::max<size_t>(1, share(options.max_keys));
    each.max_remembered = options.max_remembered == 0 ? 0 : std::max<size_t>(1, share(options.max_remembered));
    each.min_pending_evicted = (options.min_pending_evicted + n - 1) / n;
    return each;
  }
  static size_t bound_bytes(const KeyTableOptions& options) {
    const size_t n = shard_count(options);
    size_t b = n * sizeof(LockedShard);
    for (size_t i = 0; i < n; ++i) b += Shard::bound_bytes(shard_options(options, n, i));
    return b;
  }

  size_t hash_key(std::string_view key) const { return hash_(key); }
  size_t shard_index(size_t hash) const { return (hash >> 32) & (shards_.size() - 1); }
  LockedShard& shard_of(size_t hash) { return *shards_[shard_index(hash)]; }
  const LockedShard& shard_of(size_t hash) const { return *shards_[shard_index(hash)]; }

  Decision allow(std::string_view key, int64_t cost, MonoNanos now) {
    const size_t hash = hash_key(key);
    LockedShard& s = shard_of(hash);
    ShardLock lock(s.mutex, concurrent_);
    if (!concurrent_) return s.shard.allow(key, hash, cost, now);
    const Decision d = s.shard.allow(key, hash, cost, now);
    note_pending(s);
    return d;
  }

  bool allow_all(std::span<const CheckItem> items, std::span<Decision> out, MonoNanos now) {
    thread_local Probes probes;
    if (shards_.size() == 1) {
      LockedShard& s = *shards_[0];
      ShardLock lock(s.mutex, concurrent_);
      const bool all =
          allow_all_in([&](std::string_view) -> Shard& { return s.shard; }, items, out, now, refine_, probes);
      note_pending(s);
      return all;
    }
    // Every shard the request touches, locked in ascending order (so two requests never wait
    // for each other), for the whole decision: all or nothing across shards.
    thread_local std::vector<uint32_t> touched;
    touched.clear();
    for (const CheckItem& c : items) touched.push_back(uint32_t(shard_index(hash_key(c.key))));
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    // Unlocked however this returns (an allocation can throw in there).
    struct Unlock {
      Impl& t;
      ~Unlock() {
        for (uint32_t i : touched) {
          t.note_pending(*t.shards_[i]);
          t.shards_[i]->mutex.unlock();
        }
      }
    };
    for (uint32_t i : touched) shards_[i]->mutex.lock();
    Unlock unlock{*this};
    return allow_all_in([&](std::string_view key) -> Shard& { return shard_of(hash_key(key)).shard; }, items, out, now,
                        refine_, probes);
  }

  // f(shard, hash) under the lock of `key`'s shard; then its pending count, which an insert may
  // have changed (it can evict a key with pending consumption).
  template <typename F>
  auto on_key_shard(std::string_view key, F&& f) {
    const size_t hash = hash_key(key);
    LockedShard& s = shard_of(hash);
    ShardLock lock(s.mutex, concurrent_);
    auto result = f(s.shard, hash);
    note_pending(s);
    return result;
  }

  bool charge_remote(std::string_view key, int64_t tokens, MonoNanos now) {
    return on_key_shard(key, [&](Shard& shard, size_t hash) { return shard.charge_remote(key, hash, tokens, now); });
  }

  Decision refund(std::string_view key, int64_t tokens, MonoNanos now) {
    return on_key_shard(key, [&](Shard& shard, size_t hash) { return shard.refund(key, hash, tokens, now); });
  }

  void take_pending(std::vector<ConsumptionEntry>& out, size_t max_keys, std::vector<KeyActivity>* activity) {
    if (!concurrent_) {
      shards_[0]->shard.take_pending(out, max_keys, activity);
      return;
    }
    // Shard by shard from where the last call stopped, kTakePerLock keys per hold of a lock.
    size_t budget = max_keys;
    for (size_t n = 0; n < shards_.size() && budget > 0; ++n) {
      LockedShard& s = *shards_[take_cursor_];
      {
        ShardLock lock(s.mutex, true);
        s.shard.prefetch_pending(std::min(budget, kTakePerLock));
      }
      for (;;) {
        const size_t chunk = std::min(budget, kTakePerLock);
        size_t taken;
        thread_local std::string bytes;
        struct Taken {
          size_t end;  // in bytes
          int64_t tokens;
          KeyActivity activity;
        };
        thread_local std::vector<Taken> ends;
        bytes.clear();
        ends.clear();
        {
          // Only the keys' bytes are copied under the lock: no allocation holds a check up.
          ShardLock lock(s.mutex, true);
          const size_t before = s.shard.pending_keys();
          s.shard.take_pending_each(chunk, [&](std::string_view key, int64_t tokens, KeyActivity a) {
            if (activity == nullptr && tokens == 0) return;
            bytes.append(key);
            ends.push_back({bytes.size(), tokens, a});
          });
          taken = before - s.shard.pending_keys();
          if (taken < chunk || taken == budget) note_pending(s);  // the shard's last hold
          if (taken == chunk && budget > taken) s.shard.prefetch_pending(std::min(budget - taken, kTakePerLock));
        }
        size_t begin = 0;
        for (const Taken& t : ends) {
          out.push_back({bytes.substr(begin, t.end - begin), t.tokens});
          if (activity != nullptr) activity->push_back(t.activity);
          begin = t.end;
        }
        budget -= taken;
        if (taken < chunk || budget == 0) break;
      }
      if (budget > 0) take_cursor_ = (take_cursor_ + 1) % shards_.size();
    }
  }

  size_t pending_keys() const {
    if (!concurrent_) return shards_[0]->shard.pending_keys();
    return size_t(std::max<int64_t>(0, pending_.load(std::memory_order_relaxed)));
  }

  size_t sweep_idle(MonoNanos now, size_t max_scan) {
    size_t removed = 0;
    const size_t each = std::max<size_t>(1, max_scan / shards_.size());
    for (auto& s : shards_) {
      ShardLock lock(s->mutex, concurrent_);
      removed += s->shard.sweep_idle(now, each);
      note_pending(*s);
    }
    return removed;
  }

  bool restore(std::string_view key, int64_t balance, MonoNanos at) {
    return on_key_shard(key, [&](Shard& shard, size_t hash) { return shard.restore(key, hash, balance, at); });
  }

  bool reset(std::string_view key, MonoNanos now) {
    return on_key_shard(key, [&](Shard& shard, size_t hash) { return shard.reset(key, hash, now); });
  }

  bool lower(std::string_view key, int64_t balance, MonoNanos at, int64_t minus_tokens, MonoNanos now) {
    return on_key_shard(
        key, [&](Shard& shard, size_t hash) { return shard.lower(key, hash, balance, at, minus_tokens, now); });
  }

  // The cursor: the shard in the high 16 bits, the entry in the rest.
  bool for_each_unfull(MonoNanos now, uint64_t* cursor, size_t max,
                       const std::function<void(std::string_view, int64_t)>& f) {
    size_t shard = size_t(*cursor >> 48), entry = size_t(*cursor & ((uint64_t(1) << 48) - 1));
    while (shard < shards_.size() && max > 0) {
      LockedShard& s = *shards_[shard];
      ShardLock lock(s.mutex, concurrent_);
      const size_t next = s.shard.for_each_unfull(now, entry, max, f);
      max -= std::min(max, next - entry);
      if (next >= s.shard.entry_count()) {
        ++shard;
        entry = 0;
      } else {
        entry = next;
      }
    }
    *cursor = (uint64_t(shard) << 48) | entry;
    return shard >= shards_.size();
  }

  void replace_rules(std::shared_ptr<const RuleSet> rules, MonoNanos now) {
    std::unordered_map<std::string, uint32_t> index;
    for (uint32_t i = 0; i < rules->size(); ++i) index.emplace(rules->label(i), i);
    std::vector<std::pair<std::string, RuleCounters>> gone;
    for (auto& s : shards_) {
      ShardLock lock(s->mutex, concurrent_);
      s->shard.replace_rules(rules, now, index, gone);
      note_pending(*s);
    }
    // Counts of labels retired earlier that are back in force go back under their index; the
    // others stay retired, ahead of those retired now (the oldest are kept at the bound).
    std::vector<std::pair<std::string, RuleCounters>> still_retired;
    std::vector<std::pair<std::string, RuleCounters>> retired;
    {
      ShardLock lock(shards_[0]->mutex, concurrent_);
      std::vector<RuleCounters>& counts = shards_[0]->shard.counts();
      for (auto& [label, c] : retired_) {
        if (auto it = index.find(label); it != index.end()) {
          if (it->second >= counts.size()) counts.resize(it->second + 1);
          add_to(counts[it->second], c);
        } else {
          still_retired.emplace_back(std::move(label), c);
        }
      }
    }
    gone.insert(gone.begin(), std::make_move_iterator(still_retired.begin()),
                std::make_move_iterator(still_retired.end()));
    // Retired by label, summed; beyond kMaxRetired labels the series of a rule gone for good
    // stops (Prometheus reads that as its end).
    std::unordered_map<std::string, size_t> at;
    for (auto& [label, c] : gone) {
      if (auto it = at.find(label); it != at.end()) {
        add_to(retired[it->second].second, c);
      } else if (retired.size() < kMaxRetired) {
        at.emplace(label, retired.size());
        retired.emplace_back(std::move(label), c);
      }
    }
    retired_ = std::move(retired);
    rules_ = std::move(rules);
  }

  CheckCounts check_counts() const {
    CheckCounts sum;
    for (const auto& s : shards_) {
      ShardLock lock(s->mutex, concurrent_);
      sum.checks += s->shard.totals().checks;
      sum.allowed += s->shard.totals().allowed;
      sum.denied += s->shard.totals().denied;
    }
    return sum;
  }

  std::vector<std::pair<std::string, RuleCounters>> rule_counters() const {
    // One entry per label: two rules that label alike (RLS labels can) are summed, so that
    // /metrics never has two series with one label set.
    std::vector<std::pair<std::string, RuleCounters>> out = retired_;
    std::unordered_map<std::string, size_t> at;
    for (size_t i = 0; i < out.size(); ++i) at.emplace(out[i].first, i);
    for (const auto& s : shards_) {
      ShardLock lock(s->mutex, concurrent_);
      const std::vector<RuleCounters>& counts = s->shard.counts();
      for (uint32_t i = 0; i < counts.size(); ++i) {
        if (counts[i].checks == 0) continue;
        std::string label = s->shard.rules().label(i);
        if (auto it = at.find(label); it != at.end()) {
          add_to(out[it->second].second, counts[i]);
        } else {
          at.emplace(label, out.size());
          out.emplace_back(std::move(label), counts[i]);
        }
      }
    }
    return out;
  }

  std::optional<Limit> limit_for(std::string_view key) const {
    const LockedShard& s = shard_of(hash_key(key));
    ShardLock lock(s.mutex, concurrent_);
    return s.shard.limit_for(key);
  }

  void set_rate_scale(uint32_t num, uint32_t den, MonoNanos now) {
    for (auto& s : shards_) {
      ShardLock lock(s->mutex, concurrent_);
      s->shard.set_rate_scale(num, den, now);
    }
  }

  std::optional<int64_t> balance(std::string_view key, MonoNanos now) {
    LockedShard& s = shard_of(hash_key(key));
    ShardLock lock(s.mutex, concurrent_);
    return s.shard.balance(key, now);
  }

  uint64_t pending_dropped() const {
    return sum_over_shards([](const Shard& s) { return s.pending_dropped(); });
  }
  uint64_t denials_unharvested() const {
    return sum_over_shards([](const Shard& s) { return s.denials_unharvested(); });
  }

  KeyTableStats stats() const {
    KeyTableStats sum;
    for (const auto& s : shards_) {
      ShardLock lock(s->mutex, concurrent_);
      const KeyTableStats x = s->shard.stats();
      sum.keys += x.keys;
      sum.bytes += x.bytes;
      sum.evictions += x.evictions;
      sum.idle_removed += x.idle_removed;
      sum.rejected_keys += x.rejected_keys;
      sum.remembered += x.remembered;
      sum.restored += x.restored;
      sum.forgotten_debts += x.forgotten_debts;
      sum.remote_ignored += x.remote_ignored;
      sum.pending_dropped += x.pending_dropped;
      sum.denials_unharvested += x.denials_unharvested;
      sum.longest_probe = std::max(sum.longest_probe, x.longest_probe);
    }
    return sum;
  }

  const RuleSet& rules() const { return *rules_; }
  size_t size() const {
    return sum_over_shards([](const Shard& s) { return s.size(); });
  }
  size_t shards() const { return shards_.size(); }

 private:
  // f(shard) summed over the shards, each read under its lock.
  template <class F>
  uint64_t sum_over_shards(F f) const {
    uint64_t n = 0;
    for (const auto& s : shards_) {
      ShardLock lock(s->mutex, concurrent_);
      n += f(s->shard);
    }
    return n;
  }

  // See KeyTable::allow_all. `shard_for(key)` is the (locked) shard that holds `key`.
  template <class ShardFor>
  static bool allow_all_in(ShardFor shard_for, std::span<const CheckItem> items, std::span<Decision> out, MonoNanos now,
                           const Refine& refine, Probes& probes) {
    // Phase 1: every check against a copy of its bucket, as though the request's earlier checks
    // had been charged (the same key twice adds up). Nothing changes in the table.
    probes.clear();
    // A check of a probed key against its copy of the bucket.
    auto decide_probed = [&](size_t i, Probe& p) {
      out[i] = p.bucket.try_acquire(p.limit, items[i].cost, now);
      out[i].limit = p.limit;
      out[i].rule = p.rule;
    };
    bool all = true, again = false, charges_anyway = false;
    for (size_t i = 0; i < items.size(); ++i) {
      const CheckItem& c = items[i];
      Probe* p = probes.find(c.key);
      if (p == nullptr) {
        Probe q;
        if (!shard_for(c.key).probe(c.key, now, q, out[i])) {
          all = all && out[i].allowed;
          continue;
        }
        p = probes.add(q);
      }
      decide_probed(i, *p);
      again = again || refine.wanted(out[i], p->limit);
      charges_anyway = charges_anyway || (p->limit.charge_when_over && c.cost > 0);
      pass_in_shadow(out[i]);
      all = all && out[i].allowed;
    }
    // A request denied charges its charge_when_over costs, at the decision's time: the precise one.
    if (again || (!all && charges_anyway && refine.clock)) {
      // Phase 1 again at the precise time (Refine), each key probed anew exactly as phase 2's
      // insert would make it (a remembered balance refilled under its own limit to that time).
      // Keys not probed (unlimited, too long) keep their decisions, which do not depend on time.
      if (const MonoNanos later = refine.clock->now_ns(); later > now) {
        now = later;
        for (Probe& p : probes.all()) {
          Decision unused;
          shard_for(p.key).probe(p.key, now, p, unused);  // (limited before: it is still)
        }
        all = true;
        for (size_t i = 0; i < items.size(); ++i) {
          if (Probe* p = probes.find(items[i].key)) {
            decide_probed(i, *p);
            pass_in_shadow(out[i]);
          }
          all = all && out[i].allowed;
        }
      }
    }
    if (all) {
      // Phase 2: charge for real. Each decision is the one phase 1 made (same state, same time;
      // an eviction in between remembers a balance, or forgets one that was barely spent).
      for (size_t i = 0; i < items.size(); ++i) {
        if (!out[i].limited) continue;
        Shard& shard = shard_for(items[i].key);
        out[i] = shard.decide(items[i].key, shard.hash_key(items[i].key), items[i].cost, now);
      }
      for (size_t i = 0; i < items.size(); ++i) shard_for(items[i].key).count(out[i], true);
      return true;
    }
    // Nothing is charged. The checks that would have passed say why they did not, and when the
    // whole request could: when its slowest denied check could.
    int64_t retry = 0;
    for (const Decision& d : out.first(items.size())) {
      if (!d.allowed) retry = std::max(retry, d.retry_after_ns);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      Decision& d = out[i];
      if (const Probe* p = probes.find(items[i].key)) {
        TokenBucket untouched = p->before;
        d.remaining = untouched.try_acquire(p->limit, 0, now).remaining;
      }
      if (!d.limited) continue;
      if (d.allowed) {
        d.allowed = false;
        d.shadow_denied = false;  // denied after all, and counted so: by another check
        d.reason = DenyReason::kOtherCheckDenied;
        d.retry_after_ns = retry;
      }
    }
    // Except the limits whose cost must be paid whatever the answer, in request order.
    for (size_t i = 0; i < items.size(); ++i) {
      Decision& d = out[i];
      if (!d.limited || !d.limit.charge_when_over || items[i].cost <= 0) continue;
      shard_for(items[i].key).charge_denied(items[i].key, items[i].cost, now, d);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      Shard& shard = shard_for(items[i].key);
      shard.count(out[i], false);
      // Denied by its own bucket (charged anyway or not): for top-K. Not another check's denial.
      if (out[i].rule != RuleSet::kUnlimited && items[i].cost > 0 && out[i].reason != DenyReason::kOtherCheckDenied) {
        shard.note_denied(items[i].key);
      }
    }
    return false;
  }

  // A concurrent table's count of pending keys (for early sealing), from each shard's (`s`
  // locked, after any change to it). A shard adds its changes to the count 16 at a time, and when
  // it has none left: one shared counter bumped by every check that dirties a key was a cache
  // line bouncing between the checking threads and the sealing one. So the count may be off by
  // 15 keys per shard, and a drained table counts 0. take_pending publishes once per shard, after
  // its last hold there (until then the count is high by what it took: early sealing may be
  // asked for once more, and finds less to do).
  void note_pending(LockedShard& s) {
    if (!concurrent_) return;
    const int64_t now_pending = int64_t(s.shard.pending_keys());
    const int64_t change = now_pending - s.published;
    if (change != 0 && (now_pending == 0 || change >= kPublishEvery || change <= -kPublishEvery)) {
      pending_.fetch_add(change, std::memory_order_relaxed);
      s.published = now_pending;
    }
  }
  static constexpr int64_t kPublishEvery = 16;

  static constexpr size_t kMaxRetired = 1024;
  std::shared_ptr<const RuleSet> rules_;                       // the owner's (rules() and reloads are its)
  std::vector<std::pair<std::string, RuleCounters>> retired_;  // counts of labels not in force (owner's)
  const bool concurrent_;
  const Refine refine_;   // KeyTableOptions::precise_clock
  const KeyedHash hash_;  // KeyTableOptions::hash_key's; before the shards, which keep a reference
  std::vector<std::unique_ptr<LockedShard>> shards_;
  size_t take_cursor_ = 0;                       // the shard take_pending starts with
  alignas(64) std::atomic<int64_t> pending_{0};  // its own line (alignas rounds Impl up, too)
};

KeyTable::KeyTable(std::shared_ptr<const RuleSet> rules, KeyTableOptions options)
    : impl_(std::make_unique<Impl>(std::move(rules), options)) {}
KeyTable::~KeyTable() = default;
KeyTable::KeyTable(KeyTable&&) noexcept = default;
KeyTable& KeyTable::operator=(KeyTable&&) noexcept = default;

Decision KeyTable::allow(std::string_view key, int64_t cost, MonoNanos now_ns) {
  return impl_->allow(key, cost, now_ns);
}
Decision KeyTable::refund(std::string_view key, int64_t tokens, MonoNanos now_ns) {
  return impl_->refund(key, tokens, now_ns);
}
bool KeyTable::allow_all(std::span<const CheckItem> items, std::span<Decision> out, MonoNanos now_ns) {
  return impl_->allow_all(items, out, now_ns);
}
bool KeyTable::charge_remote(std::string_view key, int64_t tokens, MonoNanos now_ns) {
  return impl_->charge_remote(key, tokens, now_ns);
}
void KeyTable::take_pending(std::vector<ConsumptionEntry>& out, size_t max_keys, std::vector<KeyActivity>* activity) {
  impl_->take_pending(out, max_keys, activity);
}
size_t KeyTable::pending_keys() const { return impl_->pending_keys(); }
uint64_t KeyTable::pending_dropped() const { return impl_->pending_dropped(); }
uint64_t KeyTable::denials_unharvested() const { return impl_->denials_unharvested(); }
size_t KeyTable::sweep_idle(MonoNanos now_ns, size_t max_scan) { return impl_->sweep_idle(now_ns, max_scan); }
bool KeyTable::restore(std::string_view key, int64_t balance_microtokens, MonoNanos at_ns) {
  return impl_->restore(key, balance_microtokens, at_ns);
}
bool KeyTable::reset(std::string_view key, MonoNanos now_ns) { return impl_->reset(key, now_ns); }
bool KeyTable::lower(std::string_view key, int64_t balance_microtokens, MonoNanos at_ns, int64_t minus_tokens,
                     MonoNanos now_ns) {
  return impl_->lower(key, balance_microtokens, at_ns, minus_tokens, now_ns);
}
bool KeyTable::for_each_unfull(MonoNanos now_ns, uint64_t* cursor, size_t max_entries,
                               const std::function<void(std::string_view, int64_t)>& f) {
  return impl_->for_each_unfull(now_ns, cursor, max_entries, f);
}
void KeyTable::replace_rules(std::shared_ptr<const RuleSet> rules, MonoNanos now_ns) {
  impl_->replace_rules(std::move(rules), now_ns);
}
std::optional<Limit> KeyTable::limit_for(std::string_view key) const { return impl_->limit_for(key); }
void KeyTable::set_rate_scale(uint32_t num, uint32_t den, MonoNanos now_ns) { impl_->set_rate_scale(num, den, now_ns); }
std::optional<int64_t> KeyTable::balance_microtokens(std::string_view key, MonoNanos now_ns) {
  return impl_->balance(key, now_ns);
}
const RuleSet& KeyTable::rules() const { return impl_->rules(); }
size_t KeyTable::size() const { return impl_->size(); }
size_t KeyTable::shards() const { return impl_->shards(); }
CheckCounts KeyTable::check_counts() const { return impl_->check_counts(); }
std::vector<std::pair<std::string, RuleCounters>> KeyTable::rule_counters() const { return impl_->rule_counters(); }
KeyTableStats KeyTable::stats() const { return impl_->stats(); }
size_t KeyTable::memory_bound(const KeyTableOptions& options) { return Impl::bound_bytes(options); }

}  // namespace tollgate
