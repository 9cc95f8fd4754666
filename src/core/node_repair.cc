// Relay repair (issue 39; docs/design.md 7.7, "Repair"): a batch lost on either hop of relay is
// asked for again as soon as a gap shows, from the node that can hand it over without charging
// anything twice.
//
// Within a group: a mate's own batches and its relay batches reach us from it directly, and
// their seqs are dense, so a batch that arrives above a missing seq shows the loss. We ask the
// mate (and, from the second try, one more mate) with a digest of just its two origins; it
// answers through push-pull's path, which repairs in-group origins to in-group members.
//
// Across groups: only the contact a sender picked for our group may apply the sender's batches
// here (every batch enters a group once, through its contact). So the sender keeps, per group,
// its stints: which contact (a member's life) was sent which of its seqs. Every relay message
// tells the contact the current stint's first and last seq; the contact asks for the seqs of
// that range it lacks, and the sender hands over only seqs of a stint with that same contact:
// never a seq another contact was sent (and may have relayed).
#include "core/node_repair.h"

#include <algorithm>

namespace tollgate {

namespace {

// A gap is asked about at most this many times (a round apart); then it is left to push-pull
// (within a group) or given up (counted: NodeStats::repair_gave_up).
constexpr uint32_t kMaxRepairTries = 20;

// True if a seq in [from, through] is not in `w`.
bool has_gap(const SeenWindow& w, uint64_t from, uint64_t through) {
  from = std::max(from, w.watermark + 1);
  if (from > through) return false;
  if (through - w.watermark > SeenWindow::kBits) return true;  // beyond the window: never seen
  for (uint64_t s = from; s <= through; ++s) {
    if (!w.contains(s)) return true;
  }
  return false;
}

}  // namespace

void Node::forget_repairs() {
  repair_->mates.clear();
  repair_->senders.clear();
  repair_->stints.clear();
}

void Node::forget_repairs_of(const NodeId& id) {
  repair_->mates.erase(id);
  repair_->senders.erase(id);
}

std::pair<uint64_t, uint64_t> Node::record_stint(uint32_t group, const MemberInfo& contact,
                                                 const std::vector<BatchPtr>& fresh, MonoNanos now) {
  std::vector<std::deque<Repair::Stint>>& all = repair_->stints;
  if (all.size() != groups_) all.assign(groups_, {});
  std::deque<Repair::Stint>& stints = all[group];
  while (!stints.empty() && now - stints.front().at > options_.ledger.retention_ns) stints.pop_front();
  uint64_t first = 0, last = 0;
  for (const BatchPtr& b : fresh) {
    if (b->origin != options_.id) continue;
    first = first ? std::min(first, b->seq) : b->seq;
    last = std::max(last, b->seq);
  }
  Repair::Stint* current = nullptr;
  if (!stints.empty()) {
    Repair::Stint& s = stints.back();
    if (s.contact == contact.id && s.contact_incarnation == contact.incarnation &&
        s.incarnation == options_.incarnation) {
      current = &s;
    }
  }
  if (last != 0) {
    if (current) {
      current->last = std::max(current->last, last);
      current->at = now;
    } else {
      stints.push_back({contact.id, contact.incarnation, options_.incarnation, first, last, now});
      current = &stints.back();
    }
  }
  return current ? std::pair{current->first, current->last} : std::pair<uint64_t, uint64_t>{0, 0};
}

bool Node::sent_to(const NodeId& contact, uint64_t contact_incarnation, const Batch& b) const {
  if (b.origin != options_.id || b.incarnation != options_.incarnation || groups_ == 0) return false;
  const uint32_t group = relay_group_of(contact, groups_);
  if (group >= repair_->stints.size()) return false;
  for (const Repair::Stint& s : repair_->stints[group]) {
    if (s.contact == contact && s.contact_incarnation == contact_incarnation && s.incarnation == b.incarnation &&
        b.seq >= s.first && b.seq <= s.last) {
      return true;
    }
  }
  return false;
}

namespace {
// The window of `origin`'s life `incarnation` in `d` (an empty one when `d` has none of it);
// nullptr when `d` has moved past that life.
const SeenWindow* window_of_life(const OriginDigest& d, uint64_t incarnation, const SeenWindow& empty) {
  if (d.current.incarnation == incarnation) return &d.current;
  if (d.previous.incarnation == incarnation) return &d.previous;
  if (incarnation > d.current.incarnation) return &empty;
  return nullptr;
}
}  // namespace

bool Node::lacks_told(const NodeId& sender, uint64_t incarnation, uint64_t since, uint64_t through) const {
  if (since == 0 || through < since) return false;
  OriginDigest d;
  const SeenWindow empty{};
  if (!ledger_.windows_of(sender, &d)) return has_gap(empty, since, through);
  const SeenWindow* w = window_of_life(d, incarnation, empty);
  return w && has_gap(*w, since, through);
}

bool Node::lacks_from_mate(const NodeId& mate, uint64_t told_incarnation, uint64_t told_own,
                           uint64_t told_relay) const {
  const SeenWindow empty{};
  for (const auto& [origin, told] : {std::pair{mate, told_own}, std::pair{relay_origin(mate), told_relay}}) {
    OriginDigest d;
    const bool known = ledger_.windows_of(origin, &d);
    // A seq missing below the highest seen: one arrived after it.
    if (known && d.current.highest() > d.current.watermark) return true;
    // One up to the last the mate told us of.
    if (told == 0) continue;
    const SeenWindow* w = known ? window_of_life(d, told_incarnation, empty) : &empty;
    if (w && has_gap(*w, 1, told)) return true;
  }
  return false;
}

void Node::note_gaps(const GossipMessage& m, bool relay, MonoNanos now) {
  if (relay) {
    // A member of another group whose contact we are, telling us its stint with us.
    if (m.relay_through == 0) return;
    Repair::Told& t = repair_->senders[m.sender];
    if (t.incarnation != m.sender_incarnation || t.since != m.relay_since) {
      t = Repair::Told{m.sender_incarnation, m.relay_since, m.relay_through, {}};
    } else {
      t.through = std::max(t.through, m.relay_through);
    }
    if (!lacks_told(m.sender, t.incarnation, t.since, t.through)) {
      repair_->senders.erase(m.sender);
    } else if (t.gap.noticed == 0) {
      t.gap.noticed = now;
    }
    return;
  }
  const bool told = m.relay_since != 0 || m.relay_through != 0;  // a mate's last seqs (rows rounds)
  if ((m.batches.empty() && !told) || !in_our_group(m.sender)) return;
  auto it = repair_->mates.find(m.sender);
  Repair::MateGap said;
  if (it != repair_->mates.end()) said = it->second;
  if (told) {
    if (said.incarnation != m.sender_incarnation) said = Repair::MateGap{{}, m.sender_incarnation, 0, 0};
    said.own = std::max(said.own, m.relay_since);
    said.relay = std::max(said.relay, m.relay_through);
  }
  if (!lacks_from_mate(m.sender, said.incarnation, said.own, said.relay)) {
    if (it != repair_->mates.end()) repair_->mates.erase(it);
    return;
  }
  if (said.gap.noticed == 0) said.gap.noticed = now;
  repair_->mates[m.sender] = said;
}

void Node::ask_for_repairs(MonoNanos now) {
  // A gap is asked about a quarter of a round after it showed at the earliest: a message's
  // batches may arrive in another order than sent.
  const int64_t settle = options_.interval_ns / 4;
  auto ask = [&](const NodeId& owner, std::initializer_list<NodeId> origins, const std::string& address) {
    const std::shared_ptr<GossipMessage> m = message({}, kNoRows);
    m->digest.emplace();
    for (const NodeId& origin : origins) {
      OriginDigest d;
      if (ledger_.windows_of(origin, &d)) {
        d.origin = origin;
        m->digest->origins.push_back(std::move(d));
      }
    }
    // Exactly the owner's origins: its id, and its id followed by kRelayOriginSuffix (ids
    // hold no NUL byte, so nothing else sorts in between).
    m->digest_from = owner;
    m->digest_until = owner + '\x01';
    ++stats_.repair_requests;
    send(address, m);
  };
  for (auto it = repair_->mates.begin(); it != repair_->mates.end();) {
    const NodeId& mate = it->first;
    const Repair::MateGap& said = it->second;
    Repair::Gap& g = it->second.gap;
    const MemberInfo* v = membership_.find(mate);
    if (now - g.noticed < settle) {
      ++it;
    } else if (!v || !lacks_from_mate(mate, said.incarnation, said.own, said.relay)) {
      it = repair_->mates.erase(it);
    } else if (g.tries >= kMaxRepairTries) {
      ++stats_.repair_gave_up;  // push-pull goes on repairing within the group
      it = repair_->mates.erase(it);
    } else {
      ask(mate, {mate, relay_origin(mate)}, v->address);
      // From the second try, one more mate too: the owner, or our way to it, may be lossy.
      if (g.tries > 0) {
        const MemberInfo* other = random_mate();
        if (other && other->id != mate) ask(mate, {mate, relay_origin(mate)}, other->address);
      }
      ++g.tries;
      ++it;
    }
  }
  for (auto it = repair_->senders.begin(); it != repair_->senders.end();) {
    const NodeId& sender = it->first;
    Repair::Told& t = it->second;
    const MemberInfo* v = membership_.find(sender);
    if (now - t.gap.noticed < settle) {
      ++it;
    } else if (!v || !lacks_told(sender, t.incarnation, t.since, t.through)) {
      it = repair_->senders.erase(it);
    } else if (t.gap.tries >= kMaxRepairTries) {
      ++stats_.repair_gave_up;  // lost to our group: over-admission, the safe side
      it = repair_->senders.erase(it);
    } else {
      // Only the sender may hand its batches to us (the seqs it sent us): one way to ask.
      ask(sender, {sender}, v->address);
      ++t.gap.tries;
      ++it;
    }
  }
}

}  // namespace tollgate
