// Who is being limited (issue 41, docs/topk-plan.md): a bounded summary of the heaviest keys of
// a stream of (key, weight), and the merge of several such summaries into one answer with
// stated error bounds. Pure: no clock, no threads.
//
// SpaceSaving is Metwally, Agrawal and El Abbadi's space-saving algorithm ("Efficient
// Computation of Frequent and Top-k Elements in Data Streams", ICDT 2005) with weighted updates:
// `capacity` counters; a key held is counted exactly from the moment it got its counter, and a
// new key takes the smallest counter over, inheriting its count as its `error`. Hence, for a
// stream of total weight n:
//   - a key held: count - error <= its true weight <= count;
//   - a key not held: its true weight <= threshold(), the smallest count (0 while not full);
//   - the counts sum to n exactly, so threshold() <= n / capacity.
// Summaries of disjoint streams (other nodes, other windows) merge as intervals
// (merge_top_keys): the mergeable-summaries view of Agarwal et al. (PODS 2012), with each side's
// slack kept apart, so every reported interval contains the key's true total.
#ifndef TOLLGATE_SRC_CORE_TOP_KEYS_H_
#define TOLLGATE_SRC_CORE_TOP_KEYS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tollgate {

struct TopEntry {
  std::string key;
  uint64_t count = 0;  // an upper bound of the key's weight
  uint64_t error = 0;  // count - error is a lower bound
};

class SpaceSaving {
 public:
  // At most `capacity` counters (>= 1).
  explicit SpaceSaving(size_t capacity);

  // Adds `weight` (> 0; 0 changes nothing) to `key`. O(log capacity).
  void add(std::string_view key, uint64_t weight);

  // The `k` largest counts, largest first (ties: by key), each with its error.
  std::vector<TopEntry> top(size_t k) const;
  // Every key not held weighs at most this much: the smallest count once every counter is in
  // use, 0 before.
  uint64_t threshold() const;
  // The stream's total weight (what the counts sum to).
  uint64_t total() const { return total_; }
  size_t size() const { return counters_.size(); }
  size_t capacity() const { return capacity_; }
  // Bytes held: counters, their keys, the index (an estimate, for the memory bound).
  size_t bytes() const;
  void clear();

 private:
  struct Counter {
    std::string key;
    uint64_t count = 0;
    uint64_t error = 0;
    size_t heap = 0;  // its place in heap_
  };
  // heap_: counter indices, a min-heap by count.
  void sift_down(size_t at);
  void sift_up(size_t at);
  bool less(size_t a, size_t b) const { return counters_[heap_[a]].count < counters_[heap_[b]].count; }
  void swap_at(size_t a, size_t b);

  size_t capacity_;
  uint64_t total_ = 0;
  size_t key_bytes_ = 0;
  std::vector<Counter> counters_;
  std::vector<size_t> heap_;
  std::unordered_map<std::string, size_t> index_;
};

// One summary as another node publishes it: its top entries (possibly fewer than it holds) and
// the weight any key it left out may have (the larger of its threshold and the smallest count
// it left out).
struct PublishedTop {
  std::vector<TopEntry> entries;
  uint64_t threshold = 0;
  uint64_t total = 0;
};
// What a summary publishes: its `k` largest, and the bound for every other key.
PublishedTop publish(const SpaceSaving& s, size_t k);

// A key of the merged answer: its true total over all the parts lies in [lower, upper].
struct MergedKey {
  std::string key;
  uint64_t lower = 0;
  uint64_t upper = 0;
};
struct MergedTop {
  std::vector<MergedKey> keys;  // by upper bound, largest first (ties: lower, then key)
  uint64_t total = 0;           // the parts' total weight
  // Every reported interval is at most this wide: the sum of the parts' thresholds.
  uint64_t error_bound = 0;
  // A key not reported weighs at most this: error_bound, or the upper bound of the first key
  // left out beyond `k` if that is larger.
  uint64_t unreported_bound = 0;
};
// Merges summaries of disjoint streams: a key a part holds adds [count - error, count], one it
// does not hold [0, threshold]. Keeps the `k` with the largest upper bounds.
MergedTop merge_top_keys(std::span<const PublishedTop> parts, size_t k);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_TOP_KEYS_H_
