#include "tollgate/key_table.h"

#include <deque>
#include <functional>
#include <string>
#include <unordered_map>

#include "tollgate/rules.h"

namespace tollgate {
namespace {

constexpr uint32_t kNil = UINT32_MAX;

size_t hash_key(std::string_view key) { return std::hash<std::string_view>{}(key); }

// Heap bytes held by a std::string beyond the object itself (0 while it fits the inline buffer).
size_t string_heap_bytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() + 1 : 0;
}

}  // namespace

class KeyTable::Impl {
 public:
  Impl(std::shared_ptr<const RuleSet> rules, KeyTableOptions options)
      : rules_(std::move(rules)), options_(options) {
    if (options_.max_keys == 0) options_.max_keys = 1;
    index_.reserve(std::min<size_t>(options_.max_keys, 1 << 16));
  }

  Decision allow(std::string_view key, int64_t cost, MonoNanos now) {
    uint32_t slot = find(key);
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
      slot = insert(key, rule, now);
    } else {
      touch(slot);
    }
    Entry& e = slots_[slot];
    Decision d = e.bucket.try_acquire(rules_->limit(e.rule), cost, now);
    if (d.allowed && cost > 0) {
      e.pending += cost;
      if (!e.dirty) {
        e.dirty = true;
        e.dirty_next = dirty_head_;
        dirty_head_ = slot;
      }
    }
    return d;
  }

  bool charge_remote(std::string_view key, int64_t tokens, MonoNanos now) {
    uint32_t slot = find(key);
    if (slot == kNil) {
      const uint32_t rule = key.size() > options_.max_key_bytes ? RuleSet::kUnlimited : rules_->match(key);
      if (rule == RuleSet::kUnlimited) {
        ++stats_.remote_ignored;
        return false;
      }
      slot = insert(key, rule, now);
    } else {
      touch(slot);
    }
    Entry& e = slots_[slot];
    e.bucket.consume_remote(rules_->limit(e.rule), tokens, now);
    return true;
  }

  void take_pending(std::vector<ConsumptionEntry>& out) {
    for (uint32_t s = dirty_head_; s != kNil;) {
      Entry& e = slots_[s];
      if (e.pending > 0) out.push_back({e.key, e.pending});
      e.pending = 0;
      e.dirty = false;
      const uint32_t next = e.dirty_next;
      e.dirty_next = kNil;
      s = next;
    }
    dirty_head_ = kNil;
    for (auto& [key, tokens] : orphan_pending_) out.push_back({key, tokens});
    orphan_pending_.clear();
  }

  size_t sweep_idle(MonoNanos now, size_t max_scan) {
    size_t removed = 0;
    uint32_t s = tail_;
    for (size_t n = 0; n < max_scan && s != kNil; ++n) {
      Entry& e = slots_[s];
      const uint32_t newer = e.prev;
      if (e.bucket.full_at(rules_->limit(e.rule), now)) {
        erase(s);
        ++stats_.idle_removed;
        ++removed;
      }
      s = newer;
    }
    // Remembered balances are dropped oldest first once refilled; a stale queue entry (the key
    // came back, or was remembered again later) is skipped.
    for (size_t n = 0; n < max_scan && !remembered_order_.empty(); ++n) {
      const auto [hash, generation] = remembered_order_.front();
      auto it = remembered_.find(hash);
      if (it != remembered_.end() && it->second.generation == generation) {
        if (!it->second.bucket.full_at(it->second.limit, now)) break;
        remembered_.erase(it);
      }
      remembered_order_.pop_front();
    }
    return removed;
  }

  void replace_rules(std::shared_ptr<const RuleSet> rules, MonoNanos now) {
    std::shared_ptr<const RuleSet> old = std::move(rules_);
    rules_ = std::move(rules);
    for (uint32_t s = head_; s != kNil;) {
      Entry& e = slots_[s];
      const uint32_t next = e.next;
      const uint32_t rule = rules_->match(e.key);
      if (rule == RuleSet::kUnlimited) {
        erase(s);
      } else {
        const Limit& before = old->limit(e.rule);
        const Limit& after = rules_->limit(rule);
        if (!(before == after)) {
          e.bucket.balance_microtokens(before, now);  // settle refill under the old rate first
          e.bucket.clamp_to(after);
        }
        e.rule = rule;
      }
      s = next;
    }
  }

  std::optional<int64_t> balance(std::string_view key, MonoNanos now) {
    const uint32_t slot = find(key);
    if (slot == kNil) return std::nullopt;
    Entry& e = slots_[slot];
    return e.bucket.balance_microtokens(rules_->limit(e.rule), now);
  }

  KeyTableStats stats() const {
    KeyTableStats s = stats_;
    s.keys = index_.size();
    s.remembered = remembered_.size();
    size_t bytes = slots_.size() * sizeof(Entry) + free_.capacity() * sizeof(uint32_t);
    for (const Entry& e : slots_) bytes += string_heap_bytes(e.key);
    // unordered_map: one heap node per element (next pointer, value, cached hash) plus buckets.
    constexpr size_t kIndexNode = sizeof(void*) + sizeof(std::pair<const std::string_view, uint32_t>) + sizeof(size_t);
    bytes += index_.size() * kIndexNode + index_.bucket_count() * sizeof(void*);
    constexpr size_t kRememberedNode = sizeof(void*) + sizeof(std::pair<const size_t, Remembered>) + sizeof(size_t);
    bytes += remembered_.size() * kRememberedNode + remembered_.bucket_count() * sizeof(void*) +
             remembered_order_.size() * sizeof(std::pair<size_t, uint64_t>);
    for (const auto& [key, tokens] : orphan_pending_) bytes += sizeof(key) + sizeof(tokens) + string_heap_bytes(key);
    s.bytes = bytes;
    return s;
  }

  const RuleSet& rules() const { return *rules_; }
  size_t size() const { return index_.size(); }

 private:
  struct Entry {
    std::string key;
    TokenBucket bucket;
    int64_t pending = 0;      // tokens admitted here since the last take_pending()
    uint32_t rule = 0;        // index into rules_
    uint32_t prev = kNil;     // LRU neighbours: head_ is the most recently used
    uint32_t next = kNil;
    uint32_t dirty_next = kNil;
    bool dirty = false;       // on the dirty list (the slot had pending since the last take)
  };
  // An evicted bucket that had not refilled, kept so its key does not come back full.
  struct Remembered {
    TokenBucket bucket;
    Limit limit;
    uint64_t generation = 0;
  };
  struct ViewHash {
    size_t operator()(std::string_view s) const { return hash_key(s); }
  };

  uint32_t find(std::string_view key) const {
    auto it = index_.find(key);
    return it == index_.end() ? kNil : it->second;
  }

  uint32_t insert(std::string_view key, uint32_t rule, MonoNanos now) {
    if (index_.size() >= options_.max_keys) evict_lru();
    uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = uint32_t(slots_.size());
      slots_.emplace_back();  // std::deque never moves existing entries: index_ views stay valid
    }
    Entry& e = slots_[slot];
    e.key.assign(key);
    e.rule = rule;
    e.pending = 0;  // dirty/dirty_next are left alone: a reused slot may still be on the dirty list
    const Limit& limit = rules_->limit(rule);
    e.bucket = TokenBucket(limit, now);
    if (!remembered_.empty()) {
      auto it = remembered_.find(hash_key(key));
      if (it != remembered_.end()) {
        e.bucket = it->second.bucket;
        e.bucket.balance_microtokens(it->second.limit, now);  // refill while it was away
        if (!(it->second.limit == limit)) e.bucket.clamp_to(limit);
        remembered_.erase(it);
        ++stats_.restored;
      }
    }
    index_.emplace(std::string_view(e.key), slot);
    link_front(slot);
    return slot;
  }

  void evict_lru() {
    const uint32_t victim = tail_;
    if (victim == kNil) return;
    Entry& e = slots_[victim];
    const Limit& limit = rules_->limit(e.rule);
    // The victim was the least recently used, so its bucket was last refilled when it was last
    // used; ask at that time whether it was full, which needs no clock.
    if (options_.max_remembered > 0 && e.bucket.raw_balance_microtokens() < limit.burst * kMicrotokensPerToken) {
      remember(hash_key(e.key), e.bucket, limit);
    }
    erase(victim);
    ++stats_.evictions;
  }

  void remember(size_t hash, const TokenBucket& bucket, const Limit& limit) {
    while (remembered_.size() >= options_.max_remembered && !remembered_order_.empty()) {
      const auto [old_hash, generation] = remembered_order_.front();
      remembered_order_.pop_front();
      auto it = remembered_.find(old_hash);
      if (it != remembered_.end() && it->second.generation == generation) {
        remembered_.erase(it);
        ++stats_.forgotten_debts;
      }
    }
    const uint64_t generation = ++remembered_generation_;
    remembered_[hash] = Remembered{bucket, limit, generation};
    remembered_order_.emplace_back(hash, generation);
  }

  // Removes a key. Its pending consumption moves to orphan_pending_ so it is still reported. The
  // slot stays on the dirty list if it is on it (take_pending skips it while it has nothing
  // pending), which keeps removal O(1).
  void erase(uint32_t slot) {
    Entry& e = slots_[slot];
    if (e.pending > 0) orphan_pending_.emplace_back(e.key, e.pending);
    index_.erase(std::string_view(e.key));
    unlink(slot);
    std::string().swap(e.key);  // release a long key's heap buffer now, not at reuse
    e.pending = 0;
    free_.push_back(slot);
  }

  void link_front(uint32_t slot) {
    Entry& e = slots_[slot];
    e.prev = kNil;
    e.next = head_;
    if (head_ != kNil) slots_[head_].prev = slot;
    head_ = slot;
    if (tail_ == kNil) tail_ = slot;
  }

  void unlink(uint32_t slot) {
    Entry& e = slots_[slot];
    if (e.prev != kNil) slots_[e.prev].next = e.next; else head_ = e.next;
    if (e.next != kNil) slots_[e.next].prev = e.prev; else tail_ = e.prev;
    e.prev = e.next = kNil;
  }

  void touch(uint32_t slot) {
    if (slot == head_) return;
    unlink(slot);
    link_front(slot);
  }

  std::shared_ptr<const RuleSet> rules_;
  KeyTableOptions options_;
  std::deque<Entry> slots_;
  std::vector<uint32_t> free_;
  std::unordered_map<std::string_view, uint32_t, ViewHash> index_;
  uint32_t head_ = kNil, tail_ = kNil, dirty_head_ = kNil;
  std::vector<std::pair<std::string, int64_t>> orphan_pending_;  // pending of keys that left the table
  std::unordered_map<size_t, Remembered> remembered_;             // by key hash
  std::deque<std::pair<size_t, uint64_t>> remembered_order_;      // (hash, generation), oldest first
  uint64_t remembered_generation_ = 0;
  KeyTableStats stats_;
};

KeyTable::KeyTable(std::shared_ptr<const RuleSet> rules, KeyTableOptions options)
    : impl_(std::make_unique<Impl>(std::move(rules), options)) {}
KeyTable::~KeyTable() = default;
KeyTable::KeyTable(KeyTable&&) noexcept = default;
KeyTable& KeyTable::operator=(KeyTable&&) noexcept = default;

Decision KeyTable::allow(std::string_view key, int64_t cost, MonoNanos now_ns) { return impl_->allow(key, cost, now_ns); }
bool KeyTable::charge_remote(std::string_view key, int64_t tokens, MonoNanos now_ns) {
  return impl_->charge_remote(key, tokens, now_ns);
}
void KeyTable::take_pending(std::vector<ConsumptionEntry>& out) { impl_->take_pending(out); }
size_t KeyTable::sweep_idle(MonoNanos now_ns, size_t max_scan) { return impl_->sweep_idle(now_ns, max_scan); }
void KeyTable::replace_rules(std::shared_ptr<const RuleSet> rules, MonoNanos now_ns) {
  impl_->replace_rules(std::move(rules), now_ns);
}
std::optional<int64_t> KeyTable::balance_microtokens(std::string_view key, MonoNanos now_ns) {
  return impl_->balance(key, now_ns);
}
const RuleSet& KeyTable::rules() const { return impl_->rules(); }
size_t KeyTable::size() const { return impl_->size(); }
KeyTableStats KeyTable::stats() const { return impl_->stats(); }

}  // namespace tollgate
