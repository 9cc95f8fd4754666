// tollgate-sim: runs a scenario (sim/scenarios/*.yaml) and measures over- and under-admission
// against one ideal bucket per key, convergence time and gossip cost, per phase of the timeline.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <optional>

#include "report.h"
#include "scenario.h"
#include "tollgate/config_error.h"
#include "tollgate/duration.h"
#include "tollgate/rules_file.h"
#include "virtual_sim.h"

int main(int argc, char** argv) {
  using namespace tollgate;
  CLI::App app{
      "tollgate-sim: runs a cluster scenario and compares what the cluster admitted with what one ideal\n"
      "token bucket per key would have (over_admission = admitted / oracle_admitted), per phase of the\n"
      "scenario's timeline. --cluster virtual runs the real node code on a simulated network in virtual\n"
      "time: the same --seed prints the same bytes.",
      "tollgate-sim"};
  std::string scenario_path, cluster = "virtual", mode, transport, policy, membership, interval, duration, json_path, csv_path;
  std::optional<size_t> nodes, fanout;
  std::optional<uint64_t> seed;
  app.add_option("--scenario", scenario_path, "Scenario file (sim/scenarios/NAME.yaml)")->required()->check(CLI::ExistingFile);
  app.add_option("--cluster", cluster, "virtual (simulated network, virtual time); local (real daemons) is not built yet")
      ->check(CLI::IsMember({"virtual", "local"}));
  app.add_option("--mode", mode, "Override: mesh or gossip")->check(CLI::IsMember({"mesh", "gossip"}));
  app.add_option("--transport", transport, "Override: udp or tcp")->check(CLI::IsMember({"udp", "tcp"}));
  app.add_option("--policy", policy, "Override: open or proportional")->check(CLI::IsMember({"open", "proportional"}));
  app.add_option("--membership", membership, "Override: static or heartbeat")->check(CLI::IsMember({"static", "heartbeat"}));
  app.add_option("--nodes", nodes, "Override: number of nodes")->check(CLI::Range(size_t(1), size_t(100'000)));
  app.add_option("--interval", interval, "Override: dissemination round, e.g. 50ms");
  app.add_option("--fanout", fanout, "Override: gossip fanout")->check(CLI::Range(size_t(1), size_t(64)));
  app.add_option("--duration", duration, "Override: simulated duration, e.g. 30s");
  app.add_option("--seed", seed, "Override: random seed (same seed, same output)");
  app.add_option("--json", json_path, "Write the summary as JSON to FILE");
  app.add_option("--csv", csv_path, "Write the 100 ms time series as CSV to FILE");
  std::string plot_path;
  app.add_option("--plot", plot_path, "Draw admitted vs oracle vs limit over time into FILE.png (gnuplot)");
  CLI11_PARSE(app, argc, argv);

  try {
    sim::Scenario s = sim::load_scenario_file(scenario_path);
    if (!mode.empty()) s.mode = mode == "mesh" ? DisseminationMode::kMesh : DisseminationMode::kGossip;
    if (!transport.empty()) s.transport = transport;
    if (!policy.empty()) s.policy = policy == "proportional" ? PartitionPolicy::kProportional : PartitionPolicy::kOpen;
    if (!membership.empty()) s.membership = membership == "heartbeat" ? MembershipKind::kHeartbeat : MembershipKind::kStatic;
    if (nodes) s.nodes = *nodes;
    if (fanout) s.fanout = *fanout;
    if (seed) s.seed = *seed;
    for (auto [text, target, flag] : {std::tuple{&interval, &s.interval_ns, "--interval"}, std::tuple{&duration, &s.duration_ns, "--duration"}}) {
      if (text->empty()) continue;
      std::string why;
      auto ns = parse_duration_ns(*text, &why);
      if (!ns || *ns <= 0) {
        std::cerr << "tollgate-sim: " << flag << ": " << (why.empty() ? "must be positive" : why) << "\n";
        return 2;
      }
      *target = *ns;
    }
    if (cluster == "local") {
      std::cerr << "tollgate-sim: --cluster local (real daemons) is not built yet; use --cluster virtual\n";
      return 2;
    }
    auto rules = parse_rules(s.rules_yaml, scenario_path + " (rules)");
    const sim::SimResult result = sim::run_virtual(s, rules);
    const sim::RunInfo info{s.name, cluster};
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
  } catch (const ConfigError& e) {
    std::cerr << "tollgate-sim: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tollgate-sim: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
