// What a node knows of the other members' lease counts (issue 40; docs/design.md 6.7): the
// newest count per (origin, key), and which origins count now.
//
// A row is state, not a delta: the count with the highest (incarnation, seq) of its origin wins,
// so a batch seen twice, late, by a second path or after a healed partition sets the same value
// again, and no release is ever counted twice. An origin counts while membership holds it alive
// in the life its rows belong to: a member marked failed (suspect, dead, unreachable) or gone
// takes its leases with it, with nothing to send; back alive in the same life, its rows count
// again. A newer life drops the older one's rows. The sums of the counted rows live in the
// LeaseTable (add_remote), where acquires read them.
//
// A row at 0 is kept for keep_zero_ns (past any batch that can still arrive: the ledger's
// retention), so a late copy of an older count cannot bring a released lease back.
// Not thread-safe: the node's.
#ifndef TOLLGATE_SRC_CORE_INFLIGHT_VIEW_H_
#define TOLLGATE_SRC_CORE_INFLIGHT_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/clock.h"
#include "core/consumption.h"

namespace tollgate {

class LeaseTable;
class Membership;

struct InflightViewStats {
  size_t rows = 0;                 // (origin, key) rows held
  uint64_t rows_dropped = 0;       // counts not kept: max_rows reached
  uint64_t freed_with_failed = 0;  // leases no longer counted because their member failed or left
  uint64_t stale = 0;              // counts older than the row they would replace
};

class InflightView {
 public:
  InflightView(NodeId self, size_t max_rows, int64_t keep_zero_ns);

  // A batch of counts (Batch::counts) from another member, as the ledger applies it.
  void apply(const Batch& batch, const Membership& members, LeaseTable& table, MonoNanos now_ns);
  // Re-decides which origins count (call when membership's states may have changed).
  void recount(const Membership& members, LeaseTable& table);
  // Membership forgot `origin` for good: its rows go.
  void forget(const NodeId& origin, LeaseTable& table);
  // Drops rows at 0 older than keep_zero_ns. Once per round.
  void expire(MonoNanos now_ns);

  InflightViewStats stats() const;
  // The most `max_rows` rows of keys of up to `key_bytes` can hold (the daemon's memory bound).
  static size_t bound_bytes(size_t max_rows, size_t key_bytes, size_t max_origins);

 private:
  struct Row {
    uint64_t seq = 0;
    int64_t count = 0;
    MonoNanos at = 0;
  };
  struct Origin {
    uint64_t incarnation = 0;
    bool counted = false;
    std::unordered_map<std::string, Row> rows;
  };
  bool counts(const NodeId& origin, const Origin& o, const Membership& members) const;
  // Adds (sign +1) or removes (-1) every row of `o` from the table's sums.
  static void add_all(const Origin& o, int sign, LeaseTable& table);
  void set(Origin& o, const std::string& key, uint64_t seq, int64_t count, LeaseTable& table, MonoNanos now);

  NodeId self_;
  size_t max_rows_;
  int64_t keep_zero_ns_;
  size_t rows_ = 0;
  std::unordered_map<NodeId, Origin> origins_;
  InflightViewStats stats_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_INFLIGHT_VIEW_H_
