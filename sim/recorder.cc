#include "recorder.h"

#include <algorithm>
#include <cmath>

namespace tollgate::sim {

namespace {
constexpr int64_t kSeriesStepNs = 100 * kNanosPerMilli;
}  // namespace

double PhaseStats::convergence_ms(double p) const {
  if (convergence_ns.empty()) return -1;
  std::vector<int64_t> v = convergence_ns;
  const size_t idx = std::min(v.size() - 1, size_t(std::ceil(p / 100.0 * double(v.size()))) - (p > 0 ? 1 : 0));
  std::nth_element(v.begin(), v.begin() + long(idx), v.end());
  return double(v[idx]) / double(kNanosPerMilli);
}

Recorder::Recorder(const Scenario& s, std::shared_ptr<const RuleSet> rules) : oracle_(rules) {
  for (const Phase& p : s.phases()) {
    PhaseStats ps;
    ps.name = p.name;
    ps.start_ns = p.start_ns;
    ps.end_ns = p.end_ns;
    result_.phases.push_back(ps);
  }
  result_.total.name = "total";
  result_.total.end_ns = s.duration_ns;
  if (!rules->rules().empty()) {
    const Rate& r = rules->rules()[0].limit.rate;
    result_.limit_per_sec = double(r.tokens) * double(kNanosPerSecond) / double(r.period_ns);
  }
}

void Recorder::check(int64_t t_ns, std::string_view key, int64_t cost, size_t side, bool allowed) {
  const bool ideal = oracle_.admit(key, cost, t_ns);
  for (PhaseStats* ps : {&phase_at(t_ns), &result_.total}) {
    ++ps->offered;
    ps->admitted += allowed;
    ps->oracle_admitted += ideal;
  }
  SeriesPoint& pt = series_at(t_ns);
  pt.admitted += allowed;
  pt.oracle_admitted += ideal;
  if (pt.admitted_by_side.size() <= side) pt.admitted_by_side.resize(side + 1);
  pt.admitted_by_side[side] += allowed;
}

void Recorder::sent(int64_t t_ns, uint64_t messages, uint64_t bytes) {
  PhaseStats& ps = phase_at(t_ns);
  ps.messages += messages;
  ps.bytes += bytes;
  result_.total.messages += messages;
  result_.total.bytes += bytes;
}

void Recorder::converged(int64_t sealed_ns, int64_t took_ns) {
  phase_at(sealed_ns).convergence_ns.push_back(took_ns);
  result_.total.convergence_ns.push_back(took_ns);
}

void Recorder::alive(int64_t until_ns, size_t live) {
  for (PhaseStats& p : result_.phases) {
    const int64_t a = std::max(p.start_ns, alive_since_), b = std::min(p.end_ns, until_ns);
    if (b > a) p.node_seconds += double(live) * double(b - a) / double(kNanosPerSecond);
  }
  if (until_ns > alive_since_) {
    result_.total.node_seconds += double(live) * double(until_ns - alive_since_) / double(kNanosPerSecond);
    alive_since_ = until_ns;
  }
}

// Under-admission (see PhaseStats::under): 1 s windows (ten series steps), cut at phase boundaries.
SimResult Recorder::finish() {
  std::vector<PhaseStats*> all;
  for (PhaseStats& p : result_.phases) all.push_back(&p);
  all.push_back(&result_.total);
  for (PhaseStats* p : all) {
    uint64_t admitted = 0, oracle = 0;
    int steps = 0;
    auto flush = [&] {
      p->under += oracle > admitted ? oracle - admitted : 0;
      admitted = oracle = 0;
      steps = 0;
    };
    for (const SeriesPoint& pt : result_.series) {
      if (pt.t_ns < p->start_ns || pt.t_ns >= p->end_ns) continue;
      admitted += pt.admitted;
      oracle += pt.oracle_admitted;
      if (++steps == 10) flush();
    }
    flush();
  }
  return std::move(result_);
}

PhaseStats& Recorder::phase_at(int64_t t_ns) {
  for (PhaseStats& p : result_.phases) {
    if (t_ns >= p.start_ns && t_ns < p.end_ns) return p;
  }
  return result_.phases.empty() ? result_.total : result_.phases.back();
}

SeriesPoint& Recorder::series_at(int64_t t_ns) {
  const size_t step = size_t(t_ns / kSeriesStepNs);
  while (result_.series.size() <= step) {
    SeriesPoint p;
    p.t_ns = int64_t(result_.series.size()) * kSeriesStepNs;
    result_.series.push_back(p);
  }
  return result_.series[step];
}

}  // namespace tollgate::sim
