// tollgate::Member on 127.0.0.1: bad options fail at construction with what to fix; two members
// in this process, each checked from several threads at once while their background threads
// gossip, charge exactly what the other admitted. CI runs these under ThreadSanitizer too. (The
// mixed cluster with real daemons is in tests/integration/cluster_test.cc.)
#include "tollgate/member.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tollgate/config_error.h"

namespace tollgate {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit = 20s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

constexpr const char* kRules = "rules:\n  - {match: \"k*\", rate: 1/h, burst: 1000000, max_debt: 1000000}\n";

// Heartbeat membership on ports the kernel picks: the first member seeds to nothing, the second
// joins through the first.
MemberOptions options(const std::string& id, const std::string& seed) {
  MemberOptions o;
  o.node_id = id;
  o.bind = "127.0.0.1:0";
  o.insecure_gossip = true;
  o.rules_yaml = kRules;
  o.seeds = {seed};
  o.settings = {{"membership", "heartbeat"}, {"interval", "20ms"}, {"fail-after", "1s"}, {"push-pull-interval", "200ms"}};
  return o;
}

std::string error_of(const MemberOptions& o) {
  try {
    Member m(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Member, BadOptionsFailAtConstructionWithWhatToFix) {
  MemberOptions o = options("a", "127.0.0.1:9");
  MemberOptions bad = o;
  bad.settings.push_back({"fail-aftr", "3s"});
  EXPECT_NE(error_of(bad).find("unknown setting \"fail-aftr\""), std::string::npos) << error_of(bad);
  bad = o;
  bad.settings.push_back({"fanout", "0"});
  EXPECT_NE(error_of(bad).find("setting fanout must be"), std::string::npos) << error_of(bad);
  bad = o;
  bad.insecure_gossip = false;  // and no key
  EXPECT_NE(error_of(bad).find("gossip must be authenticated"), std::string::npos) << error_of(bad);
  bad = o;
  bad.transport = "quic";
  EXPECT_NE(error_of(bad).find("transport must be udp or tcp"), std::string::npos) << error_of(bad);
  bad = o;
  bad.rules_file = "/nonexistent/rules.yaml";  // and rules_yaml too
  EXPECT_NE(error_of(bad).find("rules_file or as rules_yaml"), std::string::npos) << error_of(bad);
  bad = o;
  bad.rules_yaml = "rules:\n  - {match: \"k*\", rate: fast}\n";
  EXPECT_NE(error_of(bad).find("rules_yaml:2"), std::string::npos) << error_of(bad);
  bad = o;
  bad.settings = {};  // static membership, no peers file
  EXPECT_NE(error_of(bad).find("static membership needs peers_file"), std::string::npos) << error_of(bad);
  bad.peers_file = "/nonexistent/peers.txt";
  EXPECT_NE(error_of(bad).find("/nonexistent/peers.txt"), std::string::npos) << error_of(bad);
  bad = o;
  bad.bind = "127.0.0.1:99999";
  EXPECT_NE(error_of(bad).find("127.0.0.1:99999"), std::string::npos) << error_of(bad);
}

// Two members, four threads checking at each while their background threads run rounds, seal
// (early too: thousands of keys) and gossip: each member charges exactly what both admitted.
TEST(Member, TwoMembersCheckedFromManyThreadsChargeEachOthersConsumptionOnce) {
  Member a(options("a", "127.0.0.1:9"));
  Member b(options("b", "127.0.0.1:" + std::to_string(a.gossip_port())));
  ASSERT_TRUE(eventually([&] { return a.stats().members_alive == 1 && b.stats().members_alive == 1; }));
  constexpr int kThreads = 4, kChecks = 3000;
  std::atomic<int64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2 * kThreads; ++t) {
    threads.emplace_back([&, t] {
      Member& m = t < kThreads ? a : b;
      for (int n = 0; n < kChecks; ++n) {
        // One hot key everyone shares, and keys of this thread's own (enough for early seals).
        const std::string key = n % 2 ? "k-hot" : "k" + std::to_string(t) + "-" + std::to_string(n);
        if (m.check(key, 1).allowed) admitted.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(admitted.load(), 2 * kThreads * kChecks);
  const int64_t hot = 2 * kThreads * kChecks / 2;
  EXPECT_TRUE(eventually([&] {
    return a.check("k-hot", 0).remaining == 1'000'000 - hot && b.check("k-hot", 0).remaining == 1'000'000 - hot;
  })) << a.check("k-hot", 0).remaining << " " << b.check("k-hot", 0).remaining;
  // One of the other member's own keys, at this member.
  EXPECT_TRUE(eventually([&] { return a.check("k5-0", 0).remaining == 999'999; }));
  EXPECT_TRUE(eventually([&] { return b.check("k0-0", 0).remaining == 999'999; }));
  // Thousands of new keys within a round: the checks asked the member's thread to seal early.
  EXPECT_GT(a.stats().early_seals + b.stats().early_seals, 0u);
  EXPECT_EQ(a.stats().stopped_by, "");
}

}  // namespace
}  // namespace tollgate
