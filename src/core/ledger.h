// The consumption ledger: what a node has admitted, what it has heard, and what it can repair.
//
// Each node seals its own admitted consumption into Batches named (origin, incarnation, seq),
// with seq dense from 1 within an incarnation. A receiver merges a batch into its KeyTable at
// most once: it keeps, per origin, a SeenWindow (a watermark below which every seq has been
// applied or given up, and a 256-bit map of the seqs just above it). So a batch delivered twice,
// out of order or relayed by a third node is charged exactly once, and forgetting a key (LRU
// eviction) forgets nothing about which batches were applied.
//
// Repair: every node retains the batches it sealed or applied for `retention_ns` (bounded by
// bytes too). A peer's Digest (its windows) tells exactly which retained batches it lacks, and
// missing_for() returns them, so the next exchange after a loss repairs it. A gap nobody can
// repair any more (older than every node's retention) stays a hole in the window until 256 later
// seqs push it out; then it is given up and counted in `abandoned`. Either way the cluster
// over-admits by that consumption, it never double-charges.
//
// Restart: a node that restarts takes a higher incarnation and seqs from 1 again. Receivers keep
// the window of the previous incarnation too, so late copies of the old incarnation's batches
// are still applied once, and new batches are never mistaken for old ones.
//
// Memory: O(origins) for windows (about 200 bytes an origin, at most max_origins) plus the
// retained batches (at most max_retained_bytes). Nothing is kept per (key, origin).
// Not thread-safe: one owner, like the KeyTable it charges.
#ifndef TOLLGATE_SRC_CORE_LEDGER_H_
#define TOLLGATE_SRC_CORE_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/clock.h"
#include "core/consumption.h"

namespace tollgate {

class KeyTable;

// Resets of keys (docs/design.md 6.6), as a merge asks the ledger's owner about them.
class ResetFilter {
 public:
  virtual ~ResetFilter() = default;
  // A reset the batch being applied carries.
  virtual void reset(const ResetMark& mark, MonoNanos now_ns) = 0;
  // Whether an entry of it counts: false for consumption sealed under an epoch of its key older
  // than the one the owner knows (admitted before a reset).
  virtual bool counts(const ConsumptionEntry& entry, MonoNanos now_ns) = 0;
  // The lease counts a batch being applied carries (Batch::counts; issue 40), after its entries.
  virtual void lease_counts(const Batch& /*batch*/, MonoNanos /*now_ns*/) {}
  // The top-K unit a batch being applied carries (Batch::top; issue 41).
  virtual void top_unit(const Batch& /*batch*/, MonoNanos /*now_ns*/) {}
};

struct LedgerOptions {
  // How long sealed and applied batches are kept for repair and relaying. Longer repairs longer
  // outages at the cost of memory; 10 s covers many gossip rounds and a push-pull period.
  int64_t retention_ns = 10 * kNanosPerSecond;
  // Upper bound on retained batch bytes (batch_bytes()); the oldest go first beyond it.
  size_t max_retained_bytes = 8 << 20;
  // Origins tracked at most. Batches from further origins are dropped and counted, so a flood of
  // forged origins cannot grow memory. Membership forgets origins with forget_origin().
  size_t max_origins = 4096;
};

enum class MergeResult : uint8_t {
  kApplied,           // new: every entry charged to the key table
  kDuplicate,         // already applied (or given up): nothing charged
  kStaleIncarnation,  // from an incarnation older than the previous one we know: dropped
  kTooManyOrigins,    // unknown origin and max_origins reached: dropped
  kSelf,              // claims our node id with a newer life or a seq we never sealed: dropped.
                      // (Our own batches relayed back are kDuplicate; a past life's batches are
                      // applied once, which is how a restarted node relearns its own debt.)
};
const char* merge_result_name(MergeResult r);

struct LedgerStats {
  uint64_t sealed = 0;           // batches this node sealed
  uint64_t applied = 0;          // remote batches applied
  uint64_t duplicates = 0;       // remote batches dropped as already applied
  uint64_t stale = 0;            // dropped: older incarnation
  uint64_t origin_overflow = 0;  // dropped: max_origins reached
  uint64_t self_conflicts = 0;   // dropped: claims our node id with a life or seq we never had
  uint64_t abandoned = 0;        // seqs given up because they slid out of a window unseen
  uint64_t entries_applied = 0;  // (key, tokens) entries charged from remote batches
  size_t origins = 0;            // origins tracked now
  size_t retained_batches = 0;   // batches held for repair and relay now
  size_t retained_bytes = 0;
  size_t bytes = 0;  // estimated heap bytes: windows plus retained batches
};

class Ledger {
 public:
  Ledger(NodeId self, uint64_t incarnation, LedgerOptions options = {});
  ~Ledger();
  Ledger(Ledger&&) noexcept;
  Ledger& operator=(Ledger&&) noexcept;

  const NodeId& self() const;
  uint64_t incarnation() const;
  // The last seq sealed in this life: of our own batches, and of those we relay (seal_relay).
  uint64_t last_seq() const;
  uint64_t last_relay_seq() const;

  // Seals this node's consumption (as from KeyTable::take_pending; a key may appear more than
  // once, its tokens add up, the later epoch wins) and `resets` into the next batch, retains it,
  // and returns it for sending. Returns nullptr when there is nothing to seal: empty rounds use
  // no seq.
  BatchPtr seal(std::vector<ConsumptionEntry> entries, MonoNanos now_ns, std::vector<ResetMark> resets = {});
  // Seals this node's lease counts (issue 40) into the next batch, one of counts only.
  BatchPtr seal_counts(LeaseCounts counts, MonoNanos now_ns);
  // Seals one top-K unit (issue 41) into the next batch, one of that unit only.
  BatchPtr seal_top(TopUnit unit, MonoNanos now_ns);
  // Relay mode: seals consumption this node relays (other groups' batches it applied, summed)
  // under relay_origin(self), a sequence of its own; retained like our own batches, and
  // never charged here again.
  BatchPtr seal_relay(std::vector<ConsumptionEntry> entries, MonoNanos now_ns, std::vector<ResetMark> resets = {});

  // Applies a batch heard from the network to `table`, unless it was applied before: its resets
  // first, then each entry that `resets` says still counts (without a filter, every entry).
  // Applied batches are retained for relaying and repair.
  MergeResult merge(const BatchPtr& batch, KeyTable& table, MonoNanos now_ns, ResetFilter* resets = nullptr);

  // This node's windows, to send to a peer for repair.
  Digest digest() const;
  // Which origins a digest or a repair speaks for (relay mode: our group's only).
  using OriginFilter = std::function<bool(const NodeId& origin)>;
  Digest digest(const OriginFilter& include) const;
  // One origin's windows, as digest() lists them (origin left empty); false when it has none.
  bool windows_of(std::string_view origin, OriginDigest* out) const;
  // Retained batches that the owner of `peer` has not applied, oldest first. When the digest is
  // one part of a larger one, only origins o with `from` <= o (< *until when set) are answered
  // for: the other origins are in other parts.
  std::vector<BatchPtr> missing_for(const Digest& peer, const NodeId& from = {},
                                    const std::optional<NodeId>& until = std::nullopt,
                                    const OriginFilter& include = {}) const;

  // Drops retained batches older than retention. Call once per round.
  void expire(MonoNanos now_ns);
  // Forgets an origin's windows (membership dropped it for good). Its batches still retained
  // here stay until they expire. Forget only after retention, plus the time a batch takes to
  // reach every node, has passed since the origin's last batch: a peer that still retains one
  // would otherwise send it again and it would be applied twice.
  void forget_origin(const NodeId& origin);

  // For a restart (NodeState): what this life has sealed, as the positions of its own two origins
  // (its id and its relay id) ...
  Digest own_positions() const;
  // ... and, in the next life, every position of a previous one taken back: batches at or below
  // them count as already applied. Also a peer's positions (Node's sync on start): a window of an
  // incarnation we know already becomes the union of both. Our current life's positions are never
  // overwritten; beyond max_origins the rest is left out.
  void restore(const Digest& positions);

  LedgerStats stats() const;

  // Starts a new life of this node without restarting it (membership outbid a remembered
  // newer life): seals from seq 1 under `incarnation` (> incarnation()) from now on. Our old
  // life's window is kept as the previous one, so its batches relayed back stay duplicates.
  void start_incarnation(uint64_t incarnation);

  // Relay mode, when the number of groups changes: batches retained until now are no longer
  // handed out by missing_for() (they expire as before). They were applied under another
  // grouping, where a node may hold an origin's batch while another holds it summed in a
  // contact's: once groups merge, repairing either to the other would charge it twice.
  void start_epoch();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_LEDGER_H_
