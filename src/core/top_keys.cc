#include "core/top_keys.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace tollgate {

SpaceSaving::SpaceSaving(size_t capacity) : capacity_(capacity) {
  if (capacity == 0) throw std::invalid_argument("SpaceSaving needs at least one counter");
  counters_.reserve(capacity);
  heap_.reserve(capacity);
  index_.reserve(capacity);
}

void SpaceSaving::swap_at(size_t a, size_t b) {
  std::swap(heap_[a], heap_[b]);
  counters_[heap_[a]].heap = a;
  counters_[heap_[b]].heap = b;
}

void SpaceSaving::sift_down(size_t at) {
  for (;;) {
    const size_t l = 2 * at + 1, r = l + 1;
    size_t smallest = at;
    if (l < heap_.size() && less(l, smallest)) smallest = l;
    if (r < heap_.size() && less(r, smallest)) smallest = r;
    if (smallest == at) return;
    swap_at(at, smallest);
    at = smallest;
  }
}

void SpaceSaving::sift_up(size_t at) {
  while (at > 0) {
    const size_t parent = (at - 1) / 2;
    if (!less(at, parent)) return;
    swap_at(at, parent);
    at = parent;
  }
}

void SpaceSaving::add(std::string_view key, uint64_t weight) {
  if (weight == 0) return;
  total_ += weight;
  if (auto it = index_.find(std::string(key)); it != index_.end()) {
    Counter& c = counters_[it->second];
    c.count += weight;
    sift_down(c.heap);  // larger now: it may sink below its children
    return;
  }
  if (counters_.size() < capacity_) {
    const size_t i = counters_.size();
    counters_.push_back(Counter{std::string(key), weight, 0, heap_.size()});
    heap_.push_back(i);
    index_.emplace(counters_[i].key, i);
    key_bytes_ += key.size();
    sift_up(counters_[i].heap);
    return;
  }
  // The smallest counter goes to the new key, which inherits its count as its error.
  const size_t i = heap_.front();
  Counter& c = counters_[i];
  index_.erase(c.key);
  key_bytes_ -= c.key.size();
  c.key.assign(key);
  key_bytes_ += key.size();
  c.error = c.count;
  c.count += weight;
  index_.emplace(c.key, i);
  sift_down(0);
}

uint64_t SpaceSaving::threshold() const { return counters_.size() < capacity_ ? 0 : counters_[heap_.front()].count; }

std::vector<TopEntry> SpaceSaving::top(size_t k) const {
  std::vector<const Counter*> all;
  all.reserve(counters_.size());
  for (const Counter& c : counters_) all.push_back(&c);
  const size_t n = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + long(n), all.end(), [](const Counter* a, const Counter* b) {
    return std::tie(b->count, a->key) < std::tie(a->count, b->key);
  });
  std::vector<TopEntry> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back({all[i]->key, all[i]->count, all[i]->error});
  return out;
}

size_t SpaceSaving::bytes() const {
  // A counter, its heap slot, an index node (key copy, hash, next pointer), and the keys twice.
  return counters_.capacity() * (sizeof(Counter) + sizeof(size_t)) +
         index_.size() * (sizeof(std::string) + 2 * sizeof(size_t) + sizeof(void*)) + 2 * key_bytes_;
}

void SpaceSaving::clear() {
  counters_.clear();
  heap_.clear();
  index_.clear();
  total_ = 0;
  key_bytes_ = 0;
}

PublishedTop publish(const SpaceSaving& s, size_t k) {
  PublishedTop p;
  p.entries = s.top(k);
  p.total = s.total();
  p.threshold = s.threshold();
  // A key held but left out weighs at most its count, which is at most the smallest published.
  if (p.entries.size() < s.size() && !p.entries.empty()) p.threshold = std::max(p.threshold, p.entries.back().count);
  return p;
}

MergedTop merge_top_keys(std::span<const PublishedTop> parts, size_t k) {
  MergedTop m;
  std::unordered_map<std::string_view, MergedKey> keys;
  for (const PublishedTop& p : parts) {
    m.total += p.total;
    m.error_bound += p.threshold;
    for (const TopEntry& e : p.entries) {
      MergedKey& key = keys[e.key];
      key.lower += e.count - std::min(e.error, e.count);
    }
  }
  // upper: each part adds the count where it holds the key, its threshold where it does not.
  for (auto& [name, key] : keys) key.upper = m.error_bound;
  for (const PublishedTop& p : parts) {
    for (const TopEntry& e : p.entries) {
      MergedKey& key = keys[e.key];
      key.upper = key.upper - p.threshold + e.count;
    }
  }
  std::vector<MergedKey> all;
  all.reserve(keys.size());
  for (auto& [name, key] : keys) {
    key.key.assign(name);
    all.push_back(std::move(key));
  }
  std::sort(all.begin(), all.end(), [](const MergedKey& a, const MergedKey& b) {
    return std::tie(b.upper, b.lower, a.key) < std::tie(a.upper, a.lower, b.key);
  });
  m.unreported_bound = m.error_bound;
  if (all.size() > k) {
    m.unreported_bound = std::max(m.unreported_bound, all[k].upper);
    all.resize(k);
  }
  m.keys = std::move(all);
  return m;
}

}  // namespace tollgate
