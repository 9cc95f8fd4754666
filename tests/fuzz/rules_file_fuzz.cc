// The rules file (include/tollgate/rules_file.h): any text into parse_rules(), as the daemon
// loads it at start-up and on SIGHUP.
//
// Contract: it returns a RuleSet or throws ConfigError naming the source, never anything else
// (the reload path must be able to report a bad file and keep the old rules). What it accepts
// has non-empty, distinct patterns of at most 256 bytes and valid limits; an exact pattern
// governs its own key; and the rules, written back as YAML, parse to the same rules.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <set>
#include <string>

#include "fuzz_util.h"
#include "tollgate/config_error.h"
#include "tollgate/limit.h"
#include "tollgate/rules_file.h"

namespace {

const std::string kSource = "fuzz-rules.yaml";

bool plain_ascii(const std::string& s) {
  for (const char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// A double-quoted YAML scalar; only for printable ASCII, where escaping '"' and '\' suffices.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string limit_fields(const tollgate::Limit& l, const char* indent) {
  return std::string(indent) + "rate: " + tollgate::format_rate(l.rate) + "\n" + indent +
         "burst: " + std::to_string(l.burst) + "\n" + indent + "max_debt: " + std::to_string(l.max_debt) + "\n" +
         indent + "charge_when_over: " + (l.charge_when_over ? "true" : "false") + "\n";
}

std::shared_ptr<const tollgate::RuleSet> parse(std::string_view text) {
  try {
    return tollgate::parse_rules(text, kSource);
  } catch (const tollgate::ConfigError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with(kSource), "a ConfigError that does not name the file");
    return nullptr;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parse_rules threw something other than ConfigError: %s\n", e.what());
    FUZZ_CHECK(false, "parse_rules throws only ConfigError");
  }
  return nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto rules = parse(tollgate::fuzz::as_text(data, size));
  if (!rules) return 0;

  std::set<std::string> seen;
  bool writable = true;
  for (size_t i = 0; i < rules->rules().size(); ++i) {
    const tollgate::Rule& r = rules->rules()[i];
    FUZZ_CHECK(!r.match.empty() && r.match.size() <= 256, "a pattern that is empty or too long");
    FUZZ_CHECK(seen.insert(r.match).second, "a pattern listed twice");
    FUZZ_CHECK(tollgate::validate_limit(r.limit).empty(), "an invalid limit accepted");
    FUZZ_CHECK(r.line >= 1, "a rule without its line");
    if (r.match.find('*') == std::string::npos) {
      FUZZ_CHECK(rules->match(r.match) == i, "an exact pattern does not govern its own key");
    }
    writable = writable && plain_ascii(r.match);
  }
  if (rules->default_limit()) {
    FUZZ_CHECK(tollgate::validate_limit(*rules->default_limit()).empty(), "an invalid default accepted");
  }

  // Written back (patterns of printable ASCII only: anything else would need YAML escapes
  // whose round trip is yaml-cpp's business), it parses to the same rules.
  if (!writable) return 0;
  std::string yaml = rules->rules().empty() ? "rules: []\n" : "rules:\n";
  for (const tollgate::Rule& r : rules->rules())
    yaml += "  - match: " + quoted(r.match) + "\n" + limit_fields(r.limit, "    ");
  if (rules->default_limit()) yaml += "default:\n" + limit_fields(*rules->default_limit(), "  ");
  const auto again = parse(yaml);
  FUZZ_CHECK(again != nullptr, "the rules written back do not parse");
  FUZZ_CHECK(again->rules().size() == rules->rules().size() && again->default_limit() == rules->default_limit(),
             "the rules written back differ");
  for (size_t i = 0; i < rules->rules().size(); ++i) {
    FUZZ_CHECK(again->rules()[i].match == rules->rules()[i].match && again->rules()[i].limit == rules->rules()[i].limit,
               "a rule written back differs");
  }
  return 0;
}
