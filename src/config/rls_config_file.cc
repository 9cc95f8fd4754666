#include "tollgate/rls_config_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

#include "config/strict_yaml.h"
#include "read_file.h"
#include "tollgate/duration.h"

namespace tollgate {
namespace {

class RlsParser {
 public:
  explicit RlsParser(const std::string& source) : source_(source) {}

  RlsDomain parse(std::string_view text) {
    const YAML::Node root = yaml::load(text, source_);
    if (root.IsNull())
      yaml::fail(source_, YAML::Mark::null_mark(), "empty file: expected `domain:` and `descriptors:`");
    if (!root.IsMap()) fail(root, "expected a mapping with `domain:` and `descriptors:`");
    RlsDomain d;
    d.source = source_;
    bool has_domain = false;
    static constexpr std::string_view kFields[] = {"domain", "descriptors"};
    yaml::for_each_field(source_, root, kFields,
                         [&](const std::string& name, const YAML::Node& value, const YAML::Node& at) {
      at_ = at.Mark();
      if (name == "domain") {
        has_domain = true;
        d.domain = scalar(value, "domain");
        d.line = value.Mark().line + 1;
        d.column = value.Mark().column + 1;
      } else {
        d.descriptors = descriptor_list(value);
      }
    });
    if (!has_domain) fail(root, "no `domain`");
    if (d.domain.empty()) fail(root, "`domain` must not be empty");
    return d;
  }

 private:
  [[noreturn]] void fail(const YAML::Node& at, const std::string& problem) const { yaml::fail(source_, at, problem); }
  // A field's value: at the value, or at the field's name when the value is empty (yaml-cpp puts
  // an empty value's mark at the next token).
  [[noreturn]] void fail_value(const YAML::Node& value, const std::string& problem) const {
    yaml::fail(source_, value.IsNull() ? at_ : value.Mark(), problem);
  }

  std::vector<RlsDescriptor> descriptor_list(const YAML::Node& list) const {
    if (list.IsNull()) return {};
    if (!list.IsSequence()) fail(list, "`descriptors` must be a list of descriptors (each starting with \"- key:\")");
    // YAML aliases can make the tree cyclic (an anchor is known while its node is still open) or
    // exponential (aliases of aliases): the walk is bounded in depth and in size, so such a file
    // is an error, never a hang or a stack overflow.
    if (++depth_ > kMaxRlsDescriptorDepth) {
      fail(list, "descriptors nest deeper than " + std::to_string(kMaxRlsDescriptorDepth) + " levels");
    }
    std::vector<RlsDescriptor> out;
    for (const YAML::Node& item : list) {
      if (++descriptors_ > kMaxRlsDescriptors) {
        fail(item, "more than " + std::to_string(kMaxRlsDescriptors) + " descriptors in one file");
      }
      out.push_back(descriptor(item));
    }
    --depth_;
    return out;
  }

  RlsDescriptor descriptor(const YAML::Node& node) const {
    if (!node.IsMap()) fail(node, "a descriptor must be a mapping with `key` and optionally `value`, `rate_limit`");
    RlsDescriptor d;
    d.line = node.Mark().line + 1;
    d.column = node.Mark().column + 1;
    bool has_key = false;
    static constexpr std::string_view kFields[] = {
        "key",      "value",           "rate_limit",      "rate_limits",     "descriptors", "shadow_mode", "quota_mode",
        "metadata", "detailed_metric", "value_to_metric", "share_threshold", "concurrency", "lease_ttl"};
    std::optional<int64_t> lease_ttl;
    std::optional<YAML::Mark> lease_ttl_at;
    yaml::for_each_field(source_, node, kFields,
                         [&](const std::string& name, const YAML::Node& value, const YAML::Node& at) {
      at_ = at.Mark();
      if (name == "key") {
        has_key = true;
        d.key = scalar(value, "key");
        if (d.key.empty()) fail_value(value, "descriptor `key` must not be empty");
      } else if (name == "value") {
        // As in envoyproxy/ratelimit, an empty value is the same as none: any value matches.
        if (std::string v = scalar(value, "value"); !v.empty()) d.value = std::move(v);
      } else if (name == "rate_limit") {
        if (d.rate_limit) fail_value(value, "a descriptor takes `rate_limit` or `rate_limits`, not both");
        d.rate_limit = rate_limit(value);
      } else if (name == "rate_limits") {
        if (d.rate_limit) fail_value(value, "a descriptor takes `rate_limit` or `rate_limits`, not both");
        if (!value.IsSequence() || value.size() == 0 || value.size() > kMaxRlsLimitsPerDescriptor) {
          fail_value(value, "`rate_limits` must be a list of 1 to " + std::to_string(kMaxRlsLimitsPerDescriptor) +
                                " limits, each like a `rate_limit`");
        }
        for (const YAML::Node& item : value) {
          RlsLimit l = rate_limit(item);
          if (l.unlimited && value.size() > 1) fail(item, "`unlimited: true` cannot be one of several limits");
          if (!d.rate_limit) {
            d.rate_limit = std::move(l);
          } else {
            d.more_limits.push_back(std::move(l));
          }
        }
      } else if (name == "descriptors") {
        d.descriptors = descriptor_list(value);
      } else if (name == "shadow_mode") {
        d.shadow_mode = boolean(value, "shadow_mode");
      } else if (name == "quota_mode") {
        d.quota_mode = boolean(value, "quota_mode");
      } else if (name == "metadata") {
        if (!value.IsNull() && !value.IsMap())
          fail(value, "`metadata` must be a mapping (returned to Envoy as a Struct)");
        size_t budget = kMaxMetadataValues;
        d.metadata = metadata_value(value, 0, budget);
      } else if (name == "detailed_metric") {
        d.detailed_metric = boolean(value, "detailed_metric");
      } else if (name == "value_to_metric") {
        d.value_to_metric = boolean(value, "value_to_metric");
      } else if (name == "concurrency") {  // tollgate's: at most N in flight (hits_addend acquires)
        d.concurrency.emplace().limit = integer(value, "concurrency", 1, kMaxTokens);
      } else if (name == "lease_ttl") {
        std::string why;
        const std::optional<int64_t> ttl = parse_duration_ns(scalar(value, "lease_ttl"), &why);
        if (!ttl) fail_value(value, "lease_ttl: " + why);
        if (*ttl < 1'000'000) fail_value(value, "lease_ttl must be at least 1ms");
        lease_ttl = *ttl;
        lease_ttl_at = value.Mark();
      } else {
        d.share_threshold = boolean(value, "share_threshold");
      }
    });
    if (!has_key) fail(node, "descriptor has no `key`");
    if (lease_ttl) {
      if (!d.concurrency)
        yaml::fail(source_, *lease_ttl_at, "`lease_ttl` without `concurrency` (e.g. concurrency: 10)");
      d.concurrency->ttl_ns = *lease_ttl;
    }
    return d;
  }

  // A `metadata` value, typed as the reference's YAML reader types it (YAML 1.1: yes/no/on/off
  // are booleans too): a quoted scalar is a string; a plain one is null, a boolean, a number or
  // a string. Bounded in depth and in values, like the descriptors (aliases can multiply them).
  static constexpr size_t kMaxMetadataDepth = 16;
  static constexpr size_t kMaxMetadataValues = 1024;
  RlsValue metadata_value(const YAML::Node& node, size_t depth, size_t& budget) const {
    if (depth > kMaxMetadataDepth) fail(node, "`metadata` nests deeper than " + std::to_string(kMaxMetadataDepth));
    if (budget == 0) fail(node, "`metadata` has more than " + std::to_string(kMaxMetadataValues) + " values");
    --budget;
    RlsValue v;
    if (node.IsNull()) return v;
    if (node.IsSequence()) {
      v.kind = RlsValue::Kind::kList;
      for (const YAML::Node& item : node) v.items.push_back(metadata_value(item, depth + 1, budget));
      return v;
    }
    if (node.IsMap()) {
      v.kind = RlsValue::Kind::kMap;
      for (const auto& field : node) {
        if (!field.first.IsScalar()) fail(field.first, "`metadata` keys must be single values");
        const std::string& name = field.first.Scalar();
        if (std::find(v.names.begin(), v.names.end(), name) != v.names.end()) {
          fail(field.first, "`metadata` key \"" + name + "\" appears twice");
        }
        v.names.push_back(name);
        v.items.push_back(metadata_value(field.second, depth + 1, budget));
      }
      return v;
    }
    const std::string& text = node.Scalar();
    v.kind = RlsValue::Kind::kString;
    v.text = text;
    if (node.Tag() == "!") return v;  // quoted: a string whatever it says
    if (text == "~" || text == "null" || text == "Null" || text == "NULL") {
      v.kind = RlsValue::Kind::kNull;
      v.text.clear();
    } else if (YAML::convert<bool>::decode(node, v.boolean)) {
      v.kind = RlsValue::Kind::kBool;
      v.text.clear();
    } else if (double number = 0; !text.empty() && parse_number(text, number)) {
      v.kind = RlsValue::Kind::kNumber;
      v.number = number;
      v.text.clear();
    }
    return v;
  }

  static bool parse_number(const std::string& text, double& out) {
    const char* begin = text.data() + (text[0] == '+' ? 1 : 0);
    const auto [end, ec] = std::from_chars(begin, text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size() && std::isfinite(out);
  }

  RlsLimit rate_limit(const YAML::Node& node) const {
    if (!node.IsMap()) fail(node, "`rate_limit` must be a mapping with `unit` and `requests_per_unit`");
    RlsLimit l;
    bool has_rpu = false;
    std::optional<YAML::Mark> unit_at;
    static constexpr std::string_view kFields[] = {"requests_per_unit", "unit",      "unit_multiplier", "name",
                                                   "replaces",          "unlimited", "burst",           "max_debt",
                                                   "charge_when_over"};
    yaml::for_each_field(source_, node, kFields,
                         [&](const std::string& name, const YAML::Node& value, const YAML::Node& at) {
      at_ = at.Mark();
      if (name == "requests_per_unit") {
        has_rpu = true;
        l.requests_per_unit = uint32_t(integer(value, "requests_per_unit", 0, std::numeric_limits<uint32_t>::max()));
      } else if (name == "unit") {
        const std::string text = scalar(value, "unit");
        if (!parse_rls_unit(text, &l.unit)) {
          fail_value(value, "unknown unit \"" + text + "\" (expected second, minute, hour, day, week, month or year)");
        }
        unit_at = value.Mark();
      } else if (name == "unit_multiplier") {
        l.unit_multiplier = uint32_t(integer(value, "unit_multiplier", 1, std::numeric_limits<uint32_t>::max()));
      } else if (name == "name") {
        l.name = scalar(value, "name");
      } else if (name == "replaces") {
        l.replaces = replaces(value);
      } else if (name == "unlimited") {
        l.unlimited = boolean(value, "unlimited");
      } else if (name == "burst") {
        l.burst = integer(value, "burst", 1, kMaxTokens);
      } else if (name == "max_debt") {
        l.max_debt = integer(value, "max_debt", 0, kMaxTokens);
      } else {
        l.charge_when_over = boolean(value, "charge_when_over");
      }
    });
    if (l.unlimited && unit_at) yaml::fail(source_, *unit_at, "`unlimited: true` cannot have a `unit`");
    if (!l.unlimited && l.unit == RlsUnit::kUnknown) fail(node, "`rate_limit` has no `unit` (e.g. unit: second)");
    if (!l.unlimited && !has_rpu) fail(node, "`rate_limit` has no `requests_per_unit`");
    return l;
  }

  std::vector<std::string> replaces(const YAML::Node& list) const {
    if (!list.IsSequence()) fail(list, "`replaces` must be a list of `- name: LIMIT`");
    std::vector<std::string> out;
    for (const YAML::Node& item : list) {
      if (!item.IsMap()) fail(item, "each `replaces` entry must be a mapping `name: LIMIT`");
      static constexpr std::string_view kFields[] = {"name"};
      bool has_name = false;
      yaml::for_each_field(source_, item, kFields,
                           [&](const std::string&, const YAML::Node& value, const YAML::Node& at) {
        at_ = at.Mark();
        has_name = true;
        std::string name = scalar(value, "name");
        if (name.empty()) fail_value(value, "`replaces` needs a non-empty `name`");
        out.push_back(std::move(name));
      });
      if (!has_name) fail(item, "`replaces` entry has no `name`");
    }
    return out;
  }

  std::string scalar(const YAML::Node& value, const char* field) const {
    if (value.IsNull()) return "";
    if (!value.IsScalar()) fail(value, std::string("`") + field + "` must be a single value");
    return value.Scalar();
  }

  bool boolean(const YAML::Node& value, const char* field) const {
    bool b = false;
    if (!value.IsScalar() || !YAML::convert<bool>::decode(value, b)) {
      fail_value(value, std::string("`") + field + "` must be true or false");
    }
    return b;
  }

  int64_t integer(const YAML::Node& value, const char* field, int64_t min, int64_t max) const {
    const std::string text = scalar(value, field);
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      fail_value(value, std::string("`") + field + "` must be a whole number, got \"" + text + "\"");
    }
    if (n < min || n > max) {
      fail_value(value, std::string("`") + field + "` must be between " + std::to_string(min) + " and " +
                            std::to_string(max) + ", got " + text);
    }
    return n;
  }

  const std::string& source_;
  mutable YAML::Mark at_ = YAML::Mark::null_mark();  // the name of the field being read
  mutable size_t depth_ = 0;                         // descriptor lists open
  mutable size_t descriptors_ = 0;                   // descriptors read
};

std::vector<std::filesystem::path> config_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {fs::path(path)};
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string ext = entry.path().extension().string();
    if ((ext == ".yaml" || ext == ".yml") && entry.is_regular_file(ec)) files.push_back(entry.path());
  }
  if (ec) throw ConfigError(path, 0, 0, "cannot list the RLS config directory: " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::shared_ptr<const RlsConfig> parse_rls_config(const std::vector<RlsConfigText>& files,
                                                  const RlsLoadOptions& options) {
  std::vector<RlsDomain> domains;
  for (const RlsConfigText& f : files) domains.push_back(RlsParser(f.source).parse(f.text));
  return make_rls_config(std::move(domains), options);
}

std::shared_ptr<const RlsConfig> make_rls_config(std::vector<RlsDomain> parts, const RlsLoadOptions& options) {
  std::vector<RlsDomain> domains;
  for (RlsDomain& d : parts) {
    auto same = std::find_if(domains.begin(), domains.end(), [&](const RlsDomain& o) { return o.domain == d.domain; });
    if (!options.merge_domains || same == domains.end()) {
      domains.push_back(std::move(d));  // a second part of one domain, unmerged: RlsConfig names both
      continue;
    }
    // Merged: this part's top-level descriptors join the domain's, each keeping its source for
    // errors (RlsDescriptor::source).
    for (RlsDescriptor& desc : d.descriptors) {
      if (desc.source.empty()) desc.source = d.source;
      same->descriptors.push_back(std::move(desc));
    }
  }
  return std::make_shared<const RlsConfig>(
      std::move(domains), RlsModes{.shadow_all = options.shadow_mode, .quota_all = options.quota_mode});
}

std::shared_ptr<const RlsConfig> load_rls_config(const std::string& path, const RlsLoadOptions& options) {
  std::vector<RlsConfigText> texts;
  for (const auto& file : config_files(path)) {
    texts.push_back({file.string(), read_config_file(file.string(), "RLS config file")});
  }
  if (texts.empty()) throw ConfigError(path, 0, 0, "the RLS config directory has no *.yaml or *.yml file");
  return parse_rls_config(texts, options);
}

bool rls_config_exists(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  try {
    return !config_files(path).empty();
  } catch (const std::exception&) {
    return true;  // there, but not listable: loading it says why
  }
}

std::string rls_config_fingerprint(const std::string& path) {
  namespace fs = std::filesystem;
  std::string out;
  try {
    for (const auto& file : config_files(path)) {
      std::error_code ec;
      const auto mtime = fs::last_write_time(file, ec).time_since_epoch().count();
      const auto size = fs::file_size(file, ec);
      out += file.string() + '\0' + std::to_string(mtime) + '\0' + std::to_string(ec ? 0 : size) + '\n';
    }
  } catch (const std::exception&) {
    out += "unlistable";
  }
  return out;
}

}  // namespace tollgate
