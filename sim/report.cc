#include "report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "json/json.h"

namespace tollgate::sim {
namespace {

using json::json_string;

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string ms_or_dash(double ms) { return ms < 0 ? "-" : fixed(ms, 1); }

std::string json_number_or_null(double v, int digits) { return v < 0 ? "null" : fixed(v, digits); }

// `failed_open`: a local run's count for this phase, or -1 (virtual: no such key).
void json_phase(std::ostream& out, const PhaseStats& p, int64_t failed_open = -1) {
  out << "{\"name\": " << json_string(p.name) << ", \"start_s\": " << fixed(double(p.start_ns) / 1e9, 3)
      << ", \"end_s\": " << fixed(double(p.end_ns) / 1e9, 3) << ", \"offered\": " << p.offered
      << ", \"admitted\": " << p.admitted << ", \"oracle_admitted\": " << p.oracle_admitted
      << ", \"over_admission\": " << fixed(p.over_admission(), 4)
      << ", \"under_admission\": " << fixed(p.under_admission(), 4)
      << ", \"convergence_ms_p50\": " << json_number_or_null(p.convergence_ms(50), 1)
      << ", \"convergence_ms_p99\": " << json_number_or_null(p.convergence_ms(99), 1)
      << ", \"msgs_per_node_s\": " << fixed(p.msgs_per_node_s(), 2)
      << ", \"bytes_per_node_s\": " << fixed(p.bytes_per_node_s(), 1);
  if (failed_open >= 0) out << ", \"failed_open\": " << failed_open;
  if (p.lease_limit_slot_s > 0) {
    out << ", \"lease_in_flight_ratio\": " << fixed(p.lease_in_flight_ratio(), 4)
        << ", \"lease_oracle_ratio\": " << fixed(p.lease_oracle_slot_s / p.lease_limit_slot_s, 4)
        << ", \"lease_peak_over\": " << p.lease_peak_over << ", \"lease_peak_bound\": " << p.lease_peak_bound
        << ", \"lease_over_slot_s\": " << fixed(p.lease_over_slot_s, 2)
        << ", \"lease_lost_slot_s\": " << fixed(p.lease_lost_slot_s, 2);
  }
  out << "}";
}

// Leases: per phase, what was held against the limits (offered, admitted and oracle above count
// acquires), and, after a phase that takes a node down, how long the slots the cluster still
// counted beyond those held took to fall back.
void print_leases(std::ostream& out, const SimResult& r) {
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %10s %10s %9s %10s %11s %11s %s\n", "leases", "held/limit", "oracle/lim",
                "peak_over", "peak_bound", "over_slot_s", "lost_slot_s", "lost at start -> below 10% after");
  out << line;
  auto row = [&](const PhaseStats& p) {
    std::string freed = "-";
    if (&p != &r.total) {
      double first = -1;
      for (const SeriesPoint& pt : r.series) {
        if (pt.t_ns < p.start_ns || pt.t_ns >= p.end_ns) continue;
        if (first < 0) {
          first = pt.lease_lost;
          if (first < 1) break;  // nothing counted beyond what is held
          freed = fixed(first, 1) + " -> not within the phase";
        } else if (pt.lease_lost < 0.1 * first) {
          freed = fixed(first, 1) + " -> " + fixed(double(pt.t_ns - p.start_ns) / 1e6, 0) + " ms";
          break;
        }
      }
    }
    std::snprintf(line, sizeof line, "%-12s %10.4f %10.4f %9lld %10lld %11.1f %11.1f %s\n", p.name.c_str(),
                  p.lease_in_flight_ratio(),
                  p.lease_limit_slot_s > 0 ? p.lease_oracle_slot_s / p.lease_limit_slot_s : 0.0,
                  (long long)p.lease_peak_over, (long long)p.lease_peak_bound, p.lease_over_slot_s, p.lease_lost_slot_s,
                  freed.c_str());
    out << line;
  };
  for (const PhaseStats& p : r.phases) row(p);
  row(r.total);
}

}  // namespace

void print_table(std::ostream& out, const RunInfo& info, const Scenario& s, const SimResult& r) {
  out << "scenario " << info.scenario << " on " << info.cluster << ": " << s.nodes << " nodes, "
      << dissemination_mode_name(s.node.mode) << " over " << s.transport << ", "
      << (s.node.membership == MembershipKind::kStatic ? "static" : "heartbeat") << " membership, policy "
      << partition_policy_name(s.node.partition_policy) << ", seed " << s.seed
      << (s.front_end == Scenario::FrontEnd::kRls ? ", checks through the rate limit service (gRPC)" : "") << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %7s %7s %9s %9s %9s %6s %6s %8s %8s %9s %10s\n", "phase", "start_s", "end_s",
                "offered", "admitted", "oracle", "over", "under", "conv_p50", "conv_p99", "msgs/n/s", "bytes/n/s");
  out << line;
  auto row = [&](const PhaseStats& p) {
    std::snprintf(line, sizeof line, "%-12s %7.1f %7.1f %9llu %9llu %9llu %6.3f %6.3f %8s %8s %9.1f %10.0f\n",
                  p.name.c_str(), double(p.start_ns) / 1e9, double(p.end_ns) / 1e9, (unsigned long long)p.offered,
                  (unsigned long long)p.admitted, (unsigned long long)p.oracle_admitted, p.over_admission(),
                  p.under_admission(), ms_or_dash(p.convergence_ms(50)).c_str(),
                  ms_or_dash(p.convergence_ms(99)).c_str(), p.msgs_per_node_s(), p.bytes_per_node_s());
    out << line;
  };
  for (const PhaseStats& p : r.phases) row(p);
  row(r.total);
  if (s.load.kind == LoadSpec::Kind::kLeases) print_leases(out, r);
  if (r.unconverged) {
    out << r.unconverged
        << " batches never reached every node that was alive when they were sealed (sealed over 1 s before the end)\n";
  }
  if (r.in_flight_at_end)
    out << r.in_flight_at_end << " batches sealed in the last 1 s were still on their way at the end\n";
  if (r.member_failures >= 0)
    out << r.member_failures << " times a node marked a peer failed (suspect or unreachable)\n";
  if (r.charged_twice) out << r.charged_twice << " times a node was charged a batch a second time (must be 0)\n";
  for (const SimResult::TopCheck& t : r.top_checks) {
    out << "top-" << t.k << " at node " << t.node << ", " << t.rule << " " << t.metric << ": " << t.found
        << " of the exact top " << t.k << " reported (" << t.missed << " missed beyond the bound), " << t.outside
        << " reported keys outside their bounds; total " << t.total << " (exact " << t.exact_total << "), error bound "
        << t.error_bound << ", " << t.members_reporting << " of " << t.live << " members reporting\n";
  }
  if (s.node.mode == DisseminationMode::kAuto && !r.modes_at_end.empty()) {
    out << "auto: at the end,";
    const char* sep = " ";
    for (const auto& [mode, n] : r.modes_at_end) {
      out << sep << n << " nodes in " << mode.first;
      if (mode.second > 0) out << " (" << mode.second << " groups)";
      sep = ", ";
    }
    out << "\n";
  }
  if (const LocalStats* l = info.local) {
    const uint64_t asked = r.total.offered + l->failed_open_total;
    out << "local: " << l->failed_open_total << " of " << asked << " checks ("
        << fixed(asked ? 100.0 * double(l->failed_open_total) / double(asked) : 0, 2)
        << "%) got no decision from their daemon and are left out of every figure above";
    if (l->failed_open_total) {
      out << " (first: " << l->failed_open_example << "); per phase:";
      for (size_t i = 0; i < r.phases.size() && i < l->failed_open.size(); ++i)
        out << " " << r.phases[i].name << " " << l->failed_open[i];
    }
    out << "\nlocal: checks sent up to " << fixed(double(l->lag_max_ns) / 1e6, 1)
        << " ms after their scheduled time (p99 " << fixed(double(l->lag_p99_ns) / 1e6, 1) << " ms); cluster formed in "
        << fixed(l->formed_after_s, 1) << " s; convergence is not measured on real daemons (\"-\")\n";
    if (s.front_end == Scenario::FrontEnd::kRls)
      out << "local: the daemons answered " << l->rls_calls << " ShouldRateLimit calls\n";
    if (l->stats_polls_failed)
      out << "local: " << l->stats_polls_failed << " counter polls failed: msgs and bytes are undercounted\n";
  }
}

void write_json(std::ostream& out, const RunInfo& info, const Scenario& s, const SimResult& r) {
  out << "{\"scenario\": " << json_string(info.scenario) << ", \"cluster\": " << json_string(info.cluster)
      << ", \"mode\": " << json_string(dissemination_mode_name(s.node.mode))
      << ", \"transport\": " << json_string(s.transport)
      << ", \"front_end\": " << json_string(s.front_end == Scenario::FrontEnd::kRls ? "rls" : "native")
      << ", \"policy\": " << json_string(partition_policy_name(s.node.partition_policy)) << ", \"nodes\": " << s.nodes
      << ", \"seed\": " << s.seed << ", \"phases\": [";
  const LocalStats* l = info.local;
  for (size_t i = 0; i < r.phases.size(); ++i) {
    if (i) out << ", ";
    json_phase(out, r.phases[i], l && i < l->failed_open.size() ? int64_t(l->failed_open[i]) : -1);
  }
  out << "], \"total\": ";
  json_phase(out, r.total, l ? int64_t(l->failed_open_total) : -1);
  out << ", \"unconverged\": " << r.unconverged << ", \"in_flight_at_end\": " << r.in_flight_at_end
      << ", \"member_failures\": " << r.member_failures << ", \"charged_twice\": " << r.charged_twice;
  if (l) {
    out << ", \"local\": {\"failed_open\": " << l->failed_open_total << ", \"dropped\": " << l->dropped
        << ", \"lag_p99_ms\": " << fixed(double(l->lag_p99_ns) / 1e6, 2)
        << ", \"lag_max_ms\": " << fixed(double(l->lag_max_ns) / 1e6, 2)
        << ", \"formed_after_s\": " << fixed(l->formed_after_s, 2)
        << ", \"stats_polls_failed\": " << l->stats_polls_failed << "}";
  }
  out << "}\n";
}

void write_csv(std::ostream& out, const SimResult& r) {
  size_t sides = 1;
  for (const SeriesPoint& p : r.series) sides = std::max(sides, p.admitted_by_side.size());
  out << "t_s,admitted,oracle_admitted,limit_per_step";
  for (size_t i = 0; i < sides; ++i) out << ",admitted_side_" << i;
  out << "\n";
  for (const SeriesPoint& p : r.series) {
    out << fixed(double(p.t_ns) / 1e9, 1) << "," << p.admitted << "," << p.oracle_admitted << ","
        << fixed(r.limit_per_sec / 10.0, 1);
    for (size_t i = 0; i < sides; ++i) out << "," << (i < p.admitted_by_side.size() ? p.admitted_by_side[i] : 0);
    out << "\n";
  }
}

std::vector<std::pair<double, double>> shaded_periods(const Scenario& s) {
  std::vector<std::pair<double, double>> out;
  for (const Event& e : s.timeline) {
    if (e.kind != Event::Kind::kPartition && e.kind != Event::Kind::kCrash && e.kind != Event::Kind::kLoss) continue;
    if (e.at_ns >= s.duration_ns) continue;
    out.emplace_back(double(e.at_ns) / 1e9, double(std::min(e.until_ns.value_or(s.duration_ns), s.duration_ns)) / 1e9);
  }
  return out;
}

std::string write_plot(const std::string& png_path, const Scenario& s, const SimResult& r) {
  const std::string csv_path = png_path + ".csv";
  {
    std::ofstream csv(csv_path);
    write_csv(csv, r);
    if (!csv) return "cannot write " + csv_path;
  }
  const std::string title = s.name + ": " + dissemination_mode_name(s.node.mode) + ", " +
                            partition_policy_name(s.node.partition_policy) + ", " + std::to_string(s.nodes) + " nodes";
  return write_overlay_plot(png_path, title, {{"cluster admitted", csv_path}}, shaded_periods(s));
}

std::string write_overlay_plot(const std::string& png_path, const std::string& title, const std::vector<PlotRun>& runs,
                               const std::vector<std::pair<double, double>>& shaded) {
  if (runs.empty()) return "nothing to plot";
  for (const PlotRun& run : runs) {
    std::ifstream in(run.csv_path);
    std::string header;
    if (!std::getline(in, header)) return "cannot read " + run.csv_path;
    if (header.rfind("t_s,admitted,oracle_admitted,limit_per_step", 0) != 0) {
      return run.csv_path + ": not a tollgate-sim --csv time series (its first line is \"" + header + "\")";
    }
    // gnuplot reads the paths and labels inside single quotes.
    if (run.csv_path.find('\'') != std::string::npos || run.label.find('\'') != std::string::npos) {
      return "a plotted path or label contains a single quote: " + run.label + "=" + run.csv_path;
    }
  }
  if (png_path.find('\'') != std::string::npos) return "the plot path contains a single quote: " + png_path;
  FILE* gp = popen("gnuplot", "w");
  if (!gp) return "cannot run gnuplot (scripts/deps installs gnuplot-nox)";
  std::string script = "set terminal pngcairo size 1100,500\nset output '" + png_path + "'\n" +
                       "set datafile separator ','\nset key top right\nset xlabel 'time (s)'\n" +
                       "set ylabel 'admitted per second'\nset title '";
  for (char c : title) script += c == '\'' ? '"' : c;
  script += "'\n";
  for (const auto& [from, to] : shaded) {
    script += "set object rect from " + fixed(from, 1) + ", graph 0 to " + fixed(to, 1) +
              ", graph 1 fc rgb '#e8e8e8' fs solid noborder behind\n";
  }
  // Series are per 100 ms: x10 for per-second rates.
  script += "plot ";
  for (const PlotRun& run : runs) {
    script += "'" + run.csv_path + "' using 1:($2*10) every ::1 with lines lw 2 title '" + run.label + "', ";
  }
  const std::string& first = runs.front().csv_path;
  script += "'" + first + "' using 1:($3*10) every ::1 with lines lw 1 title 'oracle (one ideal bucket)" +
            (runs.size() > 1 ? ", " + runs.front().label : std::string()) + "', '" + first +
            "' using 1:($4*10) every ::1 with lines dt 2 lc rgb 'black' title 'limit'\n";
  fputs(script.c_str(), gp);
  const int status = pclose(gp);
  return status == 0 ? "" : "gnuplot failed (exit status " + std::to_string(status) + ")";
}

}  // namespace tollgate::sim
