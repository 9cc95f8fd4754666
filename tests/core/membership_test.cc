// The membership state machine alone, with a fake clock: every transition of both kinds.
#include "core/membership.h"

#include <gtest/gtest.h>

#include <set>

namespace tollgate {
namespace {

constexpr int64_t kSec = kNanosPerSecond;

MembershipOptions heartbeat_options() {
  MembershipOptions o;
  o.kind = MembershipKind::kHeartbeat;
  o.fail_after_ns = 2 * kSec;
  o.dead_after_ns = 4 * kSec;
  o.forget_after_ns = 20 * kSec;
  o.probe_interval_ns = 1 * kSec;
  return o;
}

MemberRecord row(const std::string& id, uint64_t incarnation, uint64_t heartbeat, bool left = false) {
  return {id, id + ":1", incarnation, heartbeat, left};
}

MemberState state(const Membership& m, const std::string& id) { return m.find(id)->state; }

TEST(Membership, HeartbeatMembersGoSuspectDeadAndForgottenAsTheirHeartbeatStalls) {
  Membership m("self", "self:1", 1, heartbeat_options());
  m.merge({row("b", 1, 5)}, 0);
  EXPECT_EQ(state(m, "b"), MemberState::kAlive);
  m.tick(2 * kSec - 1);
  EXPECT_EQ(state(m, "b"), MemberState::kAlive);
  m.tick(2 * kSec);
  EXPECT_EQ(state(m, "b"), MemberState::kSuspect);
  EXPECT_EQ(m.live().size(), 1u);  // suspects still get gossip: they may only be slow
  m.tick(4 * kSec);
  EXPECT_EQ(state(m, "b"), MemberState::kDead);
  EXPECT_TRUE(m.live().empty());
  std::vector<NodeId> forgotten;
  m.tick(20 * kSec, &forgotten);
  EXPECT_EQ(forgotten, std::vector<NodeId>{"b"});
  EXPECT_EQ(m.find("b"), nullptr);
  EXPECT_EQ(m.stats().forgotten, 1u);
}

// Before failing a silent member, its row is asked for (MembershipOptions::confirm_tries): at
// 60% of fail_after and every 10% after, each time once; a newer row in between starts over; a
// member that stays silent still fails at fail_after exactly.
TEST(Membership, ASilentMembersRowIsAskedForBeforeItFailsAndItFailsOnTime) {
  MembershipOptions o = heartbeat_options();  // fail_after 2 s
  o.confirm_tries = 4;                        // (3 by default: from 70%)
  Membership m("self", "self:1", 1, o);
  m.merge({row("b", 1, 5), row("c", 1, 5)}, 0);
  std::vector<NodeId> asked;
  auto tick = [&](int64_t at) {
    asked.clear();
    m.tick(at, nullptr, &asked);
    return asked;
  };
  EXPECT_TRUE(tick(kSec).empty());
  m.merge({row("c", 1, 6)}, kSec);  // c is heard from again
  EXPECT_TRUE(tick(12 * kSec / 10 - 1).empty());
  EXPECT_EQ(tick(12 * kSec / 10), (std::vector<NodeId>{"b"}));
  EXPECT_TRUE(tick(13 * kSec / 10).empty());  // asked once per try
  EXPECT_EQ(tick(14 * kSec / 10), (std::vector<NodeId>{"b"}));
  EXPECT_EQ(tick(16 * kSec / 10), (std::vector<NodeId>{"b"}));
  EXPECT_EQ(tick(18 * kSec / 10), (std::vector<NodeId>{"b"}));
  EXPECT_EQ(tick(2 * kSec - 1), (std::vector<NodeId>{}));
  EXPECT_EQ(state(m, "b"), MemberState::kAlive);
  EXPECT_EQ(tick(22 * kSec / 10), (std::vector<NodeId>{"c"}));  // c: 60% of its silence since 1 s
  EXPECT_EQ(state(m, "b"), MemberState::kSuspect);              // (at 2 s: not asked again)
  m.merge({row("c", 1, 7)}, 23 * kSec / 10);
  EXPECT_TRUE(tick(34 * kSec / 10).empty());
  EXPECT_EQ(tick(35 * kSec / 10), (std::vector<NodeId>{"c"}));
  EXPECT_EQ(state(m, "c"), MemberState::kAlive);
}

TEST(Membership, WithoutConfirmTriesNothingIsAskedFor) {
  MembershipOptions o = heartbeat_options();
  o.confirm_tries = 0;
  Membership m("self", "self:1", 1, o);
  m.merge({row("b", 1, 5)}, 0);
  std::vector<NodeId> asked;
  for (int64_t t = 0; t <= 2 * kSec; t += kSec / 20) m.tick(t, nullptr, &asked);
  EXPECT_TRUE(asked.empty());
  EXPECT_EQ(state(m, "b"), MemberState::kSuspect);
}

// A fresh static cluster: each peer's first row takes it from "not heard from yet" to alive,
// which is neither a recovery nor a restart (issue 37, item 13: members_recovered 2 and
// members_restarted 2 on every node of a healthy 3-node cluster). A later life, and a return
// from suspect, still count.
TEST(Membership, APeersFirstRowIsNeitherARecoveryNorARestart) {
  MembershipOptions o = heartbeat_options();
  o.kind = MembershipKind::kStatic;
  Membership m("self", "self:1", 1, o);
  m.set_peers({{"self", "self:1"}, {"b", "b:1"}, {"c", "c:1"}}, 0);
  EXPECT_EQ(state(m, "b"), MemberState::kUnreachable);
  m.merge({row("b", 7, 1), row("c", 9, 1)}, kSec / 10);
  EXPECT_EQ(state(m, "b"), MemberState::kAlive);
  EXPECT_EQ(m.stats().recovered, 0u);
  EXPECT_EQ(m.stats().restarted, 0u);
  m.merge({row("b", 8, 1)}, kSec / 5);  // b restarted
  EXPECT_EQ(m.stats().restarted, 1u);
  m.tick(3 * kSec);  // c silent past fail_after
  EXPECT_NE(state(m, "c"), MemberState::kAlive);
  m.merge({row("c", 9, 2)}, 3 * kSec + 1);
  EXPECT_EQ(state(m, "c"), MemberState::kAlive);
  EXPECT_EQ(m.stats().recovered, 1u);
}

// tick() skips its scan until the earliest deadline it knows of: a member that joins, or comes
// back, after a scan that saw only far deadlines must still fail on time.
TEST(Membership, DeadlinesSetBetweenScansAreKept) {
  Membership m("self", "self:1", 1, heartbeat_options());
  m.merge({row("old", 1, 1)}, 0);
  m.tick(4 * kSec);
  ASSERT_EQ(state(m, "old"), MemberState::kDead);  // next deadline: forgotten at 20 s
  m.merge({row("new", 1, 1)}, 5 * kSec);
  m.tick(7 * kSec - 1);
  EXPECT_EQ(state(m, "new"), MemberState::kAlive);
  m.tick(7 * kSec);
  EXPECT_EQ(state(m, "new"), MemberState::kSuspect);
  m.merge({row("old", 1, 2)}, 8 * kSec);  // back from the dead: fails again 2 s later
  ASSERT_EQ(state(m, "old"), MemberState::kAlive);
  m.tick(10 * kSec);
  EXPECT_EQ(state(m, "old"), MemberState::kSuspect);
}

// We restarted with a lower incarnation than the life the cluster remembers (the wall clock,
// which incarnations come from, stepped back): a row about that life makes us outbid it.
TEST(Membership, ARowAboutANewerLifeOfOursIsOutbid) {
  Membership m("self", "self:1", 5, heartbeat_options());
  m.merge({row("self", 3, 100)}, 0);  // an older life: ignored
  EXPECT_EQ(m.self_row().incarnation, 5u);
  m.merge({row("self", 5, 100)}, 0);  // this life, relayed back: ignored
  EXPECT_EQ(m.self_row().incarnation, 5u);
  m.merge({row("self", 9, 100)}, 0);
  EXPECT_EQ(m.self_row().incarnation, 10u);
  EXPECT_EQ(m.stats().refuted, 1u);
  EXPECT_EQ(m.find("self"), nullptr) << "we never become a member of our own list";
}

// Issue #15, finding 6: a row claiming incarnation 2^64 - 1 made us take incarnation + 1 = 0 and
// lose to the remembered row for ever; one about a peer pinned it to a life nothing outbids.
TEST(Membership, IncarnationsBeyondAnyWallClockAreIgnoredAndNeverWrap) {
  Membership m("self", "self:1", 5, heartbeat_options());
  m.merge({row("b", 7, 1)}, 0);
  m.merge({row("self", UINT64_MAX, 1), row("b", UINT64_MAX, 1), row("c", kMaxIncarnation, 1)}, 0);
  EXPECT_EQ(m.self_row().incarnation, 5u);
  ASSERT_NE(m.find("b"), nullptr);
  EXPECT_EQ(m.find("b")->incarnation, 7u);
  EXPECT_EQ(m.find("c"), nullptr);
  m.mark_left("b", UINT64_MAX, 0);
  EXPECT_EQ(m.find("b")->state, MemberState::kAlive);
  EXPECT_EQ(m.stats().implausible, 4u);
  // Outbidding saturates at the largest plausible incarnation, so our rows stay plausible.
  m.merge({row("self", kMaxIncarnation - 2, 1)}, 0);
  EXPECT_EQ(m.self_row().incarnation, kMaxIncarnation - 1);
  m.merge({row("self", kMaxIncarnation - 1, 1)}, 0);
  EXPECT_EQ(m.self_row().incarnation, kMaxIncarnation - 1);
  EXPECT_EQ(m.stats().refuted, 1u);
}

TEST(Membership, AnAdvancingHeartbeatRevivesAndAStaleOneDoesNot) {
  Membership m("self", "self:1", 1, heartbeat_options());
  m.merge({row("b", 1, 5)}, 0);
  m.tick(3 * kSec);
  ASSERT_EQ(state(m, "b"), MemberState::kSuspect);
  m.merge({row("b", 1, 5)}, 3 * kSec);  // the same heartbeat, relayed late: no news
  EXPECT_EQ(state(m, "b"), MemberState::kSuspect);
  m.merge({row("b", 1, 6)}, 3 * kSec);
  EXPECT_EQ(state(m, "b"), MemberState::kAlive);
  EXPECT_EQ(m.stats().recovered, 1u);
}

TEST(Membership, AHigherIncarnationWinsEvenWithALowerHeartbeat) {
  Membership m("self", "self:1", 1, heartbeat_options());
  m.merge({row("b", 1, 900)}, 0);
  m.merge({row("b", 2, 1)}, kSec);
  EXPECT_EQ(m.find("b")->incarnation, 2u);
  EXPECT_EQ(m.find("b")->heartbeat, 1u);
  EXPECT_EQ(m.stats().restarted, 1u);
  m.merge({row("b", 1, 1000)}, kSec);  // the old life, relayed late
  EXPECT_EQ(m.find("b")->incarnation, 2u);
}

TEST(Membership, AForgottenMemberIsNotResurrectedByAStaleRow) {
  Membership m("self", "self:1", 1, heartbeat_options());
  m.merge({row("b", 1, 5)}, 0);
  m.tick(20 * kSec);
  ASSERT_EQ(m.find("b"), nullptr);
  m.merge({row("b", 1, 5)}, 21 * kSec);  // someone still gossips the old row
  EXPECT_EQ(m.find("b"), nullptr);
  m.merge({row("b", 2, 1)}, 22 * kSec);  // but a restarted b comes back
  ASSERT_NE(m.find("b"), nullptr);
  EXPECT_EQ(state(m, "b"), MemberState::kAlive);
}

TEST(Membership, DepartureIsRecordedAndNotCountedAsMissingCapacity) {
  Membership m("self", "self:1", 1, heartbeat_options());
  m.merge({row("b", 1, 5), row("c", 1, 5)}, 0);
  m.merge({row("b", 1, 5, /*left=*/true)}, kSec);
  EXPECT_EQ(state(m, "b"), MemberState::kLeft);
  EXPECT_EQ(m.reachable_fraction(), (std::pair<uint32_t, uint32_t>{2, 2}));  // self + c
  m.merge({row("d", 1, 1, /*left=*/true)}, kSec);                            // never learn of a member by its departure
  EXPECT_EQ(m.find("d"), nullptr);
}

TEST(Membership, StaticPeersStartUnreachableAreProbedAndNeverForgotten) {
  MembershipOptions o;
  o.kind = MembershipKind::kStatic;
  o.fail_after_ns = 2 * kSec;
  o.probe_interval_ns = kSec;
  Membership m("a", "a:1", 1, o);
  m.set_peers({{"a", "a:1"}, {"b", "b:1"}}, 0);
  EXPECT_EQ(state(m, "b"), MemberState::kUnreachable);
  EXPECT_EQ(m.due_probes(0), std::vector<std::string>{"b:1"});
  EXPECT_TRUE(m.due_probes(kSec / 2).empty());
  EXPECT_EQ(m.due_probes(kSec), std::vector<std::string>{"b:1"});
  m.merge({row("b", 1, 1)}, kSec);
  EXPECT_EQ(state(m, "b"), MemberState::kAlive);
  m.tick(100 * kSec);
  EXPECT_EQ(state(m, "b"), MemberState::kUnreachable);  // never dead, never forgotten
  EXPECT_TRUE(m.accepts_sender("b"));
  EXPECT_FALSE(m.accepts_sender("stranger"));
  m.merge({row("stranger", 1, 1)}, 100 * kSec);
  EXPECT_EQ(m.find("stranger"), nullptr);
  EXPECT_EQ(m.stats().unknown_rows, 1u);
  std::vector<NodeId> removed;
  m.set_peers({{"a", "a:1"}}, 100 * kSec, &removed);
  EXPECT_EQ(removed, std::vector<NodeId>{"b"});
  EXPECT_FALSE(m.accepts_sender("b"));
}

TEST(Membership, ProbesPerRoundAreCappedAndEveryFailedMemberGetsItsTurn) {
  MembershipOptions o;
  o.kind = MembershipKind::kStatic;
  o.probe_interval_ns = kSec;
  o.max_probes_per_round = 3;
  o.probe_scan_per_round = 5;
  Membership m("self", "self:1", 1, o);
  std::vector<PeerSpec> peers;
  for (int i = 0; i < 10; ++i) peers.push_back({"n" + std::to_string(i), "n" + std::to_string(i) + ":1"});
  m.set_peers(peers, 0);  // all ten unreachable and due
  std::set<std::string> probed;
  for (int round = 0; round < 4; ++round) {
    const auto due = m.due_probes(round);
    EXPECT_LE(due.size(), 3u);
    probed.insert(due.begin(), due.end());
  }
  EXPECT_EQ(probed.size(), 10u);         // four rounds of three cover all ten
  EXPECT_TRUE(m.due_probes(5).empty());  // and none is due again within the interval
}

TEST(Membership, RowsRotateUnderTheCapAndAlwaysLeadWithOurOwn) {
  MembershipOptions o = heartbeat_options();
  o.member_rows = 4;
  Membership m("self", "self:1", 1, o);
  std::vector<MemberRecord> rows;
  for (int i = 0; i < 9; ++i) rows.push_back(row("n" + std::to_string(i), 1, 1));
  m.merge(rows, 0);
  std::set<std::string> seen;
  for (int message = 0; message < 3; ++message) {
    const auto out = m.rows_for_message();
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[0].id, "self");
    for (size_t i = 1; i < out.size(); ++i) seen.insert(out[i].id);
  }
  EXPECT_EQ(seen.size(), 9u);  // three messages of three rows cover all nine members
}

}  // namespace
}  // namespace tollgate
