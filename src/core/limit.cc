#include "tollgate/limit.h"

#include <charconv>

#include "core/clock.h"

namespace tollgate {
namespace {

struct Unit {
  std::string_view suffix;
  int64_t period_ns;
};
constexpr Unit kUnits[] = {
    {"s", kNanosPerSecond},
    {"min", 60 * kNanosPerSecond},
    {"h", 3600 * kNanosPerSecond},
    // Long windows (issue 35): a day, a week, and a month of 30 days, as Envoy's rate limit
    // service configuration (and envoyproxy/ratelimit) counts them.
    {"d", 86400 * kNanosPerSecond},
    {"w", 7 * 86400 * kNanosPerSecond},
    {"month", 30 * 86400 * kNanosPerSecond},
};

}  // namespace

std::optional<Rate> parse_rate(std::string_view text, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<Rate> {
    if (error) *error = std::move(why);
    return std::nullopt;
  };
  const std::string shown = "\"" + std::string(text) + "\"";
  const auto slash = text.find('/');
  if (slash == std::string_view::npos) {
    return fail("rate " + shown + ": expected N/s, N/min, N/h, N/d, N/w or N/month (e.g. 100/s)");
  }
  const std::string_view number = text.substr(0, slash);
  const std::string_view unit = text.substr(slash + 1);
  int64_t tokens = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), tokens);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size()) {
    return fail("rate " + shown + ": \"" + std::string(number) + "\" is not a whole number of tokens");
  }
  if (tokens < 1 || tokens > kMaxTokens) {
    return fail("rate " + shown + ": tokens must be between 1 and " + std::to_string(kMaxTokens));
  }
  for (const Unit& u : kUnits) {
    if (unit == u.suffix) return Rate{tokens, u.period_ns};
  }
  return fail("rate " + shown + ": unknown unit \"" + std::string(unit) +
              "\", expected s, min, h, d (day), w (week) or month (30 days)");
}

std::string format_rate(const Rate& rate) {
  for (const Unit& u : kUnits) {
    if (rate.period_ns == u.period_ns) return std::to_string(rate.tokens) + "/" + std::string(u.suffix);
  }
  return std::to_string(rate.tokens) + "/" + std::to_string(rate.period_ns) + "ns";
}

std::string validate_limit(const Limit& limit) {
  if (limit.rate.tokens < 1 || limit.rate.tokens > kMaxTokens) {
    return "rate must be between 1 and " + std::to_string(kMaxTokens) + " tokens per period";
  }
  if (limit.rate.period_ns < 1) return "rate period must be positive";
  if (limit.burst < 1 || limit.burst > kMaxTokens) {
    return "burst must be between 1 and " + std::to_string(kMaxTokens);
  }
  if (limit.max_debt < 0 || limit.max_debt > kMaxTokens) {
    return "max_debt must be between 0 and " + std::to_string(kMaxTokens);
  }
  return {};
}

}  // namespace tollgate
