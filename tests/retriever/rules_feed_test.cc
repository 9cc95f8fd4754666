// The rules retriever as tollgated runs it (src/retriever/rules_feed.h): the cache of the rules
// in force is written off the node's thread. Its two fsyncs can take seconds on a busy disk, and
// on the node's thread they held every HTTP and RLS job waiting past its deadline (answered 503,
// which every client takes as "allowed"): seen in CI as /v1/stats answering 503 while a new rules
// version was cached.
#include "retriever/rules_feed.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "config/content_version.h"
#include "host/node_host.h"
#include "support/scripted_http_server.h"
#include "support/temp_dir.h"

namespace tollgate {
namespace {

namespace fs = std::filesystem;

constexpr const char* kOld = "rules:\n  - {match: \"k*\", rate: 1/s, burst: 5}\n";
constexpr const char* kNew = "rules:\n  - {match: \"k*\", rate: 1/s, burst: 9}\n";

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RulesFeed, TheCacheIsWrittenOffTheNodesThreadWhichKeepsServingMeanwhile) {
  const testing::TempDir temp{"rules-feed"};
  const fs::path cache = temp.path() / "rules-cache.yaml";
  std::ofstream(cache) << kOld;

  boost::asio::io_context io;
  NodeHostOptions ho;
  ho.bind = "127.0.0.1:0";
  ho.rules_text = kOld;
  ho.node.membership = MembershipKind::kHeartbeat;
  NodeHost host(io, ho);

  const std::string body = kNew;
  testing::ScriptedServer server(
      io, "HTTP/1.1 200 OK\r\nETag: \"v2\"\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  std::promise<void> release;
  const std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> writing{false};
  std::atomic<std::thread::id> writer_thread{};
  RulesFeedOptions fo;
  fo.url = "http://" + server.url().host_header + "/rules.yaml";
  fo.cache = cache.string();
  fo.poll_ns = int64_t(3600) * 1'000'000'000;  // one poll: the first, at start
  fo.before_cache_write = [&] {
    writer_thread = std::this_thread::get_id();
    writing = true;
    // Held until the test lets it go (bounded: a write on the node's thread, as before the
    // fix, would otherwise hang the test instead of failing it).
    (void)gate.wait_for(std::chrono::seconds(10));
  };
  RulesFeed feed(io, host, fo, "\"v1\"");
  feed.start();

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  const auto run_until = [&](const auto& done) {
    while (!done() && std::chrono::steady_clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(50));
    return done();
  };
  ASSERT_TRUE(run_until([&] { return host.rules_version() == content_version(body) && writing.load(); }));
  EXPECT_NE(writer_thread.load(), std::this_thread::get_id());
  // The write is held on its thread; the node's thread still runs what it is given.
  bool served = false;
  boost::asio::post(io, [&] { served = true; });
  EXPECT_TRUE(run_until([&] { return served; }));
  EXPECT_EQ(read(cache), kOld);  // not yet replaced
  release.set_value();
  EXPECT_TRUE(run_until([&] { return read(cache) == body; }));
  StatsList stats;
  feed.append_stats(stats);
  const auto failures =
      std::find_if(stats.begin(), stats.end(), [](const auto& s) { return s.first == "rules_cache_write_failures"; });
  ASSERT_NE(failures, stats.end());
  EXPECT_EQ(failures->second, 0);
  feed.stop();
}

}  // namespace
}  // namespace tollgate
