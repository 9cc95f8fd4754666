// Balances across restarts (issue 35, --state-dir): the state file's format, refused whole when
// it cannot be trusted, and a node's state carried from one life to the next exactly: balances
// refilled by the time it was down, batches already counted in them not applied again.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/key_table.h"
#include "core/ledger.h"
#include "core/node.h"
#include "core/outbox.h"
#include "state/snapshot.h"
#include "support/test_rules.h"
#include "tollgate/config_error.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

constexpr int64_t kSec = kNanosPerSecond;
constexpr int64_t kM = kMicrotokensPerToken;
constexpr int64_t kDay = 86400 * kSec;

ClusterKeys key(char c) { return ClusterKeys({std::string(32, c)}); }

NodeState sample() {
  NodeState s;
  s.node_id = "a";
  s.incarnation = 7;
  s.balances = {{"day:alice", -2 * kM}, {"day:bob", 3 * kM + 5}};
  OriginDigest o;
  o.origin = "b";
  o.current.incarnation = 9;
  o.current.watermark = 41;
  o.current.above[0] = 0b101;
  o.previous.incarnation = 4;
  o.previous.watermark = 100;
  s.positions.origins.push_back(o);
  return s;
}

std::string error_of(std::string_view bytes, const ClusterKeys& keys) {
  try {
    (void)state::decode(bytes, keys, "/var/lib/tollgate/state");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(decoded)";
}

TEST(StateFile, WhatIsWrittenIsReadBack) {
  const std::string bytes = state::encode(sample(), 1'700'000'000 * kSec, key('k'));
  const state::Loaded back = state::decode(bytes, key('k'), "state");
  EXPECT_EQ(back.written_unix_ns, 1'700'000'000 * kSec);
  EXPECT_EQ(back.state.node_id, "a");
  EXPECT_EQ(back.state.incarnation, 7u);
  EXPECT_EQ(back.state.balances, sample().balances);
  ASSERT_EQ(back.state.positions.origins.size(), 1u);
  EXPECT_EQ(back.state.positions.origins[0].origin, "b");
  EXPECT_EQ(back.state.positions.origins[0].current, sample().positions.origins[0].current);
  EXPECT_EQ(back.state.positions.origins[0].previous, sample().positions.origins[0].previous);
  // During a key rotation ("NEW\nOLD") a file written under OLD still verifies.
  EXPECT_NO_THROW(state::decode(bytes, ClusterKeys({std::string(32, 'n'), std::string(32, 'k')}), "state"));
}

// Never half a state: a file that is not one, of another version, cut short, with one bit
// changed, or of another cluster is refused before anything of it is used, naming the file.
TEST(StateFile, AnUntrustworthyFileIsRefusedWholeNamingIt) {
  const std::string good = state::encode(sample(), 0, key('k'));
  EXPECT_NE(error_of("rules:\n  - {match: x}\n", key('k')).find("/var/lib/tollgate/state: not a tollgate state file"),
            std::string::npos);
  std::string other_version = good;
  other_version[11] = 2;
  EXPECT_NE(error_of(other_version, key('k')).find("state format version 2, this tollgated reads version 1"),
            std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() - 3), key('k')).find("does not verify"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, 20), key('k')).find("not a tollgate state file"), std::string::npos);
  for (size_t i = 12; i < good.size(); i += 7) {
    std::string flipped = good;
    flipped[i] = char(flipped[i] ^ 0x10);
    EXPECT_NE(error_of(flipped, key('k')).find("does not verify"), std::string::npos) << "byte " << i;
  }
  EXPECT_NE(error_of(good, key('z')).find("another cluster key"), std::string::npos);
  EXPECT_NE(error_of(good, ClusterKeys()).find("does not verify"),
            std::string::npos);  // written with a key, read without
  EXPECT_EQ(error_of(state::encode(sample(), 0, ClusterKeys()), ClusterKeys()), "(decoded)");
}

TEST(StateFile, AMissingFileIsAFirstStartAnEmptyOneIsRefused) {
  EXPECT_EQ(state::read_file("/nonexistent/tollgate-state"), std::nullopt);
  EXPECT_THROW(state::read_file("/"), ConfigError);  // a directory
  EXPECT_NE(error_of("", key('k')).find("not a tollgate state file"), std::string::npos);
}

// The key table's half: what is not full goes out, and comes back refilled from when it was
// taken, under the limit in force.
TEST(KeyTableState, UnfullBalancesGoOutAndComeBackRefilledFromTheirTime) {
  auto rules = testing::one_rule("day:*", Limit{Rate{10, kDay}, 10, 10});
  KeyTable before(rules);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(before.allow("day:spent", 1, 0).allowed);
  ASSERT_TRUE(before.allow("day:half", 5, 0).allowed);
  ASSERT_TRUE(before.allow("day:full", 0, 0).allowed);  // looked at only: full
  ASSERT_FALSE(before.allow("other", 1, 0).limited);
  std::vector<std::pair<std::string, int64_t>> out;
  uint64_t cursor = 0;
  int slices = 1;
  while (!before.for_each_unfull(kSec, &cursor, 1, [&](std::string_view k, int64_t b) { out.emplace_back(k, b); })) {
    ++slices;  // one entry a slice: three keys, three slices (the last says it is done)
  }
  EXPECT_EQ(slices, 3);
  std::sort(out.begin(), out.end());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].first, "day:half");
  EXPECT_EQ(out[1].first, "day:spent");
  EXPECT_LT(out[1].second, kM);  // a second's refill of 10/day: a fraction of a token

  // Restored a quarter of a day later: 2.5 tokens refilled on top of what was left.
  KeyTable after(rules);
  const MonoNanos now = 50 * kSec;
  for (const auto& [k, b] : out) EXPECT_TRUE(after.restore(k, b, now - kDay / 4));
  EXPECT_FALSE(after.restore("other", 0, now));     // no rule governs it
  EXPECT_FALSE(after.restore("day:half", 0, now));  // already there
  EXPECT_EQ(after.allow("day:spent", 2, now).remaining, 0);
  EXPECT_FALSE(after.allow("day:spent", 1, now).allowed);
  EXPECT_EQ(*after.balance_microtokens("day:half", now) / kM, 7);  // 5 + 2.5, rounded down
}

struct NullOutbox : Outbox {
  void send(const std::string&, const GossipMessagePtr&) override {}
};

// The node's half: a new life takes the balances and the positions; a batch its previous life
// had applied (a peer's, or its own) is a duplicate now, while a later one is applied.
TEST(NodeState, ANewLifeTakesTheBalancesAndDoesNotApplyCountedBatchesAgain) {
  auto rules = testing::one_rule("day:*", Limit{Rate{10, kDay}, 10, 10});
  NullOutbox out;
  SplitMix64 random(1);
  NodeOptions o;
  o.id = "a";
  o.incarnation = 1;
  Node first(o, rules, out, random);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(first.check("day:k", 1, 0).allowed);
  auto peer_batch = [](uint64_t seq) {
    auto b = std::make_shared<Batch>();
    b->origin = "b";
    b->incarnation = 3;
    b->seq = seq;
    b->entries = {{"day:k", 1}};
    return BatchPtr(b);
  };
  KeyTable& table = first.table();
  Ledger& ledger = const_cast<Ledger&>(first.ledger());
  ASSERT_EQ(ledger.merge(peer_batch(1), table, 0), MergeResult::kApplied);
  ASSERT_EQ(ledger.merge(peer_batch(2), table, 0), MergeResult::kApplied);  // 8 spent in all
  first.tick(kSec);  // seals this life's 6 as batch 1 of origin a, incarnation 1
  const BatchPtr own = std::make_shared<Batch>(Batch{"a", 1, 1, {{"day:k", 6}}});
  const NodeState state = first.export_state(kSec);

  o.incarnation = 2;
  Node second(o, rules, out, random);
  EXPECT_EQ(second.import_state(state, 10 * kSec, 0), 1u);
  EXPECT_EQ(*second.table().balance_microtokens("day:k", 10 * kSec) / kM, 2);
  Ledger& l2 = const_cast<Ledger&>(second.ledger());
  EXPECT_EQ(l2.merge(peer_batch(2), second.table(), 10 * kSec), MergeResult::kDuplicate);
  EXPECT_EQ(l2.merge(own, second.table(), 10 * kSec), MergeResult::kDuplicate);  // its own last life's
  EXPECT_EQ(*second.table().balance_microtokens("day:k", 10 * kSec) / kM, 2);    // nothing charged twice
  EXPECT_EQ(l2.merge(peer_batch(3), second.table(), 10 * kSec), MergeResult::kApplied);
  EXPECT_EQ(*second.table().balance_microtokens("day:k", 10 * kSec) / kM, 1);
}

}  // namespace
}  // namespace tollgate
