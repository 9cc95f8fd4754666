// tollgate-sim's outputs: the per-phase table, the JSON summary and the CSV time series. All
// numbers are printed with fixed precision, so the same run prints the same bytes.
#ifndef TOLLGATE_SIM_REPORT_H_
#define TOLLGATE_SIM_REPORT_H_

#include <ostream>
#include <string>
#include <vector>

#include "local_stats.h"
#include "result.h"
#include "scenario.h"

namespace tollgate::sim {

struct RunInfo {
  std::string scenario, cluster;  // cluster: "virtual" or "local"
  // Local runs: the checks left out of the figures and the load generator's lag, printed under
  // the table and written to the JSON ("failed_open" per phase, "local" at the top level).
  const LocalStats* local = nullptr;
};

void print_table(std::ostream& out, const RunInfo& info, const Scenario& s, const SimResult& r);
void write_json(std::ostream& out, const RunInfo& info, const Scenario& s, const SimResult& r);
void write_csv(std::ostream& out, const SimResult& r);

// Draws the admitted rate against the oracle's and the limit over time, partitions shaded, into
// `png_path` with gnuplot (the CSV goes next to it as png_path + ".csv"). Returns "" or the error.
std::string write_plot(const std::string& png_path, const Scenario& s, const SimResult& r);

// One run of an overlay plot: its label and the CSV time series write_csv wrote for it.
struct PlotRun {
  std::string label, csv_path;
};
// Draws several runs' admitted rates in one plot, with the first run's oracle and limit, into
// `png_path`; `title` heads it and each of `shaded` (from, to) in seconds is shaded (a partition,
// a crash, a loss period). Returns "" or the error (a CSV that is missing or not write_csv's).
std::string write_overlay_plot(const std::string& png_path, const std::string& title, const std::vector<PlotRun>& runs,
                               const std::vector<std::pair<double, double>>& shaded);
// The periods write_plot shades for `s`: partitions, crashes and loss events, clipped to the run.
std::vector<std::pair<double, double>> shaded_periods(const Scenario& s);

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_REPORT_H_
