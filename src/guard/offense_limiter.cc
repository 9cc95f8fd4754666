#include "guard/offense_limiter.h"

namespace tollgate {

namespace {
constexpr std::string_view kOthers = "other offenders";
}  // namespace

std::optional<OffenseLimiter::Verdict> OffenseLimiter::admit(std::string_view offender, MonoNanos now) {
  Entry* entry = table_.find(offender);
  if (!entry) {
    // One slot stays for the shared entry, so the table never exceeds max_offenders.
    if (table_.size() + 1 >= options_.max_offenders) offender = kOthers;
    entry = table_.try_emplace(offender).first;
  }
  if (entry->logged && now - entry->last_line_ns < options_.interval_ns) {
    ++entry->suppressed;
    ++suppressed_total_;
    return std::nullopt;
  }
  Verdict v{offender, entry->suppressed};
  entry->logged = true;
  entry->last_line_ns = now;
  entry->suppressed = 0;
  return v;
}

}  // namespace tollgate
