// Durations as operators write them: "50ms", "2s", "5m", "1h" (also "us", "ns"). One parser for
// every flag, config key and scenario file.
#ifndef TOLLGATE_DURATION_H_
#define TOLLGATE_DURATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tollgate {

// Parses a non-negative whole number followed by a unit (ns, us, ms, s, m, h) into nanoseconds.
// A bare number is rejected: the unit is never guessed. On failure returns nullopt and, if
// `error` is given, says what was expected.
std::optional<int64_t> parse_duration_ns(std::string_view text, std::string* error = nullptr);

// The shortest exact spelling: 50000000 -> "50ms", 2000000000 -> "2s".
std::string format_duration(int64_t ns);

}  // namespace tollgate

#endif  // TOLLGATE_DURATION_H_
