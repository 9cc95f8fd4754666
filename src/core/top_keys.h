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
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "core/consumption.h"
#include "tollgate/rls_config.h"
#include "tollgate/top.h"

namespace tollgate {

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
  // The most bytes() can be for `capacity` counters of keys of up to `key_bytes`.
  static size_t bound_bytes(size_t capacity, size_t key_bytes);
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
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, size_t, Hash, std::equal_to<>> index_;  // looked up without a copy
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

// Merges summaries of disjoint streams: a key a part holds adds [count - error, count], one it
// does not hold [0, threshold]. Keeps the `k` with the largest upper bounds.
MergedTop merge_top_keys(std::span<const PublishedTop> parts, size_t k);
// The same answer read as one summary (what a node publishes of several windows): each key its
// upper bound as count and its interval's width as error; threshold the unreported bound.
PublishedTop as_published(const MergedTop& m);

// What top-K counts, per rule.
enum class TopMetric : uint8_t {
  kDenied = 0,  // checks the key's own bucket denied (not shadow mode, not another check's)
  kTokens = 1,  // tokens admitted here, net of nothing: refunds are not subtracted
};
inline constexpr size_t kTopMetrics = 2;

// What a node holds of one rule for its answer (Node::top_parts), to merge on any thread
// (merge_top_parts): its own summaries and the live members' latest units, shared, not copied.
struct TopParts {
  std::string rule;
  std::vector<PublishedTop> own[kTopMetrics];
  std::vector<std::shared_ptr<const TopUnit>> units;
  size_t members = 0;  // whose summaries these are (this node included, if it counted)
  // The RLS config in force, to describe Envoy buckets' keys by their descriptors; may be null.
  std::shared_ptr<const RlsConfig> rls;
};
// One rule's merge (merge_top_keys of each metric), `k` keys each.
RuleTop merge_top_rule(const TopParts& part, size_t k);
// Busiest rule first: by denials, then tokens, then by name.
void sort_busiest_first(std::vector<RuleTop>& tops);
// Each rule's merge_top_rule, busiest first.
std::vector<RuleTop> merge_top_parts(const std::vector<TopParts>& parts, size_t k);

struct RuleTopsOptions {
  size_t capacity = 128;                 // counters per summary; 0: nothing is kept
  MonoNanos window_ns = 60'000'000'000;  // a summary covers one window; answers the last two
  size_t max_rules = 64;                 // rules tracked at most (more are counted, not kept)
};

// One node's own top keys: per rule (by RuleSet::label) and metric, a SpaceSaving summary of the
// current window and one of the window before, so that an answer covers the last one to two
// windows (docs/topk-plan.md 1: rotation keeps counts integral and exactly mergeable). Pure: the
// caller passes the time. Not thread-safe: the node's thread owns it.
class RuleTops {
 public:
  explicit RuleTops(RuleTopsOptions options = {});

  bool enabled() const { return options_.capacity > 0; }
  // Starts a new window when `now` has reached the end of the current one (and forgets the one
  // before it); a gap of more than a whole window forgets both.
  void advance(MonoNanos now);
  // Counts `weight` (0: nothing) for `key` under `rule`. A rule beyond max_rules is not kept
  // (rules_refused() counts its updates).
  void add(std::string_view rule, TopMetric metric, std::string_view key, uint64_t weight);

  // This node's summary of `rule`'s `metric` over both windows, its `k` largest; nullopt for a
  // rule with nothing counted.
  std::optional<PublishedTop> published(std::string_view rule, TopMetric metric, size_t k) const;
  // The rules with something counted in either window, busiest (denials, then tokens) first.
  std::vector<std::string> rules() const;
  // When the windows an answer covers began: the previous window's start.
  MonoNanos covered_since() const { return previous_start_; }
  const RuleTopsOptions& options() const { return options_; }
  size_t bytes() const;
  uint64_t rules_refused() const { return rules_refused_; }
  // The most memory a RuleTops of these options holds, with keys of up to `key_bytes`.
  static size_t bound_bytes(const RuleTopsOptions& options, size_t key_bytes);

 private:
  struct Windows {
    std::unique_ptr<SpaceSaving> current, previous;  // made at first use
  };
  struct Tracked {
    Windows metric[kTopMetrics];
  };
  RuleTopsOptions options_;
  std::map<std::string, Tracked, std::less<>> rules_;
  MonoNanos current_start_ = 0, previous_start_ = 0;
  bool started_ = false;
  uint64_t rules_refused_ = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_TOP_KEYS_H_
