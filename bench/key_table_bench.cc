// The local admission check: KeyTable::allow() on keys already in the table, single-owner and
// concurrent, on one thread and on several.
//   build/bench/tollgate-bench --benchmark_filter=KeyTable
// Target (issue #2): under 100 ns per decision with 100k keys in the table.
#include <benchmark/benchmark.h>

#include <time.h>

#include <bit>
#include <chrono>

#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/key_table.h"
#include "core/ledger.h"
#include "core/top_keys.h"
#include "tollgate/member.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

std::shared_ptr<const RuleSet> bench_rules() {
  std::vector<Rule> rules{{"api:login:*", Limit{Rate{5, kNanosPerSecond}, 10, 10}, 1},
                          {"user:*", Limit{Rate{1000, kNanosPerSecond}, 1000, 1000}, 2}};
  return std::make_shared<RuleSet>(std::move(rules), Limit{Rate{100, kNanosPerSecond}, 100, 100});
}

std::vector<std::string> make_keys(int64_t n) {
  std::vector<std::string> keys;
  keys.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) keys.push_back("user:" + std::to_string(i * 7919) + ":session");
  return keys;
}

// Requests for keys picked uniformly at random, so table lookups miss the CPU caches as a real
// mix of many keys would. The keys are laid out in one contiguous "request stream", as they
// would arrive in a socket buffer: reading the key is not a cache miss for the daemon either.
struct RequestStream {
  RequestStream(const std::vector<std::string>& keys, size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (size_t i = 0; i < n; ++i) {
      const std::string& k = keys[rng() % keys.size()];
      offsets.push_back({uint32_t(bytes.size()), uint32_t(k.size())});
      bytes += k;
    }
  }
  std::string_view at(size_t i) const {
    const auto [off, len] = offsets[i % offsets.size()];
    return std::string_view(bytes).substr(off, len);
  }
  std::string bytes;
  std::vector<std::pair<uint32_t, uint32_t>> offsets;
};

// Checks the table's existing keys in the order `requests` gives them, 100 ns apart.
void check_existing(benchmark::State& state, KeyTable& table, const RequestStream& requests) {
  MonoNanos now = 0;
  size_t i = 0;
  for (auto _ : state) {
    now += 100;
    benchmark::DoNotOptimize(table.allow(requests.at(i++), 1, now));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_KeyTableAllowExistingRandomKey(benchmark::State& state) {
  const auto keys = make_keys(state.range(0));
  KeyTable table(bench_rules());
  for (const auto& k : keys) table.allow(k, 1, 0);
  check_existing(state, table, RequestStream(keys, 1 << 20, 1));
  state.counters["keys"] = double(table.size());
}
BENCHMARK(BM_KeyTableAllowExistingRandomKey)->Arg(100'000)->Arg(1'000)->Unit(benchmark::kNanosecond);

// The floor under any lookup of a random key: hashing it and touching one random cache line
// per request in a 100k-entry array. Reported so the table's figure can be read as a ratio.
void BM_FloorHashAndOneRandomLoad(benchmark::State& state) {
  const auto keys = make_keys(state.range(0));
  const RequestStream requests(keys, 1 << 20, 1);
  std::vector<uint64_t> lines(size_t(state.range(0)) * 8, 1);
  size_t i = 0;
  uint64_t sum = 0;
  for (auto _ : state) {
    const size_t h = std::hash<std::string_view>{}(requests.at(i++));
    sum += lines[(h % size_t(state.range(0))) * 8];
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FloorHashAndOneRandomLoad)->Arg(100'000)->Unit(benchmark::kNanosecond);

RequestStream zipf_stream(const std::vector<std::string>& keys, uint64_t seed) {
  std::vector<double> weights(keys.size());
  for (size_t r = 0; r < weights.size(); ++r) weights[r] = 1.0 / double(r + 1);
  std::discrete_distribution<size_t> zipf(weights.begin(), weights.end());
  std::mt19937_64 rng(seed);
  RequestStream requests(keys, 0, 0);
  for (size_t i = 0; i < (1 << 20); ++i) {
    const std::string& k = keys[zipf(rng)];
    requests.offsets.push_back({uint32_t(requests.bytes.size()), uint32_t(k.size())});
    requests.bytes += k;
  }
  return requests;
}

// The same 100k keys with Zipf(1.0) popularity, as real traffic is skewed: hot keys stay cached.
void BM_KeyTableAllowExistingZipfKey(benchmark::State& state) {
  const auto keys = make_keys(state.range(0));
  KeyTable table(bench_rules());
  for (const auto& k : keys) table.allow(k, 1, 0);
  check_existing(state, table, zipf_stream(keys, 3));
}
BENCHMARK(BM_KeyTableAllowExistingZipfKey)->Arg(100'000)->Unit(benchmark::kNanosecond);

// The memory floor of any hash index over 100k keys: hash the key, load a random index slot,
// then load the random 128-byte record it points to (two dependent cache misses).
void BM_FloorHashIndexThenRecord(benchmark::State& state) {
  const size_t n = size_t(state.range(0));
  const auto keys = make_keys(state.range(0));
  const RequestStream requests(keys, 1 << 20, 1);
  std::vector<uint32_t> index(std::bit_ceil(n * 2));
  std::mt19937 rng(4);
  for (auto& x : index) x = uint32_t(rng() % n);
  struct alignas(64) Record {
    uint64_t word[16];
  };
  std::vector<Record> records(n);
  size_t i = 0;
  uint64_t sum = 0;
  for (auto _ : state) {
    const size_t h = std::hash<std::string_view>{}(requests.at(i++));
    Record& r = records[index[h & (index.size() - 1)]];
    sum += r.word[0]++;
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FloorHashIndexThenRecord)->Arg(100'000)->Unit(benchmark::kNanosecond);

// The same two loads, but each request waits for the previous one (its position depends on the
// record loaded), so no two cache misses overlap: the latency of two dependent DRAM accesses on
// this machine, which a single hash-table check of a cold key cannot beat.
void BM_FloorTwoDependentMisses(benchmark::State& state) {
  const size_t n = size_t(state.range(0));
  const auto keys = make_keys(state.range(0));
  const RequestStream requests(keys, 1 << 20, 1);
  std::vector<uint32_t> index(std::bit_ceil(n * 2));
  std::mt19937 rng(4);
  for (auto& x : index) x = uint32_t(rng() % n);
  struct alignas(64) Record {
    uint64_t word[16];
  };
  std::vector<Record> records(n);  // all zero, which the compiler cannot know inside the loop
  size_t i = 0;
  for (auto _ : state) {
    const size_t h = std::hash<std::string_view>{}(requests.at(i));
    Record& r = records[index[h & (index.size() - 1)]];
    i += 1 + r.word[1];  // word[1] is always 0: the next request depends on this load
    ++r.word[0];
  }
  benchmark::DoNotOptimize(records.data());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FloorTwoDependentMisses)->Arg(100'000)->Unit(benchmark::kNanosecond);

// One hot key: the best case, everything in L1.
void BM_KeyTableAllowSameKey(benchmark::State& state) {
  const auto keys = make_keys(state.range(0));
  KeyTable table(bench_rules());
  for (const auto& k : keys) table.allow(k, 1, 0);
  MonoNanos now = 0;
  for (auto _ : state) {
    now += 100;
    benchmark::DoNotOptimize(table.allow(keys[0], 1, now));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KeyTableAllowSameKey)->Arg(100'000)->Unit(benchmark::kNanosecond);

// --- the concurrent table (KeyTableOptions::concurrent, issue #18) ------------------------------

// The same single-thread checks on a concurrent table (64 shards, an uncontended lock per check):
// what the concurrency costs when there is none. Compare with BM_KeyTableAllowExisting*Key.
void BM_ConcurrentKeyTableAllowExistingRandomKey(benchmark::State& state) {
  const auto keys = make_keys(state.range(0));
  KeyTable table(bench_rules(), {.concurrent = true});
  for (const auto& k : keys) table.allow(k, 1, 0);
  check_existing(state, table, RequestStream(keys, 1 << 20, 1));
  state.counters["shards"] = double(table.shards());
}
BENCHMARK(BM_ConcurrentKeyTableAllowExistingRandomKey)->Arg(100'000)->Unit(benchmark::kNanosecond);

void BM_ConcurrentKeyTableAllowExistingZipfKey(benchmark::State& state) {
  const auto keys = make_keys(state.range(0));
  KeyTable table(bench_rules(), {.concurrent = true});
  for (const auto& k : keys) table.allow(k, 1, 0);
  check_existing(state, table, zipf_stream(keys, 3));
}
BENCHMARK(BM_ConcurrentKeyTableAllowExistingZipfKey)->Arg(100'000)->Unit(benchmark::kNanosecond);

// Threads checking at once, 100k keys in the table: each thread on random keys of its own slice
// (distinct keys: contention only where two keys share a shard's lock), or every thread on one
// hot key (one lock, one cache line, passed from core to core). items_per_second is the sum over
// threads. kConcurrent is the sharded table; kOneLock the single-owner table behind one mutex,
// what "just add a lock" would give.
enum Locking : int64_t { kConcurrent = 0, kOneLock = 1 };
enum Keys : int64_t { kDistinct = 0, kHot = 1 };
struct SharedTable {
  std::unique_ptr<KeyTable> table;
  std::mutex lock;  // kOneLock only
  std::vector<std::string> keys;
};
SharedTable g_shared;

void BM_KeyTableThreads(benchmark::State& state) {
  const auto locking = Locking(state.range(0));
  const auto which = Keys(state.range(1));
  if (state.thread_index() == 0) {
    g_shared.keys = make_keys(100'000);
    g_shared.table = std::make_unique<KeyTable>(bench_rules(), KeyTableOptions{.concurrent = locking == kConcurrent});
    for (const auto& k : g_shared.keys) g_shared.table->allow(k, 1, 0);
  }
  // (The loop starts when every thread is here: the table is built by then.)
  const size_t slice = 100'000 / size_t(state.threads());
  std::vector<std::string> mine;
  for (size_t i = 0; i < (1 << 16); ++i) {
    const size_t at = which == kHot ? 0 : size_t(state.thread_index()) * slice + (i * 2654435761u) % slice;
    mine.push_back("user:" + std::to_string(at * 7919) + ":session");
  }
  MonoNanos now = 0;
  size_t i = 0;
  for (auto _ : state) {
    now += 100;
    const std::string& k = mine[i++ & 0xffff];
    if (locking == kOneLock) {
      std::lock_guard<std::mutex> hold(g_shared.lock);
      benchmark::DoNotOptimize(g_shared.table->allow(k, 1, now));
    } else {
      benchmark::DoNotOptimize(g_shared.table->allow(k, 1, now));
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["per_thread"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kAvgThreads);
}
BENCHMARK(BM_KeyTableThreads)
    ->ArgNames({"one_lock", "hot"})
    ->ArgsProduct({{kConcurrent, kOneLock}, {kDistinct, kHot}})
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->UseRealTime()
    ->Unit(benchmark::kNanosecond);

// The same checks with the time read from the clock for each one, as a member's check reads it
// (the benchmarks above pass a counter): what the clock costs a check, so that the member's
// figure can be split into the table, the lock, the clock and the sealing. Arg 1: concurrent.
// Arg 2: 1 for CLOCK_MONOTONIC_COARSE (4 ms resolution here) instead of steady_clock.
MonoNanos coarse_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return MonoNanos(ts.tv_sec) * kNanosPerSecond + ts.tv_nsec;
}
void BM_KeyTableAllowExistingRandomKeyClocked(benchmark::State& state) {
  const auto keys = make_keys(state.range(0));
  KeyTable table(bench_rules(), {.concurrent = state.range(1) == 1});
  for (const auto& k : keys) table.allow(k, 1, 0);
  const RequestStream requests(keys, 1 << 20, 1);
  const bool coarse = state.range(2) == 1;
  size_t i = 0;
  for (auto _ : state) {
    const MonoNanos now =
        coarse
            ? coarse_now()
            : std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
                  .count();
    benchmark::DoNotOptimize(table.allow(requests.at(i++), 1, now));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_KeyTableAllowExistingRandomKeyClocked)
    ->ArgNames({"keys", "concurrent", "coarse"})
    ->Args({100'000, 0, 0})
    ->Args({100'000, 1, 0})
    ->Args({100'000, 0, 1})
    ->Args({100'000, 1, 1})
    ->Unit(benchmark::kNanosecond);

// --- the embedded member (tollgate::Member, issue #18) -------------------------------------------

// A member alone (heartbeat membership, its seed not there) with bench_rules(), its background
// thread running rounds (sealing what the checks admit every 50 ms) while the benchmark checks:
// what a service pays per check. Compare with BM_KeyTableAllowExisting*Key in the same run.
constexpr const char* kBenchRulesYaml = R"(rules:
  - {match: "api:login:*", rate: 5/s, burst: 10, max_debt: 10}
  - {match: "user:*", rate: 1000/s, burst: 1000, max_debt: 1000}
default: {rate: 100/s, burst: 100, max_debt: 100}
)";
std::unique_ptr<Member> bench_member() {
  MemberOptions o;
  o.node_id = "bench";
  o.bind = "127.0.0.1:0";
  o.insecure_gossip = true;
  o.rules_yaml = kBenchRulesYaml;
  o.seeds = {"127.0.0.1:9"};
  o.settings = {{"membership", "heartbeat"}};
  return std::make_unique<Member>(o);
}

void BM_MemberCheckExistingRandomKey(benchmark::State& state) {
  const auto keys = make_keys(state.range(0));
  auto member = bench_member();
  for (const auto& k : keys) member->check(k, 1);
  const RequestStream requests(keys, 1 << 20, 1);
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(member->check(requests.at(i++), 1));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MemberCheckExistingRandomKey)->Arg(100'000)->Unit(benchmark::kNanosecond);

void BM_MemberCheckExistingZipfKey(benchmark::State& state) {
  const auto keys = make_keys(state.range(0));
  auto member = bench_member();
  for (const auto& k : keys) member->check(k, 1);
  const RequestStream requests = zipf_stream(keys, 3);
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(member->check(requests.at(i++), 1));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MemberCheckExistingZipfKey)->Arg(100'000)->Unit(benchmark::kNanosecond);

// 1, 2 and 4 threads checking one member at once (100k keys), on keys of their own or one hot
// key, as BM_KeyTableThreads.
std::unique_ptr<Member> g_member;
void BM_MemberThreads(benchmark::State& state) {
  const auto which = Keys(state.range(0));
  if (state.thread_index() == 0) {
    g_member = bench_member();
    for (const auto& k : make_keys(100'000)) g_member->check(k, 1);
  }
  const size_t slice = 100'000 / size_t(state.threads());
  std::vector<std::string> mine;
  for (size_t i = 0; i < (1 << 16); ++i) {
    const size_t at = which == kHot ? 0 : size_t(state.thread_index()) * slice + (i * 2654435761u) % slice;
    mine.push_back("user:" + std::to_string(at * 7919) + ":session");
  }
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(g_member->check(mine[i++ & 0xffff], 1));
  state.SetItemsProcessed(state.iterations());
  state.counters["per_thread"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kAvgThreads);
  if (state.thread_index() == 0) g_member.reset();  // (after the loop's closing barrier)
}
BENCHMARK(BM_MemberThreads)
    ->ArgNames({"hot"})
    ->Arg(kDistinct)
    ->Arg(kHot)
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->UseRealTime()
    ->Unit(benchmark::kNanosecond);

// Charging one remote batch of 64 entries (what a receiver does per batch heard).
void BM_LedgerMergeBatch(benchmark::State& state) {
  const auto keys = make_keys(100'000);
  KeyTable table(bench_rules());
  for (const auto& k : keys) table.allow(k, 1, 0);
  Ledger sender("sender", 1), receiver("receiver", 1);
  std::mt19937_64 rng(2);
  MonoNanos now = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<ConsumptionEntry> entries;
    for (int e = 0; e < 64; ++e) entries.push_back({keys[rng() % keys.size()], 1});
    now += kNanosPerMilli;
    BatchPtr batch = sender.seal(std::move(entries), now);
    state.ResumeTiming();
    benchmark::DoNotOptimize(receiver.merge(batch, table, now));
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_LedgerMergeBatch)->Unit(benchmark::kMicrosecond);

// One rule's top-K merge (merge_top_rule) at N members, each publishing 32 keys per metric
// from a pool of 200 hot keys (so the merge sees overlap, as a Zipf load gives): what one
// slice of `tollgate top` costs the node's thread, and GET /v1/top the HTTP thread.
void BM_TopMergeOneRule(benchmark::State& state) {
  const size_t members = size_t(state.range(0));
  TopParts part;
  part.rule = "user:*";
  part.members = members;
  for (size_t m = 0; m < members; ++m) {
    for (uint32_t metric = 0; metric < 2; ++metric) {
      TopUnit u{"user:*", metric, 10'000, 40, 3000, {}};
      for (uint64_t k = 0; k < 32; ++k) {
        u.entries.push_back({"user:" + std::to_string((m * 13 + 5 * k) % 200), 400 - 10 * k, k});  // each once
      }
      part.units.push_back(std::make_shared<const TopUnit>(std::move(u)));
    }
  }
  for (auto _ : state) benchmark::DoNotOptimize(merge_top_rule(part, 10));
}
BENCHMARK(BM_TopMergeOneRule)->Arg(8)->Arg(128)->Arg(1'000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tollgate

BENCHMARK_MAIN();
