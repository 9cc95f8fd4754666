// A hash map keyed by std::string that is looked up by std::string_view without making a string
// (heterogeneous lookup): for maps read on a hot path with keys that arrive as views.
#ifndef TOLLGATE_SRC_UTIL_STRING_MAP_H_
#define TOLLGATE_SRC_UTIL_STRING_MAP_H_

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tollgate {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_STRING_MAP_H_
