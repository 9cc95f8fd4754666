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

Recorder::Recorder(const Scenario& s, std::shared_ptr<const RuleSet> rules)
    : oracle_(rules), semaphore_(rules), count_exact_(s.top_check > 0) {
  for (const Phase& p : s.phases()) {
    PhaseStats ps;
    ps.name = p.name;
    ps.start_ns = p.start_ns;
    ps.end_ns = p.end_ns;
    result_.phases.push_back(ps);
  }
  if (s.load.kind == LoadSpec::Kind::kLeases) {
    for (size_t k = 0; k < s.load.keys; ++k) lease_keys_.push_back("k" + std::to_string(k));  // ArrivalStream's
  }
  result_.total.name = "total";
  result_.total.end_ns = s.duration_ns;
  if (!rules->rules().empty()) {
    const Rate& r = rules->rules()[0].limit.rate;
    result_.limit_per_sec = double(r.tokens) * double(kNanosPerSecond) / double(r.period_ns);
  }
}

void Recorder::check(int64_t t_ns, std::string_view key, int64_t cost, size_t side, bool allowed) {
  decided(t_ns, side, allowed, oracle_.admit(key, cost, t_ns));
  if (count_exact_) {
    Exact& e = exact_[std::string(key)];
    if (allowed) {
      e.tokens += uint64_t(cost);
    } else {
      ++e.denied;
    }
  }
}

void Recorder::decided(int64_t t_ns, size_t side, bool allowed, bool ideal) {
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

void Recorder::lease(int64_t t_ns, std::string_view key, int64_t count, size_t node, size_t side, bool granted,
                     int64_t hold_ns) {
  const bool ideal = semaphore_.admit(key, count, node, t_ns, hold_ns);
  held_.advance(t_ns);
  const int64_t limit = semaphore_.limit(key);
  int64_t over = 0;
  if (granted && limit > 0) {
    held_.add(key, count, node, t_ns + hold_ns);
    over = held_.in_flight(key) - limit;
    grant_times_[std::string(key)].push_back(t_ns);
  }
  for (PhaseStats* ps : {&phase_at(t_ns), &result_.total}) ps->lease_peak_over = std::max(ps->lease_peak_over, over);
  decided(t_ns, side, granted, ideal);
}

void Recorder::node_down(int64_t t_ns, size_t node) {
  held_.advance(t_ns);
  held_.node_down(node);
  semaphore_.node_down(node);
}

void Recorder::lease_sample(int64_t t_ns, const std::function<double(std::string_view)>& counted) {
  held_.advance(t_ns);
  constexpr double kStepS = double(kSeriesStepNs) / double(kNanosPerSecond);
  SeriesPoint& pt = series_at(t_ns);
  double held = 0, limit = 0, over = 0, lost = 0, ideal = 0;
  for (const std::string& key : lease_keys_) {
    const int64_t h = held_.in_flight(key), l = semaphore_.limit(key);
    if (l == 0) continue;
    held += double(h);
    ideal += double(semaphore_.in_flight(key, t_ns));
    limit += double(l);
    over += double(std::max<int64_t>(0, h - l));
    lost += std::max(0.0, counted(key) - double(h));
  }
  pt.lease_held = int64_t(held);
  pt.lease_lost = lost;
  for (PhaseStats* ps : {&phase_at(t_ns), &result_.total}) {
    ps->lease_held_slot_s += held * kStepS;
    ps->lease_limit_slot_s += limit * kStepS;
    ps->lease_oracle_slot_s += ideal * kStepS;
    ps->lease_over_slot_s += over * kStepS;
    ps->lease_lost_slot_s += lost * kStepS;
  }
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
    // Leases: the most grants of one key within any window of the phase's convergence p99.
    const double d_ms = p->convergence_ms(99);
    if (d_ms < 0) continue;
    const int64_t d_ns = int64_t(d_ms * double(kNanosPerMilli));
    for (const auto& [key, times] : grant_times_) {
      auto from = std::lower_bound(times.begin(), times.end(), p->start_ns);
      const auto to = std::lower_bound(times.begin(), times.end(), p->end_ns);
      for (auto it = from; it != to; ++it) {
        while (*it - *from > d_ns) ++from;
        p->lease_peak_bound = std::max(p->lease_peak_bound, int64_t(it - from + 1));
      }
    }
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
