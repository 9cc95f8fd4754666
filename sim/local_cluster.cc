#include "local_cluster.h"

#include "codec/cluster_key.h"
#include "process/child_process.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "arrivals.h"
#include "recorder.h"
#include "rls_front_end.h"
#include "tollgate/duration.h"

namespace tollgate::sim {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The daemons of one run and their temp dir. Stops every daemon and removes the dir when
// destroyed, whatever the reason.
class Daemons {
 public:
  Daemons(const Scenario& s, const RuleSet& rule_set, const LocalOptions& o) : s_(s), o_(o) {
    std::string pattern = (fs::temp_directory_path() / "tollgate-sim.XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("cannot create a temp dir: " + std::string(strerror(errno)));
    dir_ = pattern;
    std::ofstream rules(dir_ / "rules.yaml");
    rules << s.rules_yaml;
    if (!rules) throw std::runtime_error("cannot write " + (dir_ / "rules.yaml").string());
    if (s.front_end == Scenario::FrontEnd::kRls) {
      std::ofstream rls(dir_ / "rls.yaml");
      rls << rls_config_from_rules(rule_set);
      if (!rls) throw std::runtime_error("cannot write " + (dir_ / "rls.yaml").string());
    }
    // The cluster's gossip is authenticated, as tollgated requires: a fresh key for this run.
    {
      std::ofstream key(dir_ / "cluster.key");
      key << generate_cluster_key_hex() << "\n";
      if (!key) throw std::runtime_error("cannot write " + (dir_ / "cluster.key").string());
    }
    fs::permissions(dir_ / "cluster.key", fs::perms::owner_read | fs::perms::owner_write);
  }
  ~Daemons() {
    stop_all();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Daemons(const Daemons&) = delete;
  Daemons& operator=(const Daemons&) = delete;

  const fs::path& dir() const { return dir_; }
  size_t size() const { return ports_.size(); }
  std::string address(size_t i) const { return "127.0.0.1:" + std::to_string(ports_[i]); }
  std::string socket_path(size_t i) const { return (dir_ / (local_node_id(i) + ".sock")).string(); }
  std::string rls_socket_path(size_t i) const { return (dir_ / (local_node_id(i) + ".rls.sock")).string(); }
  fs::path log_path(size_t i) const { return dir_ / (local_node_id(i) + ".log"); }
  bool running(size_t i) const { return children_[i].running(); }

  // A new node: its port, and (static membership) the peers file listing every node so far.
  size_t add() {
    ports_.push_back(process::free_loopback_port());
    children_.emplace_back();
    if (s_.node.membership == MembershipKind::kStatic) write_peers();
    return ports_.size() - 1;
  }

  // Starts node i's daemon (again, after a crash: same id, port and socket; the daemon picks a
  // new incarnation from the clock).
  void start(size_t i) {
    std::vector<std::string> args = {o_.tollgated,
                                     "--node-id",
                                     local_node_id(i),
                                     "--bind",
                                     address(i),
                                     "--listen",
                                     "unix:" + socket_path(i),
                                     "--rules",
                                     (dir_ / "rules.yaml").string(),
                                     "--cluster-key-file",
                                     (dir_ / "cluster.key").string(),
                                     "--transport",
                                     s_.transport,
                                     "--enable-fault-injection",  // partitions and loss are injected
                                     "--log-level",
                                     o_.log_level};
    for (const NodeSettingField& f : node_setting_fields()) {
      args.insert(args.end(), {"--" + std::string(f.flag), f.format(s_.node)});  // the scenario's node settings
    }
    if (s_.node.membership == MembershipKind::kStatic) {
      args.insert(args.end(), {"--peers-file", (dir_ / "peers.txt").string()});
    } else {
      args.insert(args.end(), {"--seeds", address(0)});
    }
    if (s_.front_end == Scenario::FrontEnd::kRls) {
      args.insert(args.end(),
                  {"--rls-config", (dir_ / "rls.yaml").string(), "--rls-listen", "unix:" + rls_socket_path(i)});
    }
    if (s_.state_interval_ns > 0) {  // balances across restarts: a state directory per node
      const fs::path state = dir_ / ("state-" + std::to_string(i));
      fs::create_directories(state);
      args.insert(args.end(),
                  {"--state-dir", state.string(), "--state-interval", format_duration(s_.state_interval_ns)});
    }
    std::error_code ec;
    fs::remove(socket_path(i), ec);  // a SIGKILLed daemon leaves its socket files behind
    fs::remove(rls_socket_path(i), ec);
    children_[i] = process::ChildProcess({.argv = args, .env = {}, .log = log_path(i)});
  }

  // SIGKILL (a crash) or SIGTERM, and waits for it to exit.
  void kill(size_t i, int signo) {
    children_[i].signal(signo);
    children_[i].wait();
  }

  // If node i's daemon has exited by itself: how, and the tail of its log.
  std::optional<std::string> exited(size_t i) {
    const std::optional<int> status = children_[i].poll();
    if (!status) return std::nullopt;
    return local_node_id(i) + " " + process::describe_status(*status) + "; " + log_path(i).string() + " ends with:\n" +
           process::last_lines(log_path(i), 15);
  }

  std::string log_tails(size_t lines) const {
    std::string out;
    for (size_t i = 0; i < ports_.size(); ++i) {
      out += "  " + local_node_id(i) + " (" + log_path(i).filename().string() + "):\n" +
             process::last_lines(log_path(i), lines);
    }
    return out;
  }

  // SIGTERM to every daemon (each announces that it leaves), SIGKILL to those still running
  // after the grace period.
  void stop_all() {
    for (process::ChildProcess& child : children_) child.signal(SIGTERM);
    const auto give_up = Clock::now() + o_.stop_grace;
    for (process::ChildProcess& child : children_) {
      const auto left = std::chrono::duration_cast<milliseconds>(give_up - Clock::now());
      if (!child.wait_for(std::max(left, milliseconds(0)))) child.kill();
    }
  }

 private:
  void write_peers() {
    const fs::path tmp = dir_ / "peers.txt.new";
    {
      std::ofstream peers(tmp);
      for (size_t i = 0; i < ports_.size(); ++i) peers << local_node_id(i) << " " << address(i) << "\n";
      if (!peers) throw std::runtime_error("cannot write " + tmp.string());
    }
    fs::rename(tmp, dir_ / "peers.txt");  // atomic: a daemon never reads half a file
  }

  const Scenario& s_;
  const LocalOptions& o_;
  fs::path dir_;
  std::vector<uint16_t> ports_;
  std::vector<process::ChildProcess> children_;
};

// One check sent to a daemon; its outcome is written by the client's thread.
struct Pending {
  enum : uint8_t { kWaiting, kAllowed, kDenied, kFailed };
  Pending(int64_t t, size_t k, size_t s) : t_ns(t), key(k), side(s) {}
  int64_t t_ns;
  size_t key, side;
  std::atomic<uint8_t> outcome{kWaiting};
};

class LocalRun {
 public:
  LocalRun(const Scenario& s, std::shared_ptr<const RuleSet> rules, const LocalOptions& o, LocalStats* stats)
      : s_(s), o_(o), stats_(stats), recorder_(s, rules), arrivals_(s.load, s.seed), daemons_(s, *rules, o) {
    size_t total = s.nodes;
    for (const Event& e : s.timeline) total += e.kind == Event::Kind::kJoin ? e.count : 0;
    clients_.resize(total);
    if (s.front_end == Scenario::FrontEnd::kRls) rls_.resize(total);
    up_.assign(total, false);
    side_.assign(total, 0);
    counters_.assign(total, Counters{});
    loss_ = s.network.loss;
    phases_ = s.phases();
    stats_->failed_open.assign(phases_.size(), 0);
    for (size_t e = 0; e < s.timeline.size(); ++e) {
      if (s.timeline[e].at_ns < s.duration_ns) steps_.push_back({s.timeline[e].at_ns, false, e});
      if (s.timeline[e].until_ns && *s.timeline[e].until_ns < s.duration_ns)
        steps_.push_back({*s.timeline[e].until_ns, true, e});
    }
    // In time order; at one instant, ends before starts (a heal, then the next partition).
    std::stable_sort(steps_.begin(), steps_.end(), [](const Step& a, const Step& b) {
      return a.at_ns != b.at_ns ? a.at_ns < b.at_ns : a.end && !b.end;
    });
  }

  SimResult run() {
    say("starting " + std::to_string(s_.nodes) + " tollgated (" + dissemination_mode_name(s_.node.mode) + " over " +
        s_.transport + (rls_.empty() ? "" : ", checks through the rate limit service") + ") in " +
        daemons_.dir().string());
    const auto first_start = Clock::now();
    for (size_t i = 0; i < s_.nodes; ++i) start_node(daemons_.add());
    wait_formed();
    stats_->formed_after_s = std::chrono::duration<double>(Clock::now() - first_start).count();
    std::ostringstream formed;
    formed.precision(1);
    formed << std::fixed << "cluster formed after " << stats_->formed_after_s << " s; running for "
           << format_duration(s_.duration_ns);
    say(formed.str());
    for (size_t i = 0; i < s_.nodes; ++i) faults_due_.push_back(i);
    apply_due_faults(/*wait=*/true);
    poll_counters(0);  // the baseline: what forming the cluster cost is not counted

    start_ = Clock::now();
    size_t next_step = 0, next_boundary = 1;  // phases_[0] starts at 0
    std::vector<int64_t> lags;
    while (true) {
      const int64_t step_t = next_step < steps_.size() ? steps_[next_step].at_ns : INT64_MAX;
      const int64_t boundary_t = next_boundary < phases_.size() ? phases_[next_boundary].start_ns : INT64_MAX;
      const int64_t arrival_t = arrivals_.peek_time();
      const int64_t t = std::min({step_t, boundary_t, arrival_t, s_.duration_ns});
      wait_until(t);
      if (t == boundary_t) {  // before the events at this instant: a crash's node is polled first
        poll_counters(phases_[next_boundary - 1].start_ns);
        ++next_boundary;
      } else if (t == step_t) {
        apply(steps_[next_step++]);
      } else if (t == arrival_t && t < s_.duration_ns) {
        const Arrival a = arrivals_.next(up_);
        if (a.dropped) {
          ++stats_->dropped;
          continue;
        }
        lags.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() -
                                                                            (start_ + std::chrono::nanoseconds(a.t_ns)))
                           .count());
        send(a);
      } else {
        break;  // the end of the run
      }
      if (!faults_due_.empty()) apply_due_faults(/*wait=*/false);
    }
    poll_counters(phases_.back().start_ns);
    recorder_.alive(s_.duration_ns, live());
    finish_checks();
    if (!lags.empty()) {
      std::sort(lags.begin(), lags.end());
      stats_->lag_p99_ns = lags[std::min(lags.size() - 1, lags.size() * 99 / 100)];
      stats_->lag_max_ns = lags.back();
    }
    return recorder_.finish();
  }

 private:
  struct Step {
    int64_t at_ns;
    bool end;  // the event's end (heal, restart, loss over)
    size_t event;
  };

  void say(const std::string& line) {
    if (o_.progress) *o_.progress << "tollgate-sim: " << line << std::endl;
  }

  void check_interrupted() {
    if (o_.interrupted && o_.interrupted->load()) throw Interrupted("interrupted");
  }

  // Sleeps until `t_ns` after the start, waking now and then to notice an interruption.
  void wait_until(int64_t t_ns) {
    const auto due = start_ + std::chrono::nanoseconds(t_ns);
    while (true) {
      check_interrupted();
      const auto now = Clock::now();
      if (now >= due) return;
      std::this_thread::sleep_until(std::min(due, now + milliseconds(20)));
    }
  }

  size_t live() const { return size_t(std::count(up_.begin(), up_.end(), true)); }

  void start_node(size_t i) {
    daemons_.start(i);
    if (!clients_[i]) {
      ClientOptions c;
      c.endpoint = "unix:" + daemons_.socket_path(i);
      c.deadline = o_.check_deadline;
      c.fail_open = true;  // the reply's source tells a daemon's decision from a fallback
      c.admin_timeout = std::chrono::seconds(2);
      c.reconnect_initial = milliseconds(5);
      c.reconnect_max = milliseconds(50);  // a restarted daemon is found again quickly
      clients_[i] = std::make_unique<Client>(c);
    }
    if (!rls_.empty() && !rls_[i]) rls_[i] = std::make_unique<RlsCaller>("unix:" + daemons_.rls_socket_path(i));
    counters_[i] = Counters{};  // a new process counts from zero
  }

  // Until every node lists every other as alive; a daemon that exits, or the timeout, is an
  // error quoting the logs.
  void wait_formed() {
    const auto give_up = Clock::now() + o_.form_timeout;
    std::string missing;
    while (true) {
      check_interrupted();
      for (size_t i = 0; i < daemons_.size(); ++i) {
        if (auto why = daemons_.exited(i))
          throw std::runtime_error("a daemon stopped before the cluster formed: " + *why);
      }
      missing = formation_gap();
      if (missing.empty()) break;
      if (Clock::now() >= give_up) {
        throw std::runtime_error("the local cluster did not form within " +
                                 format_duration(o_.form_timeout.count() * kNanosPerMilli) + ": " + missing +
                                 ". The daemons' logs end with:\n" + daemons_.log_tails(8));
      }
      std::this_thread::sleep_for(milliseconds(50));  // polling a bounded wait on the members API
    }
    for (size_t i = 0; i < rls_.size() && i < daemons_.size(); ++i) {  // the gRPC front ends listen too
      if (!rls_[i]->wait_connected(std::chrono::seconds(5))) {
        throw std::runtime_error("the rate limit service of " + local_node_id(i) + " (" + daemons_.rls_socket_path(i) +
                                 ") does not accept connections; its log ends with:\n" +
                                 process::last_lines(daemons_.log_path(i), 10));
      }
    }
    for (size_t i = 0; i < s_.nodes; ++i) up_[i] = true;
  }

  // "" when every node sees every other alive, else the first pair that does not.
  std::string formation_gap() {
    for (size_t a = 0; a < daemons_.size(); ++a) {
      std::string error;
      const auto members = clients_[a]->members(&error);
      if (!members) return local_node_id(a) + " does not answer (" + error + ")";
      for (size_t b = 0; b < daemons_.size(); ++b) {
        if (a == b) continue;
        std::string state = "not listed";
        for (const MemberInfo& m : *members) {
          if (m.id == local_node_id(b)) state = member_state_name(m.state);
        }
        if (state != "alive") return local_node_id(a) + " sees " + local_node_id(b) + " as " + state;
      }
    }
    return "";
  }

  void send(const Arrival& a) {
    Pending& p = pending_.emplace_back(a.t_ns, a.key, side_[a.node]);
    {
      std::lock_guard lock(mu_);
      ++outstanding_;
    }
    if (!rls_.empty()) {
      rls_[a.node]->check_async(arrivals_.keys()[a.key], s_.load.cost, o_.check_deadline,
                                [this, &p](RlsCaller::Outcome outcome, const std::string& error) {
        p.outcome = outcome == RlsCaller::Outcome::kAllowed  ? Pending::kAllowed
                    : outcome == RlsCaller::Outcome::kDenied ? Pending::kDenied
                                                             : Pending::kFailed;
        answered(error);
      });
      return;
    }
    clients_[a.node]->check_async(arrivals_.keys()[a.key], s_.load.cost, [this, &p](CheckReply r) {
      p.outcome = r.from_daemon() ? (r.allowed ? Pending::kAllowed : Pending::kDenied) : Pending::kFailed;
      answered(r.from_daemon() ? std::string() : r.error);
    });
  }

  // On a client's thread: one check came back (`error` set if no daemon decided it).
  void answered(const std::string& error) {
    std::lock_guard lock(mu_);
    if (!error.empty() && first_error_.empty()) first_error_ = error;
    if (--outstanding_ == 0) done_.notify_all();
  }

  // Waits for the last answers (each comes by its deadline), then hands every decision to the
  // recorder in arrival order.
  void finish_checks() {
    {
      std::unique_lock lock(mu_);
      if (!done_.wait_for(lock, o_.check_deadline + std::chrono::seconds(5), [&] { return outstanding_ == 0; })) {
        throw std::runtime_error(std::to_string(outstanding_) +
                                 " checks were never answered, not even by the client's deadline");
      }
      stats_->failed_open_example = first_error_;
    }
    for (const Pending& p : pending_) {
      const uint8_t outcome = p.outcome.load();
      if (outcome == Pending::kFailed) {
        ++stats_->failed_open_total;
        for (size_t i = 0; i < phases_.size(); ++i) {
          if (p.t_ns >= phases_[i].start_ns && p.t_ns < phases_[i].end_ns) ++stats_->failed_open[i];
        }
        continue;
      }
      recorder_.check(p.t_ns, arrivals_.keys()[p.key], s_.load.cost, p.side, outcome == Pending::kAllowed);
    }
  }

  // Adds what every running daemon sent since the last poll to the phase starting at `phase_ns`.
  void poll_counters(int64_t phase_ns) {
    uint64_t messages = 0, bytes = 0;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (!daemons_.running(i)) continue;
      // A daemon that died on its own would turn its share of the load into fail-opens while the
      // timeline says it is up: the run would not measure the scenario, so it stops here.
      if (auto why = daemons_.exited(i))
        throw std::runtime_error("a daemon stopped during the run, not by the timeline: " + *why);
      const auto stats = clients_[i]->stats();
      if (!stats) {
        ++stats_->stats_polls_failed;
        continue;
      }
      Counters now = counters_[i];
      for (const auto& [name, value] : *stats) {
        if (name == "gossip_messages_sent") now.messages = value;
        if (name == "transport_bytes_sent") now.bytes = value;
        if (name == "rls_calls") now.rls_calls = value;
      }
      messages += uint64_t(std::max<int64_t>(0, now.messages - counters_[i].messages));
      bytes += uint64_t(std::max<int64_t>(0, now.bytes - counters_[i].bytes));
      if (start_ != Clock::time_point{})
        stats_->rls_calls += uint64_t(std::max<int64_t>(0, now.rls_calls - counters_[i].rls_calls));
      counters_[i] = now;
    }
    if (start_ != Clock::time_point{}) recorder_.sent(phase_ns, messages, bytes);
  }

  void apply(const Step& step) {
    const Event& e = s_.timeline[step.event];
    const std::string what =
        "t=" + format_duration(step.at_ns) + " " + (step.end ? "end of " : "") + "\"" + e.text + "\"";
    say(what);
    switch (e.kind) {
      case Event::Kind::kPartition:
        partition_ = step.end ? nullptr : &e;
        for (size_t i = 0; i < side_.size(); ++i) side_[i] = 0;
        if (partition_) {
          for (size_t g = 0; g < e.groups.size(); ++g) {
            for (size_t i : e.groups[g]) side_[i] = g;
          }
        }
        all_faults_due();
        break;
      case Event::Kind::kLoss:
        loss_ = step.end ? s_.network.loss : e.loss;
        all_faults_due();
        break;
      case Event::Kind::kCrash:
        recorder_.alive(step.at_ns, live());
        if (step.end) {
          start_node(e.node);
          up_[e.node] = true;
          faults_due_.push_back(e.node);
        } else {
          up_[e.node] = false;
          daemons_.kill(e.node, e.graceful ? SIGTERM : SIGKILL);
        }
        break;
      case Event::Kind::kJoin:
        recorder_.alive(step.at_ns, live());
        for (size_t c = 0; c < e.count; ++c) {
          const size_t i = daemons_.add();  // static: the peers file now lists it
          start_node(i);
          up_[i] = true;
          faults_due_.push_back(i);
        }
        break;
    }
  }

  void all_faults_due() {
    faults_due_.clear();
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (daemons_.running(i)) faults_due_.push_back(i);
    }
  }

  // Sends each node in faults_due_ its settings. A node that is not connected yet (just started)
  // stays due and is retried on the next pass unless `wait`; a daemon that refuses is an error.
  void apply_due_faults(bool wait) {
    std::vector<size_t> still_due;
    for (size_t i : faults_due_) {
      if (!daemons_.running(i)) continue;
      Client& c = *clients_[i];
      if (!c.connected() && !(wait && c.wait_connected(std::chrono::seconds(5)))) {
        if (auto why = daemons_.exited(i)) throw std::runtime_error("a daemon stopped: " + *why);
        still_due.push_back(i);
        continue;
      }
      const FaultSettings f = plan_faults(i, daemons_.size(), partition_, loss_, s_.network);
      if (const std::string error = c.set_faults(f); !error.empty()) {
        if (!c.connected()) {  // lost the connection meanwhile: retry
          still_due.push_back(i);
          continue;
        }
        throw std::runtime_error("setting the faults of " + local_node_id(i) + ": " + error + "; its log ends with:\n" +
                                 process::last_lines(daemons_.log_path(i), 10));
      }
    }
    faults_due_ = std::move(still_due);
  }

  const Scenario& s_;
  const LocalOptions& o_;
  LocalStats* stats_;
  Recorder recorder_;
  ArrivalStream arrivals_;
  std::vector<Phase> phases_;
  std::vector<Step> steps_;
  // Declared before the clients, which are destroyed first: a client completes its outstanding
  // checks (their callbacks write here) when it is destroyed, and is closed before the daemons stop.
  std::deque<Pending> pending_;  // a deque: the client threads hold pointers into it
  std::mutex mu_;
  std::condition_variable done_;
  uint64_t outstanding_ = 0;  // guarded by mu_
  std::string first_error_;   // guarded by mu_
  Daemons daemons_;
  std::vector<std::unique_ptr<Client>> clients_;  // admin calls, and checks with front_end native
  std::vector<std::unique_ptr<RlsCaller>> rls_;   // checks with front_end rls (else empty)
  std::vector<bool> up_;                          // taking load: started (or restarted, or joined) and not crashed
  std::vector<size_t> side_;
  struct Counters {         // a daemon's, at the last poll
    int64_t messages = 0;   // gossip_messages_sent
    int64_t bytes = 0;      // transport_bytes_sent
    int64_t rls_calls = 0;  // rls_calls: ShouldRateLimit calls it answered
  };
  std::vector<Counters> counters_;
  std::vector<size_t> faults_due_;
  const Event* partition_ = nullptr;
  double loss_ = 0;
  Clock::time_point start_{};
};

}  // namespace

std::string local_node_id(size_t index) { return "node-" + std::to_string(index); }

FaultSettings plan_faults(size_t index, size_t nodes, const Event* partition, double loss, const NetworkSpec& network) {
  FaultSettings f;
  if (partition) {
    size_t mine = SIZE_MAX;
    for (size_t g = 0; g < partition->groups.size(); ++g) {
      if (std::find(partition->groups[g].begin(), partition->groups[g].end(), index) != partition->groups[g].end())
        mine = g;
    }
    for (size_t g = 0; g < partition->groups.size(); ++g) {
      if (g == mine) continue;
      for (size_t other : partition->groups[g]) {
        if (other < nodes) f.drop_to.push_back(local_node_id(other));
      }
    }
    f.drop_from = f.drop_to;
  }
  f.loss = loss;
  f.duplicate = network.duplicate;
  f.delay_ms = network.latency_min_ns / kNanosPerMilli;
  f.jitter_ms = (network.latency_max_ns - network.latency_min_ns) / kNanosPerMilli;
  return f;
}

std::string find_tollgated(const std::string& configured, const std::vector<std::string>& candidates) {
  auto runnable = [](const std::string& p) {
    return !p.empty() && ::access(p.c_str(), X_OK) == 0 && !fs::is_directory(p);
  };
  if (!configured.empty()) {
    if (!runnable(configured)) throw std::runtime_error("--tollgated " + configured + ": not an executable file");
    return configured;
  }
  std::string tried;
  for (const std::string& c : candidates) {
    if (runnable(c)) return c;
    if (!c.empty()) tried += c + ", ";
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (fs::path(dir.empty() ? "." : dir) / "tollgated").string();
    if (runnable(candidate)) return candidate;
  }
  throw std::runtime_error("cannot find tollgated: tried " + tried + "and PATH; pass --tollgated PATH");
}

SimResult run_local(const Scenario& scenario, std::shared_ptr<const RuleSet> rules, const LocalOptions& options,
                    LocalStats* stats) {
  LocalStats ignored;
  return LocalRun(scenario, std::move(rules), options, stats ? stats : &ignored).run();
}

}  // namespace tollgate::sim
