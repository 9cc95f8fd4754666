// The arrival stream the local back end replays (sim/arrivals.h): rate, key popularity, spread
// over live nodes, determinism; and the fault settings it gives each daemon (plan_faults).
#include "arrivals.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "local_cluster.h"

namespace tollgate::sim {
namespace {

LoadSpec load(double rate, size_t keys = 1, LoadSpec::Spread spread = LoadSpec::Spread::kUniform,
              LoadSpec::Distribution d = LoadSpec::Distribution::kUniform) {
  LoadSpec l;
  l.rate_per_sec = rate;
  l.keys = keys;
  l.spread = spread;
  l.distribution = d;
  return l;
}

// Arrivals before `until_ns`, all nodes in `up`.
std::vector<Arrival> take(ArrivalStream& s, int64_t until_ns, const std::vector<bool>& up) {
  std::vector<Arrival> out;
  while (s.peek_time() < until_ns) out.push_back(s.next(up));
  return out;
}

TEST(Arrivals, PoissonAtTheRateInIncreasingTime) {
  ArrivalStream s(load(500), 1);
  const auto a = take(s, 20 * kNanosPerSecond, std::vector<bool>(8, true));
  EXPECT_NEAR(double(a.size()), 10'000, 300);  // sd 100
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end(), [](const Arrival& x, const Arrival& y) { return x.t_ns < y.t_ns; }));
  EXPECT_GT(a.front().t_ns, 0);
}

TEST(Arrivals, TheSameSeedGivesTheSameStreamAnotherSeedAnother) {
  const std::vector<bool> up(4, true);
  ArrivalStream a(load(100, 10), 7), b(load(100, 10), 7), c(load(100, 10), 8);
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    const Arrival x = a.next(up), y = b.next(up), z = c.next(up);
    ASSERT_EQ(std::tie(x.t_ns, x.node, x.key), std::tie(y.t_ns, y.node, y.key));
    differ += x.t_ns != z.t_ns;
  }
  EXPECT_GT(differ, 190);
}

// Issue 40: a lease's hold comes from a stream of its own, so the same seed offers the same
// arrivals (times, nodes, keys) whether they check or take leases; holds are exponential with
// the mean asked for, or fixed.
TEST(Arrivals, LeaseHoldsLeaveTheArrivalsAsTheyWere) {
  const std::vector<bool> up(4, true);
  LoadSpec leases = load(100, 10);
  leases.kind = LoadSpec::Kind::kLeases;
  leases.hold_mean_ns = 2 * kNanosPerSecond;
  leases.never_release = 0.1;
  ArrivalStream checks(load(100, 10), 7), held(leases, 7);
  double sum = 0;
  int never = 0;
  constexpr int kN = 20'000;
  for (int i = 0; i < kN; ++i) {
    const Arrival x = checks.next(up), y = held.next(up);
    ASSERT_EQ(std::tie(x.t_ns, x.node, x.key), std::tie(y.t_ns, y.node, y.key)) << i;
    EXPECT_EQ(x.hold_ns, 0);
    ASSERT_GE(y.hold_ns, 1);
    sum += double(y.hold_ns);
    never += y.never_release;
  }
  EXPECT_NEAR(sum / kN / double(kNanosPerSecond), 2.0, 0.05);  // sd of the mean 0.014
  EXPECT_NEAR(double(never) / kN, 0.1, 0.01);
  leases.hold = LoadSpec::Hold::kFixed;
  ArrivalStream fixed(leases, 7);
  EXPECT_EQ(fixed.next(up).hold_ns, 2 * kNanosPerSecond);
}

TEST(Arrivals, UniformSpreadUsesOnlyLiveNodesEvenly) {
  ArrivalStream s(load(1000), 3);
  const std::vector<bool> up = {true, false, true, true};
  std::vector<int> per_node(4);
  for (const Arrival& a : take(s, 10 * kNanosPerSecond, up)) {
    ASSERT_FALSE(a.dropped);
    ++per_node[a.node];
  }
  EXPECT_EQ(per_node[1], 0);
  for (size_t i : {0u, 2u, 3u}) EXPECT_NEAR(per_node[i], 10'000 / 3, 300) << "node " << i;
}

TEST(Arrivals, SkewedSpreadWeighsNodeIByOneOverIPlusOne) {
  ArrivalStream s(load(1000, 1, LoadSpec::Spread::kSkewed), 3);
  std::vector<int> per_node(3);
  for (const Arrival& a : take(s, 11 * kNanosPerSecond, std::vector<bool>(3, true))) ++per_node[a.node];
  // Weights 1, 1/2, 1/3 of 11/6: 6000, 3000, 2000 of 11000.
  EXPECT_NEAR(per_node[0], 6000, 300);
  EXPECT_NEAR(per_node[1], 3000, 250);
  EXPECT_NEAR(per_node[2], 2000, 200);
}

TEST(Arrivals, SpreadOneIsAllOnNodeZeroAndNothingWhileItIsDown) {
  ArrivalStream s(load(100, 1, LoadSpec::Spread::kOne), 5);
  for (const Arrival& a : take(s, 2 * kNanosPerSecond, std::vector<bool>(4, true))) EXPECT_EQ(a.node, 0u);
  const Arrival down = s.next({false, true, true, true});
  EXPECT_TRUE(down.dropped);
}

TEST(Arrivals, ZipfKeysFavourTheFirstUniformKeysDoNot) {
  ArrivalStream zipf(load(1000, 10, LoadSpec::Spread::kUniform, LoadSpec::Distribution::kZipf), 9);
  ArrivalStream uniform(load(1000, 10), 9);
  std::vector<int> z(10), u(10);
  for (const Arrival& a : take(zipf, 10 * kNanosPerSecond, {true})) ++z[a.key];
  for (const Arrival& a : take(uniform, 10 * kNanosPerSecond, {true})) ++u[a.key];
  // Zipf(1) over 10 keys: key 0 has 1/H(10) = 34%, key 9 3.4%.
  EXPECT_NEAR(z[0], 3414, 250);
  EXPECT_NEAR(z[9], 341, 80);
  EXPECT_NEAR(u[0], 1000, 150);
  EXPECT_NEAR(u[9], 1000, 150);
  EXPECT_EQ(zipf.keys().front(), "k0");
  EXPECT_EQ(zipf.keys().back(), "k9");
}

// ---------------------------------------------------------------- plan_faults

TEST(PlanFaults, WithoutFaultsOnlyTheNetworkIsEmulated) {
  NetworkSpec net;  // 1ms-5ms
  net.duplicate = 0.01;
  const FaultSettings f = plan_faults(2, 8, nullptr, 0.05, net);
  EXPECT_TRUE(f.drop_to.empty());
  EXPECT_TRUE(f.drop_from.empty());
  EXPECT_EQ(f.loss, 0.05);
  EXPECT_EQ(f.duplicate, 0.01);
  EXPECT_EQ(f.delay_ms, 1);
  EXPECT_EQ(f.jitter_ms, 4);
}

TEST(PlanFaults, APartitionCutsEachNodeFromEveryOtherSide) {
  Event p;
  p.kind = Event::Kind::kPartition;
  p.groups = {{0, 1}, {2, 3, 4}, {5}};
  const NetworkSpec net;
  const FaultSettings a = plan_faults(1, 6, &p, 0, net);
  EXPECT_EQ(a.drop_to, (std::vector<std::string>{"node-2", "node-3", "node-4", "node-5"}));
  EXPECT_EQ(a.drop_from, a.drop_to);
  const FaultSettings b = plan_faults(3, 6, &p, 0, net);
  EXPECT_EQ(b.drop_to, (std::vector<std::string>{"node-0", "node-1", "node-5"}));
  const FaultSettings c = plan_faults(5, 6, &p, 0.2, net);
  EXPECT_EQ(c.drop_to, (std::vector<std::string>{"node-0", "node-1", "node-2", "node-3", "node-4"}));
  EXPECT_EQ(c.loss, 0.2);
}

}  // namespace
}  // namespace tollgate::sim
