// Part of the key table (core/key_table.cc): the entries, one per key of a shard, in fixed
// chunks so that an entry never moves and its number stays valid as the store grows.
#ifndef TOLLGATE_SRC_CORE_KEY_TABLE_ENTRY_STORE_H_
#define TOLLGATE_SRC_CORE_KEY_TABLE_ENTRY_STORE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "core/token_bucket.h"

namespace tollgate::key_table {

// One key's state, two cache lines. Keys up to kInlineKey bytes (nearly all real ones) live
// inside the entry, so a check reads the index line and this entry and nothing else.
struct alignas(64) Entry {
  static constexpr size_t kInlineKey = 72;

  TokenBucket bucket;
  int64_t pending = 0;  // tokens admitted here since the last take_pending()
  uint32_t rule = 0;    // index into the shard's rules
  uint32_t denied = 0;  // checks its own bucket denied since the last take_pending() (saturating)
  uint16_t key_size = 0;
  bool dirty = false;       // on the dirty list (the slot had pending since the last take)
  bool live = false;        // holds a key (false: on the free list)
  bool referenced = false;  // used since the clock hand last passed (see Shard::evict_lru)
  char key_inline[kInlineKey];
  std::unique_ptr<char[]> key_heap;  // keys longer than kInlineKey

  std::string_view key() const { return {key_heap ? key_heap.get() : key_inline, key_size}; }
  // Heap bytes the key holds (0 inline).
  size_t key_heap_bytes() const { return key_heap ? key_size : 0; }
  void set_key(std::string_view k) {
    key_size = uint16_t(k.size());
    if (k.size() <= kInlineKey) {
      key_heap.reset();
      std::memcpy(key_inline, k.data(), k.size());
    } else {
      key_heap = std::make_unique<char[]>(k.size());
      std::memcpy(key_heap.get(), k.data(), k.size());
    }
  }
  // Releases a long key's buffer now, not when the entry is reused.
  void clear_key() {
    key_heap.reset();
    key_size = 0;
  }
};
static_assert(sizeof(Entry) == 128);

// Entries in fixed chunks of 1,024 (128 KiB): entry numbers stay valid as the store grows, no
// entry ever moves, and the chunk table is small enough to stay in L1. (std::deque keeps 4 such
// entries per block, and its block map became one more cache miss per check at 100k keys.)
class EntryStore {
 public:
  static constexpr size_t kChunk = 1024;
  Entry& operator[](size_t i) { return chunks_[i / kChunk][i % kChunk]; }
  const Entry& operator[](size_t i) const { return chunks_[i / kChunk][i % kChunk]; }
  size_t size() const { return size_; }
  void emplace_back() {
    if (size_ % kChunk == 0) chunks_.push_back(std::make_unique<Entry[]>(kChunk));
    ++size_;
  }
  // Heap bytes of the entries (not of long keys), now and at most for `entries`.
  size_t bytes() const { return chunks_.size() * kChunk * sizeof(Entry); }
  static size_t bound_bytes(size_t entries) { return (entries + kChunk - 1) / kChunk * kChunk * sizeof(Entry); }

 private:
  std::vector<std::unique_ptr<Entry[]>> chunks_;
  size_t size_ = 0;
};

}  // namespace tollgate::key_table

#endif  // TOLLGATE_SRC_CORE_KEY_TABLE_ENTRY_STORE_H_
