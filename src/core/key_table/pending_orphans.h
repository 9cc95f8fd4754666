// Part of the key table (core/key_table.cc): the consumption of keys that left the table
// (evicted, idle, or no longer governed) before take_pending reported it, kept until it does.
// Bounded: a key flood while nothing takes (a member whose thread is stuck) must not grow memory
// without bound; beyond the capacity the consumption is dropped and counted
// (KeyTableStats::pending_dropped), and peers never hear of it. Not thread-safe: one per shard.
#ifndef TOLLGATE_SRC_CORE_KEY_TABLE_PENDING_ORPHANS_H_
#define TOLLGATE_SRC_CORE_KEY_TABLE_PENDING_ORPHANS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tollgate::key_table {

class PendingOrphans {
 public:
  explicit PendingOrphans(size_t capacity) : capacity_(capacity) {}

  // Keeps `tokens` of `key` for the next take; false (and counted) beyond the capacity.
  bool add(std::string_view key, int64_t tokens) {
    if (orphans_.size() >= capacity_) {
      ++dropped_;
      return false;
    }
    orphans_.emplace_back(key, tokens);
    bytes_ += bytes_of(orphans_.back());
    return true;
  }

  // Hands up to `max` of them to take(key, tokens), the most recent last, and forgets them.
  // Returns how many.
  template <class Take>
  size_t take(size_t max, Take take) {
    const size_t n = std::min(max, orphans_.size());
    size_t taken_bytes = 0;
    for (size_t i = orphans_.size() - n; i < orphans_.size(); ++i) {
      take(std::string_view(orphans_[i].first), orphans_[i].second);
      taken_bytes += bytes_of(orphans_[i]);
    }
    orphans_.resize(orphans_.size() - n);
    bytes_ -= taken_bytes;
    return n;
  }

  size_t size() const { return orphans_.size(); }
  uint64_t dropped() const { return dropped_; }
  // Heap bytes held now (kept as they change: stats must not walk them), and at most for a
  // capacity and keys of up to `key_bytes`.
  size_t bytes() const { return bytes_; }
  size_t walked_bytes() const {  // the same, counted the slow way (debug builds check both agree)
    size_t b = 0;
    for (const auto& o : orphans_) b += bytes_of(o);
    return b;
  }
  static size_t bound_bytes(size_t capacity, size_t key_bytes) {
    // A heap block of n bytes: n plus malloc's 8-byte header, rounded up to 16, at least 32.
    const size_t block = key_bytes > 15 ? std::max<size_t>(32, (key_bytes + 1 + 8 + 15) / 16 * 16) : 0;
    return capacity * (2 * sizeof(Orphan) + block);
  }

 private:
  using Orphan = std::pair<std::string, int64_t>;
  static size_t bytes_of(const Orphan& o) {
    const size_t heap = o.first.capacity() > std::string().capacity() ? o.first.capacity() + 1 : 0;
    return sizeof(o.first) + sizeof(o.second) + heap;
  }

  size_t capacity_;
  std::vector<Orphan> orphans_;
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace tollgate::key_table

#endif  // TOLLGATE_SRC_CORE_KEY_TABLE_PENDING_ORPHANS_H_
