// Strict reading of our YAML files (rules, scenarios, tollgated --config): every error is a
// ConfigError naming the file, line and column; unknown and repeated fields are errors that list
// what was expected. The one home of these rules for every file we read.
#ifndef TOLLGATE_SRC_CONFIG_STRICT_YAML_H_
#define TOLLGATE_SRC_CONFIG_STRICT_YAML_H_

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstddef>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace tollgate::yaml {

// At most this many nodes (scalars, nulls, aliases, lists and mappings) in a document: about 90
// MB in yaml-cpp, and room for some 20,000 rules or descriptors.
inline constexpr size_t kMaxNodes = 200'000;

// Parses `text`; a syntax error is a ConfigError at its line and column of `source`, and so is a
// document of more than kMaxNodes nodes, refused before it is loaded.
YAML::Node load(std::string_view text, const std::string& source);

// Throws ConfigError(source, line, column of `at`, problem).
[[noreturn]] void fail(const std::string& source, const YAML::Mark& at, const std::string& problem);
[[noreturn]] inline void fail(const std::string& source, const YAML::Node& at, const std::string& problem) {
  fail(source, at.Mark(), problem);
}

// "a, b, c".
std::string join(std::span<const std::string_view> names);

// Calls fn(name, value) for each field of mapping `map`, in order, rejecting a field not in
// `allowed` ("unknown field "x" (expected one of: a, b)") and a field given twice. A `fn` that
// takes a third argument gets the field's name node too: an empty value's own mark points past
// it (yaml-cpp gives it the next token's position), so errors about it belong at the name.
template <typename Fn>
void for_each_field(const std::string& source, const YAML::Node& map, std::span<const std::string_view> allowed,
                    Fn&& fn) {
  std::set<std::string, std::less<>> seen;
  for (const auto& kv : map) {
    const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      fail(source, kv.first, "unknown field \"" + name + "\" (expected one of: " + join(allowed) + ")");
    }
    if (!seen.insert(name).second) fail(source, kv.first, "field \"" + name + "\" appears twice");
    if constexpr (std::is_invocable_v<Fn, const std::string&, const YAML::Node&, const YAML::Node&>) {
      fn(name, kv.second, kv.first);
    } else {
      fn(name, kv.second);
    }
  }
}

}  // namespace tollgate::yaml

#endif  // TOLLGATE_SRC_CONFIG_STRICT_YAML_H_
