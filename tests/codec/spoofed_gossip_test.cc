// Spoofed gossip against real nodes, through the real codec with a cluster key: forged,
// replayed and truncated datagrams, and a keyed sender missing from the peers file, change no
// bucket. (Issue #5; the codec's own tests cover each decode error in isolation.)
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec_test_util.h"
#include "core/node.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

constexpr int64_t kRound = 50 * kNanosPerMilli;
constexpr int64_t kM = 1'000'000;

// Captures what a node sends, encoded as the UDP transport would.
class Wire : public Outbox {
 public:
  explicit Wire(ClusterKeys keys) : keys_(std::move(keys)) {}
  void send(const std::string& address, const GossipMessagePtr& m) override {
    for (std::string& d : encode_datagrams(*m, keys_)) sent.push_back({address, std::move(d)});
  }
  std::vector<std::pair<std::string, std::string>> sent;

 private:
  ClusterKeys keys_;
};

std::shared_ptr<const RuleSet> hourly() {
  // 1 an hour, burst 1000: a balance shows what was charged.
  return std::make_shared<RuleSet>(std::vector<Rule>{{"k*", Limit{Rate{1, 3600 * kNanosPerSecond}, 1000, 1000}, 0}},
                                   std::nullopt);
}

struct Harness {
  ClusterKeys keys = codec_test::key_a();
  Wire a_wire{keys}, b_wire{keys};
  SplitMix64 random{7};
  std::unique_ptr<Node> a, b;
  MonoNanos now = 0;

  explicit Harness(uint64_t a_incarnation = 1) {
    a = make("a", a_incarnation, a_wire);
    b = make("b", 1, b_wire);
  }
  std::unique_ptr<Node> make(const std::string& id, uint64_t incarnation, Wire& wire) {
    NodeOptions o;
    o.id = id;
    o.address = id + ":1";
    o.incarnation = incarnation;
    o.mode = DisseminationMode::kMesh;
    auto n = std::make_unique<Node>(o, hourly(), wire, random);
    n->set_peers({{"a", "a:1"}, {"b", "b:1"}}, now);
    return n;
  }
  // Delivers datagrams to b the way the transport does: decode (MAC checked), then receive.
  size_t deliver_to_b(const std::vector<std::string>& datagrams) {
    size_t accepted = 0;
    for (const std::string& d : datagrams) {
      DecodeResult r = decode(d, keys);
      if (!r.message) continue;
      ++accepted;
      b->receive(*r.message, now);
    }
    return accepted;
  }
  // One round of both; b's messages reach a. Returns what a sent to b (not yet delivered).
  std::vector<std::string> a_round() {
    now += kRound;
    a_wire.sent.clear();
    b_wire.sent.clear();
    a->tick(now);
    b->tick(now);
    for (auto& [to, d] : b_wire.sent) {
      if (DecodeResult r = decode(d, keys); to == "a:1" && r.message) a->receive(*r.message, now);
    }
    std::vector<std::string> out;
    for (auto& [to, d] : a_wire.sent) {
      if (to == "b:1") out.push_back(d);
    }
    return out;
  }
  int64_t charged_at_b(const std::string& key) {
    auto bal = b->table().balance_microtokens(key, now);
    return bal ? (1000 * kM - *bal + kM / 2) / kM : 0;
  }
};

TEST(SpoofedGossip, AReplayedDatagramChargesNothingTwice) {
  Harness h;
  for (int r = 0; r < 3; ++r) h.deliver_to_b(h.a_round());  // a and b see each other alive
  ASSERT_TRUE(h.a->check("k1", 30, h.now).allowed);
  const std::vector<std::string> captured = h.a_round();
  ASSERT_GT(h.deliver_to_b(captured), 0u);
  ASSERT_EQ(h.charged_at_b("k1"), 30);
  for (int i = 0; i < 5; ++i) EXPECT_GT(h.deliver_to_b(captured), 0u);  // authentic bytes, replayed
  EXPECT_EQ(h.charged_at_b("k1"), 30);
  // Much later, after many more batches from a have moved b's window along.
  for (int r = 0; r < 400; ++r) {
    h.a->check("k2", 1, h.now);  // allowed or not: either way a batch or a heartbeat goes out
    h.deliver_to_b(h.a_round());
  }
  h.deliver_to_b(captured);
  EXPECT_EQ(h.charged_at_b("k1"), 30);
  EXPECT_GT(h.b->ledger().stats().duplicates, 0u);
}

TEST(SpoofedGossip, ReplaysOfAPreviousLifeAfterARestartChargeNothing) {
  Harness h;
  for (int r = 0; r < 3; ++r) h.deliver_to_b(h.a_round());
  ASSERT_TRUE(h.a->check("k1", 30, h.now).allowed);
  const std::vector<std::string> old_life = h.a_round();
  h.deliver_to_b(old_life);
  ASSERT_EQ(h.charged_at_b("k1"), 30);
  h.a = h.make("a", 2, h.a_wire);                           // a restarts
  for (int r = 0; r < 3; ++r) h.deliver_to_b(h.a_round());  // b and the new a find each other
  ASSERT_TRUE(h.a->check("k1", 5, h.now).allowed);
  h.deliver_to_b(h.a_round());
  ASSERT_EQ(h.charged_at_b("k1"), 35);
  h.deliver_to_b(old_life);
  EXPECT_EQ(h.charged_at_b("k1"), 35);
}

TEST(SpoofedGossip, ForgedAndTruncatedDatagramsAreRejectedBeforeTheNode) {
  Harness h;
  for (int r = 0; r < 3; ++r) h.deliver_to_b(h.a_round());
  ASSERT_TRUE(h.a->check("k1", 30, h.now).allowed);
  const std::vector<std::string> genuine = h.a_round();
  ASSERT_FALSE(genuine.empty());
  std::vector<std::string> forged;
  for (const std::string& d : genuine) {
    for (size_t at : {size_t(0), d.size() / 2, d.size() - 1}) {
      std::string f = d;
      f[at] = char(f[at] ^ 0x20);
      forged.push_back(f);
    }
    for (size_t len : {size_t(0), size_t(1), d.size() / 2, d.size() - 1}) forged.push_back(d.substr(0, len));
  }
  // The same message signed with another cluster's key.
  Wire other(codec_test::key_b());
  other.send("b:1", std::make_shared<GossipMessage>(*decode(genuine[0], h.keys).message));
  forged.push_back(other.sent[0].second);
  EXPECT_EQ(h.deliver_to_b(forged), 0u);
  EXPECT_EQ(h.charged_at_b("k1"), 0);
  EXPECT_EQ(h.deliver_to_b(genuine), genuine.size());
  EXPECT_EQ(h.charged_at_b("k1"), 30);
}

// A host that holds the cluster key but is not in b's peers file (static membership): its
// messages are authentic and still change nothing.
TEST(SpoofedGossip, AKeyedSenderMissingFromThePeersFileChangesNothing) {
  Harness h;
  Wire c_wire(h.keys);
  std::unique_ptr<Node> c = h.make("c", 1, c_wire);
  c->set_peers({{"b", "b:1"}, {"c", "c:1"}}, h.now);
  ASSERT_TRUE(c->check("k1", 30, h.now).allowed);
  h.now += kRound;
  c->tick(h.now);
  std::vector<std::string> from_c;
  for (auto& [to, d] : c_wire.sent) {
    if (to == "b:1") from_c.push_back(d);
  }
  ASSERT_FALSE(from_c.empty());
  EXPECT_EQ(h.deliver_to_b(from_c), from_c.size());  // authentic: the MAC passes
  EXPECT_EQ(h.charged_at_b("k1"), 0);
  EXPECT_EQ(h.b->stats().dropped_unknown_sender, from_c.size());
}

// --- replays of digest requests (issue #15, findings 2 and 5) --------------------------------

// a's digest requests to b, captured as the wire carries them.
std::vector<std::string> digest_requests_from_a(Harness& h) {
  std::vector<std::string> requests;
  for (int r = 0; r < 200 && requests.empty(); ++r) {
    for (const std::string& d : h.a_round()) {
      if (DecodeResult x = decode(d, h.keys); x.message && x.message->digest_reply_wanted) requests.push_back(d);
    }
  }
  return requests;
}

// How many datagrams b sends back to a for `datagrams` delivered to it.
size_t answers_from_b(Harness& h, const std::vector<std::string>& datagrams) {
  h.b_wire.sent.clear();
  h.deliver_to_b(datagrams);
  return h.b_wire.sent.size();
}

TEST(SpoofedGossip, AReplayedDigestRequestIsAnsweredOnce) {
  Harness h;
  for (int r = 0; r < 3; ++r) h.deliver_to_b(h.a_round());
  for (int i = 0; i < 50; ++i) {  // b retains batches a could ask for
    h.b->check("k" + std::to_string(i), 1, h.now);
    h.now += kRound;
    h.b->tick(h.now);
  }
  const std::vector<std::string> request = digest_requests_from_a(h);
  ASSERT_FALSE(request.empty());
  EXPECT_GT(answers_from_b(h, request), 0u);
  // The same authentic bytes, replayed a hundred times: not one datagram more, no scan.
  size_t replies = 0;
  for (int i = 0; i < 100; ++i) replies += answers_from_b(h, request);
  EXPECT_EQ(replies, 0u);
  EXPECT_EQ(h.b->stats().digests_ignored, 100u * request.size());
  // a's next request, a new message, is answered.
  EXPECT_GT(answers_from_b(h, digest_requests_from_a(h)), 0u);
}

TEST(SpoofedGossip, EachPartOfASplitDigestIsAnsweredOnce) {
  Harness h;
  GossipMessage m;
  m.sender = "a";
  m.sender_incarnation = 1;
  m.sender_address = "a:1";
  m.message_seq = 7;
  m.digest.emplace();
  m.digest_reply_wanted = true;
  for (const char* from : {"", "m"}) {  // two parts of one message: digests of [.., m) and [m, ..)
    m.digest_from = from;
    h.b_wire.sent.clear();
    h.b->receive(m, h.now);
    EXPECT_FALSE(h.b_wire.sent.empty()) << "part from \"" << from << "\"";
  }
  h.b_wire.sent.clear();
  h.b->receive(m, h.now);  // the second part again
  m.message_seq = 6;       // an older message
  h.b->receive(m, h.now);
  EXPECT_TRUE(h.b_wire.sent.empty());
  EXPECT_EQ(h.b->stats().digests_ignored, 2u);
}

// A member holding the key that asks for repairs as fast as it can draws at most twice
// max_repair_batches per push-pull interval.
TEST(SpoofedGossip, RepairsToOneSenderAreCappedPerPushPullInterval) {
  Harness h;
  for (int r = 0; r < 3; ++r) h.deliver_to_b(h.a_round());
  for (int i = 0; i < 20; ++i) {
    for (int k = 0; k < 64; ++k) h.b->check("k" + std::to_string(i * 64 + k), 1, h.now);
    h.now += kRound;
    h.b->tick(h.now);
  }
  ASSERT_GT(h.b->ledger().stats().retained_batches, 20u);
  GossipMessage m;
  m.sender = "a";
  m.sender_incarnation = 1;
  m.sender_address = "a:1";
  m.digest.emplace();  // a has seen nothing: everything b retains is missing
  const size_t max_repair = h.b->options().max_repair_batches;
  size_t batches = 0;
  for (uint64_t seq = 1000; seq < 1100; ++seq) {
    m.message_seq = seq;
    h.b_wire.sent.clear();
    h.b->receive(m, h.now);
    for (auto& [to, d] : h.b_wire.sent) batches += decode(d, h.keys).message->batches.size();
  }
  EXPECT_LE(batches, 2 * max_repair);
  EXPECT_GT(h.b->stats().repairs_capped, 0u);
}

// Under static membership a message must come from its sender's listed address, so an
// authentic datagram replayed (or forged, keyless) from another host changes nothing.
TEST(SpoofedGossip, AMessageFromAnotherAddressThanItsSendersIsDropped) {
  Harness h;
  for (int r = 0; r < 3; ++r) h.deliver_to_b(h.a_round());
  ASSERT_TRUE(h.a->check("k1", 30, h.now).allowed);
  const std::vector<std::string> captured = h.a_round();
  for (const std::string& d : captured) {
    DecodeResult r = decode(d, h.keys);
    ASSERT_TRUE(r.message);
    r.message->received_from = "10.6.6.6:7946";
    h.b->receive(*r.message, h.now);
  }
  EXPECT_EQ(h.charged_at_b("k1"), 0);
  EXPECT_EQ(h.b->stats().dropped_wrong_source, captured.size());
  for (const std::string& d : captured) {
    DecodeResult r = decode(d, h.keys);
    r.message->received_from = "a:1";  // where the peers file says a lives
    h.b->receive(*r.message, h.now);
  }
  EXPECT_EQ(h.charged_at_b("k1"), 30);
}

// Static membership: a peers file that lists a sender by IP holds it to that IP; one that lists
// it by host name accepts it from the address it gives, when the datagram came from there.
TEST(SpoofedGossip, StaticMembersAreHeldToTheirListedIpOrTrustedForAListedName) {
  Harness h;
  h.b->set_peers({{"a", "10.0.0.1:7946"}, {"b", "b:1"}, {"n", "node-n.example:7946"}}, h.now);
  auto from = [&](const std::string& sender, const std::string& address) {
    GossipMessage m;
    m.sender = sender;
    m.sender_incarnation = 1;
    m.sender_address = address;
    m.received_from = address;  // it did come from the address it gives
    m.message_seq = 1;
    return m;
  };
  const uint64_t dropped = h.b->stats().dropped_wrong_source;
  h.b->receive(from("a", "10.0.0.1:7946"), h.now);
  h.b->receive(from("n", "10.0.0.7:7946"), h.now);
  EXPECT_EQ(h.b->stats().dropped_wrong_source, dropped);
  h.b->receive(from("a", "10.0.0.66:7946"), h.now);  // not where the peers file says a lives
  EXPECT_EQ(h.b->stats().dropped_wrong_source, dropped + 1);
}

}  // namespace
}  // namespace tollgate
