// What the `tollgate` CLI prints, as pure functions of the client's replies (so they are tested
// without a daemon). Text output is for people; --json output is one line of JSON for programs.
#ifndef TOLLGATE_SRC_CLI_OUTPUT_H_
#define TOLLGATE_SRC_CLI_OUTPUT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/client.h"

namespace tollgate::cli {

// Exit codes of `tollgate check` (and 0 / kExitError for the other commands).
inline constexpr int kExitAllowed = 0;
inline constexpr int kExitDenied = 1;
inline constexpr int kExitError = 2;

// Human form of a duration for output: "0ns", "750us", "1.5ms", "2s", "12.345s"; at most 3
// decimals (truncated), trailing zeros dropped. kRetryNever prints as "never", negative values as
// "-" + |v|. (tollgate::format_duration is exact instead, and prints 1234567891ns as such.)
std::string format_duration_human(int64_t ns);

// One line, e.g.
//   allowed "api:login:alice" cost 1: 4 tokens left; limit 30/min, burst 5, max debt 5
//   denied "api:login:alice" cost 1: insufficient tokens, retry after 1.5s; -1 tokens left; limit ...
//   allowed "x" cost 1: not limited (no rule governs the key)
// The key is printed JSON-quoted so that control characters cannot garble a terminal.
std::string format_check_text(std::string_view key, int64_t cost, const CheckReply& reply);
// {"key": "...", "cost": 1, "allowed": true, "remaining": 4, "retry_after_ns": 0,
//  "reason": "allowed", "limited": true, "limit": {"rate": "30/min", "rate_tokens": 30,
//  "rate_period_ns": 60000000000, "burst": 5, "max_debt": 5}}
// retry_after_ns is null when waiting cannot help (kRetryNever); limit is null when not limited.
std::string format_check_json(std::string_view key, int64_t cost, const CheckReply& reply);

// A table with a header: ID ADDRESS STATE INCARNATION LAST-HEARD; the node itself is marked.
std::string format_members_text(const std::vector<MemberInfo>& members);

// Per rule, busiest first: "rule "user:*": 3 members reporting", then its most denied and most
// tokens as RANK KEY COUNT tables, a count "650" when exact or "650..662" (its bounds), with each
// metric's total, error bound and the most a key not listed can weigh.
std::string format_top_text(const std::vector<RuleTop>& tops);

// "name  value" lines, names aligned.
std::string format_stats_text(const StatsList& stats);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_OUTPUT_H_
