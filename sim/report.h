// tollgate-sim's outputs: the per-phase table, the JSON summary and the CSV time series. All
// numbers are printed with fixed precision, so the same run prints the same bytes.
#ifndef TOLLGATE_SIM_REPORT_H_
#define TOLLGATE_SIM_REPORT_H_

#include <ostream>
#include <string>

#include "scenario.h"
#include "result.h"

namespace tollgate::sim {

struct RunInfo {
  std::string scenario, cluster;  // cluster: "virtual" or "local"
};

void print_table(std::ostream& out, const RunInfo& info, const Scenario& s, const SimResult& r);
void write_json(std::ostream& out, const RunInfo& info, const Scenario& s, const SimResult& r);
void write_csv(std::ostream& out, const SimResult& r);

// Draws the admitted rate against the oracle's and the limit over time, partitions shaded, into
// `png_path` with gnuplot (the CSV goes next to it as png_path + ".csv"). Returns "" or the error.
std::string write_plot(const std::string& png_path, const Scenario& s, const SimResult& r);

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_REPORT_H_
