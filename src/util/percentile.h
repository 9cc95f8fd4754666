// The latency percentile that tollgate-load and tollgate-uds-floor report, computed one way so
// that their figures compare.
#ifndef TOLLGATE_SRC_UTIL_PERCENTILE_H_
#define TOLLGATE_SRC_UTIL_PERCENTILE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tollgate::cli {

// The value at rank floor(p / 100 * n) of `v` (p in [0, 100]), or -1 when `v` is empty.
inline int64_t percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return -1;
  const size_t i = std::min(v.size() - 1, size_t(p / 100.0 * double(v.size())));
  std::nth_element(v.begin(), v.begin() + long(i), v.end());
  return v[i];
}

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_UTIL_PERCENTILE_H_
