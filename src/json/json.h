// The little JSON tollgate writes (`tollgate --json`, HTTP's /v1/members and /v1/stats, tollgate-sim
// --json): a correct string escaper, no parser, and the members and stats documents.
// (Debian's nlohmann-json is not among the project's dependencies; this is all we need.)
#ifndef TOLLGATE_SRC_JSON_JSON_H_
#define TOLLGATE_SRC_JSON_JSON_H_

#include <string>
#include <string_view>
#include <vector>

#include "tollgate/top.h"
#include "tollgate/types.h"

namespace tollgate::json {

// Appends `text` to `out` as a JSON string literal, quotes included. `"` and `\` are escaped,
// control characters (< 0x20) become \b \f \n \r \t or \u00XX, valid UTF-8 passes through
// unchanged, and every byte that is not part of a valid UTF-8 sequence (keys are arbitrary
// bytes) becomes U+FFFD, so the output is always valid JSON in valid UTF-8.
void append_json_string(std::string& out, std::string_view text);

// The same, as a new string.
std::string json_string(std::string_view text);

// {"members": [{"id": ..., "address": ..., "state": ..., "incarnation": N, "last_heard_ms": N,
// "self": B}, ...]}
// and a newline: `tollgate members --json` and GET /v1/members.
std::string format_members_json(const std::vector<MemberInfo>& members);

// {"stats": {"name": value, ...}} and a newline, in the list's order: `tollgate stats --json` and
// GET /v1/stats.
std::string format_stats_json(const StatsList& stats);

// {"rules": [{"rule": R, "members_reporting": N, "denied": M, "tokens": M}, ...]} and a newline,
// each M {"total", "error_bound", "unreported_bound", "keys": [{"key", "lower", "upper"}, ...]},
// an Envoy bucket's key with its "descriptor" ("web: path=/x") after "key":
// `tollgate top --json` and GET /v1/top.
std::string format_top_json(const std::vector<RuleTop>& tops);

}  // namespace tollgate::json

#endif  // TOLLGATE_SRC_JSON_JSON_H_
