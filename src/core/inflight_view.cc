#include "core/inflight_view.h"

#include <algorithm>

#include "core/lease_table.h"
#include "core/membership.h"
#include "util/heap_bytes.h"

namespace tollgate {

InflightView::InflightView(NodeId self, size_t max_rows, int64_t keep_zero_ns)
    : self_(std::move(self)), max_rows_(max_rows), keep_zero_ns_(keep_zero_ns) {}

bool InflightView::counts(const NodeId& origin, const Origin& o, const Membership& members) const {
  const MemberInfo* m = members.find(origin);
  // A member's batch may reach us before its row of the new life does: a life newer than the
  // one membership knows is alive (it just sent this), an older one is gone.
  return m && m->state == MemberState::kAlive && m->incarnation <= o.incarnation;
}

void InflightView::add_all(const Origin& o, int sign, LeaseTable& table) {
  for (const auto& [key, row] : o.rows) table.add_remote(key, sign * row.count);
}

void InflightView::set(Origin& o, const std::string& key, uint64_t seq, int64_t count, LeaseTable& table,
                       MonoNanos now) {
  auto it = o.rows.find(key);
  if (it == o.rows.end()) {
    // A 0 is kept too: a late copy of an older count must find it.
    if (rows_ >= max_rows_) {
      ++stats_.rows_dropped;
      return;
    }
    it = o.rows.emplace(key, Row{}).first;
    ++rows_;
  } else if (it->second.seq >= seq) {
    ++stats_.stale;
    return;
  }
  if (o.counted) table.add_remote(key, count - it->second.count);
  it->second = Row{seq, count, now};
}

void InflightView::apply(const Batch& b, const Membership& members, LeaseTable& table, MonoNanos now) {
  if (!b.counts || origin_node(b.origin) == self_) return;  // our past lives' leases died with them
  auto [it, fresh] = origins_.try_emplace(b.origin);
  Origin& o = it->second;
  if (!fresh && b.incarnation < o.incarnation) return;
  if (fresh || b.incarnation > o.incarnation) {
    // A new life: the old one's leases died with it.
    if (o.counted) add_all(o, -1, table);
    rows_ -= o.rows.size();
    o.rows.clear();
    o.incarnation = b.incarnation;
    o.counted = counts(b.origin, o, members);
  }
  const LeaseCounts& c = *b.counts;
  for (const InflightEntry& e : c.entries) {
    if (e.count >= 0) set(o, e.key, b.seq, e.count, table, now);
  }
  if (c.refresh) {
    // Keys of the range the refresh does not list are 0 at its version. Listed keys are sorted.
    for (auto& [key, row] : o.rows) {
      if (row.count == 0 || row.seq >= b.seq || key < c.from || (!c.until.empty() && !(key < c.until))) continue;
      auto listed = std::lower_bound(c.entries.begin(), c.entries.end(), key,
                                     [](const InflightEntry& e, const std::string& k) { return e.key < k; });
      if (listed != c.entries.end() && listed->key == key) continue;
      if (o.counted) table.add_remote(key, -row.count);
      row = Row{b.seq, 0, now};
    }
  }
}

void InflightView::recount(const Membership& members, LeaseTable& table) {
  for (auto& [origin, o] : origins_) {
    const bool now_counts = counts(origin, o, members);
    if (now_counts == o.counted) continue;
    add_all(o, now_counts ? +1 : -1, table);
    if (!now_counts) {
      for (const auto& [key, row] : o.rows) stats_.freed_with_failed += uint64_t(row.count);
    }
    o.counted = now_counts;
  }
}

void InflightView::forget(const NodeId& origin, LeaseTable& table) {
  auto it = origins_.find(origin);
  if (it == origins_.end()) return;
  if (it->second.counted) add_all(it->second, -1, table);
  rows_ -= it->second.rows.size();
  origins_.erase(it);
}

void InflightView::expire(MonoNanos now) {
  for (auto& [origin, o] : origins_) {
    rows_ -= std::erase_if(o.rows,
                           [&](const auto& kv) { return kv.second.count == 0 && now - kv.second.at > keep_zero_ns_; });
  }
}

size_t InflightView::bound_bytes(size_t max_rows, size_t key_bytes, size_t max_origins) {
  auto entry = [](size_t value) { return heap_block_bytes(sizeof(void*) + value) + 3 * sizeof(void*); };
  const size_t key = heap_string_bytes(key_bytes) - sizeof(std::string);
  // A row: its map entry and key; an origin (at most one per row, and no more than the ledger
  // knows): an entry, a node id of up to 256 bytes, its map's first bucket array.
  const size_t row = entry(sizeof(std::pair<const std::string, Row>)) + key;
  const size_t origin = entry(sizeof(std::pair<const NodeId, Origin>)) + heap_string_bytes(256) + 16 * sizeof(void*);
  return max_rows * row + std::min(max_rows, max_origins) * origin;
}

InflightViewStats InflightView::stats() const {
  InflightViewStats s = stats_;
  s.rows = rows_;
  return s;
}

}  // namespace tollgate
