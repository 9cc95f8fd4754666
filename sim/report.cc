#include "report.h"

#include <cstdio>
#include <fstream>

namespace tollgate::sim {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string ms_or_dash(double ms) { return ms < 0 ? "-" : fixed(ms, 1); }

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number_or_null(double v, int digits) { return v < 0 ? "null" : fixed(v, digits); }

void json_phase(std::ostream& out, const PhaseStats& p) {
  out << "{\"name\": " << json_string(p.name) << ", \"start_s\": " << fixed(double(p.start_ns) / 1e9, 3)
      << ", \"end_s\": " << fixed(double(p.end_ns) / 1e9, 3) << ", \"offered\": " << p.offered
      << ", \"admitted\": " << p.admitted << ", \"oracle_admitted\": " << p.oracle_admitted
      << ", \"over_admission\": " << fixed(p.over_admission(), 4) << ", \"under_admission\": " << fixed(p.under_admission(), 4)
      << ", \"convergence_ms_p50\": " << json_number_or_null(p.convergence_ms(50), 1)
      << ", \"convergence_ms_p99\": " << json_number_or_null(p.convergence_ms(99), 1)
      << ", \"msgs_per_node_s\": " << fixed(p.msgs_per_node_s(), 2) << ", \"bytes_per_node_s\": " << fixed(p.bytes_per_node_s(), 1)
      << "}";
}

}  // namespace

void print_table(std::ostream& out, const RunInfo& info, const Scenario& s, const SimResult& r) {
  out << "scenario " << info.scenario << " on " << info.cluster << ": " << s.nodes << " nodes, "
      << dissemination_mode_name(s.mode) << " over " << s.transport << ", "
      << (s.membership == MembershipKind::kStatic ? "static" : "heartbeat") << " membership, policy "
      << partition_policy_name(s.policy) << ", seed " << s.seed << "\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %7s %7s %9s %9s %9s %6s %6s %8s %8s %9s %10s\n", "phase", "start_s", "end_s",
                "offered", "admitted", "oracle", "over", "under", "conv_p50", "conv_p99", "msgs/n/s", "bytes/n/s");
  out << line;
  auto row = [&](const PhaseStats& p) {
    std::snprintf(line, sizeof line, "%-12s %7.1f %7.1f %9llu %9llu %9llu %6.3f %6.3f %8s %8s %9.1f %10.0f\n",
                  p.name.c_str(), double(p.start_ns) / 1e9, double(p.end_ns) / 1e9, (unsigned long long)p.offered,
                  (unsigned long long)p.admitted, (unsigned long long)p.oracle_admitted, p.over_admission(),
                  p.under_admission(), ms_or_dash(p.convergence_ms(50)).c_str(), ms_or_dash(p.convergence_ms(99)).c_str(),
                  p.msgs_per_node_s(), p.bytes_per_node_s());
    out << line;
  };
  for (const PhaseStats& p : r.phases) row(p);
  row(r.total);
  if (r.unconverged) out << r.unconverged << " batches never reached every node that was alive when they were sealed\n";
}

void write_json(std::ostream& out, const RunInfo& info, const Scenario& s, const SimResult& r) {
  out << "{\"scenario\": " << json_string(info.scenario) << ", \"cluster\": " << json_string(info.cluster)
      << ", \"mode\": " << json_string(dissemination_mode_name(s.mode)) << ", \"transport\": " << json_string(s.transport)
      << ", \"policy\": " << json_string(partition_policy_name(s.policy)) << ", \"nodes\": " << s.nodes
      << ", \"seed\": " << s.seed << ", \"phases\": [";
  for (size_t i = 0; i < r.phases.size(); ++i) {
    if (i) out << ", ";
    json_phase(out, r.phases[i]);
  }
  out << "], \"total\": ";
  json_phase(out, r.total);
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

std::string write_plot(const std::string& png_path, const Scenario& s, const SimResult& r) {
  const std::string csv_path = png_path + ".csv";
  {
    std::ofstream csv(csv_path);
    write_csv(csv, r);
    if (!csv) return "cannot write " + csv_path;
  }
  FILE* gp = popen("gnuplot", "w");
  if (!gp) return "cannot run gnuplot (scripts/deps installs gnuplot-nox)";
  std::string script = "set terminal pngcairo size 1100,500\nset output '" + png_path + "'\n" +
                       "set datafile separator ','\nset key top right\nset xlabel 'time (s)'\n" +
                       "set ylabel 'admitted per second'\nset title '" + s.name + ": " +
                       dissemination_mode_name(s.mode) + ", " + partition_policy_name(s.policy) + ", " +
                       std::to_string(s.nodes) + " nodes'\n";
  for (const Event& e : s.timeline) {
    if (e.kind != Event::Kind::kPartition && e.kind != Event::Kind::kCrash && e.kind != Event::Kind::kLoss) continue;
    const double from = double(e.at_ns) / 1e9, to = double(e.until_ns.value_or(s.duration_ns)) / 1e9;
    script += "set object rect from " + fixed(from, 1) + ", graph 0 to " + fixed(to, 1) +
              ", graph 1 fc rgb '#e8e8e8' fs solid noborder behind\n";
  }
  // Series are per 100 ms: x10 for per-second rates, smoothed over 1 s.
  script += "plot '" + csv_path + "' using 1:($2*10) every ::1 with lines lw 2 title 'cluster admitted', '" + csv_path +
            "' using 1:($3*10) every ::1 with lines lw 1 title 'oracle (one ideal bucket)', '" + csv_path +
            "' using 1:($4*10) every ::1 with lines dt 2 lc rgb 'black' title 'limit'\n";
  fputs(script.c_str(), gp);
  const int status = pclose(gp);
  return status == 0 ? "" : "gnuplot failed (exit status " + std::to_string(status) + ")";
}

}  // namespace tollgate::sim
