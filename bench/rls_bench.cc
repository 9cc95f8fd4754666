// tollgate-rls-bench: closed-loop calls to one tollgated from N threads, each with its own
// connection, through Envoy's rate limit service (gRPC ShouldRateLimit, --target rls) or the
// native client API (one check per request over a blocking socket, --target native). Each thread
// sends its next call as soon as the previous answer arrives. Prints the calls made, calls per
// second, and the round trip's p50/p99/max in microseconds.
//
// Both targets do the same work in the daemon (one key checked per call, keys taken in turn), so
// the difference is the front end: gRPC (HTTP/2, protobuf, gRPC's threads, the hop to the node's
// thread and back) against our framing on the node's own thread. Compare them, and the machine's
// floor (tollgate-uds-floor), in one run: scripts/rls-latency.
#include <grpcpp/grpcpp.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "api/endpoint.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "native_round_trip.h"
#include "util/percentile.h"

namespace {

namespace pb = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string target = "rls";
  std::string endpoint;
  std::string domain = "bench";
  std::string descriptor_key = "key";
  size_t connections = 1;
  size_t keys = 100;
  double seconds = 5;
};

// One thread's calls; returns their round trips in microseconds.
std::vector<int64_t> run_rls(const Options& o, size_t thread, Clock::time_point end) {
  grpc::ChannelArguments args;
  args.SetInt("tollgate.bench.channel", int(thread));  // a channel (connection) of its own
  auto channel = grpc::CreateCustomChannel(o.endpoint, grpc::InsecureChannelCredentials(), args);
  auto stub = pb::RateLimitService::NewStub(channel);
  std::vector<int64_t> rtt_us;
  pb::RateLimitRequest request;
  request.set_domain(o.domain);
  pb::RateLimitDescriptor::Entry* entry = request.add_descriptors()->add_entries();
  entry->set_key(o.descriptor_key);
  for (size_t turn = thread; Clock::now() < end; turn += o.connections) {
    entry->set_value("v" + std::to_string(turn % o.keys));
    pb::RateLimitResponse response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    const auto sent = Clock::now();
    const grpc::Status status = stub->ShouldRateLimit(&ctx, request, &response);
    rtt_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count());
    if (!status.ok() || response.statuses_size() != 1) {
      throw std::runtime_error("ShouldRateLimit failed: " + status.error_message());
    }
  }
  return rtt_us;
}

std::vector<int64_t> run_native(const Options& o, size_t thread, Clock::time_point end) {
  namespace asio = boost::asio;
  std::string why;
  const auto endpoint = tollgate::api::parse_endpoint(o.endpoint, &why);
  if (!endpoint || endpoint->kind != tollgate::api::Endpoint::Kind::kUnix) {
    throw std::runtime_error("--endpoint: the native target takes unix:PATH" + (why.empty() ? "" : ": " + why));
  }
  asio::io_context io;
  asio::local::stream_protocol::socket socket(io);
  socket.connect(asio::local::stream_protocol::endpoint(endpoint->path));
  tollgate::bench::NativeBuffers buffers;
  std::vector<std::string> key(1);
  std::vector<int64_t> rtt_us;
  uint64_t id = 0;
  for (size_t turn = thread; Clock::now() < end; turn += o.connections) {
    key[0] = o.descriptor_key + "v" + std::to_string(turn % o.keys);
    const auto sent = Clock::now();
    tollgate::bench::native_round_trip(socket, ++id, key, buffers);
    rtt_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count());
  }
  return rtt_us;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tollgate-rls-bench: closed-loop calls to one tollgated from --connections threads, through the rate "
      "limit service (gRPC) or the native client API; prints calls, calls/s and p50/p99/max in microseconds."};
  Options o;
  app.add_option("--target", o.target, "rls (gRPC ShouldRateLimit) or native (client API)")
      ->check(CLI::IsMember({"rls", "native"}));
  app.add_option("--endpoint", o.endpoint, "rls: HOST:PORT or unix:PATH; native: unix:PATH")->required();
  app.add_option("--domain", o.domain, "rls: the request's domain");
  app.add_option("--key", o.descriptor_key,
                 "rls: the descriptor entry's key (its value is vN); native: the key prefix (keys are KEYvN)");
  app.add_option("--connections", o.connections, "Threads, each with its own channel or connection")
      ->check(CLI::Range(size_t(1), size_t(256)));
  app.add_option("--keys", o.keys, "Distinct values N, taken in turn")->check(CLI::Range(size_t(1), size_t(1) << 30));
  app.add_option("--seconds", o.seconds, "How long to measure")->check(CLI::Range(0.1, 3600.0));
  CLI11_PARSE(app, argc, argv);

  const auto start = Clock::now();
  const auto end = start + std::chrono::nanoseconds(int64_t(o.seconds * 1e9));
  std::vector<std::vector<int64_t>> per_thread(o.connections);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < o.connections; ++t) {
    threads.emplace_back([&, t] {
      try {
        per_thread[t] = o.target == "rls" ? run_rls(o, t, end) : run_native(o, t, end);
      } catch (const std::exception& e) {
        std::cerr << "tollgate-rls-bench: " << e.what() << "\n";
        failed = true;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (failed) return 1;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<int64_t> all;
  for (const auto& v : per_thread) all.insert(all.end(), v.begin(), v.end());
  std::cout << "calls calls_per_s p50_us p99_us max_us\n"
            << all.size() << " " << int64_t(double(all.size()) / elapsed) << " " << tollgate::cli::percentile(all, 50)
            << " " << tollgate::cli::percentile(all, 99) << " " << *std::max_element(all.begin(), all.end()) << "\n";
  return 0;
}
