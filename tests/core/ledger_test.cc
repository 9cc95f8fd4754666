#include "core/ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/key_table.h"
#include "support/test_rules.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

using testing::one_rule;
using testing::per_second;
constexpr int64_t kM = kMicrotokensPerToken;
constexpr int64_t kBurst = 1'000'000;

// A node as the ledger sees it: its key table and its ledger. All tests run at time 0 with a
// huge burst, so a key's balance is exactly kBurst minus what was charged to it.
struct Node {
  explicit Node(const std::string& id, uint64_t incarnation = 1, KeyTableOptions table_options = {},
                LedgerOptions ledger_options = {})
      : table(one_rule("*", Limit{Rate{1, 3600 * kNanosPerSecond}, kBurst, kBurst}), table_options),
        ledger(id, incarnation, ledger_options) {}

  // Admits `tokens` of each key locally and seals them into this node's next batch.
  BatchPtr admit_and_seal(const std::vector<std::pair<std::string, int64_t>>& admits, MonoNanos now = 0) {
    for (const auto& [key, tokens] : admits) EXPECT_TRUE(table.allow(key, tokens, now).allowed);
    std::vector<ConsumptionEntry> pending;
    table.take_pending(pending);
    return ledger.seal(std::move(pending), now);
  }
  MergeResult merge(const BatchPtr& b, MonoNanos now = 0) { return ledger.merge(b, table, now); }
  // Tokens charged to `key` so far (local and remote), to the nearest token: the rule refills one
  // token an hour, so the few milliseconds some tests advance refill a negligible fraction.
  // A cost-0 query first, so an evicted key comes back (at its remembered balance, if any).
  int64_t charged(const std::string& key) {
    table.allow(key, 0, 0);
    auto balance = table.balance_microtokens(key, 0);
    return balance ? (kBurst * kM - *balance + kM / 2) / kM : 0;
  }

  KeyTable table;
  Ledger ledger;
};

TEST(SeenWindow, InOrderSeqsAdvanceTheWatermark) {
  SeenWindow w;
  for (uint64_t s = 1; s <= 1000; ++s) EXPECT_TRUE(w.insert(s, nullptr));
  EXPECT_EQ(w.watermark, 1000u);
  EXPECT_EQ(w.highest(), 1000u);
  EXPECT_TRUE(w.contains(1));
  EXPECT_FALSE(w.contains(1001));
  EXPECT_FALSE(w.insert(500, nullptr));
  EXPECT_FALSE(w.insert(0, nullptr));  // seq 0 is never valid
}

TEST(SeenWindow, OutOfOrderSeqsFillTheGap) {
  SeenWindow w;
  EXPECT_TRUE(w.insert(3, nullptr));
  EXPECT_TRUE(w.insert(5, nullptr));
  EXPECT_EQ(w.watermark, 0u);
  EXPECT_EQ(w.highest(), 5u);
  EXPECT_FALSE(w.contains(4));
  EXPECT_TRUE(w.insert(1, nullptr));
  EXPECT_EQ(w.watermark, 1u);
  EXPECT_TRUE(w.insert(2, nullptr));
  EXPECT_EQ(w.watermark, 3u);
  EXPECT_TRUE(w.insert(4, nullptr));
  EXPECT_EQ(w.watermark, 5u);
  EXPECT_FALSE(w.insert(3, nullptr));
}

TEST(SeenWindow, SeqsThatSlideOutUnseenAreGivenUpAndCounted) {
  SeenWindow w;
  uint64_t abandoned = 0;
  EXPECT_TRUE(w.insert(2, &abandoned));  // seq 1 missing
  EXPECT_TRUE(w.insert(3, &abandoned));
  // Seq 300 is beyond the 256-seq window above watermark 0: seqs 1..44 slide out. Of those, 2 and
  // 3 were seen; the other 42 are given up.
  EXPECT_TRUE(w.insert(300, &abandoned));
  EXPECT_EQ(abandoned, 42u);
  EXPECT_EQ(w.watermark, 44u);
  EXPECT_TRUE(w.contains(1));  // given up counts as seen: a late copy is not charged
  EXPECT_FALSE(w.contains(45));
  EXPECT_EQ(w.highest(), 300u);
  // A jump far beyond the window gives up everything unseen in between.
  EXPECT_TRUE(w.insert(10'000, &abandoned));
  EXPECT_EQ(w.watermark, 10'000u - SeenWindow::kBits);
  EXPECT_EQ(abandoned, 42u + (10'000u - SeenWindow::kBits - 44u) - 1u);  // minus seq 300, seen
}

TEST(Ledger, SealCombinesEntriesAndSkipsEmptyRounds) {
  Ledger l("a", 1);
  EXPECT_EQ(l.seal({}, 0), nullptr);
  EXPECT_EQ(l.seal({{"k", 0}}, 0), nullptr);
  BatchPtr b = l.seal({{"y", 2}, {"x", 1}, {"y", 3}}, 0);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->origin, "a");
  EXPECT_EQ(b->incarnation, 1u);
  EXPECT_EQ(b->seq, 1u);                               // empty rounds used no seq
  std::vector<ConsumptionEntry> entries = b->entries;  // in no promised order
  std::sort(entries.begin(), entries.end(), [](const auto& p, const auto& q) { return p.key < q.key; });
  EXPECT_EQ(entries, (std::vector<ConsumptionEntry>{{"x", 1}, {"y", 5}}));
  EXPECT_EQ(l.seal({{"x", 1}}, 0)->seq, 2u);
  EXPECT_EQ(l.stats().sealed, 2u);
}

// Refunds (negative entries) are summed with the consumption of the same key; a key whose
// refunds cancel its consumption is left out, and a round of nothing else seals nothing.
TEST(Ledger, SealNetsRefundsAgainstConsumption) {
  Ledger l("a", 1);
  EXPECT_EQ(l.seal({{"k", 3}, {"k", -3}}, 0), nullptr);
  BatchPtr b = l.seal({{"x", 5}, {"y", -2}, {"x", -1}, {"z", 4}, {"z", -4}, {"w", -1}, {"w", -1}}, 0);
  ASSERT_NE(b, nullptr);
  std::vector<ConsumptionEntry> entries = b->entries;
  std::sort(entries.begin(), entries.end(), [](const auto& p, const auto& q) { return p.key < q.key; });
  EXPECT_EQ(entries, (std::vector<ConsumptionEntry>{{"w", -2}, {"x", 4}, {"y", -2}}));
}

// Property 1.
TEST(Ledger, DuplicateOutOfOrderAndRelayedBatchesAreChargedOnce) {
  Node a("a"), b("b"), c("c");
  BatchPtr b1 = a.admit_and_seal({{"k", 1}, {"j", 10}});
  BatchPtr b2 = a.admit_and_seal({{"k", 2}});
  BatchPtr b3 = a.admit_and_seal({{"k", 4}, {"j", 20}});

  // b hears them out of order and twice.
  for (const BatchPtr& x : {b3, b1, b3, b2, b1, b2}) b.merge(x);
  EXPECT_EQ(b.charged("k"), 7);
  EXPECT_EQ(b.charged("j"), 30);
  EXPECT_EQ(b.ledger.stats().applied, 3u);
  EXPECT_EQ(b.ledger.stats().duplicates, 3u);

  // c hears b2 from a directly, then everything b relays (b retains what it applied).
  EXPECT_EQ(c.merge(b2), MergeResult::kApplied);
  for (const BatchPtr& x : b.ledger.missing_for(c.ledger.digest())) c.merge(x);
  for (const BatchPtr& x : {b1, b2, b3}) EXPECT_EQ(c.merge(x), MergeResult::kDuplicate);
  EXPECT_EQ(c.charged("k"), 7);
  EXPECT_EQ(c.charged("j"), 30);

  // a's own batches relayed back to it are not charged a second time.
  for (const BatchPtr& x : {b1, b2, b3}) EXPECT_EQ(a.merge(x), MergeResult::kDuplicate);
  EXPECT_EQ(a.charged("k"), 7);
}

// Property 2.
TEST(Ledger, LostBatchIsRepairedByTheNextDigestExchange) {
  Node a("a"), b("b"), c("c");
  BatchPtr b1 = a.admit_and_seal({{"k", 1}});
  BatchPtr b2 = a.admit_and_seal({{"k", 2}, {"lost-only", 5}});
  BatchPtr b3 = a.admit_and_seal({{"k", 4}});
  b.merge(b1);
  b.merge(b3);  // b2 lost on the way to b
  c.merge(b2);  // ... but c heard it
  EXPECT_EQ(b.charged("k"), 5);

  // a's answer to b's digest is exactly what b lacks.
  std::vector<BatchPtr> repair = a.ledger.missing_for(b.ledger.digest());
  ASSERT_EQ(repair.size(), 1u);
  EXPECT_EQ(repair[0], b2);
  // Any node that has it can repair: c, which never talked to b before.
  std::vector<BatchPtr> from_c = c.ledger.missing_for(b.ledger.digest());
  ASSERT_EQ(from_c.size(), 1u);
  EXPECT_EQ(from_c[0], b2);

  for (const BatchPtr& x : repair) EXPECT_EQ(b.merge(x), MergeResult::kApplied);
  for (const BatchPtr& x : from_c) EXPECT_EQ(b.merge(x), MergeResult::kDuplicate);
  EXPECT_EQ(b.charged("k"), 7);
  EXPECT_EQ(b.charged("lost-only"), 5);
  EXPECT_TRUE(a.ledger.missing_for(b.ledger.digest()).empty());
  EXPECT_EQ(b.ledger.stats().abandoned, 0u);
}

TEST(Ledger, RepairCoversOriginsAndIncarnationsThePeerHasNeverSeen) {
  Node a("a"), a2("a", 2), b("b");
  BatchPtr old_life = a.admit_and_seal({{"k", 1}});
  BatchPtr new_life = a2.admit_and_seal({{"k", 2}});
  Node relay("relay");
  relay.merge(old_life);
  relay.merge(new_life);
  std::vector<BatchPtr> repair = relay.ledger.missing_for(b.ledger.digest());
  EXPECT_EQ(repair.size(), 2u);
  for (const BatchPtr& x : repair) b.merge(x);
  EXPECT_EQ(b.charged("k"), 3);
  EXPECT_TRUE(relay.ledger.missing_for(b.ledger.digest()).empty());
}

TEST(Ledger, APartOfADigestIsAnsweredOnlyForTheOriginsItCovers) {
  Node a("a"), m("m"), z("z"), relay("relay"), b("b");
  for (Node* o : {&a, &m, &z}) relay.merge(o->admit_and_seal({{"k", 1}}));
  // b's digest travels in two parts, split at "n": [start, "n") and ["n", end).
  const Digest empty = b.ledger.digest();
  std::vector<BatchPtr> first = relay.ledger.missing_for(empty, "", NodeId("n"));
  std::vector<BatchPtr> second = relay.ledger.missing_for(empty, "n", std::nullopt);
  ASSERT_EQ(first.size(), 2u);   // a, m
  ASSERT_EQ(second.size(), 1u);  // z
  EXPECT_EQ(second[0]->origin, "z");
  for (const BatchPtr& x : first) EXPECT_LT(x->origin, "n");
}

TEST(Ledger, ExpiredBatchesCanNoLongerRepairAndTheGapIsGivenUpNotDoubleCharged) {
  LedgerOptions options;
  options.retention_ns = 10 * kNanosPerSecond;
  Node a("a", 1, {}, options), b("b");
  BatchPtr lost = a.admit_and_seal({{"k", 3}}, 0);
  a.ledger.expire(11 * kNanosPerSecond);
  EXPECT_EQ(a.ledger.stats().retained_batches, 0u);
  EXPECT_TRUE(a.ledger.missing_for(b.ledger.digest()).empty());
  // a keeps sending; once the gap slides out of b's window it is given up and counted.
  for (uint64_t i = 0; i < SeenWindow::kBits + 1; ++i) b.merge(a.admit_and_seal({{"j", 1}}, 0));
  EXPECT_EQ(b.ledger.stats().abandoned, 1u);
  EXPECT_EQ(b.merge(lost), MergeResult::kDuplicate);  // too late: never charged twice
  EXPECT_EQ(b.charged("k"), 0);                       // the cluster over-admitted 3 tokens here
}

// Property 3.
TEST(Ledger, EvictedKeyIsNotRechargedByAStaleBatch) {
  for (size_t remembered : {size_t(0), size_t(100)}) {
    KeyTableOptions small;
    small.max_keys = 1;
    small.max_remembered = remembered;
    Node a("a"), b("b", 1, small);
    BatchPtr stale = a.admit_and_seal({{"x", 5}});
    ASSERT_EQ(b.merge(stale), MergeResult::kApplied);
    EXPECT_EQ(b.charged("x"), 5);
    b.table.allow("y", 1, 0);  // evicts x
    ASSERT_EQ(b.table.stats().evictions, 1u);
    EXPECT_EQ(b.merge(stale), MergeResult::kDuplicate);
    for (const BatchPtr& x : a.ledger.missing_for(b.ledger.digest())) b.merge(x);
    // Remembered: x comes back at its balance. Not remembered: full. Never charged again.
    EXPECT_EQ(b.charged("x"), remembered ? 5 : 0) << "max_remembered=" << remembered;
  }
}

// Property 4.
TEST(Ledger, RestartedOriginIsNeitherDoubleCountedNorForgotten) {
  Node a("a", 1), b("b");
  BatchPtr old1 = a.admit_and_seal({{"k", 1}});
  BatchPtr old2 = a.admit_and_seal({{"k", 2}});
  BatchPtr old3 = a.admit_and_seal({{"k", 4}});
  b.merge(old1);
  b.merge(old2);  // old3 still in flight when a restarts

  Node a2("a", 2);  // a restarted: higher incarnation, seqs from 1 again
  BatchPtr new1 = a2.admit_and_seal({{"k", 8}});
  EXPECT_EQ(new1->seq, 1u);
  EXPECT_EQ(b.merge(new1), MergeResult::kApplied);  // same seq as old1, but not a duplicate
  EXPECT_EQ(b.merge(old3), MergeResult::kApplied);  // the old life is not forgotten
  EXPECT_EQ(b.merge(old1), MergeResult::kDuplicate);
  EXPECT_EQ(b.merge(new1), MergeResult::kDuplicate);
  EXPECT_EQ(b.charged("k"), 15);

  // The restarted node learns its past life's consumption from b, once.
  for (const BatchPtr& x : b.ledger.missing_for(a2.ledger.digest())) a2.merge(x);
  for (const BatchPtr& x : {old1, old2, old3}) EXPECT_EQ(a2.merge(x), MergeResult::kDuplicate);
  EXPECT_EQ(a2.charged("k"), 15);

  // Two restarts later, the first life is older than anything b tracks: dropped and counted.
  Node a3("a", 3);
  b.merge(a3.admit_and_seal({{"k", 16}}));
  Node a1_again("a", 1);
  a1_again.admit_and_seal({{"k", 100}});
  BatchPtr ghost = a1_again.admit_and_seal({{"k", 100}});  // b tracks lives 3 and 2 only
  EXPECT_EQ(b.merge(ghost), MergeResult::kStaleIncarnation);
  EXPECT_EQ(b.ledger.stats().stale, 1u);
  EXPECT_EQ(b.charged("k"), 31);
}

TEST(Ledger, BatchesClaimingOurIdThatWeNeverSealedAreCounted) {
  Node a("a", 5), impostor_same_life("a", 5), impostor_newer("a", 6);
  a.admit_and_seal({{"k", 1}});
  impostor_same_life.admit_and_seal({{"k", 1}});
  BatchPtr forged_seq = impostor_same_life.admit_and_seal({{"k", 1}});  // seq 2: a only sealed 1
  EXPECT_EQ(a.merge(forged_seq), MergeResult::kSelf);
  EXPECT_EQ(a.merge(impostor_newer.admit_and_seal({{"k", 1}})), MergeResult::kSelf);
  EXPECT_EQ(a.ledger.stats().self_conflicts, 2u);
  EXPECT_EQ(a.charged("k"), 1);
}

TEST(Ledger, OriginsBeyondTheLimitAreDroppedAndCountedUntilOneIsForgotten) {
  LedgerOptions options;
  options.max_origins = 3;  // self + 2 others
  Node b("b", 1, {}, options);
  Node x("x"), y("y"), z("z");
  EXPECT_EQ(b.merge(x.admit_and_seal({{"k", 1}})), MergeResult::kApplied);
  EXPECT_EQ(b.merge(y.admit_and_seal({{"k", 1}})), MergeResult::kApplied);
  EXPECT_EQ(b.merge(z.admit_and_seal({{"k", 1}})), MergeResult::kTooManyOrigins);
  EXPECT_EQ(b.ledger.stats().origin_overflow, 1u);
  EXPECT_EQ(b.charged("k"), 2);
  b.ledger.forget_origin("x");
  EXPECT_EQ(b.merge(z.admit_and_seal({{"k", 1}})), MergeResult::kApplied);
  EXPECT_EQ(b.ledger.stats().origins, 3u);
}

// Property 5: 1,000 origins x 10,000 hot keys, one receiver, as the simulator will run it.
TEST(Ledger, MemoryIsBoundedByOriginsAndRetentionNotKeysTimesNodes) {
  constexpr int kOrigins = 1000, kKeys = 10'000, kRounds = 12, kKeysPerBatch = 20;
  LedgerOptions options;
  options.max_retained_bytes = 1 << 20;
  Node receiver("receiver", 1, {}, options);
  std::vector<Ledger> origins;
  origins.reserve(kOrigins);
  for (int i = 0; i < kOrigins; ++i) origins.emplace_back("node-" + std::to_string(i), 1);

  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> pick(0, kKeys - 1);
  int64_t total = 0;
  uint64_t total_entries = 0;
  size_t bytes_after_first_rounds = 0;
  for (int round = 0; round < kRounds; ++round) {
    const MonoNanos now = round * 50 * kNanosPerMilli;
    for (Ledger& o : origins) {
      std::vector<ConsumptionEntry> entries;
      for (int k = 0; k < kKeysPerBatch; ++k) entries.push_back({"hot:" + std::to_string(pick(rng)), 1});
      total += kKeysPerBatch;
      BatchPtr batch = o.seal(std::move(entries), now);
      total_entries += batch->entries.size();  // a key picked twice is one entry of 2 tokens
      ASSERT_EQ(receiver.ledger.merge(batch, receiver.table, now), MergeResult::kApplied);
    }
    receiver.ledger.expire(now);
    if (round == 2) bytes_after_first_rounds = receiver.ledger.stats().bytes;
  }
  const LedgerStats s = receiver.ledger.stats();
  EXPECT_EQ(s.origins, size_t(kOrigins) + 1);
  EXPECT_EQ(s.entries_applied, total_entries);
  // Retained batches respect their cap; windows cost a few hundred bytes an origin.
  EXPECT_LE(s.retained_bytes, options.max_retained_bytes);
  EXPECT_LE(s.bytes, s.retained_bytes + s.retained_batches * 64 + size_t(kOrigins + 1) * 512);
  // Once the cap is reached, more rounds do not grow the ledger.
  EXPECT_LE(s.bytes, bytes_after_first_rounds * 11 / 10);
  // What a per-(key, origin) counter would need just for its counters: far more.
  EXPECT_LT(s.bytes, size_t(kOrigins) * kKeys * sizeof(int64_t) / 20);
  // Every admitted token was charged exactly once.
  int64_t charged = 0;
  for (int k = 0; k < kKeys; ++k) charged += receiver.charged("hot:" + std::to_string(k));
  EXPECT_EQ(charged, total);
}

}  // namespace
}  // namespace tollgate
