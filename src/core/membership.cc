#include "core/membership.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "core/id_map.h"

namespace tollgate {

// id -> position in members_, with a copy of the member's (incarnation, heartbeat).
struct MemberIndexEntry {
  size_t pos = 0;
  uint64_t incarnation = 0, heartbeat = 0;
};
struct Membership::Index : IdMap<MemberIndexEntry> {};

Membership::Membership(NodeId self, std::string self_address, uint64_t incarnation, MembershipOptions options)
    : options_(options), index_(std::make_unique<Index>()) {
  self_.id = std::move(self);
  self_.address = std::move(self_address);
  self_.incarnation = incarnation;
  self_.heartbeat = 0;
}

Membership::~Membership() = default;
Membership::Membership(Membership&&) noexcept = default;
Membership& Membership::operator=(Membership&&) noexcept = default;

Membership::Row* Membership::find_member(const NodeId& id) {
  const MemberIndexEntry* at = index_->find(id);
  return at ? &members_[at->pos] : nullptr;
}

const MemberInfo* Membership::find(const NodeId& id) const {
  const MemberIndexEntry* at = index_->find(id);
  return at ? &members_[at->pos].view : nullptr;
}

bool Membership::knows_address(const std::string& address) const {
  for (const Row& m : members_) {
    if (m.view.address == address && (m.view.state == MemberState::kAlive || m.view.state == MemberState::kSuspect)) {
      return true;
    }
  }
  return false;
}

namespace {
// Rows merge() looks up at a time, their index slots prefetched first; prefetch() does the first
// chunk of a message ahead of its merge.
constexpr size_t kMergeChunk = 16;
// States whose members due_probes() looks for.
bool probed(MemberState s) { return s == MemberState::kDead || s == MemberState::kUnreachable; }
}  // namespace

void Membership::add_member(Row m) {
  (*index_)[m.view.id] = {members_.size(), m.view.incarnation, m.view.heartbeat};
  probe_targets_ += probed(m.view.state);
  next_scan_ns_ = std::min(next_scan_ns_, deadline(m));
  members_.push_back(std::move(m));
  live_dirty_ = true;
  ++live_version_;
  ++stats_.joined;
}

void Membership::sync_index(const Row& m) {
  MemberIndexEntry& e = (*index_)[m.view.id];
  e.incarnation = m.view.incarnation;
  e.heartbeat = m.view.heartbeat;
}

MonoNanos Membership::deadline(const Row& m) const {
  constexpr MonoNanos kNever = std::numeric_limits<MonoNanos>::max();
  const MonoNanos heard = m.view.last_heard_ns;
  switch (m.view.state) {
    case MemberState::kAlive:
      return options_.confirm_tries ? std::min(heard + options_.fail_after_ns, confirm_due(m))
                                    : heard + options_.fail_after_ns;
    case MemberState::kSuspect:
      return options_.kind == MembershipKind::kStatic ? kNever : heard + options_.dead_after_ns;
    case MemberState::kDead:
    case MemberState::kLeft:
      return options_.kind == MembershipKind::kStatic ? kNever : heard + options_.forget_after_ns;
    case MemberState::kUnreachable:
      return kNever;
  }
  return kNever;
}

MonoNanos Membership::confirm_due(const Row& m) const {
  const int64_t fail_after = options_.fail_after_ns;
  const int64_t first = fail_after - int64_t(std::min<uint32_t>(options_.confirm_tries, 9)) * (fail_after / 10);
  return std::max(m.view.last_heard_ns + first, m.confirm_ns);
}

void Membership::remove_at(size_t i) {
  live_dirty_ = true;
  ++live_version_;
  probe_targets_ -= probed(members_[i].view.state);
  index_->erase(members_[i].view.id);
  if (i + 1 != members_.size()) {
    members_[i] = std::move(members_.back());
    (*index_)[members_[i].view.id].pos = i;
  }
  members_.pop_back();
}

void Membership::set_state(Row& m, MemberState s, bool first_heard) {
  if (m.view.state == s) return;
  const MemberState before = m.view.state;
  if (s == MemberState::kSuspect || s == MemberState::kUnreachable) ++stats_.failed;
  if (s == MemberState::kAlive && before != MemberState::kLeft && !first_heard) ++stats_.recovered;
  probe_targets_ = probe_targets_ - probed(before) + probed(s);
  m.view.state = s;
  live_dirty_ = true;
  ++live_version_;
  next_scan_ns_ = std::min(next_scan_ns_, deadline(m));
}

void Membership::set_peers(const std::vector<PeerSpec>& peers, MonoNanos now, std::vector<NodeId>* removed) {
  std::unordered_map<NodeId, const PeerSpec*> listed;
  for (const PeerSpec& p : peers) {
    if (p.id != self_.id) listed.emplace(p.id, &p);
  }
  for (size_t i = 0; i < members_.size();) {
    auto it = listed.find(members_[i].view.id);
    if (it == listed.end()) {
      if (removed) removed->push_back(members_[i].view.id);
      remove_at(i);
      continue;
    }
    if (members_[i].view.address != it->second->address) {  // an address may change with a reload
      members_[i].view.address = it->second->address;
      ++live_version_;  // plans that hold addresses are stale
    }
    listed.erase(it);
    ++i;
  }
  for (const PeerSpec& p : peers) {
    if (!listed.count(p.id)) continue;
    // Not heard from yet: unreachable until its first message, and due a probe at once, so a
    // listed peer is only reported alive (and counted as reachable) once it has spoken.
    Row m;
    m.view.id = p.id;
    m.view.address = p.address;
    m.view.state = MemberState::kUnreachable;
    m.view.last_heard_ns = now;
    m.last_probe_ns = now - options_.probe_interval_ns;
    add_member(std::move(m));
    listed.erase(p.id);
  }
}

void Membership::tick(MonoNanos now, std::vector<NodeId>* forgotten, std::vector<NodeId>* confirm) {
  ++self_.heartbeat;
  for (auto it = tombstones_.begin(); it != tombstones_.end();) {
    it = it->second.until_ns <= now ? tombstones_.erase(it) : std::next(it);
  }
  // Deadlines only move later while members are heard from, so nothing is due before the
  // earliest deadline the last scan saw (or a state change since has set).
  if (now < next_scan_ns_) return;
  next_scan_ns_ = std::numeric_limits<MonoNanos>::max();
  for (size_t i = 0; i < members_.size();) {
    Row& m = members_[i];
    const int64_t silent = now - m.view.last_heard_ns;
    if (m.view.state == MemberState::kAlive && options_.confirm_tries && silent < options_.fail_after_ns &&
        now >= confirm_due(m)) {
      if (confirm) confirm->push_back(m.view.id);
      m.confirm_ns = now + options_.fail_after_ns / 10;
    }
    if (options_.kind == MembershipKind::kStatic) {
      if (m.view.state == MemberState::kAlive && silent >= options_.fail_after_ns)
        set_state(m, MemberState::kUnreachable);
      next_scan_ns_ = std::min(next_scan_ns_, deadline(m));
      ++i;
      continue;
    }
    if (m.view.state == MemberState::kAlive && silent >= options_.fail_after_ns) set_state(m, MemberState::kSuspect);
    if (m.view.state == MemberState::kSuspect && silent >= options_.dead_after_ns) set_state(m, MemberState::kDead);
    const bool gone = m.view.state == MemberState::kDead || m.view.state == MemberState::kLeft;
    if (gone && silent >= options_.forget_after_ns) {
      tombstones_[m.view.id] = {m.view.incarnation, m.view.heartbeat, now + options_.forget_after_ns};
      if (forgotten) forgotten->push_back(m.view.id);
      ++stats_.forgotten;
      remove_at(i);
      continue;
    }
    next_scan_ns_ = std::min(next_scan_ns_, deadline(m));
    ++i;
  }
}

bool Membership::accepts_sender(const NodeId& id) const {
  if (id == self_.id) return false;
  return options_.kind == MembershipKind::kHeartbeat || index_->contains(id);
}

void Membership::prefetch(const NodeId& id, const std::vector<MemberRecord>& rows) const {
  index_->prefetch(Index::hash_of(id));
  for (size_t k = 0; k < rows.size() && k < kMergeChunk; ++k) index_->prefetch(Index::hash_of(rows[k].id));
}

void Membership::merge(const std::vector<MemberRecord>& rows, MonoNanos now) {
  // A message's rows are looked up in chunks, each chunk's index slots prefetched first (IdMap:
  // their cache misses overlap). Adding a member below leaves the hashes valid.
  uint64_t hashes[kMergeChunk];
  for (size_t base = 0; base < rows.size(); base += kMergeChunk) {
    const size_t n = std::min(kMergeChunk, rows.size() - base);
    for (size_t k = 0; k < n; ++k) {
      hashes[k] = Index::hash_of(rows[base + k].id);
      index_->prefetch(hashes[k]);
    }
    for (size_t k = 0; k < n; ++k) merge_row(rows[base + k], hashes[k], now);
  }
}

void Membership::merge_row(const MemberRecord& r, uint64_t hash, MonoNanos now) {
  if (r.id.empty()) return;
  if (r.incarnation >= kMaxIncarnation) {
    ++stats_.implausible;
    return;
  }
  const MemberIndexEntry* known = index_->find(r.id, hash);
  if (!known && r.id == self_.id) {  // (we are never in index_: no string compare for most rows)
    // Our own row is authoritative, except that a life of ours the cluster still remembers as
    // newer than this one (we restarted after the wall clock stepped back, and incarnations
    // come from the wall clock) would win over us everywhere: outbid it, as SWIM refutes.
    if (r.incarnation > self_.incarnation && !self_.left) {
      // Saturating: our rows must stay plausible to the others (< kMaxIncarnation).
      self_.incarnation = std::min(r.incarnation + 1, kMaxIncarnation - 1);
      ++stats_.refuted;
    }
    return;
  }
  if (known && !r.left && std::tie(r.incarnation, r.heartbeat) <= std::tie(known->incarnation, known->heartbeat)) {
    return;  // nothing we did not know (the common case: see MemberIndexEntry)
  }
  Row* m = known ? &members_[known->pos] : nullptr;
  if (!m) {
    if (options_.kind == MembershipKind::kStatic) {
      ++stats_.unknown_rows;
      return;
    }
    if (r.left) return;  // do not learn of a member by its departure
    if (auto t = tombstones_.find(r.id); t != tombstones_.end()) {
      if (std::tie(r.incarnation, r.heartbeat) <= std::tie(t->second.incarnation, t->second.heartbeat)) return;
      tombstones_.erase(t);
    }
    Row fresh;
    fresh.view.id = r.id;
    fresh.view.address = r.address;
    fresh.view.incarnation = r.incarnation;
    fresh.view.heartbeat = r.heartbeat;
    fresh.view.state = MemberState::kAlive;
    fresh.view.last_heard_ns = now;
    fresh.last_probe_ns = now;
    fresh.heard = true;
    add_member(std::move(fresh));
    return;
  }
  MemberInfo& v = m->view;
  const bool newer = std::tie(r.incarnation, r.heartbeat) > std::tie(v.incarnation, v.heartbeat);
  const bool departs = r.left && !m->left && r.incarnation == v.incarnation;
  if (!newer && !departs) return;  // nothing we did not know
  const bool first_heard = !m->heard;
  m->heard = true;
  if (r.incarnation > v.incarnation) {
    if (!first_heard) ++stats_.restarted;
    m->left = false;
    v.heartbeat = 0;
  }
  v.incarnation = r.incarnation;
  v.heartbeat = std::max(v.heartbeat, r.heartbeat);
  // Static membership: the peers file says where a member is; its own claim does not move it.
  if (!r.address.empty() && options_.kind == MembershipKind::kHeartbeat && v.address != r.address) {
    v.address = r.address;
    ++live_version_;  // plans that hold addresses are stale
  }
  v.last_heard_ns = now;
  sync_index(*m);
  if (r.left) {
    m->left = true;
    set_state(*m, MemberState::kLeft);
  } else if (!m->left) {
    set_state(*m, MemberState::kAlive, first_heard);
  }
}

void Membership::mark_left(const NodeId& id, uint64_t incarnation, MonoNanos now) {
  if (incarnation >= kMaxIncarnation) {
    ++stats_.implausible;
    return;
  }
  Row* m = find_member(id);
  if (!m || incarnation < m->view.incarnation) return;
  m->left = true;
  m->heard = true;
  m->view.incarnation = incarnation;
  m->view.last_heard_ns = now;
  sync_index(*m);
  set_state(*m, MemberState::kLeft);
}

MemberRecord Membership::self_row() const { return self_; }

std::vector<MemberRecord> Membership::rows_for_message() { return rows_for_message(options_.member_rows); }

std::vector<MemberRecord> Membership::rows_for_message(size_t max_rows) {
  std::vector<MemberRecord> rows;
  rows.push_back(self_);
  const size_t budget = max_rows > 0 ? max_rows - 1 : 0;
  const size_t n = members_.size();
  for (size_t scanned = 0; scanned < n && rows.size() - 1 < budget; ++scanned) {
    const Row& m = members_[(rotate_ + scanned) % n];
    // Only members heard recently: a dead member's row must stop circulating so that it can be
    // forgotten everywhere.
    if (m.view.state != MemberState::kAlive && m.view.state != MemberState::kSuspect &&
        m.view.state != MemberState::kLeft) {
      continue;
    }
    rows.push_back({m.view.id, m.view.address, m.view.incarnation, m.view.heartbeat, m.left});
  }
  if (n > 0) rotate_ = (rotate_ + budget) % n;
  return rows;
}

const std::vector<const MemberInfo*>& Membership::live() const {
  if (live_dirty_) {
    live_.clear();
    for (const Row& m : members_) {
      if (m.view.state == MemberState::kAlive || m.view.state == MemberState::kSuspect) live_.push_back(&m.view);
    }
    live_dirty_ = false;
  }
  return live_;
}

std::vector<std::string> Membership::due_probes(MonoNanos now, std::vector<MemberRecord>* rows) {
  std::vector<std::string> out;
  if (rows) rows->clear();
  if (probe_targets_ == 0) return out;  // the usual case: no scan
  const size_t n = members_.size();
  const size_t scan = std::min(n, options_.probe_scan_per_round);
  for (size_t k = 0; k < scan && out.size() < options_.max_probes_per_round; ++k) {
    Row& m = members_[probe_cursor_++ % n];
    if (m.view.state != MemberState::kDead && m.view.state != MemberState::kUnreachable) continue;
    if (now - m.last_probe_ns < options_.probe_interval_ns) continue;
    m.last_probe_ns = now;
    out.push_back(m.view.address);
    if (rows) rows->push_back({m.view.id, m.view.address, m.view.incarnation, m.view.heartbeat, m.left});
  }
  if (n) probe_cursor_ %= n;
  return out;
}

std::pair<uint32_t, uint32_t> Membership::reachable_fraction() const {
  uint32_t reachable = 1, known = 1;
  for (const Row& m : members_) {
    if (m.view.state == MemberState::kLeft) continue;  // departed on purpose: not missing capacity
    ++known;
    if (m.view.state == MemberState::kAlive || m.view.state == MemberState::kSuspect) ++reachable;
  }
  return {reachable, known};
}

std::vector<MemberInfo> Membership::view(MonoNanos now) const {
  std::vector<MemberInfo> out;
  MemberInfo me;
  me.id = self_.id;
  me.address = self_.address;
  me.state = MemberState::kAlive;
  me.incarnation = self_.incarnation;
  me.heartbeat = self_.heartbeat;
  me.self = true;
  out.push_back(me);
  for (const Row& m : members_) {
    MemberInfo v = m.view;
    v.last_heard_ns = now - m.view.last_heard_ns;
    out.push_back(v);
  }
  std::sort(out.begin() + 1, out.end(), [](const MemberInfo& a, const MemberInfo& b) { return a.id < b.id; });
  return out;
}

}  // namespace tollgate
