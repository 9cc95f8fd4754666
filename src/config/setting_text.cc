#include "config/setting_text.h"

#include <optional>

namespace tollgate {

std::string quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

std::string parse_duration_setting(std::string_view text, int64_t min_ns, int64_t max_ns, int64_t& out) {
  std::string why;
  const std::optional<int64_t> ns = parse_duration_ns(text, &why);
  if (!ns) return "is not a duration (" + why + ")";
  const std::string range = "must be from " + format_duration(min_ns) + " to " + format_duration(max_ns);
  if (*ns < min_ns) {
    if (max_ns != kMaxSettingDurationNs) return range;
    return min_ns <= 1 ? "must be longer than 0s" : "must be at least " + format_duration(min_ns);
  }
  if (*ns > max_ns)
    return min_ns <= 1 || max_ns == kMaxSettingDurationNs ? "must be at most " + format_duration(max_ns) : range;
  out = *ns;
  return {};
}

std::string parse_choice_setting(std::string_view text, std::initializer_list<std::string_view> choices,
                                 size_t& index) {
  std::string list;
  size_t i = 0;
  for (std::string_view c : choices) {
    if (c == text) {
      index = i;
      return {};
    }
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(c);
    ++i;
  }
  return "must be " + list + ", got " + quoted(text);
}

}  // namespace tollgate
