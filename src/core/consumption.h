// What travels between daemons: batches of one node's admitted consumption, and the digests
// (SeenWindow per origin) with which two nodes find out which batches one of them lacks.
#ifndef TOLLGATE_SRC_CORE_CONSUMPTION_H_
#define TOLLGATE_SRC_CORE_CONSUMPTION_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tollgate {

// A node's identity in the cluster (its --node-id; by default its gossip address).
using NodeId = std::string;

// Relay dissemination: a node's batches of the consumption it relays to its group are named by
// its id followed by this suffix (node ids cannot contain a NUL byte), a sequence of their own.
inline constexpr std::string_view kRelayOriginSuffix{"\0relay", 6};
inline std::string relay_origin(std::string_view id) { return std::string(id) + std::string(kRelayOriginSuffix); }
// The node an origin belongs to: `origin` without kRelayOriginSuffix.
inline std::string_view origin_node(std::string_view origin) {
  if (origin.size() > kRelayOriginSuffix.size() && origin.ends_with(kRelayOriginSuffix)) {
    origin.remove_suffix(kRelayOriginSuffix.size());
  }
  return origin;
}

// `tokens` of `key` admitted by one node, under the reset epoch of the key that node knew when
// it sealed them (0: none; docs/design.md 6.6): a node that knows a later reset of the key does
// not count them.
struct ConsumptionEntry {
  std::string key;
  int64_t tokens = 0;
  uint64_t epoch = 0;
  friend bool operator==(const ConsumptionEntry&, const ConsumptionEntry&) = default;
};

// A reset of `key` (tollgate reset KEY, docs/design.md 6.6): its bucket is full again, and from
// then on consumption sealed under an older epoch of the key does not count.
struct ResetMark {
  std::string key;
  uint64_t epoch = 0;  // >= 1
  friend bool operator==(const ResetMark&, const ResetMark&) = default;
};

// How many leases of `key` (a concurrency rule's, issue 40) one node holds now: state, not a
// delta (docs/design.md 6.7). The newest (incarnation, seq) of an origin's counts of a key wins.
struct InflightEntry {
  std::string key;
  int64_t count = 0;  // >= 0
  friend bool operator==(const InflightEntry&, const InflightEntry&) = default;
};

// A node's lease counts in a batch. A refresh says more: the origin's counts of every key k
// with from <= k (< until when until is not empty) are exactly those listed, at the batch's
// version, and any other key of that range is 0. It heals a count whose batch was lost beyond
// repair and teaches a joiner leases older than the ledger's retention.
struct LeaseCounts {
  std::vector<InflightEntry> entries;  // at most one per key, sorted by key in a refresh
  bool refresh = false;
  std::string from, until;
};

// One key of a top-K summary (issue 41): its true weight lies in [count - error, count].
struct TopEntry {
  std::string key;
  uint64_t count = 0;  // an upper bound of the key's weight
  uint64_t error = 0;  // count - error is a lower bound
  friend bool operator==(const TopEntry&, const TopEntry&) = default;
};

// One node's top keys of one rule and metric over its last one to two windows (issue 41;
// gossip minor 8; docs/design.md 7.8): state, not a delta. The newest (incarnation, seq) of an
// origin's unit of a (rule, metric) replaces the one before; a receiver forgets it ttl_ms after
// it arrived unless a newer one came, or when the origin fails or leaves.
struct TopUnit {
  std::string rule;        // RuleSet::label, 1..256 bytes
  uint32_t metric = 0;     // TopMetric: 0 denied checks, 1 tokens admitted
  uint64_t total = 0;      // the weight summarised (of every key, listed or not)
  uint64_t threshold = 0;  // a key not listed weighs at most this
  uint32_t ttl_ms = 0;
  std::vector<TopEntry> entries;  // count not increasing, error <= count, each key once
  friend bool operator==(const TopUnit&, const TopUnit&) = default;
};

// One node's consumption over one dissemination round, named by (origin, incarnation, seq).
// Sequence numbers start at 1 and are dense within an incarnation: every sealed batch gets the
// next one, so a receiver can tell a duplicate from news and a gap from the end. A node that
// restarts takes a higher incarnation and starts again at seq 1. Immutable once sealed: shared
// by pointer between the ledger, the retransmit queue and (in the simulator) every node.
struct Batch {
  NodeId origin;
  uint64_t incarnation = 0;
  uint64_t seq = 0;
  std::vector<ConsumptionEntry> entries;  // at most one entry per key
  std::vector<ResetMark> resets{};        // resets this node made (or relays), taken before the entries
  // Lease counts (issue 40; gossip minor 7), when this batch carries them (held apart: most
  // batches carry none, and the simulator keeps millions). A batch carries consumption or counts,
  // never both, so a relay contact may pass a batch of counts on whole without charging anything
  // twice.
  std::shared_ptr<const LeaseCounts> counts{};
  // A top-K unit (issue 41; gossip minor 8), alone in its batch like counts: passed on whole by a
  // relay contact, never summed.
  std::shared_ptr<const TopUnit> top{};
};
using BatchPtr = std::shared_ptr<const Batch>;

// Approximate heap footprint of a batch, for memory accounting.
size_t batch_bytes(const Batch& batch);

// Which seqs of one (origin, incarnation) a node has applied: all seqs <= watermark, plus those
// marked in `above` (bit i is seq watermark + 1 + i).
struct SeenWindow {
  static constexpr uint64_t kBits = 256;
  uint64_t incarnation = 0;
  uint64_t watermark = 0;
  std::array<uint64_t, kBits / 64> above{};

  bool contains(uint64_t seq) const;
  // Marks `seq` seen. Returns false if it already was. A seq beyond the window slides it
  // forward; seqs that slide out unseen are given up and added to `*abandoned`.
  bool insert(uint64_t seq, uint64_t* abandoned);
  // Highest seq seen (watermark if none above it).
  uint64_t highest() const;
  friend bool operator==(const SeenWindow&, const SeenWindow&) = default;
};

// What one node has applied, per origin: the current and the previous incarnation's windows.
struct OriginDigest {
  NodeId origin;
  SeenWindow current;
  SeenWindow previous;  // incarnation 0 when there is none
};
struct Digest {
  std::vector<OriginDigest> origins;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_CONSUMPTION_H_
