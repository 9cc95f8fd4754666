// IdMap: an open-addressing hash map from node ids to small values, for the lookups made for
// every membership row and every batch of every message. A lookup usually touches one slot,
// which holds the full hash, the id (inline when short, as node ids are: std::string's small
// buffer) and the value; std::unordered_map touches a bucket array and then a separately
// allocated node, two cache misses where this takes one. Measured on 1,000 simulated nodes,
// where these lookups dominated (docs/design.md).
//
// On FlatTable (util/flat_table.h): linear probing at most half full, deletion by backward shift.
// Iteration order depends only on the sequence of inserts and erases (the hash is std::hash,
// which is deterministic), so a simulation that iterates stays reproducible. Pointers to values
// are invalidated by any insert or erase.
#ifndef TOLLGATE_SRC_CORE_ID_MAP_H_
#define TOLLGATE_SRC_CORE_ID_MAP_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

#include "util/flat_table.h"

namespace tollgate {

template <typename V>
class IdMap {
 public:
  size_t size() const { return table_.size(); }
  bool empty() const { return table_.empty(); }

  V* find(std::string_view id) { return find(id, hash_of(id)); }
  const V* find(std::string_view id) const { return const_cast<IdMap*>(this)->find(id); }

  // For many lookups at once (a message's rows): hash each id, prefetch() them all,
  // then find() each with its hash. The cache misses overlap, where one find() after another
  // waits for each in turn; on 1,000 simulated nodes, whose tables do not fit in any cache,
  // these lookups were a third of the run (docs/design.md, the simulator at size).
  static uint64_t hash_of(std::string_view id) { return uint64_t(std::hash<std::string_view>{}(id)) | 1; }
  void prefetch(uint64_t h) const { table_.prefetch(h); }
  V* find(std::string_view id, uint64_t h) {
    const size_t i = locate(id, h);
    return i == Table::kNone ? nullptr : &table_.slot(i).value;
  }
  bool contains(std::string_view id) const { return find(id) != nullptr; }

  // The value for `id`, value-initialized and inserted if absent; second is true if inserted.
  std::pair<V*, bool> try_emplace(std::string_view id) {
    const uint64_t h = hash_of(id);
    if (const size_t i = locate(id, h); i != Table::kNone) return {&table_.slot(i).value, false};
    Slot& s = table_.slot(table_.claim(h));
    s.hash = h;
    s.id.assign(id);
    s.value = V{};
    return {&s.value, true};
  }
  V& operator[](std::string_view id) { return *try_emplace(id).first; }

  bool erase(std::string_view id) {
    const size_t i = locate(id, hash_of(id));
    if (i == Table::kNone) return false;
    table_.erase(i);
    return true;
  }

  void clear() { table_.clear(); }

  // Calls f(const std::string& id, V& value) for every entry, in slot order.
  template <typename F>
  void for_each(F&& f) {
    table_.for_each_index([&](size_t i) { f(std::as_const(table_.slot(i).id), table_.slot(i).value); });
  }
  template <typename F>
  void for_each(F&& f) const {
    table_.for_each_index([&](size_t i) { f(table_.slot(i).id, table_.slot(i).value); });
  }

  // Heap bytes held (slots plus ids too long for the small buffer), for memory accounting.
  size_t heap_bytes() const {
    size_t b = table_.bytes();
    table_.for_each_index([&](size_t i) {
      const std::string& id = table_.slot(i).id;
      b += id.capacity() > 15 ? id.capacity() + 1 : 0;
    });
    return b;
  }

  // a == b (public for its test), inline for ids of up to 16 bytes (node ids are): a call to memcmp per lookup was
  // 6-7 % of a 1,000-node simulation.
  static bool same_id(const std::string& a, std::string_view b) {
    const size_t n = b.size();
    if (a.size() != n) return false;
    const char* x = a.data();
    const char* y = b.data();
    if (n > 16) return std::memcmp(x, y, n) == 0;
    if (n >= 8) return load<uint64_t>(x) == load<uint64_t>(y) && load<uint64_t>(x + n - 8) == load<uint64_t>(y + n - 8);
    if (n >= 4) return load<uint32_t>(x) == load<uint32_t>(y) && load<uint32_t>(x + n - 4) == load<uint32_t>(y + n - 4);
    for (size_t i = 0; i < n; ++i) {
      if (x[i] != y[i]) return false;
    }
    return true;
  }
  template <typename T>
  static T load(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty (hash_of never returns 0)
    std::string id;
    V value{};
  };
  struct Policy {
    static bool empty(const Slot& s) { return s.hash == 0; }
    static size_t hash(const Slot& s) { return s.hash; }
  };
  using Table = FlatTable<Slot, Policy>;

  size_t locate(std::string_view id, uint64_t h) const {
    return table_.find(h, [&](const Slot& s) { return s.hash == h && same_id(s.id, id); });
  }

  Table table_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_ID_MAP_H_
