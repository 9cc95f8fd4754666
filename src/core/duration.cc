#include "tollgate/duration.h"

#include <charconv>

#include "core/clock.h"

namespace tollgate {
namespace {

struct Unit {
  std::string_view suffix;
  int64_t ns;
};
// Longest suffixes first where one ends another ("ms" before "s").
constexpr Unit kUnits[] = {{"ns", 1},
                           {"us", kNanosPerMicro},
                           {"ms", kNanosPerMilli},
                           {"s", kNanosPerSecond},
                           {"m", 60 * kNanosPerSecond},
                           {"h", 3600 * kNanosPerSecond}};

}  // namespace

std::optional<int64_t> parse_duration_ns(std::string_view text, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<int64_t> {
    if (error) *error = "duration \"" + std::string(text) + "\": " + why;
    return std::nullopt;
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return fail("expected a whole number and a unit, e.g. 50ms, 2s, 5m");
  const std::string_view unit = text.substr(digits);
  if (unit.empty()) return fail("missing unit (ns, us, ms, s, m or h)");
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + digits, n);
  if (ec != std::errc() || end != text.data() + digits) return fail("number out of range");
  for (const Unit& u : kUnits) {
    if (unit != u.suffix) continue;
    if (n > INT64_MAX / u.ns) return fail("too long");
    return n * u.ns;
  }
  return fail("unknown unit \"" + std::string(unit) + "\" (expected ns, us, ms, s, m or h)");
}

std::string format_duration(int64_t ns) {
  if (ns == 0) return "0s";
  for (size_t i = std::size(kUnits); i-- > 0;) {
    if (ns % kUnits[i].ns == 0) return std::to_string(ns / kUnits[i].ns) + std::string(kUnits[i].suffix);
  }
  return std::to_string(ns) + "ns";
}

}  // namespace tollgate
