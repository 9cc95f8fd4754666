// Concurrency leases at one node (LeaseTable) and the view of the other members' counts
// (InflightView): exactness under threads, ids, bounds, expiry, and counts as state.
#include "core/lease_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/inflight_view.h"
#include "core/membership.h"
#include "core/random.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

std::shared_ptr<const RuleSet> rules(int64_t limit, int64_t ttl_ns = 60 * kNanosPerSecond) {
  return std::make_shared<RuleSet>(std::vector<Rule>{}, std::nullopt, nullptr,
                                   std::vector<ConcurrencyRule>{{"job:*", limit, ttl_ns, 0}});
}

LeaseTable::IdSource seeded(uint64_t seed) {
  auto r = std::make_shared<SplitMix64>(seed);
  auto mu = std::make_shared<std::mutex>();
  return [r, mu](uint8_t* out, size_t n) {
    std::lock_guard lock(*mu);
    for (size_t i = 0; i < n; ++i) out[i] = uint8_t(r->next_u64());
  };
}

TEST(LeaseTable, GrantsUpToTheLimitAndAReleaseFreesExactlyItsSlots) {
  LeaseTable t({}, seeded(1));
  t.set_rules(rules(3));
  const LeaseGrant a = t.acquire("job:a", 2, 0, 0);
  ASSERT_EQ(a.outcome, LeaseOutcome::kGranted);
  EXPECT_EQ(a.expires_ns, 60 * kNanosPerSecond);
  EXPECT_EQ(t.acquire("job:a", 2, 0, 0).outcome, LeaseOutcome::kOverLimit);
  EXPECT_EQ(t.acquire("job:a", 4, 0, 0).outcome, LeaseOutcome::kNever);
  const LeaseGrant b = t.acquire("job:a", 1, 0, 0);
  ASSERT_EQ(b.outcome, LeaseOutcome::kGranted);
  EXPECT_EQ(b.in_flight, 3);
  EXPECT_EQ(t.acquire("other", 1, 0, 0).outcome, LeaseOutcome::kUnlimited);
  EXPECT_TRUE(t.release(a.id));
  EXPECT_FALSE(t.release(a.id));
  EXPECT_EQ(t.in_flight("job:a"), 1);
  LeaseId wrong = b.id;
  wrong.bytes[15] ^= 1;  // one bit off frees nothing
  EXPECT_FALSE(t.release(wrong));
  EXPECT_EQ(t.in_flight("job:a"), 1);
  EXPECT_EQ(t.stats().held, 1u);
  EXPECT_EQ(t.stats().unknown, 2u);
}

// Issue 40's per-rule metric: each rule in force sums its keys' counts (own and heard of) and
// its own leases; a reload that moves a key to another rule moves its count with it.
TEST(LeaseTable, RuleLeasesSumEachRulesKeysAndFollowAReload) {
  LeaseTable t({}, seeded(1));
  EXPECT_TRUE(t.rule_leases().empty()) << "no rules, nothing to list";
  const auto two = [](const char* second) {
    return std::make_shared<RuleSet>(
        std::vector<Rule>{}, std::nullopt, nullptr,
        std::vector<ConcurrencyRule>{{"job:*", 10, kNanosPerSecond, 1}, {second, 10, kNanosPerSecond, 2}});
  };
  t.set_rules(two("db"));
  ASSERT_EQ(t.acquire("job:a", 2, 0, 0).outcome, LeaseOutcome::kGranted);
  ASSERT_EQ(t.acquire("job:b", 1, 0, 0).outcome, LeaseOutcome::kGranted);
  t.add_remote("job:a", 3);
  t.add_remote("db", 4);
  using Row = std::pair<std::string, std::pair<int64_t, int64_t>>;
  auto rows = [&] {
    std::vector<Row> out;
    for (const auto& [label, l] : t.rule_leases()) out.push_back({label, {l.in_flight, l.held}});
    return out;
  };
  EXPECT_EQ(rows(), (std::vector<Row>{{"job:*", {6, 3}}, {"db", {4, 0}}}));
  // "job:b" gets a rule of its own: its count moves there at the next walk.
  t.set_rules(two("job:b"));
  EXPECT_EQ(rows(), (std::vector<Row>{{"job:*", {5, 2}}, {"job:b", {1, 1}}}));
}

TEST(LeaseTable, RemoteCountsShareTheLimit) {
  LeaseTable t({}, seeded(1));
  t.set_rules(rules(5));
  t.add_remote("job:a", 4);
  EXPECT_EQ(t.acquire("job:a", 2, 0, 0).outcome, LeaseOutcome::kOverLimit);
  EXPECT_EQ(t.acquire("job:a", 1, 0, 0).outcome, LeaseOutcome::kGranted);
  t.add_remote("job:a", -4);
  EXPECT_EQ(t.in_flight("job:a"), 1);
}

TEST(LeaseTable, ChangesAreTakenOnceWithTheOwnCountAndZeroesIncluded) {
  LeaseTable t({}, seeded(1));
  t.set_rules(rules(5));
  const LeaseGrant a = t.acquire("job:a", 2, 0, 0);
  t.acquire("job:b", 1, 0, 0);
  t.add_remote("job:c", 3);  // not ours: not a change
  std::vector<InflightEntry> out;
  t.take_changes(&out);
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.key < y.key; });
  EXPECT_EQ(out, (std::vector<InflightEntry>{{"job:a", 2}, {"job:b", 1}}));
  out.clear();
  t.take_changes(&out);
  EXPECT_TRUE(out.empty());
  t.release(a.id);
  t.take_changes(&out);
  EXPECT_EQ(out, (std::vector<InflightEntry>{{"job:a", 0}}));
  EXPECT_EQ(t.own_counts(), (std::vector<InflightEntry>{{"job:b", 1}}));
}

TEST(LeaseTable, LeasesExpireAtTheirTtlUnlessRenewedAndRenewalsAreBounded) {
  LeaseTableOptions o;
  o.max_ttl_ns = 10 * kNanosPerSecond;
  LeaseTable t(o, seeded(1));
  t.set_rules(rules(5, kNanosPerSecond));
  const LeaseGrant a = t.acquire("job:a", 1, 0, 0);                       // the rule's 1 s
  const LeaseGrant b = t.acquire("job:a", 1, 3600 * kNanosPerSecond, 0);  // capped at 10 s
  EXPECT_EQ(b.expires_ns, 10 * kNanosPerSecond);
  for (int i = 1; i <= 100; ++i) ASSERT_TRUE(t.renew(a.id, 0, i * 10 * kNanosPerMilli));  // stale heap entries
  EXPECT_EQ(t.expire(kNanosPerSecond + 500 * kNanosPerMilli, 100), 0u) << "renewed until 2 s";
  EXPECT_EQ(t.expire(2 * kNanosPerSecond, 100), 1u);
  EXPECT_FALSE(t.renew(a.id, 0, 2 * kNanosPerSecond));
  EXPECT_EQ(t.in_flight("job:a"), 1);
  EXPECT_EQ(t.expire(10 * kNanosPerSecond, 100), 1u);
  EXPECT_EQ(t.in_flight("job:a"), 0);
  EXPECT_EQ(t.stats().expired, 2u);
  EXPECT_EQ(t.stats().keys, 1u) << "job:a's change to 0 is still to be sealed";
  std::vector<InflightEntry> out;
  t.take_changes(&out);
  EXPECT_EQ(t.stats().keys, 0u);
}

TEST(LeaseTable, RefusesBeyondMaxLeasesAndBadInput) {
  LeaseTableOptions o;
  o.max_leases = 2;
  LeaseTable t(o, seeded(1));
  t.set_rules(rules(100));
  EXPECT_TRUE(t.acquire("job:a", 1, 0, 0).granted());
  EXPECT_TRUE(t.acquire("job:b", 1, 0, 0).granted());
  EXPECT_EQ(t.acquire("job:c", 1, 0, 0).outcome, LeaseOutcome::kTooManyLeases);
  EXPECT_EQ(t.acquire("job:c", 0, 0, 0).outcome, LeaseOutcome::kInvalid);
  EXPECT_EQ(t.acquire("job:c", 1, -1, 0).outcome, LeaseOutcome::kInvalid);
  EXPECT_EQ(t.acquire(std::string(257, 'j'), 1, 0, 0).outcome, LeaseOutcome::kInvalid);
}

// Envoy's stream-done call names the descriptor, not the lease: a release by key frees the
// key's oldest lease by key, whole, and a release owed by a call that took nothing is settled
// first, freeing nobody's lease.
TEST(LeaseTable, ReleasesByKeyFreeTheOldestAndSettleWhatIsOwedFirst) {
  LeaseTable t({}, seeded(1));
  t.set_rules(rules(3));
  const LeaseGrant a = t.acquire_anonymous("job:e", 1, 0, 0);
  const LeaseGrant b = t.acquire_anonymous("job:e", 2, 0, 10);
  ASSERT_EQ(a.outcome, LeaseOutcome::kGranted);
  ASSERT_EQ(b.outcome, LeaseOutcome::kGranted);
  ASSERT_EQ(t.acquire_anonymous("job:e", 1, 0, 20).outcome, LeaseOutcome::kOverLimit);
  t.owe_release("job:e", 1, 20);  // the denied call's own release is still to come

  AnonymousRelease r = t.release_anonymous("job:e", 1, 30);  // settles the denied call's
  EXPECT_EQ(r.owed, 1);
  EXPECT_EQ(r.released, 0);
  EXPECT_EQ(t.in_flight("job:e"), 3) << "a denied stream's end freed a slot it never had";
  r = t.release_anonymous("job:e", 1, 40);  // the oldest: a
  EXPECT_EQ(r.released, 1);
  EXPECT_EQ(t.in_flight("job:e"), 2);
  EXPECT_FALSE(t.release(a.id)) << "a was the one freed";
  r = t.release_anonymous("job:e", 2, 50);
  EXPECT_EQ(r.released, 2);
  EXPECT_EQ(t.in_flight("job:e"), 0);
  r = t.release_anonymous("job:e", 1, 60);  // nothing left: counted, nothing else happens
  EXPECT_FALSE(r.matched());
  const LeaseStats st = t.stats();
  EXPECT_EQ(st.anonymous_acquired, 2u);
  EXPECT_EQ(st.anonymous_released, 2u);
  EXPECT_EQ(st.owed_settled, 1u);
  EXPECT_EQ(st.anonymous_unmatched, 1u);
  EXPECT_EQ(st.held, 0u);
}

// An owed release lapses after kOwedReleaseNs (its stream's end never came), a lease by key that
// expired is skipped, and a released-by-id one too; the queues of keys nobody releases are swept.
TEST(LeaseTable, OwedReleasesLapseAndExpiredLeasesByKeyAreSkipped) {
  LeaseTable t({}, seeded(2));
  t.set_rules(rules(5, kNanosPerSecond));
  t.owe_release("job:f", 2, 0);
  const LeaseGrant a = t.acquire_anonymous("job:f", 1, 0, 0);               // expires at 1 s
  const LeaseGrant b = t.acquire_anonymous("job:f", 1, 0, 0);               // released by id below
  const LeaseGrant c = t.acquire_anonymous("job:f", 1, 0, kOwedReleaseNs);  // at 11 s
  ASSERT_TRUE(a.granted() && b.granted() && c.granted());
  EXPECT_TRUE(t.release(b.id));
  EXPECT_EQ(t.expire(2 * kNanosPerSecond, 100), 1u);  // a
  const AnonymousRelease r = t.release_anonymous("job:f", 1, kOwedReleaseNs + 1);
  EXPECT_EQ(r.owed, 0) << "owed at 0, lapsed at 10 s";
  EXPECT_EQ(r.released, 1) << "c, past the expired a and the released b";
  EXPECT_EQ(t.in_flight("job:f"), 0);
  // A key owed a release that never comes, and one whose only lease expires: swept.
  t.owe_release("job:g", 1, 20 * kNanosPerSecond);
  ASSERT_TRUE(t.acquire_anonymous("job:h", 1, 0, 20 * kNanosPerSecond).granted());
  EXPECT_EQ(t.stats().queued_keys, 2u);  // g and h (f's went with its last release)
  t.expire(40 * kNanosPerSecond, 100);
  EXPECT_EQ(t.stats().queued_keys, 0u);
  EXPECT_FALSE(t.release_anonymous("job:g", 1, 60 * kNanosPerSecond).matched());
  EXPECT_FALSE(t.release_anonymous("job:h", 1, 60 * kNanosPerSecond).matched());
}

// proportional: a side that reaches half the members it knows grants half the limit (floored),
// so two halves of a partition hold the limit together; the whole limit once all are back.
TEST(LeaseTable, UnderProportionalASideGrantsItsShareOfTheLimit) {
  LeaseTable t({}, seeded(4));
  t.set_rules(rules(5));
  t.set_share(2, 4);  // floor(5 x 2/4) = 2
  EXPECT_TRUE(t.acquire("job:p", 2, 0, 0).granted());
  const LeaseGrant over = t.acquire("job:p", 1, 0, 0);
  EXPECT_EQ(over.outcome, LeaseOutcome::kOverLimit);
  EXPECT_EQ(over.limit, 5) << "the rule's limit is reported, the share is what is granted";
  t.set_share(1, 4);  // floor(5/4) = 1: held beyond the share are not revoked, nothing more granted
  EXPECT_EQ(t.acquire("job:q", 2, 0, 0).outcome, LeaseOutcome::kOverLimit);
  t.set_share(4, 4);  // healed
  EXPECT_TRUE(t.acquire("job:p", 3, 0, 0).granted());
  EXPECT_EQ(t.in_flight("job:p"), 5);
}

// Envoy's calls come on many threads: takes, owed releases and releases by key, interleaved on
// a few keys, never hold more than the limit, and once every call has had its release nothing is
// held or owed (each call holds or owes its slot, and each release settles one of either).
TEST(LeaseTable, ThreadsTakingAndReleasingByKeyEndWithNothingHeldOrOwed) {
  LeaseTable t({}, seeded(5));
  t.set_rules(rules(3));
  std::atomic<bool> over_limit{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 2000; ++i) {
        const std::string key = "job:" + std::to_string((w + i) % 3);
        const LeaseGrant g = t.acquire_anonymous(key, 1, 0, 0);
        if (g.outcome == LeaseOutcome::kGranted) {
          if (g.in_flight > 3) over_limit = true;
        } else {
          t.owe_release(key, 1, 0);
        }
        t.release_anonymous(key, 1, 0);  // the call's end, whatever it got
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_FALSE(over_limit.load());
  for (int k = 0; k < 3; ++k) EXPECT_EQ(t.in_flight("job:" + std::to_string(k)), 0);
  const LeaseStats st = t.stats();
  EXPECT_EQ(st.held, 0u);
  EXPECT_EQ(st.queued_keys, 0u) << "an owed release or a queue was left behind";
  EXPECT_EQ(st.anonymous_unmatched, 0u);
}

// A flood of denials over distinct keys records at most max_leases owed releases.
TEST(LeaseTable, OwedReleasesAreBounded) {
  LeaseTableOptions o;
  o.max_leases = 4;
  LeaseTable t(o, seeded(3));
  t.set_rules(rules(1));
  for (int i = 0; i < 10; ++i) t.owe_release("job:" + std::to_string(i), 1, 0);
  EXPECT_EQ(t.stats().owed_dropped, 6u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.release_anonymous("job:" + std::to_string(i), 1, 1).owed, 1);
  EXPECT_FALSE(t.release_anonymous("job:9", 1, 1).matched());
}

TEST(LeaseTable, IdsAreHexRoundTripsAndAnythingElseIsRefused) {
  LeaseTable t({}, seeded(7));
  t.set_rules(rules(100));
  const LeaseGrant a = t.acquire("job:a", 1, 0, 0), b = t.acquire("job:a", 1, 0, 0);
  EXPECT_NE(a.id, b.id);
  const std::string hex = a.id.hex();
  EXPECT_EQ(hex.size(), 32u);
  EXPECT_EQ(LeaseId::parse(hex), a.id);
  EXPECT_FALSE(LeaseId::parse(hex.substr(1)));
  EXPECT_FALSE(LeaseId::parse(std::string(32, 'g')));
  EXPECT_FALSE(LeaseId::parse("ff" + hex.substr(2))) << "no such shard";
  std::string upper = hex;
  for (char& c : upper) c = char(toupper(c));
  if (upper != hex) {
    EXPECT_FALSE(LeaseId::parse(upper)) << "one spelling only";
  }
}

// Exactly the limit from many threads at once, whatever the interleaving (TSan runs this too).
TEST(LeaseTable, ThreadsNeverHoldMoreThanTheLimitTogether) {
  LeaseTable t({}, seeded(3));
  t.set_rules(rules(10));
  std::atomic<int> held{0}, peak{0}, granted{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        const LeaseGrant g = t.acquire("job:hot", 1, 0, 0);
        if (g.outcome != LeaseOutcome::kGranted) continue;
        granted.fetch_add(1);
        const int now = held.fetch_add(1) + 1;
        int p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {
        }
        held.fetch_sub(1);
        ASSERT_TRUE(t.release(g.id));
      }
    });
  }
  // A scraper beside them (/metrics: rule_leases) and reloads (set_rules): never above the
  // limit, never below 0, and no race (CI runs this under TSan).
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) {
      for (const auto& [label, l] : t.rule_leases()) {
        EXPECT_EQ(label, "job:*");
        EXPECT_GE(l.held, 0);
        EXPECT_LE(l.in_flight, 10);
      }
      t.set_rules(rules(10));
    }
  });
  for (auto& th : threads) th.join();
  done.store(true);
  scraper.join();
  EXPECT_LE(peak.load(), 10);
  EXPECT_GT(granted.load(), 0);
  EXPECT_EQ(t.in_flight("job:hot"), 0);
  EXPECT_EQ(t.stats().held, 0u);
}

// --- InflightView ------------------------------------------------------------------------------

struct ViewFixture : ::testing::Test {
  ViewFixture()
      : table({}, seeded(1)), members("me", "10.0.0.9:1", 1, MembershipOptions{}), view("me", 1000, kNanosPerSecond) {
    table.set_rules(rules(100));
    members.set_peers({{"a", "10.0.0.1:1"}, {"b", "10.0.0.2:1"}}, 0);
    members.merge({{"a", "10.0.0.1:1", 5, 1, false}, {"b", "10.0.0.2:1", 5, 1, false}}, 0);
  }
  void apply(const std::string& origin, uint64_t life, uint64_t seq, std::vector<InflightEntry> counts,
             bool refresh = false, std::string from = {}, std::string until = {}) {
    Batch b;
    b.origin = origin;
    b.incarnation = life;
    b.seq = seq;
    b.counts = std::make_shared<const LeaseCounts>(LeaseCounts{std::move(counts), refresh, from, until});
    view.apply(b, members, table, now);
  }
  LeaseTable table;
  Membership members;
  InflightView view;
  MonoNanos now = 0;
};

TEST_F(ViewFixture, TheNewestCountOfAnOriginWinsInAnyOrderAndTwiceIsOnce) {
  apply("a", 5, 2, {{"job:x", 3}});
  apply("a", 5, 4, {{"job:x", 0}});
  apply("a", 5, 3, {{"job:x", 7}});  // late: older than the row
  apply("a", 5, 4, {{"job:x", 0}});  // again
  EXPECT_EQ(table.in_flight("job:x"), 0);
  apply("b", 5, 9, {{"job:x", 2}});
  apply("a", 5, 5, {{"job:x", 1}});
  EXPECT_EQ(table.in_flight("job:x"), 3) << "origins add up";
  EXPECT_EQ(view.stats().stale, 2u);
}

TEST_F(ViewFixture, AReleaseSeenBeforeTheCountItReplacesIsKept) {
  apply("a", 5, 4, {{"job:x", 0}});  // a key never seen at 0: kept, so that
  apply("a", 5, 3, {{"job:x", 1}});  // the older count that arrives later does not count
  EXPECT_EQ(table.in_flight("job:x"), 0);
}

TEST_F(ViewFixture, ANewLifeDropsTheOldOnesCountsAndAnOlderLifeIsIgnored) {
  apply("a", 5, 10, {{"job:x", 3}, {"job:y", 1}});
  apply("a", 6, 1, {{"job:y", 2}});
  EXPECT_EQ(table.in_flight("job:x"), 0);
  EXPECT_EQ(table.in_flight("job:y"), 2);
  apply("a", 5, 11, {{"job:x", 9}});
  EXPECT_EQ(table.in_flight("job:x"), 0);
}

TEST_F(ViewFixture, ARefreshZeroesUnlistedKeysOfItsRangeOnly) {
  apply("a", 5, 1, {{"job:a", 1}, {"job:m", 2}, {"job:z", 3}});
  apply("a", 5, 2, {{"job:n", 1}}, /*refresh=*/true, "job:b", "job:y");  // [job:b, job:y)
  EXPECT_EQ(table.in_flight("job:a"), 1) << "before the range";
  EXPECT_EQ(table.in_flight("job:m"), 0);
  EXPECT_EQ(table.in_flight("job:n"), 1);
  EXPECT_EQ(table.in_flight("job:z"), 3) << "at or after its end";
  apply("a", 5, 3, {}, /*refresh=*/true);  // everything: none held
  EXPECT_EQ(table.in_flight("job:a") + table.in_flight("job:n") + table.in_flight("job:z"), 0);
}

TEST_F(ViewFixture, AFailedOriginStopsCountingAndCountsAgainWhenBack) {
  apply("a", 5, 1, {{"job:x", 4}});
  apply("b", 5, 1, {{"job:x", 1}});
  now = 3 * kNanosPerSecond;  // past fail_after: both unreachable
  members.tick(now);
  view.recount(members, table);
  EXPECT_EQ(table.in_flight("job:x"), 0);
  EXPECT_EQ(view.stats().freed_with_failed, 5u);
  members.merge({{"a", "10.0.0.1:1", 5, 2, false}}, now);
  view.recount(members, table);
  EXPECT_EQ(table.in_flight("job:x"), 4);
  view.forget("a", table);
  EXPECT_EQ(table.in_flight("job:x"), 0);
}

TEST_F(ViewFixture, RowsAreBoundedAndZeroRowsExpire) {
  InflightView small("me", 2, kNanosPerSecond);
  Batch b;
  b.origin = "a";
  b.incarnation = 5;
  b.seq = 1;
  b.counts =
      std::make_shared<const LeaseCounts>(LeaseCounts{{{"job:1", 1}, {"job:2", 0}, {"job:3", 1}}, false, {}, {}});
  small.apply(b, members, table, 0);
  EXPECT_EQ(small.stats().rows, 2u);
  EXPECT_EQ(small.stats().rows_dropped, 1u);
  small.expire(2 * kNanosPerSecond);
  EXPECT_EQ(small.stats().rows, 1u) << "the row at 0 went, the row at 1 stays";
  EXPECT_EQ(table.in_flight("job:1"), 1);
}

}  // namespace
}  // namespace tollgate
