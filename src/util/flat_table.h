// FlatTable: the one open-addressing hash table of the project, for the lookups on the hot paths
// (the key table's index, membership's id map, remembered balances, a peer's digest). Linear
// probing over a power-of-two array kept at most half full, so probe runs stay short; deletion by
// backward shift, so no tombstones accumulate however many entries come and go. A lookup reads
// the probe array only (and the caller's key behind a match); values, if any, live in a parallel
// array touched on a hit, so a probe array of small slots packs many to a cache line.
//
// The table knows slots, not keys: the caller hashes, and says what matches. Slot is a small
// value type whose default value is the empty slot; Policy says which slots are empty and what
// hash a full one was stored under:
//   struct Policy {
//     static bool empty(const Slot& s);
//     static size_t hash(const Slot& s);  // its home is hash & (slot_count() - 1)
//   };
// A lookup reads at most longest_probe() slots: one more than the farthest any entry sits from
// its home, which claim() keeps below kLongRun by growing the table early when a run gets that
// long, unless the table is below 1/4 full (then only hashes that collide in most of their bits
// make such runs: the key table's hash is keyed, util/keyed_hash.h, so nobody can choose them).
// And no sequence of keys makes a lookup walk a long cluster to find that a key is absent.
// Value, unless void, is kept per slot and moves with it. Iteration order is slot order, which
// depends only on the sequence of inserts and erases: deterministic for a deterministic hash.
// Indices and references are invalidated by claim() and erase(). Not thread-safe.
#ifndef TOLLGATE_SRC_UTIL_FLAT_TABLE_H_
#define TOLLGATE_SRC_UTIL_FLAT_TABLE_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace tollgate {

template <typename Slot, typename Policy, typename Value = void>
class FlatTable {
 public:
  static constexpr size_t kNone = ~size_t(0);
  static constexpr bool kHasValues = !std::is_void_v<Value>;

  // Starts with `initial_slots` slots (rounded up to a power of two), or none; an empty table's
  // first growth makes `first_slots`, and every later one doubles.
  explicit FlatTable(size_t initial_slots = 0, size_t first_slots = 16) : first_slots_(std::bit_ceil(first_slots)) {
    if (initial_slots > 0) resize(std::bit_ceil(initial_slots));
  }

  static constexpr size_t kLongRun = 64;

  FlatTable(const FlatTable& o)
      : slots_(o.slots_), values_(o.values_), size_(o.size_), first_slots_(o.first_slots_), longest_(o.longest_) {
    repoint();
  }
  FlatTable(FlatTable&& o) noexcept
      : slots_(std::move(o.slots_)),
        values_(std::move(o.values_)),
        size_(o.size_),
        first_slots_(o.first_slots_),
        longest_(o.longest_) {
    repoint();
    o.clear();
  }
  FlatTable& operator=(FlatTable o) noexcept {
    slots_.swap(o.slots_);
    values_.swap(o.values_);
    std::swap(size_, o.size_);
    std::swap(first_slots_, o.first_slots_);
    std::swap(longest_, o.longest_);
    repoint();
    return *this;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t slot_count() const { return slots_.size(); }
  // The most slots a lookup reads (see above).
  size_t longest_probe() const { return longest_ + 1; }

  // The first slot of hash `h`'s probe run for which match(slot) holds, or kNone: the run ends
  // at an empty slot, or where no entry of home h & mask can be.
  template <typename Match>
  size_t find(size_t h, Match&& match) const {
    // probe_ and mask_ are kept beside the vector so that a lookup loads two words and tests no
    // size: an empty table probes one static empty slot.
    size_t i = h & mask_;
    for (size_t left = longest_;; i = (i + 1) & mask_, --left) {
      if (Policy::empty(probe_[i])) return kNone;
      if (match(probe_[i])) return i;
      if (left == 0) return kNone;
    }
  }

  // Starts loading the slot where a lookup of hash `h` begins (the whole slot, and the value
  // beside it), for a caller about to make many lookups at once: their cache misses then
  // overlap instead of queueing one behind the other. Changes nothing.
  void prefetch(size_t h) const {
    const size_t i = h & mask_;
    prefetch_bytes<sizeof(Slot)>(&probe_[i]);
    if constexpr (kHasValues) {
      if (!values_.empty()) prefetch_bytes<sizeof(Value)>(&values_[i]);
    }
  }

  // The empty slot where a new entry of hash `h` goes (growing first if the table would be more
  // than half full), counted as used: the caller fills it with a slot of hash `h`.
  size_t claim(size_t h) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    for (;;) {
      const size_t mask = slots_.size() - 1;
      size_t i = h & mask, distance = 0;
      while (!Policy::empty(slots_[i])) i = (i + 1) & mask, ++distance;
      // A run this long is a sign of hashes that agree in their low bits (with a random hash,
      // one insert in about 250,000 at the most load, 1/2): one more bit tells them apart.
      // Only while the table is at least 1/4 full, so it never holds more than 8 slots per
      // entry (twice its usual most).
      if (distance >= kLongRun && slots_.size() < 4 * (size_ + 1)) {
        grow();
        continue;
      }
      longest_ = std::max(longest_, distance);
      ++size_;
      return i;
    }
  }

  // Removes the entry at `i`: later entries of its probe run move back into the hole when their
  // home allows it, and the last hole is left empty.
  void erase(size_t i) {
    const size_t mask = slots_.size() - 1;
    for (size_t j = (i + 1) & mask; !Policy::empty(slots_[j]); j = (j + 1) & mask) {
      const size_t home = Policy::hash(slots_[j]) & mask;
      // The entry at j may fill the hole at i only if its home is not cyclically within (i, j].
      const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (stays) continue;
      move_slot(j, i);
      i = j;
    }
    slots_[i] = Slot{};
    if constexpr (kHasValues) values_[i] = Value{};
    --size_;
  }

  void clear() {
    slots_.clear();
    if constexpr (kHasValues) values_.clear();
    size_ = 0;
    longest_ = 0;
    repoint();
  }

  Slot& slot(size_t i) { return slots_[i]; }
  const Slot& slot(size_t i) const { return slots_[i]; }
  template <typename V = Value>
  std::enable_if_t<!std::is_void_v<V>, V&> value(size_t i) {
    return values_[i];
  }
  template <typename V = Value>
  std::enable_if_t<!std::is_void_v<V>, const V&> value(size_t i) const {
    return values_[i];
  }

  // Calls f(slot index) for every used slot, in slot order.
  template <typename F>
  void for_each_index(F&& f) const {
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (!Policy::empty(slots_[i])) f(i);
    }
  }

  // Heap bytes of the arrays (not of what slots point to).
  size_t bytes() const {
    size_t b = slots_.capacity() * sizeof(Slot);
    if constexpr (kHasValues) b += values_.capacity() * sizeof(Value);
    return b;
  }

 private:
  void move_slot(size_t from, size_t to) {
    slots_[to] = std::move(slots_[from]);
    if constexpr (kHasValues) values_[to] = std::move(values_[from]);
  }

  // Every cache line of the N bytes at p. Unrolled by hand: GCC drops a loop of
  // __builtin_prefetch whose trip count it does not know (a prefetch has no side effect).
  template <size_t N>
  static void prefetch_bytes(const void* p) {
    static_assert(N <= 192, "a slot of more than three cache lines: prefetch the part a lookup reads");
    const char* c = static_cast<const char*>(p);
    __builtin_prefetch(c);
    if constexpr (N > 64) __builtin_prefetch(c + 64);
    if constexpr (N > 128) __builtin_prefetch(c + 128);
    if constexpr (N > 1) __builtin_prefetch(c + N - 1);
  }

  void repoint() {
    probe_ = slots_.empty() ? &kEmptySlot : slots_.data();
    mask_ = slots_.empty() ? 0 : slots_.size() - 1;
  }

  void resize(size_t n) {
    slots_ = std::vector<Slot>(n);
    if constexpr (kHasValues) values_ = std::vector<std::conditional_t<kHasValues, Value, char>>(n);
    probe_ = slots_.data();
    mask_ = n - 1;
  }

  void grow() {
    std::vector<Slot> old_slots = std::move(slots_);
    [[maybe_unused]] auto old_values = std::move(values_);
    resize(old_slots.empty() ? first_slots_ : old_slots.size() * 2);
    const size_t mask = slots_.size() - 1;
    longest_ = 0;
    for (size_t k = 0; k < old_slots.size(); ++k) {
      if (Policy::empty(old_slots[k])) continue;
      size_t i = Policy::hash(old_slots[k]) & mask, distance = 0;
      while (!Policy::empty(slots_[i])) i = (i + 1) & mask, ++distance;
      longest_ = std::max(longest_, distance);
      slots_[i] = std::move(old_slots[k]);
      if constexpr (kHasValues) values_[i] = std::move(old_values[k]);
    }
  }

  static inline const Slot kEmptySlot{};
  std::vector<Slot> slots_;          // size 0 or a power of two, at most half used
  const Slot* probe_ = &kEmptySlot;  // slots_.data(), or kEmptySlot while slots_ is empty
  size_t mask_ = 0;                  // slots_.size() - 1, or 0 while slots_ is empty
  std::vector<std::conditional_t<kHasValues, Value, char>> values_;  // values_[i] belongs to slots_[i]
  size_t size_ = 0;
  size_t first_slots_;
  size_t longest_ = 0;  // the farthest any entry is from its home (an upper bound after erases)
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_FLAT_TABLE_H_
