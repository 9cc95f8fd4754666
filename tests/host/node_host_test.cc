// The node's host (src/host): rules and RLS configs are read and parsed off the node's thread,
// which keeps serving meanwhile (issue 34, finding 6: a large document held the node, and every
// client failing open with it, for as long as yaml-cpp took).
#include "host/node_host.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace tollgate {
namespace {

namespace fs = std::filesystem;

class NodeHostLoads : public ::testing::Test {
 protected:
  void SetUp() override { write_rules(5); }

  void write_rules(int burst) {
    const fs::path tmp = dir_ / "rules.yaml.new";
    std::ofstream(tmp) << "rules:\n  - {match: \"k*\", rate: 1/s, burst: " << burst << "}\n";
    fs::rename(tmp, dir_ / "rules.yaml");
  }
  NodeHostOptions options() {
    NodeHostOptions o;
    o.bind = "127.0.0.1:0";
    o.rules_file = (dir_ / "rules.yaml").string();
    o.node.membership = MembershipKind::kHeartbeat;  // no peers file
    o.on_load_start = [this] {
      loader_thread_ = std::this_thread::get_id();
      // Held until the test lets it go (bounded: a load run on the owner's thread, as before
      // the fix, would otherwise hang the test instead of failing it).
      (void)gate_.wait_for(std::chrono::seconds(10));
    };
    return o;
  }
  // Runs the owner's handlers until `done` or 10 s.
  void run_until(boost::asio::io_context& io, const bool& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done && std::chrono::steady_clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(100));
  }
  static int burst(NodeHost& host) { return int(host.node().table().limit_for("k1")->burst); }

  const testing::TempDir temp_{"node-host"};
  const fs::path& dir_ = temp_.path();
  std::promise<void> release_;
  std::shared_future<void> gate_ = release_.get_future().share();
  std::atomic<std::thread::id> loader_thread_{};
};

TEST_F(NodeHostLoads, ReloadParsesOffTheOwnersThreadWhichKeepsServing) {
  boost::asio::io_context io;
  NodeHost host(io, options());
  ASSERT_EQ(burst(host), 5);
  write_rules(7);
  bool reloaded = false;
  host.reload([&] { reloaded = true; });
  // The load is held on its thread; the owner's thread still runs what it is given.
  bool served = false;
  boost::asio::post(io, [&] { served = true; });
  run_until(io, served);
  EXPECT_TRUE(served);
  EXPECT_FALSE(reloaded);
  EXPECT_EQ(burst(host), 5);  // the rules in force until the new ones are parsed
  release_.set_value();
  run_until(io, reloaded);
  ASSERT_TRUE(reloaded);
  EXPECT_NE(loader_thread_.load(), std::this_thread::get_id());
  EXPECT_EQ(burst(host), 7);
  EXPECT_EQ(host.reloads().rules, 1u);
}

TEST_F(NodeHostLoads, ARefusedOfferKeepsTheRulesAndAnOfferMadeMeanwhileWaitsItsTurn) {
  boost::asio::io_context io;
  NodeHost host(io, options());
  std::string first = "unset", second = "unset", third = "unset";
  host.offer_rules("rules:\n  - {match: \"k*\", rate: 1/s, brust: 9}\n", "feed",
                   [&](const std::string& why) { first = why; });
  // Both made while the first is held: the second is superseded by the third before it starts.
  host.offer_rules("rules:\n  - {match: \"k*\", rate: 1/s, burst: 8}\n", "feed",
                   [&](const std::string& why) { second = why; });
  host.offer_rules("rules:\n  - {match: \"k*\", rate: 1/s, burst: 9}\n", "feed",
                   [&](const std::string& why) { third = why; });
  EXPECT_NE(second.find("superseded"), std::string::npos) << second;
  release_.set_value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (third == "unset" && std::chrono::steady_clock::now() < deadline)
    io.run_one_for(std::chrono::milliseconds(100));
  EXPECT_NE(first.find("brust"), std::string::npos) << first;  // refused, with the field it names
  EXPECT_EQ(third, "");
  EXPECT_EQ(burst(host), 9);
  EXPECT_EQ(host.reloads().rules_failed, 1u);
  EXPECT_EQ(host.reloads().rules, 1u);
}

TEST_F(NodeHostLoads, ALoadUnderWayWhenTheHostGoesIsDroppedNotRunOnAGoneHost) {
  boost::asio::io_context io;
  bool reloaded = false;
  {
    NodeHost host(io, options());
    write_rules(7);
    host.reload([&] { reloaded = true; });
    release_.set_value();
  }           // the destructor waits for the loader thread; its answer finds the host gone
  io.poll();  // whatever the loader posted before the join is ready now
  EXPECT_FALSE(reloaded);
}

// Broken files on reload (issue 37, item 8): the one in force stays, the failure is counted and
// logged, and a fixed file is taken again.
TEST_F(NodeHostLoads, ABrokenClusterKeyFileOnReloadKeepsTheKeysInForceAndIsCounted) {
  boost::asio::io_context io;
  NodeHostOptions o = options();
  o.on_load_start = nullptr;  // loads are not held here
  const fs::path key = dir_ / "cluster.key";
  std::ofstream(key) << std::string(64, 'a') << "\n";
  fs::permissions(key, fs::perms::owner_read | fs::perms::owner_write);
  o.cluster_key_file = key.string();
  std::vector<std::string> errors;
  o.log = [&](LogLevel level, const std::string& line) {
    if (level == LogLevel::kError) errors.push_back(line);
  };
  NodeHost host(io, o);
  std::ofstream(key, std::ios::trunc) << "not a key\n";
  bool reloaded = false;
  host.reload([&] { reloaded = true; });
  run_until(io, reloaded);
  EXPECT_EQ(host.reloads().keys_failed, 1u);
  EXPECT_EQ(host.reloads().keys, 0u);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("cluster keys not reloaded, the previous keys stay in force"), std::string::npos)
      << errors[0];
  std::ofstream(key, std::ios::trunc) << std::string(64, 'b') << "\n";
  host.reload();
  EXPECT_EQ(host.reloads().keys, 1u);  // read at once: the next round is signed with it
}

TEST_F(NodeHostLoads, ABrokenPeersFileIsRefusedOnceAndCountedAndTheFixedOneIsTaken) {
  boost::asio::io_context io;
  NodeHostOptions o = options();
  o.on_load_start = nullptr;
  o.node.membership = MembershipKind::kStatic;
  o.node_id = "a";
  o.bind = "127.0.0.1:0";
  const fs::path peers = dir_ / "peers";
  std::ofstream(peers) << "a 127.0.0.1:1\nb 127.0.0.1:2\n";
  o.peers_file = peers.string();
  NodeHost host(io, o);
  host.start();
  std::ofstream(peers, std::ios::trunc) << "a 127.0.0.1:1\nb nowhere\n";
  bool refused = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(refused = host.reloads().peers_failed > 0) && std::chrono::steady_clock::now() < deadline) {
    io.run_one_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(refused);
  EXPECT_EQ(host.node().membership().view(host.now_ns()).size(), 2u);  // the previous list
  std::ofstream(peers, std::ios::trunc) << "a 127.0.0.1:1\nb 127.0.0.1:2\nc 127.0.0.1:3\n";
  bool taken = false;
  while (!(taken = host.reloads().peers > 0) &&
         std::chrono::steady_clock::now() < deadline + std::chrono::seconds(10)) {
    io.run_one_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(taken);
  EXPECT_EQ(host.reloads().peers_failed, 1u);  // reported once, not every second
  EXPECT_EQ(host.node().membership().view(host.now_ns()).size(), 3u);
  host.stop_rounds();
}

// Every stat the host reports is declared (util/stat_def.h), with a kind and help, beside it.
TEST_F(NodeHostLoads, EveryStatTheHostReportsIsDeclared) {
  boost::asio::io_context io;
  NodeHost host(io, options());
  StatCatalog catalog;
  catalog.add(NodeHost::stat_defs());
  const StatsList stats = host.stats();
  ASSERT_GT(stats.size(), 50u);
  for (const auto& [name, value] : stats) {
    const StatCatalog::Entry* e = catalog.find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_FALSE(e->help.empty()) << name;
  }
  ASSERT_NE(catalog.find("transport_dropped_bad_mac"), nullptr);  // a family
  EXPECT_EQ(catalog.find("keys")->kind, StatKind::kGauge);
  EXPECT_EQ(catalog.find("checks")->kind, StatKind::kCounter);
}

}  // namespace
}  // namespace tollgate
