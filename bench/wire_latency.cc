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
  bool leases = false;  // --op lease: acquire a slot of each key, then release it
};

struct Measured {
  std::vector<int64_t> rtt_us;      // checks, or acquires
  std::vector<int64_t> release_us;  // --op lease: the releases
};

// --op lease, one paced turn: acquire a slot of `key` when `held` is empty (and keep its id
// there), else release the lease held; each timed. Paced one by one, so that a release does not
// ride on the daemon's thread still awake from the acquire before it.
template <typename Socket>
void lease_turn(Socket& socket, const std::string& key, std::string& held, uint64_t* id,
                tollgate::bench::NativeBuffers& b, Measured& out) {
  namespace pb = tollgate::v1::api;
  b.request.Clear();
  const bool acquire = held.empty();
  if (acquire) {
    b.request.mutable_lease()->mutable_acquire()->set_key(key);
  } else {
    b.request.mutable_lease()->mutable_release()->set_id(held);
  }
  const auto sent = Clock::now();
  const pb::LeaseResult& r = tollgate::bench::native_lease_call(socket, ++*id, b);
  const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count();
  if (acquire) {
    if (r.outcome() != pb::LEASE_GRANTED) {
      throw std::runtime_error("acquire of " + key + " answered " + r.reason() +
                               ": give the keys a concurrency rule (the bench holds one slot at a time)");
    }
    out.rtt_us.push_back(us);
    held = r.id();
  } else {
    if (!r.found()) throw std::runtime_error("release of lease " + held + ": not found");
    out.release_us.push_back(us);
    held.clear();
  }
}

template <typename Socket>
Measured measure(Socket& socket, const Options& o) {
  Measured m;
  tollgate::bench::NativeBuffers buffers;
  std::vector<std::string> keys(o.batch);
  uint64_t id = 0;
  size_t turn = 0;
  std::string held;  // --op lease: the lease to release next turn
  const auto gap = std::chrono::nanoseconds(int64_t(double(o.batch) * 1e9 / o.rate));
  const auto start = Clock::now(), end = start + std::chrono::nanoseconds(int64_t(o.seconds * 1e9));
  for (auto next = start; Clock::now() < end; next += gap) {
    std::this_thread::sleep_until(next);  // pacing, as tollgate-load paces its checks
    for (std::string& key : keys) key = o.prefix + std::to_string(turn++ % o.keys);
    if (o.leases) {
      lease_turn(socket, keys[0], held, &id, buffers, m);
    } else {
      const auto sent = Clock::now();
      tollgate::bench::native_round_trip(socket, ++id, keys, buffers);
      m.rtt_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count());
    }
    if (Clock::now() > next + std::chrono::seconds(1)) next = Clock::now();  // fell behind: no burst
  }
  return m;
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
  std::string op = "check";
  app.add_option("--op", op,
                 "check: check batches; lease: turns alternate between acquiring one slot of the next key and "
                 "releasing it (the keys need a concurrency rule; --batch is ignored; --rate counts requests), "
                 "acquires and releases timed on lines of their own")
      ->check(CLI::IsMember({"check", "lease"}));
  CLI11_PARSE(app, argc, argv);
  o.leases = op == "lease";
  if (o.leases) o.batch = 1;

  std::string why;
  const auto endpoint = tollgate::api::parse_endpoint(endpoint_text, &why);
  if (!endpoint) {
    std::cerr << "tollgate-wire-latency: --endpoint: " << why << "\n";
    return 2;
  }
  Measured m;
  try {
    asio::io_context io;
    if (endpoint->kind == tollgate::api::Endpoint::Kind::kUnix) {
      asio::local::stream_protocol::socket socket(io);
      socket.connect(asio::local::stream_protocol::endpoint(endpoint->path));
      m = measure(socket, o);
    } else {
      asio::ip::tcp::socket socket(io);
      socket.connect(asio::ip::tcp::endpoint(asio::ip::make_address(endpoint->host), endpoint->port));
      socket.set_option(asio::ip::tcp::no_delay(true));
      m = measure(socket, o);
    }
  } catch (const std::exception& e) {
    std::cerr << "tollgate-wire-latency: " << endpoint->to_string() << ": " << e.what() << "\n";
    return 1;
  }
  auto line = [](const char* what, std::vector<int64_t>& v) {
    if (v.empty()) return;
    std::cout << what << v.size() << " " << tollgate::cli::percentile(v, 50) << " " << tollgate::cli::percentile(v, 99)
              << " " << *std::max_element(v.begin(), v.end()) << "\n";
  };
  std::cout << (o.leases ? "op " : "") << "round_trips p50_us p99_us max_us\n";
  line(o.leases ? "acquire " : "", m.rtt_us);
  line("release ", m.release_us);
  return 0;
}
