// A limit: how fast tokens refill, how many a bucket holds, how deep into debt it may go.
#ifndef TOLLGATE_LIMIT_H_
#define TOLLGATE_LIMIT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tollgate {

// A refill rate as an exact fraction: `tokens` every `period_ns`. "6000/min" is kept as
// {6000, 60e9}, not as 100.0/s, so refill never accumulates floating-point rounding.
struct Rate {
  int64_t tokens = 0;
  int64_t period_ns = 0;
  friend bool operator==(const Rate&, const Rate&) = default;
};

// Bounds that keep every bucket computation inside 64-bit microtoken arithmetic with room to spare.
inline constexpr int64_t kMaxTokens = 1'000'000'000'000;  // 10^12 tokens

struct Limit {
  Rate rate;
  int64_t burst = 0;     // capacity in tokens, >= 1: a full bucket holds this many
  int64_t max_debt = 0;  // how far below zero remote consumption may drive the balance, >= 0
  // Charge a denied check's cost all the same, into debt down to -max_debt: for costs known only
  // after the work is done (Envoy's apply_on_stream_done, tokens of an LLM answer), which must be
  // paid whatever the answer. Later checks then wait until the debt is repaid.
  bool charge_when_over = false;
  // Shadow mode, to try a limit before enforcing it: a check it would deny is allowed all the
  // same, uncharged, and marked (Decision::shadow_denied), so the bucket follows exactly what
  // enforcing would have admitted. Not with charge_when_over.
  bool shadow = false;
  friend bool operator==(const Limit&, const Limit&) = default;
};

// Parses "N/s", "N/min", "N/h", "N/d", "N/w" or "N/month" (30 days), N a positive integer up to
// kMaxTokens, no spaces.
// On failure returns nullopt and, if `error` is given, says what was expected.
std::optional<Rate> parse_rate(std::string_view text, std::string* error = nullptr);

// "5/s", "6000/min", "1/h", "100/d": the inverse of parse_rate for the units it accepts.
std::string format_rate(const Rate& rate);

// Empty when `limit` is usable; otherwise what is wrong with it ("burst must be >= 1", ...).
std::string validate_limit(const Limit& limit);

}  // namespace tollgate

#endif  // TOLLGATE_LIMIT_H_
