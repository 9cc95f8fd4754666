// `tollgate-load`: a load generator for tollgated, for soak tests and capacity checks. It sends
// checks at a steady rate to one or more daemons (round robin), over keys drawn uniformly or by
// Zipf popularity, and prints a line every report interval: checks offered, allowed, denied,
// failed open (no answer within the deadline), and the latency of its batches.
//
//   tollgate-load --endpoint unix:/tmp/a.sock --endpoint unix:/tmp/b.sock --rate 2000
//                 --keys 10000 --zipf --duration 10m --report-every 10s
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tollgate/client.h"
#include "tollgate/duration.h"
#include "util/percentile.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Window {
  uint64_t offered = 0, allowed = 0, denied = 0, failed_open = 0;
  std::vector<int64_t> batch_us;  // latency of each batch
  void reset() { *this = Window{}; }
};

using tollgate::cli::percentile;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tollgate-load: drives checks into tollgated at a steady rate and reports what came back."};
  std::vector<std::string> endpoints;
  double rate = 1000;
  size_t keys = 1000;
  bool zipf = false;
  std::string duration_text = "10s", every_text = "10s", deadline_text = "20ms", prefix = "k";
  size_t batch = 0;
  app.add_option("--endpoint", endpoints, "Daemon endpoints (unix:PATH or tcp:HOST:PORT); repeat for several")
      ->required();
  app.add_option("--rate", rate, "Checks per second, over all endpoints")->check(CLI::Range(1.0, 10'000'000.0));
  app.add_option("--keys", keys, "Distinct keys, named PREFIX0..PREFIX{N-1}")
      ->check(CLI::Range(size_t(1), size_t(1) << 40));
  app.add_flag("--zipf", zipf, "Zipf(1) key popularity instead of uniform");
  app.add_option("--prefix", prefix, "Key name prefix");
  app.add_option("--duration", duration_text, "How long to run, e.g. 10m");
  app.add_option("--report-every", every_text, "Print a line this often");
  app.add_option("--deadline", deadline_text, "Client deadline per batch; no answer by then counts as failed open");
  app.add_option("--batch", batch, "Checks per request (default: what one millisecond of --rate needs)");
  CLI11_PARSE(app, argc, argv);

  std::string why;
  const auto duration_ns = tollgate::parse_duration_ns(duration_text, &why);
  const auto every_ns = tollgate::parse_duration_ns(every_text, &why);
  const auto deadline_ns = tollgate::parse_duration_ns(deadline_text, &why);
  if (!duration_ns || !every_ns || !deadline_ns || *every_ns <= 0) {
    std::cerr << "tollgate-load: " << (why.empty() ? "durations must be positive" : why) << "\n";
    return 2;
  }
  std::vector<std::unique_ptr<tollgate::Client>> clients;
  for (const std::string& e : endpoints) {
    tollgate::ClientOptions o;
    o.endpoint = e;
    o.deadline = std::chrono::nanoseconds(*deadline_ns);
    try {
      clients.push_back(std::make_unique<tollgate::Client>(o));
    } catch (const std::exception& ex) {
      std::cerr << "tollgate-load: --endpoint " << e << ": " << ex.what() << "\n";
      return 2;
    }
  }
  if (batch == 0) batch = std::max<size_t>(1, size_t(std::ceil(rate / 1000.0)));
  const auto gap = std::chrono::nanoseconds(int64_t(double(batch) * 1e9 / rate));

  std::mt19937_64 rng(42);
  std::vector<double> cdf;
  if (zipf) {
    cdf.resize(keys);
    double acc = 0;
    for (size_t k = 0; k < keys; ++k) cdf[k] = acc += 1.0 / double(k + 1);
  }
  std::uniform_real_distribution<double> unit(0, 1);
  auto pick = [&]() -> size_t {
    if (!zipf) return size_t(rng() % keys);
    return size_t(std::upper_bound(cdf.begin(), cdf.end(), unit(rng) * cdf.back()) - cdf.begin());
  };

  std::cout << "time_s offered allowed denied failed_open batch_p50_us batch_p99_us batch_max_us\n" << std::flush;
  Window w;
  std::vector<std::string> names(batch);
  std::vector<tollgate::CheckItem> items(batch);
  const auto start = Clock::now();
  auto next = start, next_report = start + std::chrono::nanoseconds(*every_ns);
  const auto end = start + std::chrono::nanoseconds(*duration_ns);
  size_t turn = 0;
  while (Clock::now() < end) {
    std::this_thread::sleep_until(next);  // pacing the offered load, not synchronization
    next += gap;
    for (size_t i = 0; i < batch; ++i) {
      names[i] = prefix + std::to_string(pick());
      items[i] = {names[i], 1};
    }
    const auto sent = Clock::now();
    const auto replies = clients[turn++ % clients.size()]->check_batch(items);
    w.batch_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count());
    for (const auto& r : replies) {
      ++w.offered;
      if (!r.from_daemon()) {
        ++w.failed_open;
      } else {
        ++(r.allowed ? w.allowed : w.denied);
      }
    }
    if (Clock::now() >= next_report) {
      const double t = std::chrono::duration<double>(Clock::now() - start).count();
      std::cout << int64_t(t) << " " << w.offered << " " << w.allowed << " " << w.denied << " " << w.failed_open << " "
                << percentile(w.batch_us, 50) << " " << percentile(w.batch_us, 99) << " "
                << (w.batch_us.empty() ? -1 : *std::max_element(w.batch_us.begin(), w.batch_us.end())) << "\n"
                << std::flush;
      w.reset();
      next_report += std::chrono::nanoseconds(*every_ns);
    }
    if (Clock::now() > next + std::chrono::seconds(1)) next = Clock::now();  // fell behind: do not burst to catch up
  }
  return 0;
}
