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
  if (auto it = index_.find(key); it != index_.end()) {
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

size_t SpaceSaving::bound_bytes(size_t capacity, size_t key_bytes) {
  return capacity *
         (sizeof(Counter) + sizeof(size_t) + sizeof(std::string) + 2 * sizeof(size_t) + sizeof(void*) + 2 * key_bytes);
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

PublishedTop as_published(const MergedTop& m) {
  PublishedTop p;
  p.total = m.total;
  p.threshold = m.unreported_bound;
  p.entries.reserve(m.keys.size());
  for (const MergedKey& k : m.keys) p.entries.push_back({k.key, k.upper, k.upper - k.lower});
  return p;
}

RuleTop merge_top_rule(const TopParts& p, size_t k) {
  std::vector<PublishedTop> metric[kTopMetrics] = {p.own[0], p.own[1]};
  for (const auto& u : p.units) {
    metric[std::min<size_t>(u->metric, kTopMetrics - 1)].push_back(PublishedTop{u->entries, u->threshold, u->total});
  }
  RuleTop top{p.rule, merge_top_keys(metric[0], k), merge_top_keys(metric[1], k), p.members};
  if (p.rls) {
    for (MergedTop* m : {&top.denied, &top.tokens}) {
      for (MergedKey& key : m->keys) {
        if (!key.key.empty() && key.key[0] == kRlsKeyPrefix) key.descriptor = p.rls->describe_key(key.key);
      }
    }
  }
  return top;
}

void sort_busiest_first(std::vector<RuleTop>& tops) {
  std::sort(tops.begin(), tops.end(), [](const RuleTop& a, const RuleTop& b) {
    return std::tie(b.denied.total, b.tokens.total, a.rule) < std::tie(a.denied.total, a.tokens.total, b.rule);
  });
}

std::vector<RuleTop> merge_top_parts(const std::vector<TopParts>& parts, size_t k) {
  std::vector<RuleTop> out;
  out.reserve(parts.size());
  for (const TopParts& p : parts) out.push_back(merge_top_rule(p, k));
  sort_busiest_first(out);
  return out;
}

RuleTops::RuleTops(RuleTopsOptions options) : options_(options) {
  if (options_.window_ns <= 0) throw std::invalid_argument("RuleTops needs a window longer than 0");
}

void RuleTops::advance(MonoNanos now) {
  if (!started_) {
    started_ = true;
    current_start_ = previous_start_ = now;
    return;
  }
  if (now - current_start_ < options_.window_ns) return;
  const bool gap = now - current_start_ >= 2 * options_.window_ns;  // the current one is too old too
  previous_start_ = gap ? now : current_start_;
  current_start_ = now;
  for (auto it = rules_.begin(); it != rules_.end();) {
    bool any = false;
    for (Windows& w : it->second.metric) {
      w.previous = gap ? nullptr : std::move(w.current);
      w.current = nullptr;
      any = any || w.previous != nullptr;
    }
    it = any ? std::next(it) : rules_.erase(it);  // nothing in either window: no longer tracked
  }
}

void RuleTops::add(std::string_view rule, TopMetric metric, std::string_view key, uint64_t weight) {
  if (!enabled() || weight == 0) return;
  auto it = rules_.find(rule);
  if (it == rules_.end()) {
    if (rules_.size() >= options_.max_rules) {
      ++rules_refused_;
      return;
    }
    it = rules_.emplace(std::string(rule), Tracked{}).first;
  }
  Windows& w = it->second.metric[size_t(metric)];
  if (!w.current) w.current = std::make_unique<SpaceSaving>(options_.capacity);
  w.current->add(key, weight);
}

std::optional<PublishedTop> RuleTops::published(std::string_view rule, TopMetric metric, size_t k) const {
  const auto it = rules_.find(rule);
  if (it == rules_.end()) return std::nullopt;
  const Windows& w = it->second.metric[size_t(metric)];
  std::vector<PublishedTop> parts;
  for (const SpaceSaving* s : {w.current.get(), w.previous.get()}) {
    if (s != nullptr) parts.push_back(publish(*s, k));
  }
  if (parts.empty()) return std::nullopt;
  if (parts.size() == 1) return std::move(parts.front());
  return as_published(merge_top_keys(parts, k));
}

std::vector<std::string> RuleTops::rules() const {
  struct Busy {
    uint64_t denied = 0, tokens = 0;
    const std::string* rule;
  };
  std::vector<Busy> all;
  for (const auto& [rule, t] : rules_) {
    Busy b{0, 0, &rule};
    for (size_t m = 0; m < kTopMetrics; ++m) {
      uint64_t& into = m == size_t(TopMetric::kDenied) ? b.denied : b.tokens;
      for (const SpaceSaving* s : {t.metric[m].current.get(), t.metric[m].previous.get()}) {
        if (s != nullptr) into += s->total();
      }
    }
    all.push_back(b);
  }
  std::sort(all.begin(), all.end(), [](const Busy& a, const Busy& b) {
    return std::tie(b.denied, b.tokens, *a.rule) < std::tie(a.denied, a.tokens, *b.rule);
  });
  std::vector<std::string> out;
  out.reserve(all.size());
  for (const Busy& b : all) out.push_back(*b.rule);
  return out;
}

size_t RuleTops::bytes() const {
  size_t b = 0;
  for (const auto& [rule, t] : rules_) {
    b += rule.size() + sizeof(Tracked) + 64;  // the map's node
    for (const Windows& w : t.metric) {
      for (const SpaceSaving* s : {w.current.get(), w.previous.get()}) {
        if (s != nullptr) b += sizeof(SpaceSaving) + s->bytes();
      }
    }
  }
  return b;
}

size_t RuleTops::bound_bytes(const RuleTopsOptions& options, size_t key_bytes) {
  if (options.capacity == 0) return 0;
  // Every summary at capacity (2 windows of 2 metrics per rule), and the rule's label of up to
  // key_bytes.
  const size_t summary = sizeof(SpaceSaving) + SpaceSaving::bound_bytes(options.capacity, key_bytes);
  return options.max_rules * (key_bytes + sizeof(Tracked) + 64 + 2 * kTopMetrics * summary);
}

}  // namespace tollgate
