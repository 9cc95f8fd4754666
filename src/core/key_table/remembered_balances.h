// Part of the key table (core/key_table.cc): the balances of evicted keys that had not refilled,
// kept by key hash so that a key comes back at its balance instead of full (an evicted or
// restarted bucket must never come back full while it is in debt).
//
// Bounded by a capacity. Beyond it, balances that are barely spent (more than half the burst
// left) are forgotten before any that is deep in use or in debt, oldest first within each class:
// a flood of new keys that each spend a token must not push out what an established key in debt
// owes (forgetting a barely spent balance over-admits by less than half a burst, once).
// Not thread-safe: one per shard, under its lock.
#ifndef TOLLGATE_SRC_CORE_KEY_TABLE_REMEMBERED_BALANCES_H_
#define TOLLGATE_SRC_CORE_KEY_TABLE_REMEMBERED_BALANCES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

#include "core/clock.h"
#include "core/token_bucket.h"
#include "tollgate/limit.h"
#include "util/flat_table.h"

namespace tollgate::key_table {

// A remembered balance: the bucket as it was evicted, under the limit it had then.
struct Remembered {
  TokenBucket bucket;
  Limit limit;
  uint64_t generation = 0;  // which remember() made it (stale order entries are skipped)
};

class RememberedBalances {
 public:
  explicit RememberedBalances(size_t capacity) : capacity_(capacity) {}

  size_t size() const { return table_.size(); }
  bool empty() const { return table_.empty(); }
  // Heap bytes held now, and at most for a capacity (KeyTable::memory_bound).
  size_t bytes() const;
  static size_t bound_bytes(size_t capacity);
  // Order entries queued, stale ones included: at most 2 x capacity + kOrderSlack.
  size_t queued() const { return light_.size() + heavy_.size(); }
  static constexpr size_t kOrderSlack = 1024;

  // The balance remembered for a key of this hash, or null. Valid until the next change.
  const Remembered* find(size_t hash) const;
  // The same, taken out (its key is back in the table).
  std::optional<Remembered> take(size_t hash);
  // Remembers `bucket` (evicted under `limit`) for the key of this hash, replacing what was
  // remembered for it. Returns how many balances were forgotten to make room.
  size_t remember(size_t hash, const TokenBucket& bucket, const Limit& limit);
  // Forgets balances that have refilled by `now`, oldest first, examining at most `max_scan`
  // of each class (sweep_idle's share).
  void expire(MonoNanos now, size_t max_scan);

 private:
  // By key hash, on FlatTable (util/flat_table.h), grown by doubling. A key flood remembers and
  // forgets a balance per eviction, hundreds of thousands a second: with std::unordered_map
  // that was a node malloc and free each, 40% of the daemon's time under a flood of 300,000 new
  // keys/s (perf), and allocator stalls in the checks of other clients. Lookups probe the hashes
  // only (eight to a cache line); the value is in a parallel array, touched on a match.
  struct Policy {
    static bool empty(size_t h) { return h == 0; }
    static size_t hash(size_t h) { return h; }
  };
  using Table = FlatTable<size_t, Policy, Remembered>;
  // 0 marks an empty slot; a key hashing to 0 is stored as 1 (balances are remembered by
  // hash, so two keys of one hash share a balance already; this adds 2^-64 to that).
  static size_t stored(size_t hash) { return hash ? hash : 1; }
  size_t locate(size_t hash) const;

  size_t capacity_;
  Table table_{0, 64};
  // (hash, generation), oldest first: balances with more than half the burst left, and the rest.
  std::deque<std::pair<size_t, uint64_t>> light_, heavy_;
  uint64_t generation_ = 0;
};

}  // namespace tollgate::key_table

#endif  // TOLLGATE_SRC_CORE_KEY_TABLE_REMEMBERED_BALANCES_H_
