// A setting's value as text, read by every settings table (config/node_settings.cc,
// daemon/daemon_settings.cc): each parser returns "" or why not, as a phrase that follows the
// setting's name ("must be a whole number from 1 to 64, got \"0\"").
#ifndef TOLLGATE_SRC_CONFIG_SETTING_TEXT_H_
#define TOLLGATE_SRC_CONFIG_SETTING_TEXT_H_

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "tollgate/duration.h"

namespace tollgate {

// Durations are bounded, so that the products the settings imply (2 x fail_after, ...) cannot
// overflow; found by the daemon_config fuzzer (tests/fuzz/regressions/daemon_config/).
inline constexpr int64_t kMaxSettingDurationNs = 168 * 3600 * kNanosPerSecond;

std::string quoted(std::string_view text);

// A duration from min_ns to max_ns ("50ms", "1h").
std::string parse_duration_setting(std::string_view text, int64_t min_ns, int64_t max_ns, int64_t& out);

// A whole number from min to max, in decimal, nothing around it.
template <class T>
std::string parse_whole_setting(std::string_view text, T min, T max, T& out) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < min || v > max) {
    return "must be a whole number from " + std::to_string(min) + " to " + std::to_string(max) + ", got " +
           quoted(text);
  }
  out = v;
  return {};
}

// One of `choices`; `index` is its position.
std::string parse_choice_setting(std::string_view text, std::initializer_list<std::string_view> choices, size_t& index);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_SETTING_TEXT_H_
