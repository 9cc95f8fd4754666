// Who is in the cluster and who is alive: gossip-style failure detection (van Renesse, Minsky and
// Hayden, 1998), as a pure state machine driven by the caller's clock.
//
// Every member owns a heartbeat counter that it increments once per round and gossips, together
// with the counters it has heard of others. A member whose counter has not advanced here for
// fail_after is not heard from, directly or through anyone:
//   heartbeat membership: alive -> suspect (fail_after) -> dead (dead_after) -> forgotten
//                         (forget_after); a newer heartbeat at any point makes it alive again;
//   static membership:    alive -> unreachable (fail_after); listed members are never removed,
//                         only by editing the peers file.
// Dead and unreachable members are still probed every probe_interval, so a healed node rejoins
// without an operator. A restarted member comes back with a higher incarnation, which always wins.
// Not thread-safe: one owner (the Node).
#ifndef TOLLGATE_SRC_CORE_MEMBERSHIP_H_
#define TOLLGATE_SRC_CORE_MEMBERSHIP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/gossip_message.h"

namespace tollgate {

enum class MembershipKind : uint8_t { kStatic, kHeartbeat };

// Incarnations are microseconds of wall time at start-up (about 2^51 today); 2^62 is 146,000
// years away. A row or departure claiming 2^62 or more is forged or corrupt: it is ignored (and
// counted), and outbidding saturates below it, so no incarnation ever wraps when outbid by one.
inline constexpr uint64_t kMaxIncarnation = uint64_t{1} << 62;

struct MembershipOptions {
  MembershipKind kind = MembershipKind::kStatic;
  // No heartbeat advance for this long: suspect (heartbeat) or unreachable (static). Many
  // rounds (40 at 50 ms), so a few lost messages never fail a member.
  int64_t fail_after_ns = 2 * kNanosPerSecond;
  // Heartbeat membership: suspect becomes dead after this long without an advance.
  int64_t dead_after_ns = 4 * kNanosPerSecond;
  // Heartbeat membership: a dead or departed member is forgotten after this long. It must exceed
  // the ledger's retention plus the time a batch needs to reach everyone (see
  // Ledger::forget_origin), so the default is well above the 10 s retention.
  int64_t forget_after_ns = 60 * kNanosPerSecond;
  // Dead and unreachable members (and seeds not yet joined) get a message this often.
  int64_t probe_interval_ns = 1 * kNanosPerSecond;
  // Rows gossiped per message at most (the sender's own row always included); the rest rotate
  // through later messages, so messages stay small in large clusters.
  size_t member_rows = 64;  // >= 2: our row and one other (as a setting: 2..1024)
  size_t max_probes_per_round = 8;
  // Before failing a member on silence, ask for its row this many times (tick's `confirm`: the
  // Node asks the member itself and, relaying, two members of its group; docs/design.md 7.5):
  // at 70% of fail_after and every 10% after, so that rows lost or slow on their way here do not
  // fail a live member. A failed member is still failed at fail_after. 0: never; at most 9.
  uint32_t confirm_tries = 3;
  size_t probe_scan_per_round = 128;
};

// A peers-file line: `id host:port`.
struct PeerSpec {
  NodeId id;
  std::string address;
  friend bool operator==(const PeerSpec&, const PeerSpec&) = default;
};

struct MembershipStats {
  uint64_t joined = 0;        // members added (heartbeat: learned; static: listed)
  uint64_t failed = 0;        // transitions to suspect or unreachable
  uint64_t recovered = 0;     // back to alive from suspect, dead or unreachable
  uint64_t restarted = 0;     // members seen with a higher incarnation
  uint64_t forgotten = 0;     // dead or departed members removed
  uint64_t unknown_rows = 0;  // static: rows about members not in the peers file, ignored
  uint64_t refuted = 0;       // rows about a newer life of ours: we took a higher incarnation
  uint64_t implausible = 0;   // rows and departures with an incarnation above kMaxIncarnation, ignored
};

class Membership {
 public:
  Membership(NodeId self, std::string self_address, uint64_t incarnation, MembershipOptions options);
  ~Membership();
  Membership(Membership&&) noexcept;
  Membership& operator=(Membership&&) noexcept;

  const NodeId& self() const { return self_.id; }
  MembershipKind kind() const { return options_.kind; }
  const MembershipOptions& options() const { return options_; }

  // Static membership: the peers file's contents (self may be listed; it is skipped). Members no
  // longer listed are removed; new ones start unreachable, due a probe, until they are first
  // heard from. Ids returned in `removed` should be forgotten by the ledger once safe.
  void set_peers(const std::vector<PeerSpec>& peers, MonoNanos now_ns, std::vector<NodeId>* removed = nullptr);

  // Starts a new round: increments our heartbeat and moves members through their states.
  // Appends members forgotten this round to `forgotten`, and alive members whose row should be
  // asked for (MembershipOptions::confirm_tries) to `confirm`.
  void tick(MonoNanos now_ns, std::vector<NodeId>* forgotten = nullptr, std::vector<NodeId>* confirm = nullptr);

  // True if a message from `id` should be accepted: always under heartbeat membership; under
  // static membership only from listed members (or ourselves? never: we drop our own id).
  bool accepts_sender(const NodeId& id) const;

  // Merges rows heard in a message. Rows about us are ignored (our own row is authoritative),
  // except one with a higher incarnation than ours: a past life the cluster still remembers, so
  // we move to a higher incarnation still (self_row().incarnation; the Node follows it).
  void merge(const std::vector<MemberRecord>& rows, MonoNanos now_ns);
  // Starts loading the index entries of `id` and of the first rows (Node::prefetch).
  void prefetch(const NodeId& id, const std::vector<MemberRecord>& rows) const;

  // Marks `id` as having announced that it leaves.
  void mark_left(const NodeId& id, uint64_t incarnation, MonoNanos now_ns);

  // Our row, with `left` set after leave().
  MemberRecord self_row() const;
  void leave() { self_.left = true; }

  // Rows to put in the next message: ours first, then up to member_rows - 1 alive or
  // suspect members, rotating so every row goes out regularly.
  std::vector<MemberRecord> rows_for_message();
  // The same with at most `max_rows` rows (ours included), whatever member_rows says.
  std::vector<MemberRecord> rows_for_message(size_t max_rows);

  // Members to disseminate to: alive or suspect, not ourselves.
  // Valid until the next call of a non-const method.
  const std::vector<const MemberInfo*>& live() const;
  // Changes whenever live() (or the pointers in it) may have, or a member's address: cached
  // plans over the members check it.
  uint64_t live_version() const { return live_version_; }
  // Calls `f` with every member but us, in any state.
  void for_each_member(const std::function<void(const MemberInfo&)>& f) const {
    for (const Row& m : members_) f(m.view);
  }
  // Members known, in any state, ourselves included.
  size_t known() const { return members_.size() + 1; }
  // Dead or unreachable members due a probe at `now_ns` (marks them probed): at most
  // max_probes_per_round, found by a cursor that examines at most probe_scan_per_round members
  // per call. So a large cluster that starts with every peer unreachable (or heals a large
  // partition) sends a few probes per round, not one to every peer: the first answer's rows
  // then make many members alive at once. With `rows`, also each probed member's own row as
  // known here, for its probe: a failed member's row circulates no more, and a member that
  // restarted with a lower incarnation learns from it the life to outbid (merge).
  std::vector<std::string> due_probes(MonoNanos now_ns, std::vector<MemberRecord>* rows = nullptr);

  // (reachable including self, known including self): the proportional policy's scale.
  std::pair<uint32_t, uint32_t> reachable_fraction() const;

  // Everyone, self first, with last_heard relative to `now_ns`.
  std::vector<MemberInfo> view(MonoNanos now_ns) const;
  const MemberInfo* find(const NodeId& id) const;
  bool knows_address(const std::string& address) const;
  const MembershipStats& stats() const { return stats_; }

 private:
  // What this node knows of one other member: its row as last heard, and local bookkeeping.
  struct Row {
    MemberInfo view;  // last_heard_ns here holds the local time of the last advance
    bool left = false;
    // A row of its own has been taken: a peers-file member starts unheard, and its first row is
    // neither a recovery nor a restart (a fresh cluster would count one of each per peer).
    bool heard = false;
    MonoNanos last_probe_ns = 0;
    MonoNanos confirm_ns = 0;  // no row asked for before then (confirm_tries)
  };
  struct Tombstone {
    uint64_t incarnation = 0;
    uint64_t heartbeat = 0;
    MonoNanos until_ns = 0;
  };
  // `first_heard`: the member's first row (not counted as a recovery).
  void set_state(Row& m, MemberState s, bool first_heard = false);
  // When tick() must next look at `m`: its current state's deadline (or never).
  MonoNanos deadline(const Row& m) const;
  // When an alive member's row is next to be asked for (confirm_tries).
  MonoNanos confirm_due(const Row& m) const;
  void sync_index(const Row& m);
  // merge() of one row, whose id hashes to `hash` (Index::hash_of).
  void merge_row(const MemberRecord& r, uint64_t hash, MonoNanos now_ns);
  Row* find_member(const NodeId& id);
  void add_member(Row m);
  void remove_at(size_t i);

  MemberRecord self_;
  MembershipOptions options_;
  std::vector<Row> members_;  // not self
  // id -> position in members_, with a copy of the member's (incarnation, heartbeat): most rows
  // of a message are no news, and are dropped without touching members_ (one cache miss per
  // row instead of two; rows are the most frequent lookup in a large cluster).
  // (An open-addressing map, src/core/id_map.h: internal, so it is held by pointer.)
  struct Index;
  std::unique_ptr<Index> index_;
  // No member can change state by tick() before this time: tick() skips its scan until then.
  // Lowered whenever a member enters a state with a deadline; recomputed by each scan.
  MonoNanos next_scan_ns_ = 0;
  // live(), rebuilt only after a member is added, removed or changes state (every round would
  // otherwise walk every member to find the same answer).
  mutable std::vector<const MemberInfo*> live_;
  mutable bool live_dirty_ = true;
  uint64_t live_version_ = 0;
  // Forgotten members, so a stale row still circulating cannot bring one back: a row is taken
  // again only if newer than what we forgot. Kept for forget_after.
  std::unordered_map<NodeId, Tombstone> tombstones_;
  size_t rotate_ = 0;
  size_t probe_cursor_ = 0;
  size_t probe_targets_ = 0;  // members dead or unreachable: due_probes() scans only if any
  MembershipStats stats_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_MEMBERSHIP_H_
