// Real tollgated processes on 127.0.0.1, for every combination of {mesh, gossip} x {udp, tcp} x
// {static, heartbeat}: propagation, cluster-wide accuracy under load, SIGKILL and restart, and a
// partition injected through the admin API. Waits are on observable state (members, balances)
// with generous bounds, never fixed sleeps: strict timing properties belong to the simulator.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "codec/codec.h"
#include "process/child_process.h"
#include "tollgate/client.h"
#include "tollgate/member.h"

namespace tollgate {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Combo {
  const char* mode;
  const char* transport;
  const char* membership;
  // Client API threads (--threads), unless a test gives its own: 1, what a 2-core machine gets
  // by default, or 2, what a 4-core host gets (issue 37, item 9: the concurrent key table,
  // checks on worker threads and gRPC's, under every test of the matrix).
  int threads = 1;
};
std::string combo_name(const ::testing::TestParamInfo<Combo>& info) {
  return std::string(info.param.mode) + "_" + info.param.transport + "_" + info.param.membership +
         (info.param.threads > 1 ? "_threads" + std::to_string(info.param.threads) : "");
}

// Polls `cond` until it holds or `limit` passes. Returns whether it held.
// Under TOLLGATE_TEST_WRAPPER node 0 runs under valgrind (CI's memcheck step), 20-50x slower:
// valgrind alone takes ~3 s to load tollgated before main, so every wait gets 4x its limit (CI
// saw a cluster that needed more than 15 s to see each other alive; alone here it takes ~5 s).
bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit = 15s) {
  static const bool wrapped = [] {
    const char* w = std::getenv("TOLLGATE_TEST_WRAPPER");
    return w && *w;
  }();
  const auto end = Clock::now() + (wrapped ? 4 * limit : limit);
  while (Clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(20ms);  // polling interval of a bounded wait, not a synchronization
  }
  return cond();
}

class Cluster {
 public:
  // Extra flags for node i (e.g. a cluster key file).
  using ExtraArgs = std::function<std::vector<std::string>(size_t)>;

  // `listed`: how many nodes the peers file lists at first (all by default).
  // `env`: NAME=value entries added to the daemons' environment.
  // Fault injection is on (--enable-fault-injection): tests cut and degrade the network with it.
  // `started`: how many nodes are started as daemons (all by default); the others are listed and
  // have a port and a client, for a member the test runs itself.
  Cluster(size_t n, Combo combo, const std::string& rules, ExtraArgs extra = {}, size_t listed = SIZE_MAX,
          std::vector<std::string> env = {}, size_t started = SIZE_MAX)
      : combo_(combo), extra_(std::move(extra)), env_(std::move(env)) {
    dir_ = fs::temp_directory_path() / ("tollgate-it-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "rules.yaml") << rules;
    // Gossip is authenticated by default (tollgated refuses to start without a key): one key for
    // the cluster, unless a test gives its nodes keys of their own.
    std::ofstream(dir_ / "cluster.key") << std::string(64, 'c') << "\n";
    fs::permissions(dir_ / "cluster.key", fs::perms::owner_read | fs::perms::owner_write);
    for (size_t i = 0; i < n; ++i) ports_.push_back(process::free_loopback_port());
    write_peers(std::min(n, listed));
    children_.resize(n);
    for (size_t i = 0; i < std::min(n, started); ++i) start(i);
    for (size_t i = 0; i < n; ++i) {
      ClientOptions o;
      o.endpoint = "unix:" + socket_path(i);
      o.deadline = 1s;  // a loaded 2-core machine (and ASan): a late answer must not read as a decision
      o.fail_open = false;
      clients_.push_back(std::make_unique<Client>(o));
    }
  }
  ~Cluster() {
    clients_.clear();
    for (size_t i = 0; i < children_.size(); ++i) stop(i, SIGTERM);
    std::error_code ec;
    if (!::testing::Test::HasFailure()) fs::remove_all(dir_, ec);
  }

  static std::string id(size_t i) { return "node-" + std::to_string(i); }
  // Whether nodes (re)started from now on accept fault injection.
  void set_faults_enabled(bool on) { faults_enabled_ = on; }
  void restart(size_t i) {
    stop(i, SIGTERM);
    start(i);
  }
  const std::filesystem::path& dir() const { return dir_; }

  // Rewrites the peers file with the first `count` nodes (atomically: write, then rename).
  void write_peers(size_t count) {
    {
      std::ofstream peers(dir_ / "peers.txt.new");
      for (size_t i = 0; i < count; ++i) peers << id(i) << " 127.0.0.1:" << ports_[i] << "\n";
    }
    fs::rename(dir_ / "peers.txt.new", dir_ / "peers.txt");
  }
  std::string socket_path(size_t i) const { return (dir_ / (id(i) + ".sock")).string(); }
  std::string address(size_t i) const { return "127.0.0.1:" + std::to_string(ports_[i]); }

  void start(size_t i) {
    std::vector<std::string> args = {TOLLGATED_PATH,
                                     "--node-id",
                                     id(i),
                                     "--bind",
                                     address(i),
                                     "--listen",
                                     "unix:" + socket_path(i),
                                     "--rules",
                                     (dir_ / "rules.yaml").string(),
                                     "--mode",
                                     combo_.mode,
                                     "--transport",
                                     combo_.transport,
                                     "--membership",
                                     combo_.membership,
                                     "--interval",
                                     "50ms",
                                     "--fail-after",
                                     "600ms",
                                     "--probe-interval",
                                     "200ms",
                                     "--push-pull-interval",
                                     "500ms",
                                     "--log-level",
                                     "warn"};
    if (faults_enabled_) args.push_back("--enable-fault-injection");
    if (std::string(combo_.membership) == "static") {
      args.insert(args.end(), {"--peers-file", (dir_ / "peers.txt").string()});
    } else {
      args.insert(args.end(), {"--seeds", address(0)});
    }
    bool keyed = false, threads = false;
    if (extra_) {
      for (std::string& a : extra_(i)) {
        keyed = keyed || a == "--cluster-key-file" || a == "--insecure-gossip";
        threads = threads || a == "--threads";
        args.push_back(std::move(a));
      }
    }
    if (!keyed) args.insert(args.end(), {"--cluster-key-file", (dir_ / "cluster.key").string()});
    if (!threads) args.insert(args.end(), {"--threads", std::to_string(combo_.threads)});
    // TOLLGATE_TEST_WRAPPER (e.g. "valgrind --error-exitcode=99 --leak-check=full"): node 0 runs
    // under it, and its exit status is checked when it stops (see stop()).
    const char* wrapper = i == 0 ? std::getenv("TOLLGATE_TEST_WRAPPER") : nullptr;
    if (wrapper && *wrapper) {
      std::vector<std::string> words;
      std::istringstream split(wrapper);
      for (std::string w; split >> w;) words.push_back(w);
      args.insert(args.begin(), words.begin(), words.end());
      wrapped_ = true;
    }
    children_[i] = process::ChildProcess({.argv = args, .env = env_, .log = dir_ / (id(i) + ".log")});
  }

  // Returns the waitpid status (-1 if the node was not running).
  int stop(size_t i, int signo) {
    if (!children_[i].running()) return -1;
    children_[i].signal(signo);
    // A daemon that does not leave within 30 s is a bug (it would hang the suite until ctest's
    // timeout, with nothing to show): its threads' stacks, then SIGKILL and a failure.
    std::optional<int> exited = children_[i].wait_for(30s);
    if (!exited) {
      const std::string stacks = process::thread_stacks(children_[i].pid());
      const int status = children_[i].kill();
      ADD_FAILURE() << id(i) << " did not exit within 30 s of signal " << signo << "; its threads:\n"
                    << stacks << "\nits log:\n"
                    << log(i);
      return status;
    }
    const int status = *exited;
    // SIGTERM is a clean leave: exit 0, whatever the build. A sanitizer's report at exit (ASan,
    // LSan, UBSan with halt_on_error, TSan's exitcode) or a crash while leaving fails the test.
    if (signo == SIGTERM) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << id(i) << (wrapped_ && i == 0 ? " under TOLLGATE_TEST_WRAPPER" : "") << " exited with status " << status
          << " after SIGTERM\n"
          << log(i);
    }
    return status;
  }

  // SIGTERM, then SIGTERM again every 200 us until the process is gone (a script's cleanup, an
  // operator pressing ^C twice): the repeats land in every phase of the leave and of the exit
  // after it. Returns the waitpid status; a daemon still running after 30 s fails the test.
  int stop_with_repeated_sigterm(size_t i) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      children_[i].signal(SIGTERM);
      if (std::optional<int> status = children_[i].poll()) return *status;
      std::this_thread::sleep_for(200us);  // pacing the repeats, not waiting for anything
    }
    ADD_FAILURE() << id(i) << " still runs 30 s after the first SIGTERM\n" << log(i);
    return children_[i].kill();
  }

  Client& client(size_t i) { return *clients_[i]; }

  // How node `observer` sees node `subject` ("alive", "dead", ...), "" if it does not list it,
  // or "no answer: ..." when the observer does not answer (so no expectation passes against a
  // dead daemon).
  std::string state_of(size_t observer, size_t subject) {
    std::string error;
    auto members = clients_[observer]->members(&error);
    if (!members) return "no answer: " + error;
    for (const MemberInfo& m : *members) {
      if (m.id == id(subject)) return member_state_name(m.state);
    }
    return "";
  }
  // Every pair of `nodes` sees each other alive, and none is still waiting at start for a peer's
  // balances (the `syncing` gauge, docs/design.md 6.5: until then it denies long-window keys).
  bool all_alive(const std::vector<size_t>& nodes) {
    for (size_t a : nodes) {
      for (size_t b : nodes) {
        if (a != b && state_of(a, b) != "alive") return false;
      }
    }
    for (size_t a : nodes) {
      if (stat(a, "syncing") != 0) return false;
    }
    return true;
  }
  pid_t pid(size_t i) const { return children_[i].pid(); }
  // Every counter of node i, "name=value ...", for failure messages.
  std::string stats_text(size_t i) {
    std::string out;
    if (auto s = clients_[i]->stats()) {
      for (const auto& [name, value] : *s) {
        if (value != 0) out += name + "=" + std::to_string(value) + " ";
      }
    }
    return out;
  }
  // Resident memory of node i, in KiB (VmRSS), or -1.
  int64_t rss_kib(size_t i) const {
    std::ifstream in("/proc/" + std::to_string(children_[i].pid()) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
    }
    return -1;
  }
  int64_t stat(size_t i, const std::string& name) {
    auto stats = clients_[i]->stats();
    if (!stats) return -1;
    for (const auto& [n, v] : *stats) {
      if (n == name) return v;
    }
    return 0;
  }
  // Whole tokens left for `key` at node i (a cost-0 query), or INT64_MIN if it did not answer.
  int64_t remaining(size_t i, const std::string& key) {
    CheckReply r = clients_[i]->check(key, 0);
    return r.from_daemon() ? r.remaining : INT64_MIN;
  }
  // Replaces the rules file (every node reads it on SIGHUP).
  void write_rules(const std::string& text) {
    std::ofstream(dir_ / "rules.yaml.new") << text;
    fs::rename(dir_ / "rules.yaml.new", dir_ / "rules.yaml");
  }
  // Replaces the cluster key file the nodes share (read on SIGHUP).
  void write_keys(const std::string& text) {
    std::ofstream(dir_ / "cluster.key.new") << text;
    fs::permissions(dir_ / "cluster.key.new", fs::perms::owner_read | fs::perms::owner_write);
    fs::rename(dir_ / "cluster.key.new", dir_ / "cluster.key");
  }
  void sighup(size_t i) { children_[i].signal(SIGHUP); }
  std::string log(size_t i) const {
    std::ifstream in(dir_ / (id(i) + ".log"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  static inline int counter_ = 0;
  Combo combo_;
  ExtraArgs extra_;
  fs::path dir_;
  std::vector<uint16_t> ports_;
  std::vector<process::ChildProcess> children_;
  std::vector<std::string> env_;
  bool faults_enabled_ = true;
  bool wrapped_ = false;
  std::vector<std::unique_ptr<Client>> clients_;
};

// Under a sanitizer the daemons' resident memory includes its shadow memory (several times the
// program's own), so memory budgets are checked in the plain build only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Limits that barely refill during a test, so balances show exactly what was charged.
constexpr const char* kSlowRules = R"(rules:
  - match: "k*"
    rate: 1/h
    burst: 1000
    max_debt: 1000
)";

// Lets `rounds` more gossip rounds run at each of `nodes` (20 rounds: at least two push-pull
// periods of 500 ms at the 50 ms interval): late copies, retransmits and push-pulls land before
// a check that nothing was charged twice. Not a fixed sleep: on a loaded machine the rounds come
// later, and this waits for them (issue 37, item 10).
void let_rounds_run(Cluster& c, std::initializer_list<size_t> nodes, int64_t rounds = 20) {
  std::vector<std::pair<size_t, int64_t>> from;
  for (size_t n : nodes) from.emplace_back(n, c.stat(n, "rounds"));
  for (const auto& [n, start] : from) {
    EXPECT_TRUE(eventually([&, n = n, start = start] { return c.stat(n, "rounds") >= start + rounds; }, 60s))
        << "node " << n << " ran " << c.stat(n, "rounds") - start << " of " << rounds << " rounds";
  }
}

class ClusterTest : public ::testing::TestWithParam<Combo> {};
bool is_relay(const Combo& c) { return std::string(c.mode) == "relay"; }

// Every node loses 30% of what it sends, duplicates 20%, and delays each message by a random
// 0-200 ms (so they arrive out of order), while all three spend. Once the faults are lifted
// every node has charged exactly what the cluster admitted: nothing twice (duplicates, relays,
// repairs) and, thanks to push-pull, nothing lost.
TEST_P(ClusterTest, UnderLossDuplicationAndReorderingNoNodeChargesTwice) {
  Cluster c(3, GetParam(), kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  FaultSettings faults;
  faults.loss = 0.3;
  faults.duplicate = 0.2;
  faults.jitter_ms = 200;
  for (size_t n = 0; n < 3; ++n) ASSERT_EQ(c.client(n).set_faults(faults), "");
  int64_t admitted = 0;
  for (int i = 0; i < 60; ++i) {
    const size_t n = size_t(i) % 3;
    const int64_t cost = int64_t(n) + 1;
    ASSERT_TRUE(c.client(n).check("k", cost).allowed);
    admitted += cost;
    std::this_thread::sleep_for(20ms);  // spreads the spending over ~25 rounds of faulty gossip
  }
  for (size_t n = 0; n < 3; ++n) ASSERT_EQ(c.client(n).set_faults(FaultSettings{}), "");
  if (is_relay(GetParam())) {
    // Relay repairs within a group only: a batch lost on both sends to a contact in another
    // group stays lost there (docs/design.md 7.7). What must hold is that nothing is charged
    // twice, and that each node has at least its own consumption.
    let_rounds_run(c, {0, 1, 2});  // late copies and push-pulls land
    for (size_t n = 0; n < 3; ++n) {
      EXPECT_GE(c.remaining(n, "k"), 1000 - admitted) << "node " << n << " charged more than the cluster admitted";
      EXPECT_LE(c.remaining(n, "k"), 1000 - 20 * (int64_t(n) + 1)) << "node " << n;
    }
    return;
  }
  for (size_t n = 0; n < 3; ++n) {
    EXPECT_TRUE(eventually([&] { return c.remaining(n, "k") == 1000 - admitted; }, 15s))
        << "node " << n << " charged " << 1000 - c.remaining(n, "k") << ", the cluster admitted " << admitted;
  }
  let_rounds_run(c, {0, 1, 2});  // late copies, retransmits and push-pulls land
  for (size_t n = 0; n < 3; ++n) EXPECT_EQ(c.remaining(n, "k"), 1000 - admitted) << "node " << n << ", later";
  EXPECT_GT(c.stat(0, "faults_duplicated") + c.stat(1, "faults_duplicated"), 0);
  EXPECT_GT(c.stat(0, "faults_lost") + c.stat(1, "faults_lost"), 0);
}

TEST_P(ClusterTest, ConsumptionAtOneNodeReachesEveryNode) {
  Cluster c(3, GetParam(), kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(c.client(0).check("k1", 2).allowed);
  for (size_t n : {1u, 2u}) {
    EXPECT_TRUE(eventually([&] { return c.remaining(n, "k1") == 900; }, 5s))
        << "node " << n << " shows " << c.remaining(n, "k1");
  }
  // Nothing is charged twice, however many rounds of gossip and repair follow.
  ASSERT_TRUE(c.client(1).check("k2", 5).allowed);
  ASSERT_TRUE(eventually([&] { return c.remaining(0, "k2") == 995 && c.remaining(2, "k2") == 995; }, 5s));
  let_rounds_run(c, {0, 1, 2});  // retransmits and two push-pull periods
  for (size_t n = 0; n < 3; ++n) {
    EXPECT_EQ(c.remaining(n, "k1"), 900) << "node " << n;
    EXPECT_EQ(c.remaining(n, "k2"), 995) << "node " << n;
  }
}

TEST_P(ClusterTest, LoadSpreadOverAllNodesAdmitsWhatOneBucketWould) {
  // 100/s with a burst of 100; max_debt covers the parallel first burst of three nodes.
  Cluster c(3, GetParam(), "rules:\n  - {match: \"hot\", rate: 100/s, burst: 100, max_debt: 300}\n");
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  // Offered: 5x the limit, spread evenly: every node 167 checks/s for 3 s.
  const auto duration = 3s;
  std::atomic<int64_t> admitted{0}, undecided{0};
  const auto start = Clock::now();
  std::vector<std::thread> load;
  for (size_t n = 0; n < 3; ++n) {
    load.emplace_back([&, n] {
      auto next = start;
      while (next < start + duration) {
        const CheckReply r = c.client(n).check("hot", 1);
        if (!r.from_daemon()) {
          ++undecided;
        } else if (r.allowed) {
          ++admitted;
        }
        next += 6ms;
        std::this_thread::sleep_until(next);  // pacing the offered load, not synchronization
      }
    });
  }
  for (auto& t : load) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double ideal = 100 + 100 * seconds;  // one bucket: the burst, then the refill
  const double ratio = double(admitted) / ideal;
  RecordProperty("admitted_over_ideal", std::to_string(ratio));
  EXPECT_LT(undecided, 30) << "checks that timed out";
  EXPECT_GT(ratio, 0.90) << "admitted " << admitted << ", one ideal bucket " << ideal;
  EXPECT_LT(ratio, 1.10) << "admitted " << admitted << ", one ideal bucket " << ideal;
}

TEST_P(ClusterTest, KilledNodeIsDetectedAndRejoinsAfterRestart) {
  Cluster c(3, GetParam(), kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  ASSERT_TRUE(c.client(2).check("k", 100).allowed);
  ASSERT_TRUE(eventually([&] { return c.remaining(0, "k") == 900; }, 5s));
  c.stop(2, SIGKILL);
  const bool is_static = std::string(GetParam().membership) == "static";
  const std::string failed = is_static ? "unreachable" : "dead";
  EXPECT_TRUE(eventually([&] { return c.state_of(0, 2) == failed && c.state_of(1, 2) == failed; }, 10s))
      << "node 0 sees node 2 as " << c.state_of(0, 2);
  c.start(2);
  EXPECT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); }, 10s)) << c.log(2);
  // The restarted node relearned its past life's consumption from the others; nobody counted it twice.
  EXPECT_TRUE(eventually([&] { return c.remaining(2, "k") == 900; }, 5s))
      << "restarted node shows " << c.remaining(2, "k");
  EXPECT_EQ(c.remaining(0, "k"), 900);
  EXPECT_EQ(c.remaining(1, "k"), 900);
}

// SIGTERM: the node tells the others it leaves (they list it as left, not failed), removes its
// socket file, and exits; started again, it rejoins.
TEST_P(ClusterTest, SigtermLeavesCleanlyAndTheNodeCanComeBack) {
  Cluster c(3, GetParam(), kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  ASSERT_TRUE(std::filesystem::exists(c.socket_path(2)));
  c.stop(2, SIGTERM);  // waits for the process to exit
  EXPECT_FALSE(std::filesystem::exists(c.socket_path(2))) << "socket file left behind";
  // The default waits (15 s): under ASan beside two Python suites, right after a build, one run
  // in 16 failed with the 5 s and 10 s these had (ctest kept no output of which), and neither
  // time is what the test is about. The node's state is printed if it happens again.
  EXPECT_TRUE(eventually([&] { return c.state_of(0, 2) == "left" && c.state_of(1, 2) == "left"; }))
      << "node 0 sees node 2 as " << c.state_of(0, 2) << ", node 1 as " << c.state_of(1, 2);
  c.start(2);
  EXPECT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(2);
}

// SIGTERM while clients keep sending large batches: every check the leaving node answered as
// allowed, including those it answered while draining, is charged at the others; nothing it
// admitted is lost with it.
// A second SIGTERM while the node leaves (and while the process exits after it) changes nothing:
// the leave goes on, the exit status is 0 and what the node admitted reaches the others. Before
// the fix the daemon's signal set was cancelled at the first SIGTERM and destroyed before exit,
// so a repeat in that window killed it (status 143, caught by the docs walk-through in CI).
TEST(ClusterShutdown, RepeatedSigtermsWhileLeavingStillLeaveCleanly) {
  Cluster c(2, Combo{"mesh", "udp", "static"}, kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); })) << c.log(1);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c.client(1).check("k", 3).allowed);
  const int status = c.stop_with_repeated_sigterm(1);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "exited with " << process::describe_status(status) << "\n"
      << c.log(1);
  EXPECT_TRUE(eventually([&] { return c.state_of(0, 1) == "left"; })) << "node 0 sees node 1 as " << c.state_of(0, 1);
  EXPECT_EQ(c.remaining(0, "k"), 970);
}

TEST_P(ClusterTest, ChecksAnsweredWhileDrainingAreChargedAtTheOthers) {
  // Node 2 answers on two threads: it leaves only once neither can admit anything more.
  Cluster c(3, GetParam(), kSlowRules, [](size_t i) {
    return i == 2 ? std::vector<std::string>{"--threads", "2"} : std::vector<std::string>{};
  });
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  constexpr int kThreads = 4, kKeysPerThread = 20, kBatch = 250, kRounds = 40;
  auto key = [](int t, int k) { return "k" + std::to_string(t) + "-" + std::to_string(k); };
  std::atomic<bool> done{false};
  std::atomic<int64_t> allowed{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < kThreads; ++t) {
    senders.emplace_back([&, t] {
      std::vector<std::string> keys;
      for (int k = 0; k < kKeysPerThread; ++k) keys.push_back(key(t, k));
      std::vector<CheckItem> items;
      for (int i = 0; i < kBatch; ++i) items.push_back({keys[size_t(i % kKeysPerThread)], 1});
      // A key is asked for at most kRounds * kBatch / kKeysPerThread = 500 tokens, half its
      // burst: every check answered is allowed, and `allowed` is what node 2 told its clients.
      for (int round = 0; round < kRounds && !done; ++round) {
        for (const CheckReply& r : c.client(2).check_batch(items, std::chrono::seconds(2))) {
          if (r.from_daemon() && r.allowed) ++allowed;
        }
      }
    });
  }
  // SIGTERM once the batches are flowing, so that some are being answered when it lands.
  EXPECT_TRUE(eventually([&] { return c.stat(2, "api.checks") >= kBatch; }, 5s));
  c.stop(2, SIGTERM);
  done = true;
  for (auto& s : senders) s.join();
  ASSERT_GT(allowed.load(), 0);
  auto charged_at = [&](size_t node) {
    int64_t sum = 0;
    for (int t = 0; t < kThreads; ++t) {
      for (int k = 0; k < kKeysPerThread; ++k) sum += 1000 - c.remaining(node, key(t, k));
    }
    return sum;
  };
  // At least what the clients were told was allowed; at most that plus the requests in flight
  // when the connections were cut (admitted by node 2, answers never read).
  for (size_t node : {0u, 1u}) {
    EXPECT_TRUE(eventually([&] { return charged_at(node) >= allowed.load(); }, 5s))
        << "node " << node << " charged " << charged_at(node) << " of " << allowed.load() << " admitted";
    EXPECT_LE(charged_at(node), allowed.load() + kThreads * kBatch);
  }
}

// tollgated --threads 2: eight connections spread over the two client API threads check one
// hot key at once (exactly its burst is admitted, nothing twice), then a flood of distinct keys
// asks the node's thread to seal early; the peer sees every charge, members and stats are
// answered on either thread, and SIGTERM stops the daemon cleanly.
TEST(ClusterThreads, EightConnectionsOnTwoThreadsChargeExactlyOnceAndThePeerSeesEveryCharge) {
  Cluster c(2, Combo{"mesh", "udp", "static"}, kSlowRules, [](size_t i) {
    return std::vector<std::string>{"--threads", i == 0 ? "2" : "1"};
  });
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); })) << c.log(0);
  constexpr int kConnections = 8, kBatches = 25, kBatch = 10;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kConnections; ++i) {
    ClientOptions o;
    o.endpoint = "unix:" + c.socket_path(0);
    o.deadline = 2s;
    o.fail_open = false;
    clients.push_back(std::make_unique<Client>(o));
    ASSERT_TRUE(clients.back()->check("k-warm", 0).from_daemon());  // connected
  }
  // Both threads hold connections: the accepting thread hands each to the least loaded.
  EXPECT_GE(c.stat(0, "api.thread.0.connections_open"), 4) << c.stats_text(0);
  EXPECT_GE(c.stat(0, "api.thread.1.connections_open"), 4) << c.stats_text(0);

  std::atomic<int64_t> allowed{0}, denied{0}, unanswered{0};
  std::vector<std::thread> senders;
  for (int i = 0; i < kConnections; ++i) {
    senders.emplace_back([&, i] {
      const std::vector<CheckItem> items(kBatch, CheckItem{"k-hot", 1});
      for (int b = 0; b < kBatches; ++b) {
        for (const CheckReply& r : clients[size_t(i)]->check_batch(items, 2s)) {
          if (!r.from_daemon()) {
            ++unanswered;
          } else if (r.allowed) {
            ++allowed;
          } else {
            ++denied;
          }
        }
      }
    });
  }
  for (auto& s : senders) s.join();
  ASSERT_EQ(unanswered.load(), 0);
  EXPECT_EQ(allowed.load(), 1000);  // the burst, from 2,000 asked; 1/h refills nothing meanwhile
  EXPECT_EQ(denied.load(), 1000);
  EXPECT_GT(c.stat(0, "api.thread.0.checks"), 0) << c.stats_text(0);
  EXPECT_GT(c.stat(0, "api.thread.1.checks"), 0) << c.stats_text(0);
  EXPECT_TRUE(eventually([&] { return c.remaining(1, "k-hot") == 0; })) << c.remaining(1, "k-hot");

  // A flood of new keys: the checking threads cannot seal (the ledger is the node thread's), so
  // they ask the node's thread to (NodeOptions::seal_wanted), and it does before its round.
  constexpr int kKeys = 4000;
  std::vector<std::string> keys;  // CheckItem holds a view
  for (int k = 0; k < kKeys; ++k) keys.push_back("k-flood-" + std::to_string(k));
  std::vector<CheckItem> flood;
  for (const std::string& key : keys) flood.push_back({key, 1});
  for (int part = 0; part < kKeys / 500; ++part) {
    const std::span<const CheckItem> slice(flood.data() + part * 500, 500);
    for (const CheckReply& r : clients[size_t(part % kConnections)]->check_batch(slice, 2s)) {
      ASSERT_TRUE(r.from_daemon() && r.allowed) << r.error;
    }
  }
  EXPECT_TRUE(eventually([&] { return c.stat(0, "early_seals") > 0; })) << c.stats_text(0);
  std::vector<CheckItem> query;
  for (const CheckItem& item : flood) query.push_back({item.key, 0});
  int64_t charged = 0;
  EXPECT_TRUE(eventually([&] {
    charged = 0;
    for (size_t from = 0; from < query.size(); from += 1000) {  // the most one request may carry
      for (const CheckReply& r : c.client(1).check_batch(std::span(query).subspan(from, 1000), 2s)) {
        charged += r.from_daemon() ? 1000 - r.remaining : 0;
      }
    }
    return charged == kKeys;
  })) << charged
      << " of " << kKeys << " charged at node 1";

  // Requests that the node's thread answers, asked on every connection (either thread).
  for (auto& client : clients) {
    const auto members = client->members();
    ASSERT_TRUE(members.has_value());
    EXPECT_EQ(members->size(), 2u);
  }
  clients.clear();
  const int status = c.stop(0, SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << c.log(0);
  EXPECT_EQ(c.state_of(1, 0), "left");
}

TEST_P(ClusterTest, PartitionedSidesEnforceAloneAndHealWithoutDoubleCharging) {
  Cluster c(3, GetParam(), kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  // Cut node 2 off: it drops everything to and from 0 and 1, and they drop it.
  FaultSettings cut;
  cut.drop_to = {Cluster::id(0), Cluster::id(1)};
  cut.drop_from = cut.drop_to;
  ASSERT_EQ(c.client(2).set_faults(cut), "");
  FaultSettings cut2;
  cut2.drop_to = {Cluster::id(2)};
  cut2.drop_from = cut2.drop_to;
  ASSERT_EQ(c.client(0).set_faults(cut2), "");
  ASSERT_EQ(c.client(1).set_faults(cut2), "");
  ASSERT_TRUE(c.client(0).check("k", 100).allowed);
  ASSERT_TRUE(c.client(2).check("k", 30).allowed);
  // (Relay: node 0's contact in node 1's group may be node 2, cut off, until node 0 marks it
  // failed: the batch sent to it is lost to that group.)
  if (!is_relay(GetParam())) {
    EXPECT_TRUE(eventually([&] { return c.remaining(1, "k") == 900; }, 5s));
  }
  EXPECT_EQ(c.remaining(2, "k"), 970);  // on its own side, it enforces alone
  EXPECT_TRUE(eventually([&] { return c.state_of(0, 2) != "alive"; }, 10s));
  for (size_t n = 0; n < 3; ++n) ASSERT_EQ(c.client(n).set_faults(FaultSettings{}), "");
  if (is_relay(GetParam())) {
    // Relay does not repair across groups: what was admitted during the cut reaches the other
    // side only if the two share a group (docs/design.md 7.7). Nothing is charged twice.
    ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); }, 10s));
    let_rounds_run(c, {0, 1, 2});  // two push-pull periods within each group
    for (size_t n = 0; n < 3; ++n) EXPECT_GE(c.remaining(n, "k"), 870) << "node " << n;
    EXPECT_LE(c.remaining(0, "k"), 900);
    EXPECT_LE(c.remaining(2, "k"), 970);
    return;
  }
  for (size_t n = 0; n < 3; ++n) {
    EXPECT_TRUE(eventually([&] { return c.remaining(n, "k") == 870; }, 10s))
        << "node " << n << " shows " << c.remaining(n, "k");
  }
}

// Nodes 0 and 1 share a cluster key; node 2 signs with another. Its gossip is dropped and
// counted, and it never joins them.
TEST(ClusterSecurity, GossipSignedWithAnotherKeyIsDroppedAndCounted) {
  const std::string key_a(64, 'a'), key_b(64, 'b');
  std::filesystem::path dir;
  const auto started = std::chrono::steady_clock::now();  // before node 2 sends anything
  Cluster c(3, Combo{"mesh", "udp", "static"}, kSlowRules, [&](size_t i) {
    const auto path = std::filesystem::temp_directory_path() /
                      ("tollgate-it-key-" + std::to_string(getpid()) + "-" + std::to_string(i));
    std::ofstream(path) << (i < 2 ? key_a : key_b) << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return std::vector<std::string>{"--cluster-key-file", path.string()};
  });
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); }));
  ASSERT_TRUE(eventually([&] { return c.remaining(2, "k") == 1000; }));  // node 2 is up and answering
  ASSERT_TRUE(c.client(2).check("k", 500).allowed);
  ASSERT_TRUE(c.client(0).check("k", 10).allowed);
  EXPECT_TRUE(eventually([&] { return c.remaining(1, "k") == 990; }, 5s));
  EXPECT_TRUE(eventually([&] { return c.stat(0, "transport_dropped_bad_mac") > 0; }, 5s));
  EXPECT_TRUE(eventually([&] { return c.state_of(0, 2) == "unreachable"; }, 5s));
  EXPECT_EQ(c.remaining(0, "k"), 990);  // node 2's 500 never counted here
  EXPECT_EQ(c.remaining(2, "k"), 500);  // nor node 0's there
  // Node 0 drops every datagram from node 2 but logs it once per 10 s, not once per datagram.
  ASSERT_TRUE(eventually([&] { return c.stat(0, "transport_dropped_bad_mac") >= 40; }, 10s));
  const std::string log = c.log(0);
  const int64_t dropped = c.stat(0, "transport_dropped_bad_mac");
  size_t lines = 0;
  for (size_t at = 0; (at = log.find(c.address(2) + ": gossip datagram dropped: bad_mac", at)) != std::string::npos;
       ++at)
    ++lines;
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started).count();
  EXPECT_GE(lines, 1u) << log;
  // One line per 10 s of node 2's life (plus the first): a line per datagram would be 40 or more.
  EXPECT_LE(lines, size_t(1 + (seconds + 9) / 10)) << dropped << " drops in " << seconds << " s\n" << log;
  EXPECT_GE(dropped, int64_t(20 * lines));
  for (size_t i = 0; i < 3; ++i) {
    std::filesystem::remove(std::filesystem::temp_directory_path() /
                            ("tollgate-it-key-" + std::to_string(getpid()) + "-" + std::to_string(i)));
  }
}

// A host that floods node 0's gossip port with 100 times a member's traffic: the excess is
// dropped before it is parsed or authenticated and counted, node 0 keeps answering its clients
// and keeps hearing its real peer, and its memory does not grow with the flood.
// Fault injection cuts a node off; only a daemon started with --enable-fault-injection takes it.
TEST(ClusterSecurity, FaultInjectionIsRefusedUnlessTheDaemonEnablesIt) {
  Cluster c(2, Combo{"mesh", "udp", "static"}, kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); })) << c.log(0);
  c.set_faults_enabled(false);
  c.restart(1);
  FaultSettings isolate;
  isolate.loss = 1;
  // The client reconnects to the restarted daemon; until then its calls fail for that reason.
  std::string refused;
  EXPECT_TRUE(eventually([&] {
    refused = c.client(1).set_faults(isolate);
    return refused.find("--enable-fault-injection") != std::string::npos;
  })) << refused
      << "\n"
      << c.log(1);
  // Nothing was injected: node 1 still hears node 0 and is heard.
  ASSERT_TRUE(c.client(0).check("k", 7).allowed);
  EXPECT_TRUE(eventually([&] { return c.remaining(1, "k") == 993; }, 5s)) << c.remaining(1, "k") << "\n"
                                                                          << c.stats_text(1) << "\n"
                                                                          << c.log(1);
  EXPECT_EQ(c.stat(1, "faults_lost"), 0);
  // The daemon with it enabled takes the same request.
  EXPECT_EQ(c.client(0).set_faults(isolate), "");
  EXPECT_EQ(c.client(0).set_faults(FaultSettings{}), "");
}

// A local user opens connections to the client API and leaves them idle, as many as the daemon
// takes: a service's new client must still be answered (it takes an idle one's place once that
// has been idle a second), never refused for good and left failing open.
TEST(ClusterSecurity, IdleClientConnectionsCannotLockOutANewClient) {
  // Two threads, each holding 32 of the 64 and making room among its own.
  Cluster c(1, Combo{"mesh", "udp", "static"}, kSlowRules, [](size_t) {
    return std::vector<std::string>{"--api-max-connections", "64", "--threads", "2"};
  });
  ASSERT_TRUE(eventually([&] { return c.remaining(0, "k") == 1000; })) << c.log(0);
  std::vector<int> hoard;
  for (int i = 0; i < 80; ++i) {  // more than the limit: the last are refused or make room
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, c.socket_path(0).c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    hoard.push_back(fd);
  }
  ClientOptions o;
  o.endpoint = "unix:" + c.socket_path(0);
  o.fail_open = false;
  o.deadline = 1s;
  Client newcomer(o);
  CheckReply reply;
  EXPECT_TRUE(eventually([&] {
    reply = newcomer.check("k", 1);
    return reply.from_daemon();
  })) << reply.error;
  // The test's own stats connection is one uid's idle connection like the hoard's, so it may
  // be the one that made room (it reconnects at once): read through a retry.
  int64_t evicted = -1, open = -1;
  EXPECT_TRUE(eventually([&] {
    evicted = c.stat(0, "api.connections_evicted");
    open = c.stat(0, "api.connections_open");
    return evicted >= 1 && open >= 0;
  })) << evicted;
  EXPECT_LE(open, 64);
  for (int fd : hoard) ::close(fd);
}

// Datagrams captured from a real cluster (the peers file lists a "node-9" whose address is a
// socket this test owns, so both daemons probe it), replayed to node 0 a hundred times from
// that socket: authentic bytes, but not from their sender's address, so nothing is charged again
// and no digest request is answered. The same bytes stamped long ago would be stale anyway
// (TcpTransport/UdpTransport tests).
TEST(ClusterSecurity, AuthenticDatagramsCapturedAndReplayedFromAnotherAddressAreDropped) {
  Cluster c(2, Combo{"mesh", "udp", "static"}, kSlowRules);
  const int tap = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in tap_addr{};
  tap_addr.sin_family = AF_INET;
  tap_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(tap, reinterpret_cast<sockaddr*>(&tap_addr), sizeof tap_addr), 0);
  socklen_t len = sizeof tap_addr;
  ASSERT_EQ(::getsockname(tap, reinterpret_cast<sockaddr*>(&tap_addr), &len), 0);
  timeval tv{};
  tv.tv_sec = 5;
  ::setsockopt(tap, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  {
    std::ofstream peers(c.dir() / "peers.txt", std::ios::app);
    peers << "node-9 127.0.0.1:" << ntohs(tap_addr.sin_port) << "\n";
  }
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); })) << c.log(0);
  ASSERT_TRUE(eventually([&] { return c.state_of(1, 9) == "unreachable"; }, 15s)) << c.state_of(1, 9);
  ASSERT_TRUE(c.client(1).check("k", 10).allowed);
  ASSERT_TRUE(eventually([&] { return c.remaining(0, "k") == 990; })) << c.remaining(0, "k");
  // Capture a second of the daemons' gossip to node-9, queued on the socket since the peers
  // file named it: probes of an unreachable member, with membership rows and, in a node's
  // first round, digest requests. (Batches go to live members only; replays of those are the
  // SpoofedGossip tests'.)
  std::vector<std::string> captured;
  const auto until = Clock::now() + 1s;
  while (Clock::now() < until) {
    char buf[65536];
    const ssize_t n = ::recv(tap, buf, sizeof buf, 0);
    if (n > 0) captured.emplace_back(buf, size_t(n));
  }
  ASSERT_GT(captured.size(), 10u) << "node-9 is listed: both daemons gossip to it";
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(uint16_t(std::stoi(c.address(0).substr(c.address(0).rfind(':') + 1))));
  const int64_t repairs_before = c.stat(0, "repairs_sent");
  for (int i = 0; i < 100; ++i) {
    for (const std::string& d : captured)
      ::sendto(tap, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
  ASSERT_TRUE(eventually([&] { return c.stat(0, "gossip_dropped_wrong_source") >= 100; })) << c.stats_text(0);
  EXPECT_EQ(c.remaining(0, "k"), 990);
  EXPECT_EQ(c.remaining(1, "k"), 990);
  EXPECT_LE(c.stat(0, "repairs_sent") - repairs_before, 10) << "replayed digest requests drew repairs";
  ::close(tap);
}

// A UDP socket on 127.0.0.1 with a port the kernel picks; reads give up after 5 s.
struct UdpSocket {
  UdpSocket() {
    fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  }
  ~UdpSocket() { ::close(fd); }
  std::string address() const { return "127.0.0.1:" + std::to_string(ntohs(addr.sin_port)); }
  void send_to(uint16_t port, const std::string& bytes) const {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(port);
    ::sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
  // Bytes waiting to be read now (without waiting).
  size_t pending_bytes() const {
    size_t total = 0;
    char buf[65536];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0;) total += size_t(n);
    return total;
  }
  int fd;
  sockaddr_in addr{};
};

// Finding 2: a digest request naming a third party as the address to answer (the reflection
// attack), here even signed with the cluster key, draws nothing at that address: the request
// did not come from the address it names. And an authentic request stamped long ago (a capture
// replayed later) is dropped as stale before the node sees it.
TEST(ClusterSecurity, AForgedReplyAddressDrawsNothingAndAStaleRequestIsDropped) {
  Cluster c(2, Combo{"mesh", "udp", "heartbeat"}, kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); })) << c.log(0);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(c.client(1).check("k" + std::to_string(i), 1).allowed);
  ASSERT_TRUE(eventually([&] { return c.remaining(0, "k19") == 999; }));  // node 0 holds batches to repair
  const ClusterKeys key({std::string(32, '\xcc')});                       // the cluster.key file's 64 hex 'c's
  UdpSocket attacker, victim;
  const uint16_t node0 = uint16_t(std::stoi(c.address(0).substr(c.address(0).rfind(':') + 1)));
  GossipMessage m;
  m.sender = Cluster::id(1);
  m.sender_incarnation = 1;
  m.sender_address = victim.address();
  m.message_seq = 1'000'000;
  m.digest.emplace();  // "I have nothing": answered in full, were it answered
  m.digest_reply_wanted = true;
  const uint64_t now_s = uint64_t(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  for (int i = 0; i < 10; ++i) {
    ++m.message_seq;
    for (const std::string& d : encode_datagrams(m, key, 1400, nullptr, now_s)) attacker.send_to(node0, d);
  }
  ASSERT_TRUE(eventually([&] { return c.stat(0, "gossip_dropped_wrong_source") >= 10; })) << c.stats_text(0);
  EXPECT_EQ(victim.pending_bytes(), 0u) << "the cluster answered to a forged address";
  EXPECT_EQ(attacker.pending_bytes(), 0u);

  m.sender_address = attacker.address();  // its own address this time, but 100 s old
  for (int i = 0; i < 10; ++i) {
    ++m.message_seq;
    for (const std::string& d : encode_datagrams(m, key, 1400, nullptr, now_s - 100)) attacker.send_to(node0, d);
  }
  ASSERT_TRUE(eventually([&] { return c.stat(0, "transport_dropped_stale") >= 10; })) << c.stats_text(0);
  EXPECT_EQ(attacker.pending_bytes(), 0u);
  EXPECT_EQ(victim.pending_bytes(), 0u);
}

// The lesson of the systems we replace: a request over several limits must not charge the
// limits that allowed it when another denies it. Through the client library, on real daemons:
// a denied all-or-nothing request charges nothing anywhere; an allowed one charges every limit,
// cluster-wide.
TEST(ClusterAllOrNothing, ADeniedRequestChargesNoLimitAndAnAllowedOneChargesEveryLimit) {
  Cluster c(2, Combo{"mesh", "udp", "static"}, kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); })) << c.log(0);
  ASSERT_TRUE(c.client(0).check("kb", 999).allowed);  // kb has 1 left
  const CheckItem over[] = {{"ka", 10}, {"kb", 5}};
  const std::vector<CheckReply> denied = c.client(0).check_all(over);
  ASSERT_EQ(denied.size(), 2u);
  ASSERT_TRUE(denied[0].from_daemon()) << denied[0].error;
  EXPECT_FALSE(denied[0].allowed);
  EXPECT_EQ(denied[0].reason, DenyReason::kOtherCheckDenied);
  EXPECT_EQ(denied[1].reason, DenyReason::kInsufficientTokens);
  const CheckItem fits[] = {{"ka", 10}, {"kb", 1}};
  const std::vector<CheckReply> allowed = c.client(0).check_all(fits);
  EXPECT_TRUE(allowed[0].allowed && allowed[1].allowed);
  for (size_t n = 0; n < 2; ++n) {
    EXPECT_TRUE(eventually([&] { return c.remaining(n, "ka") == 990 && c.remaining(n, "kb") == 0; }))
        << "node " << n << ": ka " << c.remaining(n, "ka") << ", kb " << c.remaining(n, "kb");
  }
}

// `tollgate reset KEY` (issue 35): the key is full again at every daemon within a round or two,
// over gossip on real sockets, and what is admitted after counts everywhere once. A bad key is
// refused with a reason.
TEST(ClusterReset, AResetKeyIsFullAgainAtEveryDaemon) {
  Cluster c(3, Combo{"gossip", "udp", "static"}, kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  ASSERT_TRUE(c.client(0).check("k-reset", 900).allowed);
  for (size_t n = 0; n < 3; ++n) ASSERT_TRUE(eventually([&] { return c.remaining(n, "k-reset") == 100; }));
  const ResetReply r = c.client(1).reset("k-reset");
  ASSERT_EQ(r.error, "");
  EXPECT_TRUE(r.limited);
  EXPECT_EQ(r.remaining, 1000);
  for (size_t n = 0; n < 3; ++n) {
    EXPECT_TRUE(eventually([&] { return c.remaining(n, "k-reset") == 1000; }))
        << "node " << n << ": " << c.remaining(n, "k-reset");
  }
  ASSERT_TRUE(c.client(2).check("k-reset", 30).allowed);
  for (size_t n = 0; n < 3; ++n) EXPECT_TRUE(eventually([&] { return c.remaining(n, "k-reset") == 970; }));
  EXPECT_EQ(c.stat(1, "resets"), 1);
  EXPECT_GE(c.stat(0, "resets_applied"), 1);
  EXPECT_NE(c.client(0).reset("").error.find("no key"), std::string::npos);
  EXPECT_NE(c.client(0).reset(std::string("\x1e") + "web").error.find("Envoy"), std::string::npos);
}

// Concurrency leases (issue 40) on real daemons: a lease taken at one daemon counts at the
// others, its release (by the Lease's destructor) frees the slot everywhere, and a daemon that is
// killed with leases out takes them with it once the others mark it failed.
TEST(ClusterLeases, ALeaseCountsEverywhereIsFreedByItsReleaseAndDiesWithItsDaemon) {
  Cluster c(3, Combo{"gossip", "udp", "static"}, R"(rules:
  - match: "job:*"
    concurrency: 2
    lease_ttl: 10m
)");
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  // A request for more than the limit is never granted and reports the count as seen there.
  auto seen = [&](size_t n) { return c.client(n).acquire("job:a", 3).in_flight; };
  std::optional<Lease> first(c.client(0).acquire("job:a"));
  Lease second = c.client(0).acquire("job:a");
  ASSERT_TRUE(first->granted() && !first->id().empty()) << first->error << first->reason;
  ASSERT_TRUE(second.granted()) << second.error << second.reason;
  EXPECT_EQ(second.in_flight, 2);
  EXPECT_EQ(second.limit, 2);
  EXPECT_FALSE(c.client(0).acquire("job:a").granted()) << "the limit, at the daemon that holds both";
  for (size_t n : {1, 2}) EXPECT_TRUE(eventually([&] { return seen(n) == 2; })) << "node " << n << ": " << seen(n);
  EXPECT_FALSE(c.client(1).acquire("job:a").granted()) << "the limit, cluster-wide";
  EXPECT_TRUE(c.client(1).acquire("other-key").granted()) << "no concurrency rule: unlimited";

  first.reset();  // the destructor releases it
  ASSERT_TRUE(eventually([&] { return seen(1) == 1; })) << seen(1);
  Lease at_one = c.client(1).acquire("job:a");
  ASSERT_TRUE(at_one.granted()) << at_one.reason;
  EXPECT_FALSE(c.client(1).release_lease(second.id())) << "ids are the daemon's that granted them";
  EXPECT_TRUE(c.client(1).renew_lease(at_one.id(), std::chrono::minutes(5)).has_value());

  // Node 0 dies holding `second`: once 1 and 2 fail it (--fail-after 600ms here), its lease is free.
  c.stop(0, SIGKILL);
  EXPECT_TRUE(eventually([&] { return seen(2) == 1; })) << seen(2);
  Lease at_two = c.client(2).acquire("job:a");
  EXPECT_TRUE(at_two.granted()) << at_two.reason;
  EXPECT_TRUE(at_one.release());
  EXPECT_FALSE(at_one.release()) << "released once";
}

// SIGHUP re-reads the rules: a broken file leaves the old limits in force, a valid edit applies.
TEST(ClusterReload, ABrokenRulesFileKeepsTheOldLimitsAndAValidEditApplies) {
  Cluster c(2, Combo{"mesh", "udp", "static"}, kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); })) << c.log(0);
  ASSERT_EQ(c.remaining(0, "k"), 1000);
  const int64_t version = c.stat(0, "rules_version");
  c.write_rules("rules:\n  - {match: \"k*\", rate: fast, burst: 50}\n");
  c.sighup(0);
  // Refused (on SIGHUP, or by the file watch that may see the change first: once or twice).
  ASSERT_TRUE(eventually([&] { return c.stat(0, "rules_reload_failures") >= 1; }, 5s)) << c.log(0);
  EXPECT_EQ(c.stat(0, "rules_reloads"), 0);
  EXPECT_EQ(c.stat(0, "rules_version"), version);
  EXPECT_NE(
      c.log(0).find("rules not reloaded, the previous rules (version " + std::to_string(version) + ") stay in force"),
      std::string::npos)
      << c.log(0);
  EXPECT_TRUE(c.client(0).check("k", 100).allowed);  // the old burst of 1000 still holds
  ASSERT_TRUE(eventually([&] { return c.remaining(1, "k") == 900; }, 5s));

  c.write_rules("rules:\n  - {match: \"k*\", rate: 1/h, burst: 50, max_debt: 1000}\n");
  c.sighup(0);
  ASSERT_TRUE(eventually([&] { return c.stat(0, "rules_reloads") >= 1; }, 5s)) << c.log(0);
  EXPECT_EQ(c.remaining(0, "k"), 50);  // the balance clamped into the new burst
  EXPECT_FALSE(c.client(0).check("k", 51).allowed);
  EXPECT_NE(c.stat(0, "rules_version"), version);
  // Node 1 got no SIGHUP: it applies the edit from the file watch alone, within seconds.
  ASSERT_TRUE(eventually([&] { return c.remaining(1, "k") == 50; }, 5s)) << c.log(1);
  EXPECT_EQ(c.stat(1, "rules_version"), c.stat(0, "rules_version"));
}

// A key rotation, one SIGHUP per node per step (operations.md, "Rotating the key"), while three
// nodes keep spending: nothing is dropped for its MAC, nothing is lost, nothing is charged twice.
TEST(ClusterReload, AKeyRotationUnderTrafficKeepsTheClusterConnectedAndCharging) {
  Cluster c(3, Combo{"gossip", "udp", "static"}, kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  const std::string old_key(64, 'c'), new_key(64, 'd');  // the Cluster starts every node on 'c'
  std::atomic<bool> done{false};
  std::atomic<int64_t> admitted{0}, unknown{0};  // unknown: no answer in time (admitted or not)
  std::thread spender([&] {
    for (size_t i = 0; !done.load(); ++i) {
      const CheckReply r = c.client(i % 3).check("k", 1);
      if (!r.from_daemon()) {
        unknown.fetch_add(1);
      } else if (r.allowed) {
        admitted.fetch_add(1);
      }
      std::this_thread::sleep_for(5ms);  // paces the traffic; not a synchronization
    }
  });
  // Stops and joins the spender on every way out, a failed ASSERT included.
  struct Join {
    std::atomic<bool>& done;
    std::thread& thread;
    ~Join() {
      done.store(true);
      if (thread.joinable()) thread.join();
    }
  } join{done, spender};
  int64_t reloads = 0;
  for (const std::string& keys : {old_key + "\n" + new_key + "\n", new_key + "\n" + old_key + "\n", new_key + "\n"}) {
    c.write_keys(keys);
    ++reloads;
    for (size_t n = 0; n < 3; ++n) {
      c.sighup(n);
      ASSERT_TRUE(eventually([&] { return c.stat(n, "cluster_key_reloads") == reloads; }, 5s)) << c.log(n);
      // Some rounds of gossip between nodes on different steps before the next one reloads:
      // skipping a step would then drop messages for their MAC (checked below).
      const int64_t round = c.stat(n, "rounds");
      ASSERT_TRUE(eventually([&] { return c.stat(n, "rounds") >= round + 6; }, 5s));
    }
    // Every step carries the cluster's gossip: a check at node 0 reaches node 2.
    const int64_t before = admitted.load();
    EXPECT_TRUE(eventually(
        [&] {
      const int64_t left = c.remaining(2, "k");
      return left != INT64_MIN && 1000 - left >= before;
        },
        5s))
        << "step " << reloads;
  }
  done.store(true);
  spender.join();
  ASSERT_GT(admitted.load(), 0);
  // Each node has charged exactly what the cluster admitted (up to the checks whose answer came
  // too late to know).
  const int64_t low = 1000 - admitted.load() - unknown.load(), high = 1000 - admitted.load();
  for (size_t n = 0; n < 3; ++n) {
    EXPECT_TRUE(eventually(
        [&] {
      const int64_t left = c.remaining(n, "k");
      return left >= low && left <= high && left == c.remaining((n + 1) % 3, "k");
        },
        10s))
        << "node " << n << " shows " << c.remaining(n, "k") << " left of 1000 after " << admitted.load()
        << " admitted and " << unknown.load() << " unanswered";
    EXPECT_EQ(c.stat(n, "transport_dropped_bad_mac"), 0) << "node " << n;
    EXPECT_EQ(c.stat(n, "transport_dropped_missing_mac"), 0) << "node " << n;
    EXPECT_EQ(c.stat(n, "cluster_key_reload_failures"), 0) << "node " << n;
  }
  EXPECT_TRUE(c.all_alive({0, 1, 2}));
  // The reloads really changed the keys: node 0 taken back to the old key alone is no longer
  // understood by the others.
  c.write_keys(old_key + "\n");
  c.sighup(0);
  ASSERT_TRUE(eventually([&] { return c.stat(0, "cluster_key_reloads") == reloads + 1; }, 5s)) << c.log(0);
  EXPECT_TRUE(eventually([&] { return c.stat(1, "transport_dropped_bad_mac") > 0; }, 5s));
}

TEST(ClusterHardening, AGossipFloodIsDroppedAndCountedWhileTheClusterCarriesOn) {
  Cluster c(2, Combo{"mesh", "udp", "static"}, kSlowRules, [](size_t) {
    return std::vector<std::string>{"--gossip-peer-rate", "262144"};  // 256 KiB/s per source
  });
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); }));
  const int64_t rss_before = c.rss_kib(0);
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(uint16_t(std::stoi(c.address(0).substr(c.address(0).rfind(':') + 1))));
  const std::string junk(1400, '\x5a');
  // 40 MB in 1,400-byte datagrams, as fast as loopback takes them; between bursts, node 1
  // spends tokens and node 0 must still answer, and hear of it.
  int64_t spent = 0;
  for (int burst = 0; burst < 10; ++burst) {
    for (int i = 0; i < 3000; ++i) {
      ::sendto(fd, junk.data(), junk.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    }
    // A generous deadline: the point is that node 0 answers at all while flooded. Under a
    // sanitizer on a loaded 2-core machine the flood's burst can hold an answer past the
    // cluster clients' 1 s (an ASan run once failed here that way); latency under a flood is
    // measured by scripts/flood-latency, not asserted here.
    ASSERT_TRUE(c.client(0).check("other", 1, 10s).allowed) << "node 0 stopped answering its clients";
    ASSERT_TRUE(c.client(1).check("k", 10, 10s).allowed);
    spent += 10;
  }
  ::close(fd);
  EXPECT_TRUE(eventually([&] { return c.remaining(0, "k") == 1000 - spent; }, 10s))
      << "node 0 shows " << c.remaining(0, "k") << ": its real peer's gossip was crowded out";
  const int64_t limited = c.stat(0, "transport_dropped_rate_limited");
  // 29,141-29,788 of 30,000 when this test runs alone (docs/failure-modes.md): the 256 KiB/s
  // budget passes about 200 of them. Beside other tests (ctest -j2), or sanitized, the daemon
  // reads slower, so more overflow the socket's buffer in the kernel and are never seen at all:
  // once under 25,000 in a parallel run. So: at least half, counted and dropped unread. A Debug
  // ASan daemon reads far slower, and most overflow the kernel's buffer unseen: 9,442 and 9,8xx
  // in two of three runs alone on an idle machine (2026-11-24), so sanitized builds only require
  // that thousands were counted and dropped unread (the plain build holds the real figure).
  EXPECT_GT(limited, kSanitized ? 3'000 : 15'000) << "most of the 30,000 junk datagrams are dropped unread";
  const int64_t rss_after = c.rss_kib(0);
  if (!kSanitized) {
    EXPECT_LT(rss_after - rss_before, 16 * 1024) << "RSS " << rss_before << " -> " << rss_after << " KiB";
  }
  RecordProperty("rate_limited", std::to_string(limited));
  RecordProperty("rss_kib_before_after", std::to_string(rss_before) + " " + std::to_string(rss_after));
}

// 1,100 connections to a TCP gossip port, each a stalled 50 KB of a frame, from a host without
// the key (127.0.0.2): they used to be kept for ever, up to 1,024 of them (50 MB here; 1 GiB
// with 1 MiB frames), and the member's reconnect found no slot. Now strangers are capped per
// address, charged for their bytes and must authenticate within 5 s: memory stays small, and a
// member that restarts meanwhile reconnects and is heard.
TEST(ClusterHardening, StalledHalfFramesOnTheTcpGossipPortHoldLittleAndLockNoMemberOut) {
  // This process holds the 1,100 sockets: raise its soft descriptor limit (1,024 on a default
  // shell) up to the hard one, or say why it cannot run.
  rlimit files{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &files), 0);
  const rlim_t need = 1100 + 256;
  if (files.rlim_cur < need) {
    if (files.rlim_max < need) GTEST_SKIP() << "needs " << need << " descriptors; the hard limit is " << files.rlim_max;
    files.rlim_cur = need;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &files), 0) << std::strerror(errno);
  }
  Cluster c(2, Combo{"mesh", "tcp", "static"}, kSlowRules);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); })) << c.log(0);
  const int64_t rss_before = c.rss_kib(0);
  const uint16_t port = uint16_t(std::stoi(c.address(0).substr(c.address(0).rfind(':') + 1)));
  std::vector<int> stalled;
  std::string half(4 + 50'000, 'x');
  const uint32_t length = 60'000;  // under a stranger's frame limit, never completed
  for (int b = 0; b < 4; ++b) half[b] = char((length >> (24 - 8 * b)) & 0xff);
  for (int i = 0; i < 1100; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0) << "socket " << i << ": " << std::strerror(errno);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(0x7f000002);  // 127.0.0.2
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    ::send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    stalled.push_back(fd);
  }
  c.restart(1);  // its new outbound connection to node 0 must get in among the strangers
  ASSERT_TRUE(eventually([&] { return c.client(1).check("k", 10).allowed; }));
  EXPECT_TRUE(eventually([&] { return c.remaining(0, "k") == 990; }, 10s))
      << "node 0 shows " << c.remaining(0, "k") << "\n"
      << c.stats_text(0);
  // Each stranger was closed: to make room for a newer one, or for its IP's byte budget.
  EXPECT_GE(c.stat(0, "transport_dropped_inbound_unproven_evicted") + c.stat(0, "transport_dropped_rate_limited"),
            1100 - 32)
      << c.stats_text(0);
  const int64_t rss_after = c.rss_kib(0);
  if (!kSanitized) {
    EXPECT_LT(rss_after - rss_before, 16 * 1024) << "RSS " << rss_before << " -> " << rss_after << " KiB";
  }
  RecordProperty("rss_kib_before_after", std::to_string(rss_before) + " " + std::to_string(rss_after));
  for (int fd : stalled) ::close(fd);
}

// The system clock steps an hour forward, then back (an NTP step, an operator's mistake), under
// libfaketime: buckets and failure detection run on the steady clock, so nothing refills and
// nobody fails. Then node 2 is killed and restarted while the wall clock reads two hours behind
// its first start: its new life must still win over its old one (a wall-clock incarnation alone
// would be lower), so what it admits is charged everywhere.
TEST(ClusterHardening, WallClockJumpsMoveNoBucketAndFailNoPeer) {
  const char* lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
  if (!std::filesystem::exists(lib)) GTEST_SKIP() << lib << " missing: scripts/deps installs libfaketime";
  const auto clock_file = std::filesystem::temp_directory_path() / ("tollgate-it-faketime-" + std::to_string(getpid()));
  auto set_wall_offset = [&](const char* offset) {
    std::ofstream(clock_file.string() + ".new") << offset << "\n";
    std::filesystem::rename(clock_file.string() + ".new", clock_file);
  };
  set_wall_offset("+0");
  // 1000/h: an hour of wall time would refill a whole bucket.
  const std::string hourly = "rules:\n  - match: \"k*\"\n    rate: 1000/h\n    burst: 1000\n";
  Cluster c(
      3, Combo{"gossip", "udp", "static"}, hourly, {}, SIZE_MAX,
      {std::string("LD_PRELOAD=") + REAL_TIMERFD_PATH + ":" + lib, "FAKETIME_TIMESTAMP_FILE=" + clock_file.string(),
       "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1", "ASAN_OPTIONS=verify_asan_link_order=0"});
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << c.log(0);
  ASSERT_TRUE(c.client(0).check("k", 500).allowed);
  for (size_t n = 0; n < 3; ++n) ASSERT_TRUE(eventually([&] { return c.remaining(n, "k") == 500; })) << n;

  for (const char* offset : {"+1h", "-1h"}) {
    set_wall_offset(offset);
    // A fresh check on every node after the step: a bucket on wall time would now hold 1000 (or
    // fail to refill at all); members on wall time would time out at once.
    for (int round = 0; round < 3; ++round) {
      for (size_t n = 0; n < 3; ++n) {
        const int64_t left = c.remaining(n, "k");  // INT64_MIN: the daemon did not answer
        EXPECT_TRUE(left >= 490 && left <= 501) << "node " << n << " shows " << left << " after " << offset;
      }
    }
    // Members on wall time would time out within --fail-after (600 ms) of the step: all alive
    // throughout twice that (checked at once, this could not fail: no round had run yet).
    const auto until = std::chrono::steady_clock::now() + 1200ms;
    while (std::chrono::steady_clock::now() < until) {
      ASSERT_TRUE(c.all_alive({0, 1, 2})) << "after " << offset;
      std::this_thread::sleep_for(100ms);  // sampling a state over a time span, not synchronizing
    }
  }

  // Restarted with the wall clock 2 h back: its new incarnation is lower than its last life's.
  // Under ASan the restart outlasted --fail-after, and node 2 never rejoined: failed members'
  // rows no longer circulated, so nothing told it of the life to outbid (issue #19; fixed by
  // sending the probed member's row with each probe, Node.ARestartWithALowerIncarnationAfter-
  // BeingMarkedFailedRejoins). Every build asserts the rejoin now.
  set_wall_offset("-2h");
  c.stop(2, SIGKILL);
  c.start(2);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); }, 30s)) << c.log(2);
  // Alive by its new life's heartbeat, not the old life's last word: still alive well past
  // --fail-after (600 ms). Plain build only: a sanitizer can starve an io thread that long.
  const auto settle = std::chrono::steady_clock::now() + (kSanitized ? 0s : 2s);
  while (std::chrono::steady_clock::now() < settle) {
    ASSERT_EQ(c.state_of(0, 2), "alive") << "node 0 lost the restarted node 2";
    ASSERT_EQ(c.state_of(1, 2), "alive") << "node 1 lost the restarted node 2";
    std::this_thread::sleep_for(100ms);  // sampling a state over a time span, not synchronizing
  }
  // 500 spent, plus what 1000/h refills over the test's seconds (a few tokens): 0 would be the
  // 500 counted twice, 1000 the debt forgotten.
  ASSERT_TRUE(eventually(
      [&] {
    const int64_t left = c.remaining(2, "k");
    return left >= 490 && left <= 510;
      },
      10s))
      << "the restarted node relearns the debt, once: it shows " << c.remaining(2, "k");
  ASSERT_TRUE(c.client(2).check("k", 100).allowed);
  for (size_t n = 0; n < 2; ++n) {
    EXPECT_TRUE(eventually(
        [&] {
      const int64_t left = c.remaining(n, "k");
      return left >= 390 && left <= 410;
        },
        10s))
        << "node " << n << " shows " << c.remaining(n, "k")
        << ": the restarted node's consumption was not counted once";
  }
  std::filesystem::remove(clock_file);
}

// A client floods node 0 with distinct keys (2 million here; TOLLGATE_FLOOD_KEYS for more) in
// batches of 1,000, with --max-keys 50000: both nodes stay at 50,000 buckets and count the
// evictions, resident memory stays within the budget --max-keys implies (docs/operations.md),
// and an established key in debt is neither lost nor handed back full.
TEST(ClusterHardening, AKeyFloodIsBoundedByMaxKeysAndEstablishedKeysKeepTheirBalance) {
  const char* env = std::getenv("TOLLGATE_FLOOD_KEYS");
  // 40x the cap in the plain build; 10x under the sanitizers, whose Debug build checks ~14x
  // slower (66 s alone for 2,000,000 under ASan, past ctest's 120 s beside other tests).
  const size_t total = env ? std::stoul(env) : (kSanitized ? 500'000 : 2'000'000);
  Cluster c(2, Combo{"mesh", "udp", "static"}, kSlowRules, [](size_t) {
    return std::vector<std::string>{"--max-keys", "50000"};
  });
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); }));
  const int64_t rss_before = c.rss_kib(0);
  ASSERT_TRUE(c.client(0).check("k-established", 600).allowed);
  std::vector<std::string> names(1000);
  std::vector<CheckItem> items(1000);
  size_t answered = 0;
  for (size_t sent = 0; sent < total; sent += names.size()) {
    for (size_t i = 0; i < names.size(); ++i) {
      names[i] = "k-flood-" + std::to_string(sent + i);
      items[i] = {names[i], 1};
    }
    for (const CheckReply& r : c.client(0).check_batch(items)) answered += r.from_daemon();
    if (sent % 100'000 == 0) {
      const int64_t left = c.remaining(0, "k-established");  // used now and then: stays established
      ASSERT_TRUE(left >= 399 && left <= 401) << "after " << sent << " flood keys: " << left;
    }
  }
  EXPECT_EQ(answered, total);
  // Node 0 took the flood: every key beyond the 50,000 it holds was an eviction. Node 1 hears
  // of as much of it as gossip carries (under this overload some is lost and counted as
  // seqs_abandoned: over-admission, never a double charge); it too stays at 50,000 buckets.
  EXPECT_GE(c.stat(0, "key_evictions"), int64_t(total) - 50'000) << c.stats_text(0);
  EXPECT_TRUE(eventually([&] { return c.stat(1, "key_evictions") > 0; }, 10s)) << c.stats_text(1);
  for (size_t n = 0; n < 2; ++n) EXPECT_LE(c.stat(n, "keys"), 50'000);
  RecordProperty("node0_stats", c.stats_text(0));
  RecordProperty("node1_evictions_abandoned",
                 std::to_string(c.stat(1, "key_evictions")) + " " + std::to_string(c.stat(1, "seqs_abandoned")));
  EXPECT_TRUE(eventually([&] {
    const int64_t left = c.remaining(1, "k-established");
    return left >= 399 && left <= 401;
  }));
  const int64_t rss_after = c.rss_kib(0);
  // The budget: 64 MiB for the process and its ledger, plus 400 bytes a key.
  const int64_t budget_kib = 64 * 1024 + 50'000 * 400 / 1024;
  if (!kSanitized) {
    EXPECT_LT(rss_after, budget_kib) << "RSS " << rss_before << " -> " << rss_after << " KiB";
  }
  RecordProperty("rss_kib_before_after", std::to_string(rss_before) + " " + std::to_string(rss_after));
  RecordProperty("key_bytes", std::to_string(c.stat(0, "key_bytes")));
}

// A node missing from the peers file is ignored until the file lists it; the daemons re-read the
// file by themselves.
TEST(ClusterMembership, PeersFileChangesTakeEffectWithoutRestart) {
  Cluster c(3, Combo{"gossip", "udp", "static"}, kSlowRules, {}, /*listed=*/2);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1}); }));
  EXPECT_EQ(c.state_of(0, 2), "");
  EXPECT_TRUE(eventually([&] { return c.stat(0, "gossip_dropped_unknown_sender") > 0; }, 5s));
  c.write_peers(3);
  EXPECT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); }, 10s));
  ASSERT_TRUE(c.client(2).check("k", 7).allowed);
  EXPECT_TRUE(eventually([&] { return c.remaining(0, "k") == 993; }, 5s));
}

INSTANTIATE_TEST_SUITE_P(AllModes, ClusterTest,
                         ::testing::Values(Combo{"gossip", "udp", "static"}, Combo{"gossip", "tcp", "static"},
                                           Combo{"mesh", "udp", "static"}, Combo{"mesh", "tcp", "static"},
                                           Combo{"gossip", "udp", "heartbeat"}, Combo{"gossip", "tcp", "heartbeat"},
                                           Combo{"mesh", "udp", "heartbeat"}, Combo{"mesh", "tcp", "heartbeat"},
                                           // Relay (3 members: 2 groups): under heartbeat, each
                                           // daemon starts alone (1 group) and counts 2 once it
                                           // hears of the others.
                                           Combo{"relay", "udp", "heartbeat"},
                                           // The same on two client API threads.
                                           Combo{"gossip", "udp", "static", 2}, Combo{"mesh", "tcp", "heartbeat", 2},
                                           Combo{"relay", "udp", "heartbeat", 2}),
                         combo_name);

}  // namespace
}  // namespace tollgate

namespace tollgate {
namespace {

// The proportional partition policy on real daemons (issue #19): a node refills at the share of
// the cluster it can reach. Each measure drains a fresh key at one node and times how fast its
// remaining count climbs back there (the refill the daemon applies, read through cost-0 checks;
// the window is about half a second, so the poll's latency hardly counts).
constexpr const char* kRefillRules = R"(rules:
  - match: "m*"
    rate: 300/s
    burst: 1000
)";

double refill_rate(Cluster& c, size_t node, const std::string& key) {
  EXPECT_TRUE(c.client(node).check(key, 1000).allowed) << key;
  const auto first_at = Clock::now();
  const int64_t first = c.remaining(node, key);
  int64_t last = first;
  auto last_at = first_at;
  EXPECT_TRUE(eventually([&] {
    last = c.remaining(node, key);
    last_at = Clock::now();
    return last >= first + 120;
  })) << key
      << " stayed at " << last;
  return double(last - first) / std::chrono::duration<double>(last_at - first_at).count();
}

void set_cut(Cluster& c, bool cut) {
  FaultSettings from_2, at_2;
  if (cut) {
    from_2.drop_to = from_2.drop_from = {Cluster::id(2)};
    at_2.drop_to = at_2.drop_from = {Cluster::id(0), Cluster::id(1)};
  }
  ASSERT_EQ(c.client(0).set_faults(from_2), "");
  ASSERT_EQ(c.client(1).set_faults(from_2), "");
  ASSERT_EQ(c.client(2).set_faults(at_2), "");
}

TEST(ClusterProportional, RefillFollowsTheReachableShareThroughAFlappingMemberAndComesBackToFull) {
  Cluster c(3, {"gossip", "udp", "static"}, kRefillRules, [](size_t) {
    return std::vector<std::string>{"--partition-policy", "proportional"};
  });
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); }));
  auto near = [](double rate, double expected) { return rate > expected * 0.7 && rate < expected * 1.3; };
  const double full = refill_rate(c, 0, "m-full");
  EXPECT_TRUE(near(full, 300)) << full;

  // Node 2 cut off: nodes 0 and 1 reach 2 of 3 members, node 2 reaches itself alone.
  set_cut(c, true);
  ASSERT_TRUE(eventually([&] { return c.state_of(0, 2) == "unreachable" && c.state_of(2, 0) == "unreachable"; }));
  const double majority = refill_rate(c, 0, "m-cut-0"), alone = refill_rate(c, 2, "m-cut-2");
  EXPECT_TRUE(near(majority, 200)) << majority;
  EXPECT_TRUE(near(alone, 100)) << alone;
  EXPECT_LT(alone, majority);

  // Healed: back to the full rate at once, on both sides.
  set_cut(c, false);
  ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); }));
  EXPECT_TRUE(near(refill_rate(c, 0, "m-healed-0"), 300));
  EXPECT_TRUE(near(refill_rate(c, 2, "m-healed-2"), 300));

  // Node 2 flaps: cut until the others mark it, healed until they see it again, four times.
  for (int flap = 0; flap < 4; ++flap) {
    set_cut(c, true);
    ASSERT_TRUE(eventually([&] { return c.state_of(0, 2) == "unreachable"; })) << flap;
    set_cut(c, false);
    ASSERT_TRUE(eventually([&] { return c.all_alive({0, 1, 2}); })) << flap;
  }
  const double after_0 = refill_rate(c, 0, "m-flapped-0"), after_2 = refill_rate(c, 2, "m-flapped-2");
  EXPECT_TRUE(near(after_0, 300)) << after_0;
  EXPECT_TRUE(near(after_2, 300)) << after_2;
  // Every check was answered by a daemon (no node failed or restarted along the way).
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(c.remaining(i, "m-full"), INT64_MIN) << i;
}

// Issue #18: a cluster of two tollgated and one member embedded in this test process
// (tollgate::Member), sharing one peers file, key and rules. It enforces one limit with them,
// from several of this process's threads at once; cut off from the daemons it enforces alone
// (as they do), and when the cut heals it marks them alive again and every node charges what
// the others admitted meanwhile, once.
TEST(EmbeddedMember, JoinsAClusterOfDaemonsSharesItsLimitsAndHealsAfterAPartition) {
  Cluster c(3, {"gossip", "udp", "static"}, kSlowRules, {}, SIZE_MAX, {}, /*started=*/2);
  MemberOptions o;
  o.node_id = Cluster::id(2);
  o.bind = c.address(2);
  o.cluster_key_file = (c.dir() / "cluster.key").string();
  o.peers_file = (c.dir() / "peers.txt").string();
  o.rules_file = (c.dir() / "rules.yaml").string();
  o.settings = {{"mode", "gossip"},
                {"interval", "50ms"},
                {"fail-after", "600ms"},
                {"probe-interval", "200ms"},
                {"push-pull-interval", "500ms"}};
  auto member = std::make_unique<Member>(o);
  ASSERT_TRUE(eventually([&] {
    // Ready everywhere: the daemons too may still be learning balances (--sync-deadline).
    return c.state_of(0, 2) == "alive" && c.state_of(1, 2) == "alive" && member->stats().members_alive == 2 &&
           !member->stats().syncing && c.stat(0, "syncing") == 0 && c.stat(1, "syncing") == 0;
  })) << c.state_of(0, 2)
      << " " << c.state_of(1, 2) << " " << member->stats().members_alive;

  // 4 of this process's threads check at once, 25 checks of 2 tokens each; the daemons'
  // clients spend 30 and 20.
  std::vector<std::thread> threads;
  std::atomic<int64_t> admitted{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int n = 0; n < 25; ++n) {
        if (member->check("k1", 2).allowed) admitted.fetch_add(2);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(admitted.load(), 200);
  ASSERT_TRUE(c.client(0).check("k1", 30).allowed);
  ASSERT_TRUE(c.client(1).check("k1", 20).allowed);
  // Everyone, the member included, charged all 250 once.
  EXPECT_TRUE(eventually([&] {
    return c.remaining(0, "k1") == 750 && c.remaining(1, "k1") == 750 && member->check("k1", 0).remaining == 750;
  })) << c.remaining(0, "k1")
      << " " << c.remaining(1, "k1") << " " << member->check("k1", 0).remaining;

  // The daemons cut the member off: each side goes on alone.
  FaultSettings cut;
  cut.drop_to = {Cluster::id(2)};
  cut.drop_from = {Cluster::id(2)};
  ASSERT_EQ(c.client(0).set_faults(cut), "");
  ASSERT_EQ(c.client(1).set_faults(cut), "");
  ASSERT_TRUE(eventually([&] { return member->stats().members_alive == 0 && c.state_of(0, 2) != "alive"; }))
      << member->stats().members_alive << " " << c.state_of(0, 2);
  ASSERT_TRUE(member->check("k2", 100).allowed);
  ASSERT_TRUE(c.client(0).check("k2", 40).allowed);
  EXPECT_TRUE(eventually([&] { return c.remaining(1, "k2") == 960; }));
  EXPECT_EQ(member->check("k2", 0).remaining, 900);  // what it admitted alone, nothing else

  // Healed: the member is alive again everywhere, and every node charged all 140, once.
  ASSERT_EQ(c.client(0).set_faults(FaultSettings{}), "");
  ASSERT_EQ(c.client(1).set_faults(FaultSettings{}), "");
  EXPECT_TRUE(eventually([&] {
    return member->stats().members_alive == 2 && c.state_of(0, 2) == "alive" && c.state_of(1, 2) == "alive";
  }));
  EXPECT_TRUE(eventually([&] {
    return c.remaining(0, "k2") == 860 && c.remaining(1, "k2") == 860 && member->check("k2", 0).remaining == 860;
  })) << c.remaining(0, "k2")
      << " " << c.remaining(1, "k2") << " " << member->check("k2", 0).remaining;
  EXPECT_EQ(member->stats().stopped_by, "");

  // The member leaves with its destructor: the daemons mark it left, not failed.
  member.reset();
  EXPECT_TRUE(eventually([&] { return c.state_of(0, 2) == "left" && c.state_of(1, 2) == "left"; })) << c.state_of(0, 2);
}

}  // namespace
}  // namespace tollgate
