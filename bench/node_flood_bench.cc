// The daemon's thread under a key flood, without sockets: how long its longest single steps
// are, since every other client's check waits behind the step the thread is in.
//   build/bench/tollgate-bench --benchmark_filter=NodeRound
// One iteration is one 50 ms round of scripts/flood-latency's flood: 15,000 checks on keys never
// seen before (300,000 new keys/s) into a table of --max-keys 50,000, then the round (tick()),
// with the daemon's batch splitting and a gossip node that has no live peer (as flood-latency's
// single daemon). The argument is NodeOptions::early_seal_keys (0: the round seals everything).
// Counters:
//   tick_us_max, tick_us_mean: the round itself;
//   check_us_max: the longest single check() call (one that seals early is the long one);
//   checks_over_50us: check() calls that took longer than 50 us, per round.
// The numbers are CPU-bound and comparable between builds on one machine; report them as ratios.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "core/node.h"
#include "core/random.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

class NullOutbox final : public Outbox {
 public:
  void send(const std::string&, const GossipMessagePtr&) override {}
};

void BM_NodeRoundUnderKeyFlood(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  constexpr int kChecksPerRound = 15'000;
  constexpr int64_t kRoundNs = 50 * kNanosPerMilli;
  std::vector<Rule> rules{{"flood*", Limit{Rate{10, kNanosPerSecond}, 10, 10}, 1}};
  auto rule_set = std::make_shared<RuleSet>(std::move(rules), Limit{Rate{100, kNanosPerSecond}, 100, 100});
  NodeOptions o;
  o.id = "node-0";
  o.address = "127.0.0.1:7000";
  o.keys.max_keys = 50'000;
  o.early_seal_keys = size_t(state.range(0));
  const size_t max_batch_bytes = max_batch_bytes_for(1400);
  o.split_for_sealing = [id = o.id, max_batch_bytes](std::vector<ConsumptionEntry> entries) {
    return split_for_sealing(std::move(entries), id, max_batch_bytes);
  };
  NullOutbox outbox;
  SplitMix64 random(1);
  Node node(o, rule_set, outbox, random);

  // Key names are made before the timed rounds (the daemon reads them from the request).
  std::vector<std::string> names(kChecksPerRound);
  uint64_t next_key = 0;
  auto next_names = [&] {
    for (std::string& n : names) n = "flood" + std::to_string(next_key++);
  };
  MonoNanos now = 0;
  auto round = [&](double* tick_ns, double* longest_check_ns, int64_t* slow_checks) {
    for (const std::string& n : names) {
      const auto t0 = Clock::now();
      benchmark::DoNotOptimize(node.check(n, 1, now));
      const double ns = double((Clock::now() - t0).count());
      *longest_check_ns = std::max(*longest_check_ns, ns);
      if (ns > 50'000) ++*slow_checks;
      now += kRoundNs / kChecksPerRound;
    }
    const auto t0 = Clock::now();
    node.tick(now);
    *tick_ns = double((Clock::now() - t0).count());
  };
  // Warm up past the table's size and the ledger's retention budget, as in a flood that has run
  // for a while.
  for (int i = 0; i < 20; ++i) {
    next_names();
    double a = 0, b = 0;
    int64_t c = 0;
    round(&a, &b, &c);
  }
  double tick_max = 0, tick_sum = 0, check_max = 0;
  int64_t slow = 0, rounds = 0;
  for (auto _ : state) {
    state.PauseTiming();
    next_names();
    state.ResumeTiming();
    double tick_ns = 0;
    round(&tick_ns, &check_max, &slow);
    tick_max = std::max(tick_max, tick_ns);
    tick_sum += tick_ns;
    ++rounds;
  }
  state.counters["tick_us_max"] = tick_max / 1e3;
  state.counters["tick_us_mean"] = tick_sum / 1e3 / double(rounds);
  state.counters["check_us_max"] = check_max / 1e3;
  state.counters["checks_over_50us"] = double(slow) / double(rounds);
  state.counters["evictions"] = double(node.table().stats().evictions);
}
BENCHMARK(BM_NodeRoundUnderKeyFlood)->Arg(0)->Arg(1024)->Arg(256)->Unit(benchmark::kMillisecond)->Iterations(100);

}  // namespace
}  // namespace tollgate
