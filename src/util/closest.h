// "Did you mean ...?" for a mistyped command or flag: the known name nearest to what was typed,
// by edit distance (insertions, deletions, substitutions and swaps of neighbours each cost 1).
#ifndef TOLLGATE_SRC_UTIL_CLOSEST_H_
#define TOLLGATE_SRC_UTIL_CLOSEST_H_

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tollgate {

inline size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment over three rows: what a typo usually is.
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    before.swap(prev);
    prev.swap(cur);
  }
  return prev[b.size()];
}

// The name in `known` nearest to `typed`, if it is near enough to be a typo (at most 2 edits,
// and fewer than half of the typed length); "" otherwise.
inline std::string closest_name(std::string_view typed, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& name : known) {
    const size_t d = edit_distance(typed, name);
    if (d < best_distance) best_distance = d, best = name;
  }
  return best_distance <= 2 && 2 * best_distance < typed.size() ? best : std::string();
}

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_CLOSEST_H_
