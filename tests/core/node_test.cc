// The node state machine on a virtual network in virtual time: dissemination, repair, membership
// and the partition policy, deterministic from a seed.
#include "core/node.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/test_rules.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

using testing::one_rule;
using testing::per_second;
constexpr int64_t kM = kMicrotokensPerToken;
constexpr int64_t kRound = 50 * kNanosPerMilli;

// N nodes whose outboxes put messages in one queue, delivered at the end of each round in
// random order, with optional loss and a partition (a set of blocked (from, to) pairs).
class VirtualCluster : public Outbox {
 public:
  struct Config {
    size_t nodes = 3;
    DisseminationMode mode = DisseminationMode::kGossip;
    MembershipKind membership = MembershipKind::kStatic;
    PartitionPolicy policy = PartitionPolicy::kOpen;
    // Huge, refilling 1 token an hour: a balance shows what was charged.
    Limit limit = Limit{Rate{1, 3600 * kNanosPerSecond}, 1'000'000, 1'000'000};
    uint64_t seed = 1;
    size_t fanout = 3;
    size_t max_batches_per_message = 128;
    uint32_t relay_groups = 0;
    size_t auto_relay_members = 256;
    int64_t sync_deadline_ns = 0;  // balances from a peer on start: off unless a test asks
    int64_t push_pull_interval_ns = kNanosPerSecond;
    uint32_t confirm_tries = MembershipOptions{}.confirm_tries;
    std::shared_ptr<const RuleSet> rules = nullptr;  // null: `limit` for every key
    size_t top_gossip_bytes = 0;                     // top-K units: none published unless asked
  };

  explicit VirtualCluster(Config c) : config_(c), random_(c.seed), rng_(c.seed) {
    rules_ = c.rules ? c.rules : one_rule("*", c.limit);
    for (size_t i = 0; i < c.nodes; ++i) start(i, 1);
    if (c.membership == MembershipKind::kStatic) {
      for (auto& n : nodes_) n->set_peers(peers(), now_);
    }
  }

  // Static membership: the peers file, the first list(n) nodes (all by default).
  std::vector<PeerSpec> peers() const {
    std::vector<PeerSpec> out;
    for (size_t i = 0; i < std::min(config_.nodes, listed_); ++i) out.push_back({id(i), address(i)});
    return out;
  }
  // A peers file of the first n nodes, given to every node running; the others crash.
  void list(size_t n) {
    listed_ = n;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (i >= n) crash(i);
      if (!crashed_.count(i)) nodes_[i]->set_peers(peers(), now_);
    }
  }
  static std::string id(size_t i) { return "n" + std::to_string(i); }
  static std::string address(size_t i) { return "10.0.0." + std::to_string(i) + ":7946"; }

  // (Re)starts node i with the given incarnation; its old state is gone.
  void start(size_t i, uint64_t incarnation) {
    NodeOptions o;
    o.id = id(i);
    o.address = address(i);
    o.incarnation = incarnation;
    o.mode = config_.mode;
    o.partition_policy = config_.policy;
    o.fanout = config_.fanout;
    o.max_batches_per_message = config_.max_batches_per_message;
    o.relay_groups = config_.relay_groups;
    o.auto_relay_members = config_.auto_relay_members;
    o.membership.kind = config_.membership;
    o.sync_deadline_ns = config_.sync_deadline_ns;
    o.push_pull_interval_ns = config_.push_pull_interval_ns;
    o.membership.confirm_tries = config_.confirm_tries;
    o.top_gossip_bytes = config_.top_gossip_bytes;
    if (config_.membership == MembershipKind::kHeartbeat) o.seeds = {address(0)};
    if (nodes_.size() <= i) nodes_.resize(i + 1);
    nodes_[i] = std::make_unique<Node>(o, rules_, *this, random_);
    crashed_.erase(i);
    if (config_.membership == MembershipKind::kStatic) nodes_[i]->set_peers(peers(), now_);
  }
  void crash(size_t i) { crashed_.insert(i); }

  void send(const std::string& to, const GossipMessagePtr& m) override {
    // Gossip goes out from tick(); repairs (digests and answers to them) are not held to the budget.
    if (in_tick_ && !m->digest) largest_batch_count_ = std::max(largest_batch_count_, m->batches.size());
    if (m->relay && m->batches.size() > 0) relay_target_[m->sender] = to;
    in_flight_.push_back({to, m});
  }
  // Relay: where node i last sent a message carrying batches with `relay` set (its contact there).
  size_t relay_target(size_t i) const {
    auto it = relay_target_.find(id(i));
    return it == relay_target_.end() ? SIZE_MAX : index_of(it->second);
  }
  size_t largest_batch_count() const { return largest_batch_count_; }

  // One round: every live node ticks, then every message is delivered (or lost).
  void round() {
    now_ += kRound;
    in_tick_ = true;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!crashed_.count(i)) nodes_[i]->tick(now_);
    }
    in_tick_ = false;
    deliver();
  }
  void deliver() {
    // Delivery can produce answers (push-pull); deliver those in the same round too.
    for (int wave = 0; wave < 4 && !in_flight_.empty(); ++wave) {
      std::vector<std::pair<std::string, GossipMessagePtr>> batch;
      batch.swap(in_flight_);
      std::shuffle(batch.begin(), batch.end(), rng_);
      for (auto& [to, m] : batch) {
        ++sent_;
        const size_t dst = index_of(to), src = index_of_id(m->sender);
        if (crashed_.count(dst) || blocked_.count({src, dst})) continue;
        if (loss_ > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < loss_) continue;
        if (drop_ && drop_(src, dst, *m)) continue;
        nodes_[dst]->receive(*m, now_);
      }
    }
  }
  void rounds(int n) {
    for (int i = 0; i < n; ++i) round();
  }

  void partition(const std::set<size_t>& side) {
    for (size_t a = 0; a < nodes_.size(); ++a) {
      for (size_t b = 0; b < nodes_.size(); ++b) {
        if (side.count(a) != side.count(b)) blocked_.insert({a, b});
      }
    }
  }
  void heal() { blocked_.clear(); }
  void block(size_t from, size_t to) { blocked_.insert({from, to}); }
  void set_loss(double p) { loss_ = p; }
  // Drops every message for which `drop(from, to, message)` is true (null: none).
  void set_drop(std::function<bool(size_t, size_t, const GossipMessage&)> drop) { drop_ = std::move(drop); }

  Node& node(size_t i) { return *nodes_[i]; }
  MonoNanos now() const { return now_; }
  // Tokens charged to `key` at node i (the limit is huge, so nothing was clamped).
  int64_t charged(size_t i, const std::string& key) {
    auto b = nodes_[i]->table().balance_microtokens(key, now_);
    if (!b) return 0;
    return (config_.limit.burst * kM - *b + kM / 2) / kM;
  }
  uint64_t sent() const { return sent_; }

 private:
  size_t index_of(const std::string& address) const {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (address == VirtualCluster::address(i)) return i;
    }
    ADD_FAILURE() << "no node at " << address;
    return 0;
  }
  size_t index_of_id(const std::string& id) const {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (id == VirtualCluster::id(i)) return i;
    }
    return SIZE_MAX;
  }

  Config config_;
  SplitMix64 random_;
  std::mt19937_64 rng_;
  std::shared_ptr<const RuleSet> rules_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::set<size_t> crashed_;
  std::set<std::pair<size_t, size_t>> blocked_;
  std::map<std::string, std::string> relay_target_;
  std::vector<std::pair<std::string, GossipMessagePtr>> in_flight_;
  double loss_ = 0;
  std::function<bool(size_t, size_t, const GossipMessage&)> drop_;
  size_t listed_ = SIZE_MAX;
  size_t largest_batch_count_ = 0;  // batches in the largest gossip message (repairs excluded)
  bool in_tick_ = false;
  MonoNanos now_ = 0;
  uint64_t sent_ = 0;
};

TEST(Node, MeshChargesEveryNodeAfterOneRound) {
  VirtualCluster c({.nodes = 3, .mode = DisseminationMode::kMesh});
  c.round();
  ASSERT_TRUE(c.node(0).check("k", 5, c.now()).allowed);
  ASSERT_TRUE(c.node(1).check("k", 2, c.now()).allowed);
  c.round();
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(c.charged(i, "k"), 7) << "node " << i;
}

// Top-K (issue 41): a node counts its own denials and admitted tokens per rule, never what
// other nodes charged it; a key of denials alone is counted and sealed into no batch.
TEST(Node, TopKeysCountThisNodesOwnChecksPerRuleAndDenialsAloneSealNothing) {
  auto rules = std::make_shared<RuleSet>(std::vector<Rule>{{"user:*", Limit{Rate{1, 3600 * kNanosPerSecond}, 3, 0}, 0}},
                                         Limit{Rate{1, kNanosPerSecond}, 100, 100});
  VirtualCluster c({.nodes = 2, .mode = DisseminationMode::kMesh, .rules = rules});
  c.round();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.node(0).check("user:hot", 1, c.now()).allowed);
  for (int i = 0; i < 4; ++i) ASSERT_FALSE(c.node(0).check("user:hot", 1, c.now()).allowed);
  ASSERT_TRUE(c.node(0).check("other", 5, c.now()).allowed);
  c.round();
  const RuleTops& t0 = c.node(0).tops();
  const auto denied = t0.published("user:*", TopMetric::kDenied, 10);
  ASSERT_TRUE(denied.has_value());
  ASSERT_EQ(denied->entries.size(), 1u);
  EXPECT_EQ(denied->entries[0].key, "user:hot");
  EXPECT_EQ(denied->entries[0].count, 4u);
  const auto tokens = t0.published("(default)", TopMetric::kTokens, 10);
  ASSERT_TRUE(tokens.has_value());
  EXPECT_EQ(tokens->entries[0].key, "other");
  EXPECT_EQ(tokens->entries[0].count, 5u);
  EXPECT_EQ(t0.rules(), (std::vector<std::string>{"user:*", "(default)"}));
  // Node 1 was charged all of it, and counted none of it: it checked nothing.
  const auto balance = c.node(1).table().balance_microtokens("user:hot", c.now());
  ASSERT_TRUE(balance.has_value());
  EXPECT_LT(*balance, kMicrotokensPerToken);  // its 3 tokens charged here: under one left
  EXPECT_TRUE(c.node(1).tops().rules().empty());
  // Denials alone: counted, and no batch carries the key.
  const uint64_t sealed = c.node(0).ledger().stats().sealed;
  ASSERT_FALSE(c.node(0).check("user:hot", 1, c.now()).allowed);
  c.round();
  EXPECT_EQ(c.node(0).tops().published("user:*", TopMetric::kDenied, 10)->entries[0].count, 5u);
  EXPECT_EQ(c.node(0).ledger().stats().sealed, sealed);
}

// Top-K cluster-wide (issue 41): every node answers with the merge of every live member's
// counts, in every mode (relay's units cross groups through a contact, whole), and a member that
// fails takes its share out of the answer.
TEST(Node, TopKeysAreTheMergeOfTheLiveMembersCountsAtEveryNode) {
  auto rules = std::make_shared<RuleSet>(std::vector<Rule>{{"user:*", Limit{Rate{1, 3600 * kNanosPerSecond}, 2, 0}, 0}},
                                         std::nullopt);
  for (const DisseminationMode mode :
       {DisseminationMode::kMesh, DisseminationMode::kGossip, DisseminationMode::kRelay}) {
    SCOPED_TRACE(dissemination_mode_name(mode));
    constexpr size_t kNodes = 6;
    VirtualCluster c({.nodes = kNodes, .mode = mode, .relay_groups = 2, .rules = rules, .top_gossip_bytes = 32768});
    c.round();
    // Node i denies user:hot i times after its first two, and user:cold once at node 5 only.
    std::map<std::string, uint64_t> exact;
    for (size_t i = 0; i < kNodes; ++i) {
      for (size_t n = 0; n < i + 2; ++n) {
        if (!c.node(i).check("user:hot", 1, c.now()).allowed) ++exact["user:hot"];
      }
    }
    if (!c.node(5).check("user:cold", 3, c.now()).allowed) ++exact["user:cold"];  // over the burst
    ASSERT_EQ(exact["user:cold"], 1u);
    ASSERT_GE(exact["user:hot"], 15u);
    c.rounds(40);  // 2 s: a publication (every 1 s at least) has reached everyone
    for (size_t i = 0; i < kNodes; ++i) {
      const std::vector<RuleTop> top = c.node(i).top("user:*", 10, c.now());
      ASSERT_EQ(top.size(), 1u) << "node " << i;
      EXPECT_EQ(top[0].rule, "user:*");
      EXPECT_EQ(top[0].members_reporting, kNodes) << "node " << i;  // (node 0 admitted tokens only)
      ASSERT_EQ(top[0].denied.keys.size(), 2u) << "node " << i;
      EXPECT_EQ(top[0].denied.keys[0].key, "user:hot");
      // Every node's summary holds every key it counted (far below capacity): exact.
      EXPECT_EQ(top[0].denied.keys[0].lower, exact["user:hot"]) << "node " << i;
      EXPECT_EQ(top[0].denied.keys[0].upper, exact["user:hot"]) << "node " << i;
      EXPECT_EQ(top[0].denied.keys[1].key, "user:cold");
      EXPECT_EQ(top[0].denied.keys[1].lower, 1u);
      EXPECT_EQ(top[0].denied.error_bound, 0u);
      EXPECT_EQ(top[0].denied.total, exact["user:hot"] + 1);
      EXPECT_EQ(top[0].tokens.total, 2 * kNodes) << "each counted its own two tokens";
      EXPECT_EQ(c.node(i).top("other", 10, c.now()).size(), 0u);
    }
    // Later publications replace the earlier ones everywhere (relay: through the contacts too).
    for (int n = 0; n < 4; ++n) {
      if (!c.node(3).check("user:hot", 1, c.now()).allowed) ++exact["user:hot"];
    }
    ASSERT_GE(exact["user:hot"], 19u);
    c.rounds(40);
    for (size_t i = 0; i < kNodes; ++i) {
      const std::vector<RuleTop> top = c.node(i).top("user:*", 10, c.now());
      ASSERT_EQ(top.size(), 1u) << "node " << i;
      EXPECT_EQ(top[0].denied.keys[0].upper, exact["user:hot"]) << "node " << i;
    }
    // Node 5 fails: once the others mark it, its share (5 denials of user:hot, user:cold) leaves.
    c.crash(5);
    c.rounds(80);  // 4 s: past fail_after
    for (size_t i = 0; i < kNodes - 1; ++i) {
      const std::vector<RuleTop> top = c.node(i).top("", 10, c.now());
      ASSERT_EQ(top.size(), 1u) << "node " << i;
      EXPECT_EQ(top[0].members_reporting, kNodes - 1) << "node " << i;
      ASSERT_EQ(top[0].denied.keys.size(), 1u) << "node " << i;
      EXPECT_EQ(top[0].denied.keys[0].upper, exact["user:hot"] - 5) << "node " << i;
    }
    EXPECT_GE(c.node(1).stats().top_units_sealed, 4u) << "2 units (denied, tokens) a second at least";
    EXPECT_EQ(c.node(1).stats().top_units_dropped, 0u);
  }
}

// Envoy's is_negative_hits: a refund at one node is given back at every node, in every mode, and
// through the codec (the virtual cluster encodes every message).
TEST(Node, ARefundAtOneNodeIsGivenBackAtEveryNode) {
  for (const DisseminationMode mode :
       {DisseminationMode::kMesh, DisseminationMode::kGossip, DisseminationMode::kRelay}) {
    SCOPED_TRACE(dissemination_mode_name(mode));
    VirtualCluster c({.nodes = 4, .mode = mode});
    c.rounds(3);
    ASSERT_TRUE(c.node(0).check("k", 8, c.now()).allowed);
    ASSERT_TRUE(c.node(1).check("k", 2, c.now()).allowed);
    c.rounds(6);
    for (size_t i = 0; i < 4; ++i) ASSERT_EQ(c.charged(i, "k"), 10) << "node " << i;
    const Decision after = c.node(2).refund("k", 6, c.now());
    EXPECT_EQ(after.remaining, 1'000'000 - 4);
    EXPECT_EQ(c.node(2).check("k", 0, c.now()).remaining, after.remaining);
    c.rounds(6);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c.charged(i, "k"), 4) << "node " << i;
  }
}

// A flood of new keys between two rounds: check() seals early, early_seal_keys at a time, rather
// than leaving all of them to one long round; the batches still go out with the round (gossip
// queues them as they are sealed), and every key is charged exactly once everywhere.
TEST(Node, ConsumptionSealedBetweenRoundsIsSentOnceWithTheRound) {
  for (const DisseminationMode mode : {DisseminationMode::kMesh, DisseminationMode::kGossip}) {
    SCOPED_TRACE(dissemination_mode_name(mode));
    VirtualCluster c({.nodes = 3, .mode = mode});
    c.rounds(3);  // everyone alive
    const size_t per_seal = c.node(0).options().early_seal_keys;
    ASSERT_GT(per_seal, 0u);
    constexpr int kKeys = 5000;
    for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(c.node(0).check("flood-" + std::to_string(k), 1, c.now()).allowed);
    EXPECT_EQ(c.node(0).stats().early_seals, uint64_t(kKeys / per_seal));
    EXPECT_EQ(c.node(0).table().pending_keys(), size_t(kKeys % per_seal));
    EXPECT_EQ(c.charged(1, "flood-0"), 0);  // nothing is sent before the round
    c.round();
    EXPECT_EQ(c.node(0).table().pending_keys(), 0u);
    if (mode == DisseminationMode::kGossip) c.rounds(3);  // at most max_batches_per_message a message
    for (int k = 0; k < kKeys; ++k) {
      const std::string key = "flood-" + std::to_string(k);
      ASSERT_EQ(c.charged(1, key), 1) << key;
      ASSERT_EQ(c.charged(2, key), 1) << key;
    }
  }
}

TEST(Node, GossipReachesEveryNodeWithinLogNRounds) {
  for (size_t n : {8u, 32u}) {
    VirtualCluster c({.nodes = n, .mode = DisseminationMode::kGossip, .seed = n});
    c.round();
    ASSERT_TRUE(c.node(0).check("k", 1, c.now()).allowed);
    const int bound = std::bit_width(n - 1) + 2;  // ceil(log2 N) + 2 for N a power of two
    int rounds = 0;
    auto everyone = [&] {
      for (size_t i = 0; i < n; ++i) {
        if (c.charged(i, "k") != 1) return false;
      }
      return true;
    };
    while (!everyone() && rounds < 50) {
      c.round();
      ++rounds;
    }
    EXPECT_LE(rounds, bound) << "N = " << n;
    c.rounds(100);  // retransmits and relays must never charge twice
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(c.charged(i, "k"), 1) << "node " << i << " of " << n;
  }
}

TEST(Node, GossipMessagesCarryAtMostTheBatchBudgetAndEverythingStillArrives) {
  VirtualCluster c({.nodes = 8, .mode = DisseminationMode::kGossip, .seed = 11, .max_batches_per_message = 4});
  c.round();
  int64_t admitted = 0;
  for (int r = 0; r < 20; ++r) {
    for (size_t i = 0; i < 8; ++i) {
      // Different keys: every node seals a batch every round, far more than 4 per message.
      if (c.node(i).check("k" + std::to_string(i), 1, c.now()).allowed) ++admitted;
    }
    c.round();
  }
  EXPECT_LE(c.largest_batch_count(), 4u);
  c.rounds(60);  // retransmits, then push-pull for what the budget left behind
  for (size_t i = 0; i < 8; ++i) {
    int64_t total = 0;
    for (size_t k = 0; k < 8; ++k) total += c.charged(i, "k" + std::to_string(k));
    EXPECT_EQ(total, admitted) << "node " << i;
  }
}

// Relay: every batch reaches every node once, directly within its group and summed by a contact
// in the others; each node talks to its group and one contact per other group, not to everyone.
TEST(Node, RelayChargesEveryNodeExactlyOnceForEveryBatch) {
  constexpr size_t kNodes = 64;  // 8 groups of about 8
  VirtualCluster c({.nodes = kNodes, .mode = DisseminationMode::kRelay, .seed = 3});
  c.rounds(3);  // everyone heard from
  int64_t admitted = 0;
  const uint64_t sent_before = c.sent();
  for (int r = 0; r < 20; ++r) {
    for (size_t i = 0; i < kNodes; ++i) {
      const int64_t cost = 1 + int64_t(i % 3);
      if (c.node(i).check("k" + std::to_string((r + i) % 5), cost, c.now()).allowed) admitted += cost;
    }
    c.round();
  }
  const double per_node_round = double(c.sent() - sent_before) / (20.0 * kNodes);
  c.rounds(3);
  uint64_t relayed = 0;
  for (size_t i = 0; i < kNodes; ++i) {
    int64_t total = 0;
    for (int k = 0; k < 5; ++k) total += c.charged(i, "k" + std::to_string(k));
    EXPECT_EQ(total, admitted) << "node " << i;
    EXPECT_EQ(c.node(i).stats().relay_mismatch, 0u);
    relayed += c.node(i).stats().relayed;
  }
  // Other groups' batches went through contacts: 7 of 8 groups' for every node's group.
  EXPECT_GT(relayed, 20u * kNodes * 7 / 8 / 2);
  // Its group (about 7 others) and 7 contacts, plus push-pull: far fewer than 63 (mesh).
  EXPECT_LT(per_node_round, 20.0);
  EXPECT_GT(per_node_round, 10.0);
}

// Relay under heartbeat membership: every node joins through node 0 and learns the others only
// from rows sent to it; a member not alive at a node gets that node's rows at once, so all count
// the same members (and groups) within a few rounds and every batch reaches everyone once. A
// member that restarts rejoins the same way.
TEST(Node, RelayUnderHeartbeatMembershipEveryoneJoinsAndChargesOnce) {
  constexpr size_t kNodes = 40;  // 8 groups once everyone is known
  VirtualCluster c(
      {.nodes = kNodes, .mode = DisseminationMode::kRelay, .membership = MembershipKind::kHeartbeat, .seed = 6});
  c.rounds(40);
  std::vector<uint64_t> mismatched_while_joining;
  for (size_t i = 0; i < kNodes; ++i) {
    ASSERT_EQ(c.node(i).membership().known(), kNodes) << "node " << i;
    mismatched_while_joining.push_back(c.node(i).stats().relay_mismatch);
  }
  int64_t admitted = 0;
  for (int r = 0; r < 10; ++r) {
    for (size_t i = 0; i < kNodes; ++i) {
      if (c.node(i).check("k" + std::to_string(i % 3), 1, c.now()).allowed) ++admitted;
    }
    c.round();
  }
  c.rounds(3);
  for (size_t i = 0; i < kNodes; ++i) {
    int64_t total = 0;
    for (int k = 0; k < 3; ++k) total += c.charged(i, "k" + std::to_string(k));
    EXPECT_EQ(total, admitted) << "node " << i;
    EXPECT_EQ(c.node(i).stats().relay_mismatch, mismatched_while_joining[i]) << "node " << i;
  }
  // A member leaves and comes back knowing only its seed: it learns everyone again.
  c.node(7).leave(c.now());
  c.rounds(2);
  c.start(7, 2);
  c.rounds(20);
  EXPECT_EQ(c.node(7).membership().known(), kNodes);
  for (size_t i = 0; i < kNodes; ++i) {
    const MemberInfo* seen = c.node(i).membership().find(VirtualCluster::id(7));
    if (i == 7) continue;
    EXPECT_TRUE(seen && seen->state == MemberState::kAlive) << "node " << i;
  }
}

// Relay under loss: a batch lost on its way to a contact is lost to that group (over-admission,
// the safe side), a relay batch lost within a group is repaired; nothing is ever charged twice.
TEST(Node, RelayUnderLossNeverChargesTwice) {
  constexpr size_t kNodes = 32;
  VirtualCluster c({.nodes = kNodes, .mode = DisseminationMode::kRelay, .seed = 5});
  c.rounds(3);
  c.set_loss(0.2);
  int64_t admitted = 0;
  for (int r = 0; r < 40; ++r) {
    for (size_t i = 0; i < kNodes; ++i) {
      if (c.node(i).check("k" + std::to_string(r % 4), 1 + int64_t(i % 4), c.now()).allowed)
        admitted += 1 + int64_t(i % 4);
    }
    c.round();
  }
  c.set_loss(0);
  c.rounds(60);  // push-pull periods within each group
  for (size_t i = 0; i < kNodes; ++i) {
    int64_t total = 0;
    for (int k = 0; k < 4; ++k) total += c.charged(i, "k" + std::to_string(k));
    EXPECT_LE(total, admitted) << "node " << i;
    // Both hops are repaired: the hop to a contact by its repair requests, the hop within the
    // group by repair requests and push-pull.
    EXPECT_EQ(total, admitted) << "node " << i;
  }
  uint64_t requests = 0;
  for (size_t i = 0; i < kNodes; ++i) requests += c.node(i).stats().repair_requests;
  EXPECT_GT(requests, 0u);
}

// A member whose messages to us are all lost (an asymmetric fault between two members of a
// group) is not failed while others hear from it, nor are the members of other groups whose rows
// reach us through it alone (it is their contact here): before failing a member on silence we
// ask for its row, from it and from two members of our group, who have it alive. Without
// asking, they fail here. A member that stops still fails fail_after (40 rounds) after its last
// row reached us. (Push-pull, whose answers carry many rows, is an hour away here.)
TEST(Node, AMemberWhoseMessagesToUsAreLostIsConfirmedAliveByOthers) {
  constexpr size_t kNodes = 64;
  for (const uint32_t tries : {0u, 4u}) {
    SCOPED_TRACE(tries);
    VirtualCluster c({.nodes = kNodes,
                      .mode = DisseminationMode::kRelay,
                      .seed = 8,
                      .relay_groups = 8,
                      .push_pull_interval_ns = 3600 * kNanosPerSecond,
                      .confirm_tries = tries});
    c.rounds(3);
    size_t mate = 1;
    while (relay_group_of(VirtualCluster::id(mate), 8) != relay_group_of(VirtualCluster::id(0), 8)) ++mate;
    c.block(mate, 0);
    c.rounds(100);
    const uint64_t failed = c.node(0).membership().stats().failed;
    if (tries == 0) {
      EXPECT_GT(failed, 0u);
      continue;
    }
    EXPECT_EQ(failed, 0u);
    EXPECT_GT(c.node(0).stats().row_requests, 0u);
    c.crash(mate);
    c.rounds(45);  // fail_after, and the rounds its last row may take to reach everyone
    for (size_t i = 1; i < kNodes; ++i) {
      if (i == mate) continue;
      EXPECT_EQ(c.node(i).membership().find(VirtualCluster::id(mate))->state, MemberState::kUnreachable) << i;
    }
    // Node 0 heard it only through others' rows, so the last one may reach it as late as its
    // first question (60% of fail_after, 24 rounds): it fails it that much later at most.
    c.rounds(24);
    EXPECT_EQ(c.node(0).membership().find(VirtualCluster::id(mate))->state, MemberState::kUnreachable);
  }
}

namespace {
// The members of the relay group other than node `i`'s, of `nodes` nodes in `groups` groups.
std::vector<size_t> other_group(size_t i, size_t nodes, uint32_t groups) {
  std::vector<size_t> out;
  for (size_t j = 0; j < nodes; ++j) {
    if (relay_group_of(VirtualCluster::id(j), groups) != relay_group_of(VirtualCluster::id(i), groups)) {
      out.push_back(j);
    }
  }
  return out;
}
}  // namespace

// The hop to a contact: a batch lost on both its sends is asked for by the contact as soon as a
// later message of the sender tells it the seqs it was sent (a rows round at the latest, as the
// sender checks nothing more), and relayed to its group: every node is charged exactly once.
TEST(Node, RelayRepairsABatchLostOnBothSendsToAContact) {
  constexpr size_t kNodes = 8;
  VirtualCluster c({.nodes = kNodes, .mode = DisseminationMode::kRelay, .seed = 3, .relay_groups = 2});
  c.rounds(3);
  const std::vector<size_t> others = other_group(0, kNodes, 2);
  ASSERT_FALSE(others.empty());
  for (size_t o : others) c.block(0, o);
  ASSERT_TRUE(c.node(0).check("k", 7, c.now()).allowed);
  c.rounds(2);  // sent, and sent again: both lost
  for (size_t o : others) ASSERT_EQ(c.charged(o, "k"), 0) << "node " << o;
  c.heal();
  c.rounds(12);
  for (size_t i = 0; i < kNodes; ++i) EXPECT_EQ(c.charged(i, "k"), 7) << "node " << i;
  const size_t contact = c.relay_target(0);
  ASSERT_NE(contact, SIZE_MAX);
  EXPECT_GT(c.node(contact).stats().repair_requests, 0u);
}

namespace {
// 8 nodes relaying in 2 groups, push-pull an hour away, and node 0's batch of 5 tokens of "k"
// lost on its way to `mate`, a member of its group (the link healed after).
struct LostToAMate {
  static constexpr size_t kNodes = 8;
  VirtualCluster c{{.nodes = kNodes,
                    .mode = DisseminationMode::kRelay,
                    .seed = 4,
                    .relay_groups = 2,
                    .push_pull_interval_ns = 3600 * kNanosPerSecond}};
  size_t mate = SIZE_MAX;
  // False (with the test failed) if it could not be set up.
  bool lose() {
    c.rounds(3);
    const std::vector<size_t> others = other_group(0, kNodes, 2);
    for (size_t j = 1; j < kNodes && mate == SIZE_MAX; ++j) {
      if (std::find(others.begin(), others.end(), j) == others.end()) mate = j;
    }
    EXPECT_NE(mate, SIZE_MAX);
    if (mate == SIZE_MAX) return false;
    c.block(0, mate);
    EXPECT_TRUE(c.node(0).check("k", 5, c.now()).allowed);
    c.round();
    c.heal();
    EXPECT_EQ(c.charged(mate, "k"), 0);
    return !::testing::Test::HasFailure();
  }
};
}  // namespace

// Within a group: a mate's batch lost on its way to us is asked for as soon as its next batch
// shows the gap, not at the next push-pull (an hour away here).
TEST(Node, RelayRepairsWithinTheGroupAtTheNextBatch) {
  LostToAMate t;
  ASSERT_TRUE(t.lose());
  ASSERT_TRUE(t.c.node(0).check("k", 1, t.c.now()).allowed);
  t.c.round();  // the next batch arrives: a gap below it
  EXPECT_EQ(t.c.charged(t.mate, "k"), 1);
  t.c.rounds(2);  // asked for a quarter round later at the earliest: at the next round
  EXPECT_EQ(t.c.charged(t.mate, "k"), 6);
  EXPECT_GT(t.c.node(t.mate).stats().repair_requests, 0u);
}

// Within a group, the last batch before a quiet spell: nothing after it shows the gap, so the
// mate learns of it from the sender's next rows round (its last seqs), every fail_after / 5 =
// 8 rounds here, and asks for it then, not at the next push-pull.
TEST(Node, RelayRepairsAMatesLastBatchWithinARowsRound) {
  LostToAMate t;
  ASSERT_TRUE(t.lose());
  const uint64_t asked_before = t.c.node(t.mate).stats().repair_requests;
  t.c.rounds(8 + 2);  // a rows round, and the quarter round a gap settles
  EXPECT_EQ(t.c.charged(t.mate, "k"), 5);
  EXPECT_GT(t.c.node(t.mate).stats().repair_requests, asked_before);
  for (size_t i = 0; i < LostToAMate::kNodes; ++i) EXPECT_EQ(t.c.charged(i, "k"), 5) << "node " << i;
}

// A contact asks only for the seqs of its current stint as the sender's contact: after the
// sender turned to another member of the group (its contact went silent) and back, the
// first contact asks for nothing the other one was sent and relayed. What went to the first
// contact while it could not be reached is lost to its group (over-admission, the safe side,
// docs/design.md 7.7): a batch must never be charged twice.
TEST(Node, RelayRepairNeverResendsWhatAnotherContactRelayed) {
  constexpr size_t kNodes = 12;  // groups of 5 and 7
  VirtualCluster c({.nodes = kNodes, .mode = DisseminationMode::kRelay, .seed = 6, .relay_groups = 2});
  c.rounds(3);
  ASSERT_TRUE(c.node(0).check("k", 1, c.now()).allowed);
  c.rounds(2);  // to the contact, and relayed by it
  const size_t first = c.relay_target(0);
  ASSERT_NE(first, SIZE_MAX);
  const std::vector<size_t> others = other_group(0, kNodes, 2);
  for (size_t i = 0; i < kNodes; ++i) ASSERT_EQ(c.charged(i, "k"), 1) << "node " << i;
  // The contact goes silent (nothing it sends arrives) and the sender's messages to it are
  // lost: the batch sent now is lost on both sends, and after fail_after the sender turns to
  // another contact, which relays what follows.
  c.block(0, first);
  for (size_t i = 0; i < kNodes; ++i) c.block(first, i);
  ASSERT_TRUE(c.node(0).check("k", 10, c.now()).allowed);
  c.rounds(2);
  int64_t admitted = 11;
  for (int r = 0; r < 60; ++r) {
    ASSERT_TRUE(c.node(0).check("k", 2, c.now()).allowed);
    admitted += 2;
    c.round();
  }
  const size_t second = c.relay_target(0);
  ASSERT_NE(second, first);
  c.heal();
  for (int r = 0; r < 60; ++r) {
    ASSERT_TRUE(c.node(0).check("k", 3, c.now()).allowed);
    admitted += 3;
    c.round();
  }
  ASSERT_EQ(c.relay_target(0), first) << "the first contact is the sender's again";
  c.rounds(20);
  // The sender's group has everything. The other group lacks what went to the first contact
  // while it could not be reached (10 tokens, then 2 a round until the sender gave up on it),
  // and every member of it lacks the same: nothing was relayed twice, nor half-way.
  const int64_t there = c.charged(others.front(), "k");
  EXPECT_LE(there, admitted - 10);
  EXPECT_GE(there, admitted - 10 - 2 * 60);
  for (size_t i = 0; i < kNodes; ++i) {
    const bool other = std::find(others.begin(), others.end(), i) != others.end();
    EXPECT_EQ(c.charged(i, "k"), other ? there : admitted) << "node " << i;
  }
}

// Relay: members that count groups differently could each route a batch so that a node gets it
// twice (directly and summed); a message from a member that counts otherwise is not applied.
TEST(Node, RelayIgnoresBatchesFromAMemberThatCountsOtherGroups) {
  VirtualCluster c({.nodes = 4, .mode = DisseminationMode::kRelay, .seed = 2, .relay_groups = 2});
  c.rounds(3);
  ASSERT_TRUE(c.node(0).check("k", 3, c.now()).allowed);
  c.rounds(2);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c.charged(i, "k"), 3) << i;
  NodeOptions o = c.node(1).options();
  ASSERT_EQ(o.relay_groups, 2u);
  GossipMessage m;
  m.sender = VirtualCluster::id(0);
  m.sender_incarnation = 1;
  m.sender_address = VirtualCluster::address(0);
  m.relay_groups = 4;
  m.relay = true;
  m.batches.push_back(std::make_shared<Batch>(Batch{VirtualCluster::id(0), 1, 1000, {{"k", 5}}}));
  c.node(1).receive(m, c.now());
  EXPECT_EQ(c.charged(1, "k"), 3);
  EXPECT_EQ(c.node(1).stats().relay_mismatch, 1u);
  m.relay_groups = 2;  // the same message, counting as we do
  c.node(1).receive(m, c.now());
  EXPECT_EQ(c.charged(1, "k"), 8);
}

// Relay: halving the number of groups merges groups, and then one member may hold an origin's
// batch that another holds summed in a contact's relay batch. Repair after the change must hand
// neither to the other (Ledger::start_epoch): nothing is charged twice.
TEST(Node, RelayGroupsMergingChargeNothingTwice) {
  constexpr size_t kNodes = 33, kFewer = 24;  // 8 groups; 24 make 4 (25 would keep 8)
  ASSERT_EQ(relay_groups_for(kNodes), 8u);
  ASSERT_EQ(relay_groups_for(kFewer), 4u);
  VirtualCluster c({.nodes = kNodes, .mode = DisseminationMode::kRelay, .seed = 9});
  c.rounds(3);
  int64_t admitted = 0;
  auto traffic = [&](int rounds, size_t nodes) {
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < nodes; ++i) {
        if (c.node(i).check("k" + std::to_string(i % 3), 1, c.now()).allowed) ++admitted;
      }
      c.round();
    }
  };
  traffic(10, kNodes);
  // The last members leave the peers file: every other counts 24 members, and 4 groups.
  c.list(kFewer);
  ASSERT_EQ(c.node(0).relay_groups(), 4u);
  traffic(10, kFewer);
  c.rounds(60);  // push-pull within the new groups, three times over
  for (size_t i = 0; i < kFewer; ++i) {
    int64_t total = 0;
    for (int k = 0; k < 3; ++k) total += c.charged(i, "k" + std::to_string(k));
    EXPECT_LE(total, admitted) << "node " << i;
    // What was in flight at the change is dropped, by design (design.md 7.7, "a change of g"):
    // measured 544 to 556 of 570 at the 24 nodes (2.5-4.6 % lost, seed 9). The band is that
    // figure with a small margin (it was 25 %, which hid any regression; issue 37 item 6);
    // repairing what a regrouping drops is issue 39's.
    EXPECT_GE(total * 100, admitted * 94) << "node " << i;
  }
}

// Charges `rounds` rounds of checks of keys prefix0..2 at the first `nodes` nodes, then lets
// them spread; true if every one of them charged exactly what was admitted, once.
bool ChargedExactlyOnceEverywhere(VirtualCluster& c, size_t nodes, const std::string& prefix, int rounds = 10) {
  int64_t admitted = 0;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < nodes; ++i) {
      if (c.node(i).check(prefix + std::to_string(i % 3), 1 + int64_t(i % 2), c.now()).allowed)
        admitted += 1 + int64_t(i % 2);
    }
    c.round();
  }
  c.rounds(10);
  bool exact = true;
  for (size_t i = 0; i < nodes; ++i) {
    int64_t total = 0;
    for (int k = 0; k < 3; ++k) total += c.charged(i, prefix + std::to_string(k));
    EXPECT_EQ(total, admitted) << prefix << ", node " << i;
    exact = exact && total == admitted;
  }
  return exact;
}

// Relay: the count of groups follows the cluster's size, but one that shrinks keeps it until it
// has lost a quarter of that size (no flapping around 2g^2 members); a member that comes to a
// count of its own in between (restarted: it counts the least) takes the others' as soon as it
// hears from them, and all agree again.
TEST(Node, RelayGroupsKeepTheirCountUntilTheClusterShrinksByAQuarter) {
  VirtualCluster c({.nodes = 40, .mode = DisseminationMode::kRelay, .seed = 12});
  c.rounds(3);
  ASSERT_EQ(c.node(0).relay_groups(), 8u);
  ASSERT_EQ(relay_groups_for(30), 4u);
  c.list(30);  // 8 kept: 30 is above 3/4 of the 32 members that 4 groups hold at most
  for (size_t i = 0; i < 30; ++i) EXPECT_EQ(c.node(i).relay_groups(), 8u) << i;
  EXPECT_TRUE(ChargedExactlyOnceEverywhere(c, 30, "a"));
  c.start(3, 2);
  EXPECT_EQ(c.node(3).relay_groups(), 4u);  // alone in its count...
  c.rounds(2);
  EXPECT_EQ(c.node(3).relay_groups(), 8u);  // ...until it heard from the others
  EXPECT_TRUE(ChargedExactlyOnceEverywhere(c, 30, "b"));
  c.list(24);
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(c.node(i).relay_groups(), 4u) << i;
  EXPECT_TRUE(ChargedExactlyOnceEverywhere(c, 24, "c"));
  // The restarted member's first messages (counting 4) were ignored; it ignored none: it took
  // the count of the first message it heard.
  uint64_t ignored = 0;
  for (size_t i = 0; i < 24; ++i) ignored += i == 3 ? 0 : c.node(i).stats().relay_mismatch;
  EXPECT_GT(ignored, 0u);
  EXPECT_EQ(c.node(3).stats().relay_mismatch, 0u);
}

// The thresholds a daemon runs with (issue 37, item 5): tollgated and the embedded member leave
// NodeOptions::auto_relay_members at its default, so auto gossips below 128 members known,
// relays from 128 (in relay_groups_for(128) groups), keeps relaying down to 96 (3/4 of it) and
// gossips again below.
TEST(Node, AutoModeSwitchesAtTheProductionThresholds) {
  const size_t threshold = NodeOptions{}.auto_relay_members;
  ASSERT_EQ(threshold, 128u);
  VirtualCluster c({.nodes = 128, .mode = DisseminationMode::kAuto, .seed = 21, .auto_relay_members = threshold});
  c.list(95);
  for (size_t i = 0; i < 95; ++i) ASSERT_EQ(c.node(i).mode(), DisseminationMode::kGossip) << i;
  c.list(127);
  for (size_t i = 95; i < 127; ++i) c.start(i, 1);
  for (size_t i = 0; i < 127; ++i) ASSERT_EQ(c.node(i).mode(), DisseminationMode::kGossip) << i;
  c.list(128);
  c.start(127, 1);
  for (size_t i = 0; i < 128; ++i) {
    ASSERT_EQ(c.node(i).mode(), DisseminationMode::kRelay) << i;
    ASSERT_EQ(c.node(i).relay_groups(), relay_groups_for(128)) << i;
  }
  c.list(96);
  for (size_t i = 0; i < 96; ++i) ASSERT_EQ(c.node(i).mode(), DisseminationMode::kRelay) << i;
  c.list(95);
  for (size_t i = 0; i < 95; ++i) ASSERT_EQ(c.node(i).mode(), DisseminationMode::kGossip) << i;
}

// Auto (the daemon's default): gossip below auto_relay_members known members, relay from there,
// and gossip again below 3/4 of it. A member in between keeps its mode, and one that comes to
// it gossiping (restarted) relays as soon as it hears from a relaying member. Every change
// loses at most what was in flight, never charging anything twice.
TEST(Node, AutoModeRelaysFromAGivenSizeAndMembersAgreeInBetween) {
  VirtualCluster c({.nodes = 24, .mode = DisseminationMode::kAuto, .seed = 13, .auto_relay_members = 16});
  c.list(10);
  for (size_t i = 0; i < 10; ++i) ASSERT_EQ(c.node(i).mode(), DisseminationMode::kGossip) << i;
  EXPECT_TRUE(ChargedExactlyOnceEverywhere(c, 10, "a"));
  // The peers file grows to 24: relay, in 4 groups.
  c.list(24);
  for (size_t i = 10; i < 24; ++i) c.start(i, 1);
  for (size_t i = 0; i < 24; ++i) {
    ASSERT_EQ(c.node(i).mode(), DisseminationMode::kRelay) << i;
    ASSERT_EQ(c.node(i).relay_groups(), 4u) << i;
  }
  EXPECT_TRUE(ChargedExactlyOnceEverywhere(c, 24, "b"));
  // 13 members: between 12 and 16, every member keeps relaying.
  c.list(13);
  for (size_t i = 0; i < 13; ++i) EXPECT_EQ(c.node(i).mode(), DisseminationMode::kRelay) << i;
  c.start(5, 2);
  EXPECT_EQ(c.node(5).mode(), DisseminationMode::kGossip);  // restarted: nothing heard yet
  c.rounds(2);
  EXPECT_EQ(c.node(5).mode(), DisseminationMode::kRelay);
  EXPECT_TRUE(ChargedExactlyOnceEverywhere(c, 13, "c"));
  auto charged_c = [&](size_t i) { return c.charged(i, "c0") + c.charged(i, "c1") + c.charged(i, "c2"); };
  std::vector<int64_t> before;
  for (size_t i = 0; i < 11; ++i) before.push_back(charged_c(i));
  // 11: below 3/4 of 16, gossip again.
  c.list(11);
  for (size_t i = 0; i < 11; ++i) EXPECT_EQ(c.node(i).mode(), DisseminationMode::kGossip) << i;
  EXPECT_TRUE(ChargedExactlyOnceEverywhere(c, 11, "d"));
  // Gossip repairs every origin's batches to anyone; what was relayed before must not come back
  // by repair (a node that had a batch summed by a contact would be charged it twice).
  c.rounds(60);
  for (size_t i = 0; i < 11; ++i) EXPECT_EQ(charged_c(i), before[i]) << i;
  for (size_t i = 0; i < 11; ++i) EXPECT_GE(c.node(i).stats().regroupings, 2u) << i;
}

// Relay: a contact that restarts relearns what it relayed in its past life (its old relay
// batches, repaired by its group) once, and goes on relaying under its new life.
TEST(Node, RelayAContactThatRestartsRelearnsWhatItRelayedOnce) {
  constexpr size_t kNodes = 16;  // 4 groups of about 4
  VirtualCluster c({.nodes = kNodes, .mode = DisseminationMode::kRelay, .seed = 4});
  c.rounds(3);
  int64_t admitted = 0;
  auto traffic = [&](int rounds) {
    for (int r = 0; r < rounds; ++r) {
      for (size_t i = 0; i < kNodes; ++i) {
        if (c.node(i).check("k" + std::to_string(i % 3), 1, c.now()).allowed) ++admitted;
      }
      c.round();
    }
  };
  traffic(10);
  ASSERT_GT(c.node(5).stats().relayed, 0u);
  c.crash(5);
  c.start(5, 2);  // at once: nothing sent to it was lost
  traffic(10);
  c.rounds(80);  // several push-pulls: the old relay batches are offered again and again
  for (size_t i = 0; i < kNodes; ++i) {
    int64_t total = 0;
    for (int k = 0; k < 3; ++k) total += c.charged(i, "k" + std::to_string(k));
    EXPECT_LE(total, admitted) << "node " << i;
  }
  int64_t restarted = 0;
  for (int k = 0; k < 3; ++k) restarted += c.charged(5, "k" + std::to_string(k));
  EXPECT_GT(restarted, admitted * 9 / 10);
  EXPECT_GT(c.node(5).stats().relayed, 0u);
}

TEST(Node, RelayGroupsGrowAsTheSquareRootOfTheCluster) {
  EXPECT_EQ(relay_groups_for(1), 1u);
  EXPECT_EQ(relay_groups_for(2), 1u);
  EXPECT_EQ(relay_groups_for(3), 2u);
  EXPECT_EQ(relay_groups_for(8), 2u);
  EXPECT_EQ(relay_groups_for(128), 8u);
  EXPECT_EQ(relay_groups_for(129), 16u);
  EXPECT_EQ(relay_groups_for(1000), 32u);
  EXPECT_EQ(relay_groups_for(5000), 64u);
  // Groups are a hash of the id: balanced, and a relay origin belongs to its node's group.
  std::vector<int> sizes(32);
  for (int i = 0; i < 1000; ++i)
    ++sizes[relay_group_of("10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":7946", 32)];
  for (int n : sizes) {
    EXPECT_GT(n, 12);
    EXPECT_LT(n, 55);
  }
  EXPECT_EQ(relay_group_of(relay_origin("a"), 32), relay_group_of("a", 32));
}

TEST(Node, HeavyLossIsRepairedAndNeverDoubleCharged) {
  for (DisseminationMode mode : {DisseminationMode::kMesh, DisseminationMode::kGossip}) {
    VirtualCluster c({.nodes = 6, .mode = mode, .seed = 7});
    c.set_loss(0.3);
    int64_t admitted = 0;
    for (int r = 0; r < 40; ++r) {
      for (size_t i = 0; i < 6; ++i) {
        if (c.node(i).check("k" + std::to_string(r % 4), 1 + int64_t(i), c.now()).allowed) admitted += 1 + int64_t(i);
      }
      c.round();
    }
    c.set_loss(0);
    c.rounds(60);  // a few push-pull periods
    for (size_t i = 0; i < 6; ++i) {
      int64_t total = 0;
      for (int k = 0; k < 4; ++k) total += c.charged(i, "k" + std::to_string(k));
      EXPECT_EQ(total, admitted) << dissemination_mode_name(mode) << " node " << i;
    }
  }
}

TEST(Node, PartitionedSidesEnforceAloneAndReconcileOnHeal) {
  VirtualCluster c({.nodes = 4, .mode = DisseminationMode::kGossip, .seed = 3});
  c.rounds(2);
  c.partition({0, 1});
  c.node(0).check("k", 10, c.now());
  c.node(3).check("k", 20, c.now());
  c.rounds(10);
  EXPECT_EQ(c.charged(1, "k"), 10);  // its own side only
  EXPECT_EQ(c.charged(2, "k"), 20);
  c.heal();
  c.rounds(40);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c.charged(i, "k"), 30) << "node " << i;
}

TEST(Node, StaticMembersThatStopAnsweringAreUnreachableThenRecover) {
  VirtualCluster c({.nodes = 3, .mode = DisseminationMode::kMesh});
  c.rounds(5);
  c.crash(2);
  c.rounds(int(2 * kNanosPerSecond / kRound) + 2);
  EXPECT_EQ(c.node(0).membership().find("n2")->state, MemberState::kUnreachable);
  EXPECT_EQ(c.node(0).membership().live().size(), 1u);
  c.start(2, 2);                                // restarted: fresh state, higher incarnation
  c.rounds(int(kNanosPerSecond / kRound) + 2);  // within one probe interval
  const MemberInfo* v = c.node(0).membership().find("n2");
  EXPECT_EQ(v->state, MemberState::kAlive);
  EXPECT_EQ(v->incarnation, 2u);
}

TEST(Node, StaticMembershipDropsSendersNotInThePeersFile) {
  VirtualCluster c({.nodes = 2, .mode = DisseminationMode::kMesh});
  GossipMessage forged;
  forged.sender = "intruder";
  forged.sender_address = "10.9.9.9:1";
  auto b = std::make_shared<Batch>();
  b->origin = "intruder";
  b->incarnation = 1;
  b->seq = 1;
  b->entries = {{"k", 100}};
  forged.batches = {b};
  c.node(0).receive(forged, c.now());
  EXPECT_EQ(c.node(0).stats().dropped_unknown_sender, 1u);
  EXPECT_EQ(c.charged(0, "k"), 0);
}

TEST(Node, HeartbeatMembersJoinThroughASeedFailAndAreForgotten) {
  VirtualCluster c({.nodes = 5, .mode = DisseminationMode::kGossip, .membership = MembershipKind::kHeartbeat});
  c.rounds(40);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(c.node(i).membership().live().size(), 4u) << "node " << i << " knows everyone";
  }
  c.crash(4);
  c.rounds(int(2 * kNanosPerSecond / kRound) + 5);
  EXPECT_EQ(c.node(0).membership().find("n4")->state, MemberState::kSuspect);
  c.rounds(int(2 * kNanosPerSecond / kRound) + 5);
  EXPECT_EQ(c.node(0).membership().find("n4")->state, MemberState::kDead);
  c.start(4, 2);  // restarts and rejoins through the seed
  c.rounds(int(kNanosPerSecond / kRound) + 10);
  for (size_t i = 0; i < 4; ++i) {
    const MemberInfo* v = c.node(i).membership().find("n4");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->state, MemberState::kAlive) << "node " << i;
    EXPECT_EQ(v->incarnation, 2u);
  }
  c.crash(3);
  c.rounds(int(65 * kNanosPerSecond / kRound));
  EXPECT_EQ(c.node(0).membership().find("n3"), nullptr) << "forgotten after forget_after";
  EXPECT_EQ(c.node(1).membership().find("n3"), nullptr);
}

TEST(Node, RestartedNodeLearnsRecentConsumptionFromItsPeers) {
  VirtualCluster c({.nodes = 3,
                    .mode = DisseminationMode::kGossip,
                    .membership = MembershipKind::kHeartbeat,
                    .limit = per_second(1, 100, 100)});
  c.rounds(20);
  ASSERT_TRUE(c.node(1).check("k", 60, c.now()).allowed);
  c.rounds(5);
  c.crash(1);
  c.start(1, 2);
  c.rounds(3);
  // Its own past consumption came back from the others: the bucket is not full again.
  EXPECT_EQ(c.charged(1, "k"), 60);
  EXPECT_FALSE(c.node(1).check("k", 50, c.now()).allowed);
}

// Node n1 restarted once, as incarnation 1000, and known so by the others; then crashed.
void crash_after_a_life_at_incarnation_1000(VirtualCluster& c) {
  c.rounds(10);
  c.crash(1);
  c.start(1, 1000);
  c.rounds(10);
  ASSERT_EQ(c.node(0).membership().find("n1")->incarnation, 1000u);
  c.crash(1);
}

// A node restarts with a LOWER incarnation than its last life (the wall clock stepped back):
// it learns of the newer life from its peers' rows, outbids it, and from then on its
// consumption counts everywhere and the others see it alive.
TEST(Node, ARestartWithALowerIncarnationOutbidsTheRememberedLife) {
  VirtualCluster c({.nodes = 3, .mode = DisseminationMode::kGossip, .membership = MembershipKind::kStatic});
  ASSERT_NO_FATAL_FAILURE(crash_after_a_life_at_incarnation_1000(c));
  c.start(1, 7);  // clock stepped back
  c.rounds(10);
  EXPECT_EQ(c.node(1).membership().self_row().incarnation, 1001u);
  EXPECT_EQ(c.node(1).membership().stats().refuted, 1u);
  ASSERT_TRUE(c.node(1).check("k", 25, c.now()).allowed);
  c.rounds(60);  // well past fail_after: alive through its new life's heartbeat
  for (size_t i : {0, 2}) {
    EXPECT_EQ(c.node(i).membership().find("n1")->incarnation, 1001u) << i;
    EXPECT_EQ(c.node(i).membership().find("n1")->state, MemberState::kAlive) << i;
    EXPECT_EQ(c.charged(i, "k"), 25) << i;
  }
}

// The same, once the others have marked it failed (the restart took longer than fail_after):
// failed members' rows no longer circulate, so only the probes can tell the new life about the
// old one. Each probe carries the probed member's own row. Without it the node never rejoined
// (its rows, at the lower incarnation, were ignored): found by ClusterHardening.WallClockJumps...
// under ASan, where a daemon's restart outlasts --fail-after (issue #19).
TEST(Node, ARestartWithALowerIncarnationAfterBeingMarkedFailedRejoins) {
  for (const MembershipKind kind : {MembershipKind::kStatic, MembershipKind::kHeartbeat}) {
    VirtualCluster c({.nodes = 3, .mode = DisseminationMode::kGossip, .membership = kind});
    ASSERT_NO_FATAL_FAILURE(crash_after_a_life_at_incarnation_1000(c));
    c.rounds(int(3 * kNanosPerSecond / kRound));  // past fail_after (and dead_after): failed everywhere
    for (size_t i : {0, 2}) ASSERT_NE(c.node(i).membership().find("n1")->state, MemberState::kAlive) << i;
    c.start(1, 7);                                // clock stepped back
    c.rounds(int(3 * kNanosPerSecond / kRound));  // a few probe intervals
    EXPECT_EQ(c.node(1).membership().self_row().incarnation, 1001u) << int(kind);
    for (size_t i : {0, 2}) {
      EXPECT_EQ(c.node(i).membership().find("n1")->incarnation, 1001u) << i << " " << int(kind);
      EXPECT_EQ(c.node(i).membership().find("n1")->state, MemberState::kAlive) << i << " " << int(kind);
    }
  }
}

// Static membership: a node restarted after a crash asks for the recent consumption it lacks
// with its very first probes, so within one round it is back in debt.
TEST(Node, ARestartedStaticNodeRelearnsTheDebtWithinOneRound) {
  VirtualCluster c({.nodes = 3,
                    .mode = DisseminationMode::kGossip,
                    .membership = MembershipKind::kStatic,
                    .limit = per_second(1, 100, 100)});
  c.rounds(20);
  ASSERT_TRUE(c.node(0).check("hot", 100, c.now()).allowed);
  c.rounds(10);
  ASSERT_EQ(c.charged(1, "hot"), 100);
  c.crash(1);
  c.rounds(2);
  c.start(1, 2);
  c.round();
  EXPECT_EQ(c.charged(1, "hot"), 100) << "the restarted node would admit a fresh burst";
  EXPECT_FALSE(c.node(1).check("hot", 50, c.now()).allowed);
}

TEST(Node, LeavingMemberIsMarkedLeft) {
  VirtualCluster c({.nodes = 3, .mode = DisseminationMode::kMesh, .membership = MembershipKind::kHeartbeat});
  c.rounds(30);
  c.node(2).leave(c.now());
  c.crash(2);
  c.deliver();
  EXPECT_EQ(c.node(0).membership().find("n2")->state, MemberState::kLeft);
  EXPECT_EQ(c.node(1).membership().find("n2")->state, MemberState::kLeft);
}

// A node that leaves sends what it admitted since its last round, so a graceful shutdown loses
// no consumption.
TEST(Node, ALeavingNodeSendsWhatItAdmittedSinceItsLastRound) {
  for (DisseminationMode mode : {DisseminationMode::kMesh, DisseminationMode::kGossip}) {
    VirtualCluster c({.nodes = 3, .mode = mode});
    c.rounds(30);
    ASSERT_TRUE(c.node(2).check("k", 5, c.now()).allowed);
    c.node(2).leave(c.now());
    c.crash(2);
    c.deliver();
    EXPECT_EQ(c.charged(0, "k"), 5) << dissemination_mode_name(mode);
    EXPECT_EQ(c.charged(1, "k"), 5) << dissemination_mode_name(mode);
  }
}

TEST(Node, ProportionalPolicyScalesRefillByReachableMembers) {
  VirtualCluster c({.nodes = 4,
                    .mode = DisseminationMode::kMesh,
                    .policy = PartitionPolicy::kProportional,
                    .limit = per_second(100, 100, 100)});
  c.rounds(2);
  c.partition({0, 1});
  c.rounds(int(2 * kNanosPerSecond / kRound) + 2);  // the other side is now unreachable
  ASSERT_EQ(c.node(0).membership().live().size(), 1u);
  ASSERT_TRUE(c.node(0).check("k", 100, c.now()).allowed);  // empty the bucket
  c.rounds(20);                                             // 1 s at half of 100/s
  auto b = c.node(0).table().balance_microtokens("k", c.now());
  ASSERT_TRUE(b.has_value());
  // Node 1 heard node 0's 100 tokens too; node 0's bucket refilled 50 tokens in 1 s.
  EXPECT_EQ(*b, 50 * kM);
  c.heal();
  c.rounds(int(kNanosPerSecond / kRound) + 2);  // unreachable members are probed every second
  EXPECT_EQ(c.node(0).membership().live().size(), 3u);
  EXPECT_EQ(c.node(0).membership().reachable_fraction(), (std::pair<uint32_t, uint32_t>{4, 4}));
}

class DropEverything : public Outbox {
 public:
  void send(const std::string&, const GossipMessagePtr&) override {}
};

uint64_t counted(const std::vector<std::pair<std::string, RuleCounters>>& all, const std::string& label,
                 uint64_t RuleCounters::*field) {
  for (const auto& [l, c] : all) {
    if (l == label) return c.*field;
  }
  return 0;
}

// A node whose checks only ask for early sealing (a concurrent table: a member, tollgated
// --threads) keeps evicted keys' consumption until well past the point where it asks, however
// small max_keys is: a flood is sealed long before any consumption would be dropped.
TEST(Node, AConcurrentNodeAsksForSealingLongBeforeItWouldDropConsumption) {
  DropEverything out;
  SplitMix64 random(1);
  NodeOptions o;
  o.id = "n";
  o.address = "127.0.0.1:1";
  o.keys.max_keys = 10'000;  // 8 shards of 1,250: 4,096 kept per shard would drop at 32,768
  o.keys.concurrent = true;
  o.early_seal_keys = 65'536;
  int asked = 0;
  o.seal_wanted = [&asked] { ++asked; };
  auto rules = std::make_shared<const RuleSet>(std::vector<Rule>{{"k*", Limit{Rate{10, kNanosPerSecond}, 10, 10}, 0}},
                                               std::nullopt);
  Node node(o, rules, out, random);
  ASSERT_EQ(node.table().shards(), 8u);
  for (int i = 0; i < 100'000; ++i) ASSERT_TRUE(node.check("k" + std::to_string(i), 1, 0).allowed);
  EXPECT_EQ(asked, 1);  // at 65,536 pending keys, and not again until the owner seals
  EXPECT_EQ(node.table().stats().evictions, 90'000u);
  EXPECT_EQ(node.table().pending_dropped(), 0u);
}

// Per-rule counters for /metrics: by the rule that decided, near-limit once 80% of the burst is
// used, all or nothing counted per item, kept across a reload under the rule's label.
TEST(Node, CountsChecksPerRuleAndKeepsThemAcrossAReload) {
  DropEverything out;
  SplitMix64 random(1);
  NodeOptions o;
  o.id = "n";
  o.address = "127.0.0.1:1";
  auto rules = std::make_shared<const RuleSet>(std::vector<Rule>{{"a*", Limit{Rate{10, kNanosPerSecond}, 10, 10}, 0},
                                                                 {"b", Limit{Rate{1, kNanosPerSecond}, 1, 1}, 0}},
                                               std::nullopt);
  Node node(o, rules, out, random);
  for (int i = 0; i < 12; ++i) node.check("a1", 1, 0);  // 10 allowed (the 9th and 10th near the limit), 2 denied
  node.check("zzz", 1, 0);                              // no rule: not counted
  const CheckItem items[] = {{"b", 1}, {"a2", 1}};
  Decision d[2];
  node.check_all(items, d, 0);  // both allowed
  node.check_all(items, d, 0);  // b denied: both count as denied
  auto all = node.rule_counters();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(counted(all, "a*", &RuleCounters::checks), 14u);
  EXPECT_EQ(counted(all, "a*", &RuleCounters::allowed), 11u);
  EXPECT_EQ(counted(all, "a*", &RuleCounters::denied), 3u);
  EXPECT_EQ(counted(all, "a*", &RuleCounters::near_limit), 2u);
  EXPECT_EQ(counted(all, "b", &RuleCounters::checks), 2u);
  EXPECT_EQ(counted(all, "b", &RuleCounters::near_limit), 1u);  // its only token taken
  // A reload that reorders the rules and drops b: a* keeps its counts at its new index, b's are kept.
  node.replace_rules(
      std::make_shared<const RuleSet>(std::vector<Rule>{{"c", Limit{Rate{1, kNanosPerSecond}, 1, 1}, 0},
                                                        {"a*", Limit{Rate{10, kNanosPerSecond}, 10, 10}, 0}},
                                      std::nullopt),
      0);
  node.check("a1", 1, 10 * kNanosPerSecond);
  all = node.rule_counters();
  EXPECT_EQ(counted(all, "a*", &RuleCounters::checks), 15u);
  EXPECT_EQ(counted(all, "b", &RuleCounters::checks), 2u);
  EXPECT_EQ(counted(all, "c", &RuleCounters::checks), 0u);
}

// --near-limit (the reference RLS server's NEAR_LIMIT_RATIO): what counts as near is the
// operator's. At 50% of a burst of 10, the 6th to 10th allowed checks are near (more than half used).
TEST(Node, TheNearLimitPercentIsConfigurable) {
  DropEverything out;
  SplitMix64 random(1);
  NodeOptions o;
  o.id = "n";
  o.address = "127.0.0.1:1";
  o.keys.near_limit_percent = 50;  // tollgated's --near-limit 50 (NodeSettings::apply_to)
  auto rules = std::make_shared<const RuleSet>(std::vector<Rule>{{"a*", Limit{Rate{10, kNanosPerSecond}, 10, 10}, 0}},
                                               std::nullopt);
  Node node(o, rules, out, random);
  for (int i = 0; i < 10; ++i) node.check("a1", 1, 0);
  EXPECT_EQ(counted(node.rule_counters(), "a*", &RuleCounters::near_limit), 5u);
}

TEST(Node, CountsWhatAShadowRuleWouldHaveDeniedAsAllowedAndShadowDenied) {
  DropEverything out;
  SplitMix64 random(1);
  NodeOptions o;
  o.id = "n";
  o.address = "127.0.0.1:1";
  Limit shadow{Rate{1, kNanosPerSecond}, 2, 2};
  shadow.shadow = true;
  Node node(o, std::make_shared<const RuleSet>(std::vector<Rule>{{"s*", shadow, 0}}, std::nullopt), out, random);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(node.check("s1", 1, 0).allowed);
  const auto all = node.rule_counters();
  EXPECT_EQ(counted(all, "s*", &RuleCounters::checks), 5u);
  EXPECT_EQ(counted(all, "s*", &RuleCounters::allowed), 5u);
  EXPECT_EQ(counted(all, "s*", &RuleCounters::denied), 0u);
  EXPECT_EQ(counted(all, "s*", &RuleCounters::shadow_denied), 3u);
  EXPECT_EQ(node.stats().denied, 0u);
}

// --- Balances from a peer on start (issue 35; docs/design.md 6.5) ---------------------------

constexpr int64_t kSyncDeadline = 5 * kNanosPerSecond;

// Spends `tokens` of "k" at node 0 and waits past the ledger's retention (10 s), so that no
// peer can repair the batch to a restarted node any more: only a transfer can tell it.
void spend_and_outlive_retention(VirtualCluster& c, int64_t tokens) {
  c.rounds(3);
  ASSERT_TRUE(c.node(0).check("k", tokens, c.now()).allowed);
  c.rounds(12 * kNanosPerSecond / kRound);
  for (size_t i = 0; i < 3; ++i) ASSERT_EQ(c.charged(i, "k"), tokens) << "node " << i;
}

// The failure the transfer exists for, both ways: without it a node restarted after the
// retention window holds a spent long-window key full; with it, the node denies that key until
// it has its peers' balance, and then holds the debt.
TEST(NodeSync, ARestartedNodeTakesItsPeersDebtAndDeniesLongWindowKeysUntilThen) {
  for (const bool sync : {false, true}) {
    SCOPED_TRACE(sync ? "sync on" : "sync off");
    VirtualCluster c({.nodes = 3, .sync_deadline_ns = sync ? kSyncDeadline : 0});
    spend_and_outlive_retention(c, 700);
    c.crash(2);
    c.rounds(2);
    c.start(2, 2);
    const Decision first = c.node(2).check("k", 1, c.now());
    if (!sync) {
      EXPECT_TRUE(first.allowed);
      c.rounds(5);
      EXPECT_EQ(c.charged(2, "k"), 1) << "without a transfer the restarted node forgot the debt";
      continue;
    }
    EXPECT_FALSE(first.allowed);
    EXPECT_EQ(first.reason, DenyReason::kSyncing);
    EXPECT_TRUE(c.node(2).syncing());
    c.rounds(5);
    EXPECT_FALSE(c.node(2).syncing());
    EXPECT_EQ(c.charged(2, "k"), 700);
    const NodeStats s = c.node(2).stats();
    EXPECT_EQ(s.sync_taken, 1u);
    EXPECT_EQ(s.sync_balances, 1u);
    EXPECT_EQ(s.sync_denied, 1u);
    EXPECT_GE(c.node(0).stats().sync_served + c.node(1).stats().sync_served, 1u);
    // And from here on it is a member like any other: what it admits reaches the others once.
    ASSERT_TRUE(c.node(2).check("k", 5, c.now()).allowed);
    c.rounds(6);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(c.charged(i, "k"), 705) << "node " << i;
  }
}

// A key whose bucket refills within the retention window is answered at once: push-pull repair
// gives the new node all the consumption that can still matter to it.
TEST(NodeSync, ShortWindowKeysAreAnsweredWhileSyncing) {
  VirtualCluster c({.nodes = 3, .limit = Limit{Rate{100, kNanosPerSecond}, 100, 0}, .sync_deadline_ns = kSyncDeadline});
  c.rounds(3);
  c.crash(1);
  c.start(1, 2);
  ASSERT_TRUE(c.node(1).syncing());
  const Decision d = c.node(1).check("k", 1, c.now());
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(c.node(1).stats().sync_denied, 0u);
}

// Exact while the cluster keeps spending: batches admitted during the transfer, before or after
// the peer took its snapshot, and the restarted node's own, are each counted once everywhere.
TEST(NodeSync, ConsumptionDuringTheTransferIsCountedOnceEverywhere) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    VirtualCluster c({.nodes = 3, .seed = seed, .sync_deadline_ns = kSyncDeadline});
    spend_and_outlive_retention(c, 300);
    c.crash(2);
    int64_t spent = 300;
    // While it is down (its peers retain these batches and will repair them to it) ...
    for (int r = 0; r < 4; ++r) {
      ASSERT_TRUE(c.node(0).check("k", 10, c.now()).allowed);
      spent += 10;
      c.round();
    }
    c.start(2, 2);
    // ... and while it asks.
    for (int r = 0; r < 12; ++r) {
      for (size_t i = 0; i < 2; ++i) {
        ASSERT_TRUE(c.node(i).check("k", int64_t(1 + i + r), c.now()).allowed);
        spent += int64_t(1 + i + r);
      }
      c.round();
    }
    ASSERT_FALSE(c.node(2).syncing());
    ASSERT_TRUE(c.node(2).check("k", 4, c.now()).allowed);
    spent += 4;
    c.rounds(30);  // past a push-pull period: anything lost would have been repaired
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(c.charged(i, "k"), spent) << "node " << i;
  }
}

// The peer's own consumption not sealed yet when it takes its snapshot is in its balances: it
// must be in its positions too, or the batch it seals later counts twice at the asker (found by
// a loaded run of ClusterSecurity.FaultInjectionIsRefusedUnlessTheDaemonEnablesIt: 986 for 993).
TEST(NodeSync, ThePeersUnsealedConsumptionAtItsSnapshotIsCountedOnce) {
  VirtualCluster c({.nodes = 2, .mode = DisseminationMode::kMesh, .sync_deadline_ns = kSyncDeadline});
  c.rounds(20);
  c.crash(1);
  c.rounds(2);
  c.start(1, 2);
  c.node(1).tick(c.now());                                // its request is on the way...
  ASSERT_TRUE(c.node(0).check("k", 7, c.now()).allowed);  // ...and the peer admits, unsealed
  c.deliver();                                            // the peer serves it now
  c.rounds(10);
  EXPECT_FALSE(c.node(1).syncing());
  EXPECT_EQ(c.charged(1, "k"), 7);
  EXPECT_EQ(c.charged(0, "k"), 7);
}

// The whole cluster starts at once: every member answers that it is starting too, so nobody
// waits for the deadline, and everyone answers from what it has.
TEST(NodeSync, AClusterThatStartsTogetherStopsWaitingAtOnce) {
  VirtualCluster c({.nodes = 4, .sync_deadline_ns = kSyncDeadline});
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(c.node(i).syncing());
  c.rounds(20);  // one second, well inside the deadline
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_FALSE(c.node(i).syncing()) << "node " << i;
    EXPECT_EQ(c.node(i).stats().sync_all_starting, 1u) << "node " << i;
    EXPECT_TRUE(c.node(i).check("k", 1, c.now()).allowed);
  }
}

// Nobody answers (every peer is down): the node denies long-window keys until the deadline,
// then answers from what it has, and says it gave up.
TEST(NodeSync, WithNobodyToAnswerTheNodeStopsWaitingAtTheDeadline) {
  VirtualCluster c({.nodes = 3, .sync_deadline_ns = kSyncDeadline});
  c.crash(0);
  c.crash(1);
  c.crash(2);
  c.start(2, 2);
  c.rounds(int(kSyncDeadline / kRound) - 2);
  EXPECT_TRUE(c.node(2).syncing());
  EXPECT_EQ(c.node(2).check("k", 1, c.now()).reason, DenyReason::kSyncing);
  c.rounds(3);
  EXPECT_FALSE(c.node(2).syncing());
  EXPECT_EQ(c.node(2).stats().sync_gave_up, 1u);
  EXPECT_GE(c.node(2).stats().sync_attempts, 2u) << "a peer that does not answer is replaced by another";
  EXPECT_TRUE(c.node(2).check("k", 1, c.now()).allowed);
}

// A lone node (no peers, or heartbeat without a seed but itself) has nobody to ask: it never
// denies a check for it.
TEST(NodeSync, ALoneNodeDoesNotWait) {
  VirtualCluster c({.nodes = 1, .sync_deadline_ns = kSyncDeadline});
  EXPECT_FALSE(c.node(0).syncing());
  EXPECT_TRUE(c.node(0).check("k", 1, c.now()).allowed);
}

// Under loss the asker asks again for the pages it lacks: the transfer still completes, and what
// it took is exact.
TEST(NodeSync, PagesLostOnTheWayAreAskedForAgain) {
  VirtualCluster c({.nodes = 3, .sync_deadline_ns = kSyncDeadline});
  c.rounds(3);
  for (int k = 0; k < 200; ++k) ASSERT_TRUE(c.node(0).check("k" + std::to_string(k), 1 + k, c.now()).allowed);
  c.rounds(12 * kNanosPerSecond / kRound);
  c.crash(2);
  c.start(2, 2);
  c.set_loss(0.3);
  c.rounds(40);
  c.set_loss(0);
  EXPECT_FALSE(c.node(2).syncing());
  EXPECT_EQ(c.node(2).stats().sync_taken, 1u);
  for (int k = 0; k < 200; ++k) EXPECT_EQ(c.charged(2, "k" + std::to_string(k)), 1 + k) << k;
}

// A request replayed (the same message of the same life) draws nothing: one transfer is
// prepared per session, and pages only for a message not seen before.
TEST(NodeSync, AReplayedRequestDrawsNothing) {
  VirtualCluster c({.nodes = 2});
  c.rounds(3);
  GossipMessage ask;
  ask.sender = VirtualCluster::id(1);
  ask.sender_incarnation = 1;
  ask.sender_address = VirtualCluster::address(1);
  ask.message_seq = 1000;
  ask.sync_request = SyncRequest{.session = 77, .pages = {}};
  Node& server = c.node(0);
  server.receive(ask, c.now());
  const NodeStats after_first = server.stats();
  EXPECT_EQ(after_first.sync_served, 1u);
  server.receive(ask, c.now());  // the same message again
  EXPECT_EQ(server.stats().sync_served, 1u);
  EXPECT_EQ(server.stats().sync_ignored, after_first.sync_ignored + 1);
}

// A partition longer than the retention window: each side's spending of it is beyond any repair.
// When it heals, each node asks a member that came back for its balances and, for long-window
// keys, the side that spent more wins: never a fresh burst of what the other side spent.
TEST(NodeSync, AfterALongPartitionTheSideThatSpentMoreWinsForLongWindowKeys) {
  for (const bool heal : {false, true}) {
    SCOPED_TRACE(heal ? "heal transfer on" : "off");
    VirtualCluster c({.nodes = 3, .sync_deadline_ns = heal ? kSyncDeadline : 0});
    c.rounds(20);
    c.partition({2});
    ASSERT_TRUE(c.node(0).check("k", 300, c.now()).allowed);
    ASSERT_TRUE(c.node(2).check("k", 100, c.now()).allowed);
    c.rounds(15 * kNanosPerSecond / kRound);  // past retention, each side alone
    ASSERT_EQ(c.charged(1, "k"), 300);
    ASSERT_EQ(c.charged(2, "k"), 100);
    c.heal();
    c.rounds(40);
    if (!heal) {
      EXPECT_EQ(c.charged(2, "k"), 100) << "without it, the other side's spending is never learned";
      continue;
    }
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(c.charged(i, "k"), 300) << "node " << i;
    EXPECT_GE(c.node(2).stats().heal_taken, 1u);
    EXPECT_FALSE(c.node(2).syncing()) << "a heal transfer denies nothing meanwhile";
  }
}

// --- Resets (docs/design.md 6.6) --------------------------------------------------------------

// A reset at any node makes the key full again at every node, in every mode, within a few rounds.
TEST(NodeReset, AResetKeyIsFullAgainAtEveryNode) {
  for (const DisseminationMode mode :
       {DisseminationMode::kMesh, DisseminationMode::kGossip, DisseminationMode::kRelay}) {
    SCOPED_TRACE(dissemination_mode_name(mode));
    VirtualCluster c({.nodes = 4, .mode = mode});
    c.rounds(3);
    ASSERT_TRUE(c.node(0).check("k", 700, c.now()).allowed);
    c.rounds(6);
    for (size_t i = 0; i < 4; ++i) ASSERT_EQ(c.charged(i, "k"), 700) << "node " << i;
    const std::optional<int64_t> left = c.node(1).reset("k", c.now());
    ASSERT_TRUE(left);
    EXPECT_EQ(*left, 1'000'000);
    EXPECT_EQ(c.charged(1, "k"), 0);
    c.rounds(4);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(c.charged(i, "k"), 0) << "node " << i;
      EXPECT_EQ(c.node(i).reset_epoch("k"), 1u) << "node " << i;
    }
    // Consumption after the reset counts everywhere, once.
    ASSERT_TRUE(c.node(3).check("k", 9, c.now()).allowed);
    c.rounds(6);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c.charged(i, "k"), 9) << "node " << i;
    EXPECT_EQ(c.node(1).stats().resets, 1u);
  }
}

// What a node admitted before it learned of a reset (here: cut off from the node that reset)
// charges no fresh bucket, wherever it arrives; what it admits after counts everywhere.
TEST(NodeReset, ConsumptionAdmittedBeforeTheResetDoesNotChargeTheFreshBucket) {
  for (const DisseminationMode mode : {DisseminationMode::kMesh, DisseminationMode::kGossip}) {
    SCOPED_TRACE(dissemination_mode_name(mode));
    VirtualCluster c({.nodes = 3, .mode = mode});
    c.rounds(3);
    ASSERT_TRUE(c.node(0).check("k", 300, c.now()).allowed);
    c.rounds(6);
    c.partition({2});
    ASSERT_TRUE(c.node(2).check("k", 50, c.now()).allowed);  // before it hears of the reset
    c.rounds(2);
    c.node(0).reset("k", c.now());
    c.rounds(2);
    ASSERT_TRUE(c.node(0).check("k", 5, c.now()).allowed);  // after it
    c.rounds(2);
    c.heal();
    c.rounds(40);  // past push-pull: node 2's batches of before the reset reach everyone
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(c.charged(i, "k"), 5) << "node " << i;
    EXPECT_GT(c.node(0).stats().reset_skipped + c.node(1).stats().reset_skipped, 0u);
  }
}

// The reset's own batch is lost, but consumption sealed after it arrives: that entry's epoch
// tells the node of the reset, which it takes first.
TEST(NodeReset, AResetWhoseBatchIsLostIsTakenFromTheEntriesAfterIt) {
  VirtualCluster c({.nodes = 2, .mode = DisseminationMode::kMesh});
  c.rounds(3);
  ASSERT_TRUE(c.node(0).check("k", 100, c.now()).allowed);
  c.rounds(3);
  ASSERT_EQ(c.charged(1, "k"), 100);
  c.set_loss(1.0);
  c.node(0).reset("k", c.now());
  c.round();  // the reset's batch goes, and is lost
  c.set_loss(0);
  ASSERT_TRUE(c.node(0).check("k", 7, c.now()).allowed);
  c.round();
  EXPECT_EQ(c.node(1).reset_epoch("k"), 1u);
  EXPECT_EQ(c.charged(1, "k"), 7);
}

// A node that starts after a reset takes the key's epoch with its peer's balances: the tagged
// consumption that arrives later is counted, not read as a reset it missed (which would fill
// the bucket again).
TEST(NodeReset, ANodeThatStartsAfterAResetKeepsItsPeersEpoch) {
  VirtualCluster c({.nodes = 3, .sync_deadline_ns = kSyncDeadline});
  c.rounds(20);
  ASSERT_TRUE(c.node(0).check("k", 300, c.now()).allowed);
  c.rounds(4);
  c.node(0).reset("k", c.now());
  c.rounds(2);
  ASSERT_TRUE(c.node(0).check("k", 40, c.now()).allowed);
  c.rounds(12 * kNanosPerSecond / kRound);  // past retention: only the transfer tells a new node
  c.crash(2);
  c.start(2, 2);
  c.rounds(5);
  ASSERT_FALSE(c.node(2).syncing());
  EXPECT_EQ(c.node(2).reset_epoch("k"), 1u);
  EXPECT_EQ(c.charged(2, "k"), 40);
  ASSERT_TRUE(c.node(1).check("k", 10, c.now()).allowed);
  c.rounds(6);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(c.charged(i, "k"), 50) << "node " << i;
}

// Across a restart with a state: the epochs go into NodeState and come back.
TEST(NodeReset, EpochsTravelInTheNodesState) {
  VirtualCluster c({.nodes = 1});
  c.node(0).reset("k", c.now());
  c.node(0).reset("k", c.now());
  const NodeState state = c.node(0).export_state(c.now());
  ASSERT_EQ(state.resets.size(), 1u);
  EXPECT_EQ(state.resets[0], (ResetMark{"k", 2}));
  c.start(0, 2);
  EXPECT_EQ(c.node(0).reset_epoch("k"), 0u);
  c.node(0).import_state(state, c.now(), 0);
  EXPECT_EQ(c.node(0).reset_epoch("k"), 2u);
}

// --- Concurrency leases (issue 40; docs/design.md 6.7) ---------------------------------------

// "job:*": at most `limit` leases in flight cluster-wide, leases of 10 minutes.
std::shared_ptr<const RuleSet> lease_rules(int64_t limit) {
  return std::make_shared<RuleSet>(std::vector<Rule>{}, std::nullopt, nullptr,
                                   std::vector<ConcurrencyRule>{{"job:*", limit, 600 * kNanosPerSecond, 0}});
}

class LeasesInEveryMode : public ::testing::TestWithParam<DisseminationMode> {};
INSTANTIATE_TEST_SUITE_P(Modes, LeasesInEveryMode,
                         ::testing::Values(DisseminationMode::kMesh, DisseminationMode::kGossip,
                                           DisseminationMode::kRelay),
                         [](const auto& p) { return std::string(dissemination_mode_name(p.param)); });

TEST_P(LeasesInEveryMode, ALeaseTakenAtOneNodeCountsAtEveryNodeAndItsReleaseFreesIt) {
  VirtualCluster c({.nodes = 9, .mode = GetParam(), .relay_groups = 4, .rules = lease_rules(3)});
  c.rounds(5);
  const LeaseGrant a = c.node(0).acquire("job:x", 2, 0, c.now());
  ASSERT_EQ(a.outcome, LeaseOutcome::kGranted);
  EXPECT_EQ(a.in_flight, 2);
  EXPECT_EQ(a.limit, 3);
  c.rounds(10);
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(c.node(i).leases().in_flight("job:x"), 2) << "node " << i;
  // Another key of the same rule has its own count.
  EXPECT_EQ(c.node(5).acquire("job:y", 3, 0, c.now()).outcome, LeaseOutcome::kGranted);
  EXPECT_EQ(c.node(5).acquire("job:x", 2, 0, c.now()).outcome, LeaseOutcome::kOverLimit);
  const LeaseGrant b = c.node(5).acquire("job:x", 1, 0, c.now());
  ASSERT_EQ(b.outcome, LeaseOutcome::kGranted);
  EXPECT_EQ(b.in_flight, 3);
  c.rounds(10);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(c.node(i).leases().in_flight("job:x"), 3) << "node " << i;
    EXPECT_EQ(c.node(i).acquire("job:x", 1, 0, c.now()).outcome, LeaseOutcome::kOverLimit) << "node " << i;
  }
  ASSERT_TRUE(c.node(0).release(a.id));
  EXPECT_FALSE(c.node(0).release(a.id)) << "a lease is released once";
  c.rounds(10);
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(c.node(i).leases().in_flight("job:x"), 1) << "node " << i;
  EXPECT_EQ(c.node(7).acquire("job:x", 2, 0, c.now()).outcome, LeaseOutcome::kGranted);
}

TEST(Node, AFailedMembersLeasesAreFreedAndComeBackWithItInTheSameLife) {
  VirtualCluster c({.nodes = 4,
                    .mode = DisseminationMode::kMesh,
                    .membership = MembershipKind::kHeartbeat,
                    .rules = lease_rules(4)});
  c.rounds(20);
  ASSERT_EQ(c.node(3).acquire("job:x", 3, 0, c.now()).outcome, LeaseOutcome::kGranted);
  c.rounds(5);
  ASSERT_EQ(c.node(0).leases().in_flight("job:x"), 3);
  // Node 3 is cut off: once the others fail it (fail_after, 2 s = 40 rounds), its leases go.
  c.partition({3});
  int rounds = 0;
  while (c.node(0).leases().in_flight("job:x") != 0 && rounds < 200) {
    c.round();
    ++rounds;
  }
  EXPECT_EQ(c.node(0).leases().in_flight("job:x"), 0);
  EXPECT_GE(rounds, 35) << "not before the member could be failed";
  EXPECT_LE(rounds, 45) << "fail_after (40 rounds) and a round";
  EXPECT_EQ(c.node(0).inflight_stats().freed_with_failed, 3u);
  EXPECT_EQ(c.node(1).acquire("job:x", 4, 0, c.now()).outcome, LeaseOutcome::kGranted);
  // Healed: node 3, alive again in the same life, counts again (over the limit for a while:
  // the partition's cost under `open`, repaid as leases end).
  c.heal();
  c.rounds(20);
  EXPECT_EQ(c.node(0).leases().in_flight("job:x"), 7);
  EXPECT_EQ(c.node(3).leases().in_flight("job:x"), 7);
  EXPECT_EQ(c.node(2).acquire("job:x", 1, 0, c.now()).outcome, LeaseOutcome::kOverLimit);
}

TEST(Node, AReleaseSeenTwiceAcrossAHealedPartitionCountsOnce) {
  VirtualCluster c({.nodes = 4, .mode = DisseminationMode::kGossip, .rules = lease_rules(10)});
  c.rounds(10);
  LeaseGrant held[3];
  for (auto& h : held) {
    h = c.node(0).acquire("job:x", 1, 0, c.now());
    ASSERT_EQ(h.outcome, LeaseOutcome::kGranted);
  }
  c.rounds(5);
  ASSERT_EQ(c.node(2).leases().in_flight("job:x"), 3);
  c.partition({0, 1});
  ASSERT_TRUE(c.node(0).release(held[0].id));
  c.rounds(10);  // shorter than fail_after: the far side only misses the release
  EXPECT_EQ(c.node(1).leases().in_flight("job:x"), 2);
  EXPECT_EQ(c.node(2).leases().in_flight("job:x"), 3);
  c.heal();
  c.rounds(30);  // push-pull repairs the batch, gossip relays copies: the count is a state
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c.node(i).leases().in_flight("job:x"), 2) << "node " << i;
  ASSERT_TRUE(c.node(0).release(held[1].id));
  c.rounds(10);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c.node(i).leases().in_flight("job:x"), 1) << "node " << i;
}

TEST(Node, ARestartedMembersLeasesGoWithItsOldLife) {
  VirtualCluster c({.nodes = 3,
                    .mode = DisseminationMode::kMesh,
                    .membership = MembershipKind::kHeartbeat,
                    .rules = lease_rules(5)});
  c.rounds(20);
  ASSERT_EQ(c.node(2).acquire("job:x", 4, 0, c.now()).outcome, LeaseOutcome::kGranted);
  c.rounds(5);
  ASSERT_EQ(c.node(0).leases().in_flight("job:x"), 4);
  // A restart well within fail_after: the new life holds nothing, and says so.
  c.crash(2);
  c.rounds(3);
  c.start(2, 2);
  c.rounds(10);
  EXPECT_EQ(c.node(0).leases().in_flight("job:x"), 0);
  EXPECT_EQ(c.node(1).leases().in_flight("job:x"), 0);
}

TEST(Node, AJoinerLearnsALeaseOlderThanRetentionFromARefresh) {
  VirtualCluster c({.nodes = 3,
                    .mode = DisseminationMode::kGossip,
                    .membership = MembershipKind::kHeartbeat,
                    .rules = lease_rules(5)});
  c.crash(2);
  c.rounds(10);
  ASSERT_EQ(c.node(0).acquire("job:x", 2, 0, c.now()).outcome, LeaseOutcome::kGranted);
  c.rounds(300);  // 15 s: past the ledger's retention, no repair can bring the batch
  c.start(2, 1);
  c.rounds(20);
  EXPECT_EQ(c.node(2).leases().in_flight("job:x"), 2);
  EXPECT_EQ(c.node(2).acquire("job:x", 4, 0, c.now()).outcome, LeaseOutcome::kOverLimit);
}

TEST(Node, ACountLostForGoodIsHealedByThePeriodicRefresh) {
  VirtualCluster c({.nodes = 3, .mode = DisseminationMode::kMesh, .rules = lease_rules(5)});
  c.rounds(5);
  const LeaseGrant g = c.node(0).acquire("job:x", 1, 0, c.now());
  ASSERT_EQ(g.outcome, LeaseOutcome::kGranted);
  c.rounds(5);
  ASSERT_EQ(c.node(1).leases().in_flight("job:x"), 1);
  // Every message to node 1 carrying a batch of counts is lost, repairs from either node
  // included, past the ledger's retention; heartbeats still arrive, so node 0 never fails
  // there. Only a refresh can say.
  auto counts_batch = [](const GossipMessage& m) {
    return std::any_of(m.batches.begin(), m.batches.end(), [](const BatchPtr& b) { return b->counts != nullptr; });
  };
  c.set_drop([&](size_t, size_t to, const GossipMessage& m) { return to == 1 && counts_batch(m); });
  ASSERT_TRUE(c.node(0).release(g.id));
  c.rounds(300);  // 15 s
  EXPECT_EQ(c.node(1).leases().in_flight("job:x"), 1);
  EXPECT_EQ(c.node(2).leases().in_flight("job:x"), 0);
  c.set_drop(nullptr);
  c.rounds(20 * 20);  // within lease_refresh_ns (30 s) of the last refresh
  EXPECT_EQ(c.node(1).leases().in_flight("job:x"), 0);
  EXPECT_EQ(c.node(1).acquire("job:x", 5, 0, c.now()).outcome, LeaseOutcome::kGranted);
}

TEST(Node, AMemberBackFromALongPartitionSendsARefresh) {
  VirtualCluster c({.nodes = 3, .mode = DisseminationMode::kMesh, .rules = lease_rules(5)});
  c.rounds(5);
  const LeaseGrant g = c.node(0).acquire("job:x", 2, 0, c.now());
  ASSERT_EQ(g.outcome, LeaseOutcome::kGranted);
  c.rounds(5);
  c.partition({0});
  ASSERT_TRUE(c.node(0).release(g.id));
  c.rounds(300);  // past retention: the release's batch cannot be repaired any more
  EXPECT_EQ(c.node(1).leases().in_flight("job:x"), 0) << "node 0 is unreachable: not counted";
  c.heal();
  c.rounds(60);  // probes (every second) find the healed node
  ASSERT_EQ(c.node(1).membership().find("n0")->state, MemberState::kAlive);
  // Back alive in the same life, node 0's old row (2) would count again: its refresh, sent as
  // soon as it sees the others come back, said 0.
  EXPECT_EQ(c.node(1).leases().in_flight("job:x"), 0);
  EXPECT_EQ(c.node(2).leases().in_flight("job:x"), 0);
}

TEST(Node, AnExpiredLeaseIsFreedEverywhere) {
  VirtualCluster c({.nodes = 3, .mode = DisseminationMode::kMesh, .rules = lease_rules(2)});
  c.rounds(5);
  const LeaseGrant g = c.node(0).acquire("job:x", 2, 500 * kNanosPerMilli, c.now());
  ASSERT_EQ(g.outcome, LeaseOutcome::kGranted);
  EXPECT_EQ(g.expires_ns, c.now() + 500 * kNanosPerMilli);
  c.rounds(5);
  EXPECT_EQ(c.node(1).leases().in_flight("job:x"), 2);
  c.rounds(7);
  EXPECT_EQ(c.node(0).leases().stats().expired, 1u);
  EXPECT_EQ(c.node(1).leases().in_flight("job:x"), 0);
  EXPECT_FALSE(c.node(0).renew(g.id, 0, c.now())) << "an expired lease cannot be renewed";
}

}  // namespace
}  // namespace tollgate
