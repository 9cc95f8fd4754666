// tollgate-wire-latency: a check's round trip through tollgated with nothing of ours around it.
// One thread, one connection, blocking reads and writes: it frames a check batch, writes it,
// reads the answer, paced like tollgate-load, and prints p50/p99/max in microseconds.
//
// Why it exists: tollgate-load goes through the client library, whose synchronous call hands
// the request to the library's io thread and the answer back to the caller (two thread wake-ups
// on top of the daemon's own). On a loaded host those wake-ups wait for a core, so a library
// figure mixes the daemon's latency with the library's. This one measures the daemon alone,
// to be compared with tollgate-uds-floor taken in the same run (scripts/flood-latency).
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "api/endpoint.h"
#include "native_round_trip.h"
#include "util/percentile.h"

namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

struct Options {
  double rate = 1000;
  double seconds = 10;
  size_t batch = 2;
  size_t keys = 100;
  std::string prefix = "hot";
};

// Paced round trips on a connected socket; returns the round trips in microseconds. Throws
// boost::system::system_error when the connection fails and std::runtime_error for an answer
// that is not the check results asked for.
template <typename Socket>
std::vector<int64_t> measure(Socket& socket, const Options& o) {
  std::vector<int64_t> rtt_us;
  tollgate::bench::NativeBuffers buffers;
  std::vector<std::string> keys(o.batch);
  uint64_t id = 0;
  size_t turn = 0;
  const auto gap = std::chrono::nanoseconds(int64_t(double(o.batch) * 1e9 / o.rate));
  const auto start = Clock::now(), end = start + std::chrono::nanoseconds(int64_t(o.seconds * 1e9));
  for (auto next = start; Clock::now() < end; next += gap) {
    std::this_thread::sleep_until(next);  // pacing, as tollgate-load paces its checks
    for (std::string& key : keys) key = o.prefix + std::to_string(turn++ % o.keys);
    const auto sent = Clock::now();
    tollgate::bench::native_round_trip(socket, ++id, keys, buffers);
    rtt_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count());
    if (Clock::now() > next + std::chrono::seconds(1)) next = Clock::now();  // fell behind: no burst
  }
  return rtt_us;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tollgate-wire-latency: paced check batches to one tollgated over one connection, blocking, from "
      "one thread (no client library); prints the round trip's p50/p99/max in microseconds."};
  Options o;
  std::string endpoint_text;
  app.add_option("--endpoint", endpoint_text, "The daemon's client API: unix:PATH or tcp:HOST:PORT")->required();
  app.add_option("--rate", o.rate, "Checks per second")->check(CLI::Range(1.0, 1'000'000.0));
  app.add_option("--batch", o.batch, "Checks per request")->check(CLI::Range(size_t(1), size_t(1000)));
  app.add_option("--keys", o.keys, "Distinct keys, named PREFIX0..PREFIX{N-1}, taken in turn")
      ->check(CLI::Range(size_t(1), size_t(1) << 40));
  app.add_option("--prefix", o.prefix, "Key name prefix");
  app.add_option("--seconds", o.seconds, "How long to measure")->check(CLI::Range(0.1, 3600.0));
  CLI11_PARSE(app, argc, argv);

  std::string why;
  const auto endpoint = tollgate::api::parse_endpoint(endpoint_text, &why);
  if (!endpoint) {
    std::cerr << "tollgate-wire-latency: --endpoint: " << why << "\n";
    return 2;
  }
  std::vector<int64_t> rtt_us;
  try {
    asio::io_context io;
    if (endpoint->kind == tollgate::api::Endpoint::Kind::kUnix) {
      asio::local::stream_protocol::socket socket(io);
      socket.connect(asio::local::stream_protocol::endpoint(endpoint->path));
      rtt_us = measure(socket, o);
    } else {
      asio::ip::tcp::socket socket(io);
      socket.connect(asio::ip::tcp::endpoint(asio::ip::make_address(endpoint->host), endpoint->port));
      socket.set_option(asio::ip::tcp::no_delay(true));
      rtt_us = measure(socket, o);
    }
  } catch (const std::exception& e) {
    std::cerr << "tollgate-wire-latency: " << endpoint->to_string() << ": " << e.what() << "\n";
    return 1;
  }
  std::cout << "round_trips p50_us p99_us max_us\n"
            << rtt_us.size() << " " << tollgate::cli::percentile(rtt_us, 50) << " "
            << tollgate::cli::percentile(rtt_us, 99) << " " << *std::max_element(rtt_us.begin(), rtt_us.end()) << "\n";
  return 0;
}
