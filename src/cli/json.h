// The little JSON the `tollgate` CLI writes (--json): a correct string escaper, no parser.
// (Debian's nlohmann-json is not among the project's dependencies; this is all we need.)
#ifndef TOLLGATE_SRC_CLI_JSON_H_
#define TOLLGATE_SRC_CLI_JSON_H_

#include <string>
#include <string_view>

namespace tollgate::cli {

// Appends `text` to `out` as a JSON string literal, quotes included. `"` and `\` are escaped,
// control characters (< 0x20) become \b \f \n \r \t or \u00XX, valid UTF-8 passes through
// unchanged, and every byte that is not part of a valid UTF-8 sequence (keys are arbitrary
// bytes) becomes U+FFFD, so the output is always valid JSON in valid UTF-8.
void append_json_string(std::string& out, std::string_view text);

// The same, as a new string.
std::string json_string(std::string_view text);

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_JSON_H_
