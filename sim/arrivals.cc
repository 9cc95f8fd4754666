#include "arrivals.h"

#include <algorithm>
#include <cmath>

namespace tollgate::sim {

double spread_weight(LoadSpec::Spread spread, size_t index) {
  switch (spread) {
    case LoadSpec::Spread::kUniform:
      return 1;
    case LoadSpec::Spread::kSkewed:
      return 1.0 / double(index + 1);
    case LoadSpec::Spread::kOne:
      return index == 0 ? 1 : 0;
  }
  return 1;
}

ArrivalStream::ArrivalStream(const LoadSpec& load, uint64_t seed)
    : load_(load), rng_(seed * 3 + 2), hold_rng_(seed * 3 + 3) {
  key_cdf_.resize(std::max<size_t>(1, load_.keys));
  double acc = 0;
  for (size_t k = 0; k < key_cdf_.size(); ++k) {
    acc += load_.distribution == LoadSpec::Distribution::kZipf ? 1.0 / double(k + 1) : 1.0;
    key_cdf_[k] = acc;
    keys_.push_back("k" + std::to_string(k));
  }
  draw_gap();
}

double ArrivalStream::uniform01() { return double(rng_.next_u64() >> 11) * 0x1.0p-53; }

void ArrivalStream::draw_gap() {
  const double gap_s = -std::log(1.0 - uniform01()) / load_.rate_per_sec;
  next_t_ns_ += std::max<int64_t>(1, int64_t(gap_s * double(kNanosPerSecond)));
  if (load_.until_ns > 0 && next_t_ns_ >= load_.until_ns) next_t_ns_ = INT64_MAX;  // the load's end
}

Arrival ArrivalStream::next(const std::vector<bool>& up) {
  Arrival a;
  a.t_ns = next_t_ns_;
  draw_gap();
  double total = 0;
  for (size_t i = 0; i < up.size(); ++i) total += up[i] ? spread_weight(load_.spread, i) : 0;
  if (total <= 0) {
    a.dropped = true;
    return a;
  }
  // Walk the live nodes by weight. When rounding runs past the last live node onto a down one,
  // the check is dropped (rare; the virtual back end does the same).
  double pick = uniform01() * total;
  size_t i = 0;
  for (; i + 1 < up.size(); ++i) {
    if (!up[i]) continue;
    const double w = spread_weight(load_.spread, i);
    if (pick < w) break;
    pick -= w;
  }
  if (!up[i]) {
    a.dropped = true;
    return a;
  }
  a.node = i;
  const double k = uniform01() * key_cdf_.back();
  a.key = std::min(size_t(std::upper_bound(key_cdf_.begin(), key_cdf_.end(), k) - key_cdf_.begin()), keys_.size() - 1);
  if (load_.kind == LoadSpec::Kind::kLeases) {
    const double u = double(hold_rng_.next_u64() >> 11) * 0x1.0p-53;
    const double mean = double(load_.hold_mean_ns);
    a.hold_ns = std::max<int64_t>(
        1, load_.hold == LoadSpec::Hold::kFixed ? load_.hold_mean_ns : int64_t(-std::log(1.0 - u) * mean));
    a.never_release = double(hold_rng_.next_u64() >> 11) * 0x1.0p-53 < load_.never_release;
  }
  return a;
}

}  // namespace tollgate::sim
