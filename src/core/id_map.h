// IdMap: an open-addressing hash map from node ids to small values, for the lookups made for
// every membership row and every batch of every message. A lookup usually touches one slot,
// which holds the full hash, the id (inline when short, as node ids are: std::string's small
// buffer) and the value; std::unordered_map touches a bucket array and then a separately
// allocated node, two cache misses where this takes one. Measured on 1,000 simulated nodes,
// where these lookups dominated (docs/design.md).
//
// Linear probing at most half full, deletion by backward shift (no tombstones), so probe runs
// stay short however many ids come and go. Iteration order depends only on the sequence of
// inserts and erases (the hash is std::hash, which is deterministic), so a simulation that
// iterates stays reproducible. Pointers to values are invalidated by any insert or erase.
#ifndef TOLLGATE_ID_MAP_H_
#define TOLLGATE_ID_MAP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tollgate {

template <typename V>
class IdMap {
 public:
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  V* find(std::string_view id) {
    const size_t i = locate(id, hash_of(id));
    return i == kNone ? nullptr : &slots_[i].value;
  }
  const V* find(std::string_view id) const { return const_cast<IdMap*>(this)->find(id); }
  bool contains(std::string_view id) const { return find(id) != nullptr; }

  // The value for `id`, value-initialized and inserted if absent; second is true if inserted.
  std::pair<V*, bool> try_emplace(std::string_view id) {
    const uint64_t h = hash_of(id);
    if (const size_t i = locate(id, h); i != kNone) return {&slots_[i].value, false};
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t i = h & mask();
    while (slots_[i].hash != 0) i = (i + 1) & mask();
    slots_[i].hash = h;
    slots_[i].id.assign(id);
    slots_[i].value = V{};
    ++size_;
    return {&slots_[i].value, true};
  }
  V& operator[](std::string_view id) { return *try_emplace(id).first; }

  bool erase(std::string_view id) {
    size_t hole = locate(id, hash_of(id));
    if (hole == kNone) return false;
    // Backward shift: pull later entries of the run into the hole when their home allows it.
    for (size_t j = (hole + 1) & mask(); slots_[j].hash != 0; j = (j + 1) & mask()) {
      const size_t home = slots_[j].hash & mask();
      // Movable if `home` is not cyclically within (hole, j].
      const bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
      if (stays) continue;
      slots_[hole] = std::move(slots_[j]);
      hole = j;
    }
    slots_[hole].hash = 0;
    slots_[hole].id.clear();
    slots_[hole].value = V{};
    --size_;
    return true;
  }

  void clear() {
    slots_.clear();
    size_ = 0;
  }

  // Calls f(const std::string& id, V& value) for every entry, in slot order.
  template <typename F>
  void for_each(F&& f) {
    for (Slot& s : slots_) {
      if (s.hash != 0) f(std::as_const(s.id), s.value);
    }
  }
  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.hash != 0) f(s.id, s.value);
    }
  }

  // Heap bytes held (slots plus ids too long for the small buffer), for memory accounting.
  size_t heap_bytes() const {
    size_t b = slots_.capacity() * sizeof(Slot);
    for (const Slot& s : slots_) b += s.id.capacity() > 15 ? s.id.capacity() + 1 : 0;
    return b;
  }

 private:
  struct Slot {
    uint64_t hash = 0;  // 0: empty (hash_of never returns 0)
    std::string id;
    V value{};
  };
  static constexpr size_t kNone = ~size_t(0);

  static uint64_t hash_of(std::string_view id) { return uint64_t(std::hash<std::string_view>{}(id)) | 1; }
  size_t mask() const { return slots_.size() - 1; }

  size_t locate(std::string_view id, uint64_t h) const {
    if (slots_.empty()) return kNone;
    for (size_t i = h & mask();; i = (i + 1) & mask()) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return kNone;
      if (s.hash == h && s.id == id) return i;
    }
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_ = std::vector<Slot>(old.empty() ? 16 : old.size() * 2);
    for (Slot& s : old) {
      if (s.hash == 0) continue;
      size_t i = s.hash & mask();
      while (slots_[i].hash != 0) i = (i + 1) & mask();
      slots_[i] = std::move(s);
    }
  }

  std::vector<Slot> slots_;  // size 0 or a power of two
  size_t size_ = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_ID_MAP_H_
