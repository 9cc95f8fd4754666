// tollgate-sim: runs a scenario (sim/scenarios/*.yaml) and measures over- and under-admission
// against one ideal bucket per key, convergence time and gossip cost, per phase of the timeline.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "local_cluster.h"
#include "report.h"
#include "scenario.h"
#include "tollgate/config_error.h"
#include "tollgate/duration.h"
#include "tollgate/rules_file.h"
#include "virtual_sim.h"

#ifndef TOLLGATE_BUILT_TOLLGATED
#define TOLLGATE_BUILT_TOLLGATED ""
#endif

namespace {

// Set by SIGINT/SIGTERM; the local back end checks it, stops its daemons and throws Interrupted.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

extern "C" void on_interrupt(int) { g_interrupted.store(true); }

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sa.sa_flags = SA_RESTART;  // the run loop polls the flag; system calls need not fail with EINTR
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// The tollgated built with this tollgate-sim, then the one installed beside it.
std::vector<std::string> tollgated_candidates() {
  std::vector<std::string> out = {TOLLGATE_BUILT_TOLLGATED};
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back((self.parent_path() / "tollgated").string());
  return out;
}

// "gossip=a.csv,mesh=b.csv" (or bare paths, labelled by file name) -> plot runs.
std::vector<tollgate::sim::PlotRun> parse_overlay(const std::vector<std::string>& items) {
  std::vector<tollgate::sim::PlotRun> runs;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      runs.push_back({std::filesystem::path(item).stem().string(), item});
    } else {
      runs.push_back({item.substr(0, eq), item.substr(eq + 1)});
    }
  }
  return runs;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tollgate;
  CLI::App app{
      "tollgate-sim: runs a cluster scenario and compares what the cluster admitted with what one ideal\n"
      "token bucket per key would have (over_admission = admitted / oracle_admitted), per phase of the\n"
      "scenario's timeline. --cluster virtual runs the real node code on a simulated network in virtual\n"
      "time: the same --seed prints the same bytes. --cluster local starts real tollgated processes on\n"
      "127.0.0.1 and drives them in real time through the client API; it cannot measure convergence (the\n"
      "daemons do not report when they apply each batch), so conv_p50/p99 print \"-\" (JSON null) there,\n"
      "and checks no daemon decided by --check-deadline are left out of the figures and counted under the\n"
      "table. --overlay draws the CSVs of earlier runs into one --plot.",
      "tollgate-sim"};
  std::string scenario_path, cluster = "virtual", transport, duration, json_path, csv_path;
  std::optional<size_t> nodes;
  // Every node setting is an override, under tollgated's flag name (config/node_settings.h).
  const auto fields = node_setting_fields();
  std::vector<std::optional<std::string>> setting_text(fields.size());
  std::optional<uint64_t> seed;
  app.add_option("--scenario", scenario_path, "Scenario file (sim/scenarios/NAME.yaml)")->check(CLI::ExistingFile);
  app.add_option(
         "--cluster", cluster,
         "virtual (simulated network, virtual time) or local (real tollgated processes on 127.0.0.1, real time)")
      ->check(CLI::IsMember({"virtual", "local"}));
  app.add_option("--transport", transport, "Override: udp or tcp")->check(CLI::IsMember({"udp", "tcp"}));
  std::string front_end;
  app.add_option("--front-end", front_end,
                 "Override, local only: native (checks through the client API) or rls (Envoy's ShouldRateLimit over "
                 "gRPC, the rules given to the daemons as an RLS config)")
      ->check(CLI::IsMember({"native", "rls"}));
  app.add_option("--nodes", nodes, "Override: number of nodes")->check(CLI::Range(size_t(1), size_t(100'000)));
  for (size_t i = 0; i < fields.size(); ++i) {
    const NodeSettingField& f = fields[i];
    app.add_option("--" + std::string(f.flag), setting_text[i],
                   "Override the scenario's " + f.key() + ": " + std::string(f.help))
        ->type_name(std::string(f.type_name));
  }
  app.add_option("--duration", duration,
                 "Override: duration of the run (simulated, or real with --cluster local), e.g. 30s");
  app.add_option("--seed", seed, "Override: random seed (same seed, same output)");
  app.add_option("--json", json_path, "Write the summary as JSON to FILE");
  app.add_option("--csv", csv_path, "Write the 100 ms time series as CSV to FILE");
  std::string plot_path;
  app.add_option("--plot", plot_path, "Draw admitted vs oracle vs limit over time into FILE.png (gnuplot)");
  std::string tollgated_path, check_deadline = "50ms";
  app.add_option(
      "--tollgated", tollgated_path,
      "local: the daemon binary (default: the one built with tollgate-sim, then the one beside it, then PATH)");
  app.add_option("--check-deadline", check_deadline,
                 "local: how long a check waits for its daemon; later ones count as failed open, not as decisions");
  unsigned threads = 0;
  app.add_option("--threads", threads,
                 "virtual: threads that run the nodes (default 0: one per core); the output is the same for any number")
      ->check(CLI::Range(0u, 256u));
  std::vector<std::string> overlay;
  app.add_option("--overlay", overlay,
                 "Instead of running: draw LABEL=FILE.csv,... (earlier runs' --csv) into one --plot; with --scenario "
                 "(and --duration) its partitions, crashes and loss are shaded")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);

  // Draws the earlier runs in `overlay`, with `s`'s faults shaded if given.
  auto draw_overlay = [&](const sim::Scenario* s) {
    if (plot_path.empty()) {
      std::cerr << "tollgate-sim: --overlay needs --plot FILE.png\n";
      return 2;
    }
    const auto runs = parse_overlay(overlay);
    std::string title = s ? s->name + ", " + std::to_string(s->nodes) + " nodes, " +
                                partition_policy_name(s->node.partition_policy) + ":"
                          : "runs:";
    for (size_t i = 0; i < runs.size(); ++i) title += (i ? " vs " : " ") + runs[i].label;
    if (std::string why = sim::write_overlay_plot(
            plot_path, title, runs, s ? sim::shaded_periods(*s) : std::vector<std::pair<double, double>>{});
        !why.empty()) {
      std::cerr << "tollgate-sim: " << why << "\n";
      return 1;
    }
    return 0;
  };
  if (!overlay.empty() && scenario_path.empty()) return draw_overlay(nullptr);
  if (scenario_path.empty()) {
    std::cerr << "tollgate-sim: --scenario FILE is required (or --overlay to draw earlier runs)\nRun with --help for "
                 "more information.\n";
    return 2;
  }

  try {
    sim::Scenario s = sim::load_scenario_file(scenario_path);
    if (!transport.empty()) s.transport = transport;
    if (!front_end.empty())
      s.front_end = front_end == "rls" ? sim::Scenario::FrontEnd::kRls : sim::Scenario::FrontEnd::kNative;
    if (s.load.kind == sim::LoadSpec::Kind::kLeases && cluster != "virtual") {
      std::cerr << "tollgate-sim: load.kind leases runs on --cluster virtual only (the local back end sends checks)\n";
      return 2;
    }
    if (s.front_end == sim::Scenario::FrontEnd::kRls && cluster != "local") {
      std::cerr << "tollgate-sim: front_end rls needs --cluster local: the virtual cluster runs the nodes' code with "
                   "no front end\n";
      return 2;
    }
    if (nodes) s.nodes = *nodes;
    if (seed) s.seed = *seed;
    for (size_t i = 0; i < fields.size(); ++i) {
      if (!setting_text[i]) continue;
      if (std::string why = fields[i].parse(*setting_text[i], s.node); !why.empty()) {
        std::cerr << "tollgate-sim: " << fields[i].name(SettingNames::kFlags) << " " << why << "\n";
        return 2;
      }
    }
    if (!duration.empty()) {
      std::string why;
      auto ns = parse_duration_ns(duration, &why);
      if (!ns || *ns <= 0) {
        std::cerr << "tollgate-sim: --duration: " << (why.empty() ? "must be positive" : why) << "\n";
        return 2;
      }
      s.duration_ns = *ns;
    }
    if (const SettingProblem p = validate(s.node, SettingNames::kFlags); !p.message.empty()) {
      std::cerr << "tollgate-sim: " << p.message << "\n";
      return 2;
    }
    try {
      sim::validate(s);  // the timeline against the final node count (--nodes)
    } catch (const std::invalid_argument& e) {
      std::cerr << "tollgate-sim: " << scenario_path
                << (nodes ? " with --nodes " + std::to_string(*nodes) : std::string()) << ": timeline " << e.what()
                << "\n";
      return 2;
    }
    if (!overlay.empty()) return draw_overlay(&s);
    auto rules = parse_rules(s.rules_yaml, scenario_path + " (rules)");
    sim::SimResult result;
    sim::LocalStats local;
    if (cluster == "local") {
      sim::LocalOptions o;
      o.tollgated = sim::find_tollgated(tollgated_path, tollgated_candidates());
      std::string why;
      const auto deadline = parse_duration_ns(check_deadline, &why);
      if (!deadline || *deadline < kNanosPerMilli) {
        std::cerr << "tollgate-sim: --check-deadline: " << (why.empty() ? "must be at least 1ms" : why) << "\n";
        return 2;
      }
      o.check_deadline = std::chrono::milliseconds(*deadline / kNanosPerMilli);
      o.interrupted = &g_interrupted;
      o.progress = &std::cerr;
      install_interrupt_handlers();
      result = sim::run_local(s, rules, o, &local);
    } else {
#ifdef M_TRIM_THRESHOLD
      // A large virtual run frees and reallocates messages by the million: keep freed memory in
      // the process rather than returning it to the kernel and faulting it in again (the kernel's
      // page clearing was 6% of a 1,000-node run, and system time 15%).
      // (Setting these turns off glibc's sliding mmap threshold, so set that too: 32 MiB is the
      // most it accepts on 64-bit; above it, mallopt refuses.)
      mallopt(M_TRIM_THRESHOLD, 256 << 20);
      mallopt(M_TOP_PAD, 64 << 20);
      mallopt(M_MMAP_THRESHOLD, 32 << 20);
#endif
      result = sim::run_virtual(s, rules, sim::VirtualOptions{threads});
    }
    const sim::RunInfo info{s.name, cluster, cluster == "local" ? &local : nullptr};
    sim::print_table(std::cout, info, s, result);
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      sim::write_json(out, info, s, result);
      if (!out) throw std::runtime_error("cannot write " + json_path);
    }
    if (!csv_path.empty()) {
      std::ofstream out(csv_path);
      sim::write_csv(out, result);
      if (!out) throw std::runtime_error("cannot write " + csv_path);
    }
    if (!plot_path.empty()) {
      if (std::string why = sim::write_plot(plot_path, s, result); !why.empty()) throw std::runtime_error(why);
    }
  } catch (const sim::Interrupted&) {
    std::cerr << "tollgate-sim: interrupted; every daemon it started is stopped and its temp dir removed\n";
    return 130;
  } catch (const ConfigError& e) {
    std::cerr << "tollgate-sim: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tollgate-sim: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
