// The Envoy rate limit service config (include/tollgate/rls_config_file.h): any text into
// parse_rls_config(), as tollgated loads --rls-config at start-up and on every reload.
//
// Contract: it returns a config or throws ConfigError naming the source, never anything else.
// In what it accepts, every limited limit is valid (validate_limit) and its bucket key finds it
// again: for each tree node with a limit, a request walks down to it by its own keys and values
// (a wildcard's prefix for its value, "v" for a valueless entry); when that request matches a
// limited limit, its key is a bucket key whose limit_index gives that very limit, with its values
// part or a digest in its place, and a RuleSet over the config governs the key by the limit's
// bucket, and describe_key reads it as a descriptor of its domain. Walking stops after 2000
// descriptors per input.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tollgate/config_error.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/rules.h"

namespace {

const std::string kSource = "fuzz-rls.yaml";

std::shared_ptr<const tollgate::RlsConfig> parse(std::string_view text) {
  try {
    return tollgate::parse_rls_config({{kSource, std::string(text)}});
  } catch (const tollgate::ConfigError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with(kSource), "a ConfigError that does not name the file");
    return nullptr;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parse_rls_config threw something other than ConfigError: %s\n", e.what());
    FUZZ_CHECK(false, "parse_rls_config throws only ConfigError");
  }
  return nullptr;
}

struct Walker {
  const tollgate::RlsConfig& config;
  const tollgate::RuleSet& rules;
  const std::string& domain;
  size_t visited = 0;

  // `path` holds the entries leading to `list`'s level: (key, value for this request).
  void walk(const std::vector<tollgate::RlsDescriptor>& list, std::vector<std::pair<std::string, std::string>>& path) {
    for (const tollgate::RlsDescriptor& d : list) {
      if (++visited > 2000) return;  // keep one input's work bounded
      const bool wildcard = d.value && !d.value->empty() && d.value->back() == '*';
      path.emplace_back(d.key, d.value ? (wildcard ? d.value->substr(0, d.value->size() - 1) : *d.value) : "v");
      check(d, path);
      walk(d.descriptors, path);
      path.pop_back();
    }
  }

  void check(const tollgate::RlsDescriptor& d, const std::vector<std::pair<std::string, std::string>>& path) {
    if (!d.rate_limit) return;
    std::vector<tollgate::RlsEntry> entries;
    for (const auto& [k, v] : path) entries.push_back({k, v});
    const tollgate::RlsMatch m = config.match(domain, entries);
    // An earlier sibling (an exact value, a wildcard listed first) may take the walk elsewhere,
    // so only the match found, if any, is checked.
    if (m.limit == nullptr) return;
    if (!m.limit->limited()) {
      FUZZ_CHECK(m.key.empty(), "a key for an unlimited or zero limit");
      return;
    }
    FUZZ_CHECK(tollgate::validate_limit(m.limit->bucket).empty(), "an invalid bucket accepted");
    FUZZ_CHECK(m.key.size() >= m.path_bytes && m.path_bytes <= tollgate::kRlsMaxKeyPathBytes,
               "a bucket key whose path is too long");
    const auto index = config.limit_index(m.key);
    FUZZ_CHECK(index.has_value() && &config.limit(*index) == m.limit, "a bucket key that does not find its limit");
    const auto digested = config.limit_index(m.key.substr(0, m.path_bytes) + "#digest");
    FUZZ_CHECK(digested == index, "the limit depends on the values part");
    const uint32_t rule = rules.match(m.key);
    FUZZ_CHECK(rule != tollgate::RuleSet::kUnlimited && rules.limit(rule) == m.limit->bucket,
               "the RuleSet governs a bucket key by another limit");
    // Top-K shows the key as its descriptor: its domain first, digested values or not.
    FUZZ_CHECK(config.describe_key(m.key).starts_with(domain + ": "),
               "a bucket key that does not read as its descriptor");
    FUZZ_CHECK(config.describe_key(m.key.substr(0, m.path_bytes) + "#digest").starts_with(domain + ": "),
               "a digested bucket key that does not read as its descriptor");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto config = parse(tollgate::fuzz::as_text(data, size));
  if (!config) return 0;
  const tollgate::RuleSet rules({}, std::nullopt, config);
  // Any bytes as a key (a summary from the network names any): a description or "", no crash.
  const std::string_view text = tollgate::fuzz::as_text(data, size);
  (void)config->describe_key(text.substr(text.size() / 2));
  for (const tollgate::RlsDomain& d : config->domains()) {
    FUZZ_CHECK(!d.domain.empty() && config->has_domain(d.domain), "an accepted domain that is empty or unknown");
    Walker w{*config, rules, d.domain};
    std::vector<std::pair<std::string, std::string>> path;
    w.walk(d.descriptors, path);
  }
  return 0;
}
