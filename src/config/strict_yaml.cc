#include "config/strict_yaml.h"

#include "tollgate/config_error.h"

namespace tollgate::yaml {

YAML::Node load(std::string_view text, const std::string& source) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    throw ConfigError(source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
}

void fail(const std::string& source, const YAML::Mark& at, const std::string& problem) {
  if (at.is_null()) throw ConfigError(source, 0, 0, problem);
  throw ConfigError(source, at.line + 1, at.column + 1, problem);
}

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace tollgate::yaml
