#include "tollgate/rls_config.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <deque>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "tollgate/config_error.h"
#include "tollgate/rules.h"
#include "util/string_map.h"

namespace tollgate {
namespace {

constexpr char kExactSep = '\x01';       // key, then its configured value
constexpr char kWildcardSep = '\x02';    // key, then the wildcard's prefix
constexpr char kMoreLimitMark = '\x03';  // a descriptor's other limits: the path component 0x03 N

bool has_control_char(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return (unsigned char)c < 0x20 || c == 0x7f; });
}

// A value with a '*' anywhere matches by glob_match (tollgate/rules.h): '*' is any run of
// characters, several may appear (the reference server's wildcards since its PR #1085).
bool is_wildcard(const std::optional<std::string>& value) { return value && value->find('*') != std::string::npos; }

// What names a wildcard in its node's path (and so in its bucket keys): the value without its
// '*' when that star is its only one and ends it (the bucket keys of prefix wildcards are those
// of earlier versions, so a rolling upgrade counts them in one bucket), else the whole value.
// The two forms cannot collide: the first has no '*' left, the second has at least one.
std::string wildcard_component(const std::string& value) {
  const bool prefix_only = value.find('*') == value.size() - 1;
  return prefix_only ? value.substr(0, value.size() - 1) : value;
}

}  // namespace

int64_t rls_unit_seconds(RlsUnit unit) {
  switch (unit) {
    case RlsUnit::kSecond:
      return 1;
    case RlsUnit::kMinute:
      return 60;
    case RlsUnit::kHour:
      return 3600;
    case RlsUnit::kDay:
      return 86400;
    case RlsUnit::kWeek:
      return 7 * 86400;
    case RlsUnit::kMonth:
      return 30 * 86400;
    case RlsUnit::kYear:
      return 365 * 86400;
    case RlsUnit::kUnknown:
      break;
  }
  return 0;
}

const char* rls_unit_name(RlsUnit unit) {
  switch (unit) {
    case RlsUnit::kSecond:
      return "second";
    case RlsUnit::kMinute:
      return "minute";
    case RlsUnit::kHour:
      return "hour";
    case RlsUnit::kDay:
      return "day";
    case RlsUnit::kWeek:
      return "week";
    case RlsUnit::kMonth:
      return "month";
    case RlsUnit::kYear:
      return "year";
    case RlsUnit::kUnknown:
      break;
  }
  return "unknown";
}

bool parse_rls_unit(std::string_view text, RlsUnit* out) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (RlsUnit u : {RlsUnit::kSecond, RlsUnit::kMinute, RlsUnit::kHour, RlsUnit::kDay, RlsUnit::kMonth, RlsUnit::kYear,
                    RlsUnit::kWeek}) {
    if (lower == rls_unit_name(u)) {
      *out = u;
      return true;
    }
  }
  return false;
}

struct RlsConfig::Node {
  const RlsDescriptor* descriptor = nullptr;
  std::string path;                     // prefix, domain and the node path: the key up to (not including) 0x1D
  std::string label;                    // "domain.key_value.key": RlsConfig::label
  bool value_in_key = false;            // the request's value at this level goes into the key's values
  std::vector<std::string> more_paths;  // the paths of the descriptor's more_limits, in order
  StringMap<Node*> exact;               // "key" 0x01 "value"
  struct Wildcard {
    std::string key, pattern;
    std::string head;  // the pattern's text before its first '*': a cheap reject
    Node* node;
  };
  std::vector<Wildcard> wildcards;  // in file order
  StringMap<Node*> any;             // valueless children, by key
};

// The limits of Envoy's overrides, taken as they are first used (on gRPC, HTTP, API worker and
// node threads alike): a slot is written once, under the mutex, before `used` publishes it, so
// readers scan the published slots without a lock and a limit's address never changes.
struct OverrideLimits {
  struct Slot {
    RlsLimitOverride spec;
    RlsLimit limit;
    std::string label;
  };
  std::array<Slot, RlsConfig::kMaxOverrideLimits> slots;
  std::atomic<uint32_t> used{0};
  std::mutex mutex;

  static bool same(const RlsLimitOverride& a, const RlsLimitOverride& b) {
    return a.requests_per_unit == b.requests_per_unit && a.unit == b.unit && a.unit_multiplier == b.unit_multiplier;
  }
  // The slot of `spec` (normalized: multiplier >= 1, unit known), taking a free one if it is new;
  // nullopt when every slot holds another limit.
  // `shadow`: the config's shadow_all.
  std::optional<uint32_t> find_or_add(const RlsLimitOverride& spec, bool shadow) {
    for (uint32_t n = used.load(std::memory_order_acquire), i = 0; i < n; ++i) {
      if (same(slots[i].spec, spec)) return i;
    }
    std::lock_guard lock(mutex);
    const uint32_t n = used.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i) {
      if (same(slots[i].spec, spec)) return i;
    }
    if (n == slots.size()) return std::nullopt;
    Slot& slot = slots[n];
    slot.spec = spec;
    RlsLimit& l = slot.limit;
    l.requests_per_unit = spec.requests_per_unit;
    l.unit = spec.unit;
    l.unit_multiplier = spec.unit_multiplier;
    if (l.limited()) {
      const int64_t period_s = rls_unit_seconds(spec.unit) * int64_t(spec.unit_multiplier);
      l.bucket.rate = Rate{int64_t(spec.requests_per_unit), period_s * 1'000'000'000};
      l.bucket.burst = spec.requests_per_unit;
      l.bucket.max_debt = l.bucket.burst;
      l.bucket.shadow = shadow;
    }
    slot.label = "(override " + std::to_string(spec.requests_per_unit) + " per " +
                 (spec.unit_multiplier == 1 ? "" : std::to_string(spec.unit_multiplier) + " ") +
                 rls_unit_name(spec.unit) + ")";
    used.store(n + 1, std::memory_order_release);
    return n;
  }
};

struct RlsConfig::Tree {
  bool value_metrics = false;  // some descriptor has detailed_metric or value_to_metric
  std::deque<Node> nodes;
  StringMap<Node*> roots;                   // by domain
  StringMap<uint32_t> by_path;              // Node::path of each limited node -> index into limits_
  StringMap<uint32_t> concurrency_by_path;  // Node::path of each node with a concurrency -> concurrency_
  StringMap<const Node*> by_node_path;      // every descriptor's node by Node::path (describe_key)
  OverrideLimits overrides;
};

RlsConfig::RlsConfig(std::vector<RlsDomain> domains, RlsModes modes)
    : domains_(std::move(domains)), modes_(modes), tree_(std::make_unique<Tree>()) {
  auto fail = [](const RlsDomain& d, int line, int column, const std::string& problem) {
    throw ConfigError(d.source, line, column, problem);
  };
  StringMap<const RlsDomain*> seen_domains;
  for (RlsDomain& d : domains_) {
    if (d.domain.empty()) fail(d, d.line, d.column, "`domain` must not be empty");
    if (has_control_char(d.domain)) fail(d, d.line, d.column, "`domain` must not contain control characters");
    if (auto [it, fresh] = seen_domains.emplace(d.domain, &d); !fresh) {
      fail(d, d.line, d.column, "domain \"" + d.domain + "\" is already defined in " + it->second->source);
    }
    Node& root = tree_->nodes.emplace_back();
    root.path = std::string(1, kRlsKeyPrefix) + d.domain;
    root.label = d.domain;
    tree_->roots.emplace(d.domain, &root);

    // Depth-first: compile each descriptor under its parent.
    std::function<void(std::vector<RlsDescriptor>&, Node&, const std::string&)> add =
        [&](std::vector<RlsDescriptor>& list, Node& parent, const std::string& inherited_source) {
      std::unordered_set<std::string> seen;
      for (RlsDescriptor& desc : list) {
        const std::string& source = desc.source.empty() ? inherited_source : desc.source;
        if (modes_.shadow_all) desc.shadow_mode = true;
        if (modes_.quota_all) desc.quota_mode = true;
        tree_->value_metrics = tree_->value_metrics || desc.detailed_metric || desc.value_to_metric;
        auto at = [&](const std::string& problem) { throw ConfigError(source, desc.line, desc.column, problem); };
        if (desc.key.empty()) at("descriptor `key` must not be empty");
        if (has_control_char(desc.key) || (desc.value && has_control_char(*desc.value))) {
          at("descriptor key and value must not contain control characters");
        }
        const bool wildcard = is_wildcard(desc.value);
        std::string component = desc.key;
        if (wildcard) {
          component += kWildcardSep;
          component += wildcard_component(*desc.value);
        } else if (desc.value) {
          component += kExactSep;
          component += *desc.value;
        }
        if (!seen.insert(component).second) {
          at("duplicate descriptor: key \"" + desc.key + "\"" + (desc.value ? " value \"" + *desc.value + "\"" : "") +
             " is already defined at this level");
        }
        if (desc.share_threshold && !wildcard) at("`share_threshold` needs a wildcard `value` (one with a '*')");

        Node& node = tree_->nodes.emplace_back();
        node.descriptor = &desc;
        node.path = parent.path + kRlsKeyPathSep + component;
        tree_->by_node_path.emplace(node.path, &node);
        node.label = parent.label + "." + desc.key + (desc.value ? "_" + *desc.value : "");
        node.value_in_key = !desc.value || (wildcard && !desc.share_threshold);
        if (node.path.size() + 1 > kRlsMaxKeyPathBytes) {
          at("domain and descriptor keys and values add up to more than " + std::to_string(kRlsMaxKeyPathBytes) +
             " bytes: too long for a bucket key");
        }
        if (wildcard) {
          parent.wildcards.push_back({desc.key, *desc.value, desc.value->substr(0, desc.value->find('*')), &node});
        } else if (desc.value) {
          parent.exact.emplace(desc.key + kExactSep + *desc.value, &node);
        } else {
          parent.any.emplace(desc.key, &node);
        }

        // A limit's `bucket` is derived here, and a limited one registered under `path`.
        auto derive = [&](RlsLimit& limit, const std::string& path, const std::string& label) {
          if (has_control_char(limit.name)) at("a limit's `name` must not contain control characters");
          if (limit.unlimited && limit.unit != RlsUnit::kUnknown) at("`unlimited: true` cannot have a `unit`");
          if (!limit.unlimited && limit.unit == RlsUnit::kUnknown) at("`rate_limit` needs a `unit`");
          if (limit.unit_multiplier < 1) at("`unit_multiplier` must be at least 1");
          for (const std::string& r : limit.replaces) {
            if (r.empty()) at("`replaces` needs a non-empty `name`");
            if (r == limit.name) at("limit \"" + r + "\" cannot replace itself");
          }
          if (limit.limited()) {
            const int64_t period_s = rls_unit_seconds(limit.unit) * int64_t(limit.unit_multiplier);
            if (period_s > int64_t(100) * 365 * 86400) at("the period (unit x unit_multiplier) exceeds 100 years");
            limit.bucket.rate = Rate{int64_t(limit.requests_per_unit), period_s * 1'000'000'000};
            limit.bucket.burst = limit.burst.value_or(limit.requests_per_unit);
            limit.bucket.max_debt = limit.max_debt.value_or(limit.bucket.burst);
            limit.bucket.charge_when_over = limit.charge_when_over;
            // What a shadow descriptor would deny passes (rls/decide.cc); charge_when_over ones
            // are charged whatever the answer, so their shadow is decided there alone.
            limit.bucket.shadow = desc.shadow_mode && !limit.charge_when_over;
            if (std::string why = validate_limit(limit.bucket); !why.empty()) at(why);
            tree_->by_path.emplace(path, uint32_t(limits_.size()));
            limits_.push_back(&limit);
            labels_.push_back(label);
          } else if (limit.burst || limit.max_debt || limit.charge_when_over) {
            at("`burst`, `max_debt` and `charge_when_over` need a limit with requests_per_unit above 0");
          }
        };
        if (desc.rate_limit) derive(*desc.rate_limit, node.path, node.label);
        if (desc.concurrency) {
          if (desc.concurrency->limit < 1) at("`concurrency` must be at least 1");
          if (desc.concurrency->ttl_ns < 1'000'000) at("`lease_ttl` must be at least 1ms");
          tree_->concurrency_by_path.emplace(node.path, uint32_t(concurrency_.size()));
          concurrency_.push_back(&*desc.concurrency);
          concurrency_labels_.push_back(node.label);
        }
        if (!desc.more_limits.empty() && !desc.rate_limit) at("`rate_limits` beyond the first needs the first");
        // The others of `rate_limits`: each its own bucket, under a path of its own below the
        // descriptor's (a component no request can name: control characters are refused).
        for (size_t j = 0; j < desc.more_limits.size(); ++j) {
          node.more_paths.push_back(node.path + kRlsKeyPathSep + kMoreLimitMark + std::to_string(j + 1));
          if (node.more_paths.back().size() + 1 > kRlsMaxKeyPathBytes) {
            at("domain and descriptor keys and values add up to more than " + std::to_string(kRlsMaxKeyPathBytes) +
               " bytes: too long for a bucket key");
          }
          const RlsLimit& l = desc.more_limits[j];
          derive(desc.more_limits[j], node.more_paths.back(),
                 node.label + "#" + (l.name.empty() ? std::to_string(j + 2) : l.name));
        }
        add(desc.descriptors, node, source);
      }
    };
    add(d.descriptors, root, d.source);
  }
}

RlsConfig::RlsConfig() = default;
RlsConfig::~RlsConfig() = default;
RlsConfig::RlsConfig(RlsConfig&&) noexcept = default;
RlsConfig& RlsConfig::operator=(RlsConfig&&) noexcept = default;

bool RlsConfig::has_domain(std::string_view domain) const { return tree_ && tree_->roots.contains(domain); }

RlsMatch RlsConfig::match(std::string_view domain, std::span<const RlsEntry> entries) const {
  RlsMatch m;
  if (!tree_ || entries.empty()) return m;
  auto root = tree_->roots.find(domain);
  if (root == tree_->roots.end()) return m;
  const Node* node = root->second;
  std::string exact_key;
  // Which levels put their value into the key, decided on the way down.
  std::vector<std::string_view> values;
  // The reference server's per-value metric name (value_to_metric), built on the way down when
  // the config asks for one anywhere: each level's key, with "_value" where the match was by
  // value, or by a wildcard or valueless entry with value_to_metric (a wildcard without it
  // names its pattern).
  std::string metric;
  bool metric_values = false;
  if (tree_->value_metrics) metric.assign(domain);
  for (size_t i = 0; i < entries.size(); ++i) {
    const RlsEntry& e = entries[i];
    const Node* next = nullptr;
    exact_key.assign(e.key).append(1, kExactSep).append(e.value);
    if (auto it = node->exact.find(exact_key); it != node->exact.end()) next = it->second;
    if (!next) {
      for (const Node::Wildcard& w : node->wildcards) {
        if (w.key == e.key && e.value.starts_with(w.head) && glob_match(w.pattern, e.value)) {
          next = w.node;
          break;
        }
      }
    }
    if (!next) {
      if (auto it = node->any.find(e.key); it != node->any.end()) next = it->second;
    }
    if (!next) return m;  // no such branch: no limit
    if (next->value_in_key) values.push_back(e.value);
    node = next;
    if (tree_->value_metrics) {
      const RlsDescriptor& d = *node->descriptor;
      metric.append(1, '.').append(e.key);
      if (d.value && !is_wildcard(d.value)) {
        metric.append(1, '_').append(e.value);
      } else if (d.value_to_metric) {
        metric.append(1, '_').append(e.value);
        metric_values = true;
      } else if (d.value) {
        metric.append(1, '_').append(*d.value);
      }
    }
  }
  const RlsDescriptor& d = *node->descriptor;
  // A limited match's bucket key: the limit's path, 0x1D, then each value as "LEN:VALUE".
  auto set_key = [&values](RlsMatch& one, const std::string& path) {
    one.key.reserve(path.size() + 1 + 16 * values.size());
    one.key = path;
    one.key += kRlsKeyValuesSep;
    one.path_bytes = one.key.size();
    for (std::string_view v : values) one.key.append(std::to_string(v.size())).append(1, ':').append(v);
  };
  if (d.concurrency) {  // leases under the key the descriptor's bucket has (or would have)
    m.concurrency = &*d.concurrency;
    m.shadow_mode = d.shadow_mode;
    set_key(m, node->path);
    m.concurrency_key = std::move(m.key);
    m.key.clear();  // (path_bytes stays: the rate key, if any, has the same path)
  }
  if (!d.rate_limit) return m;
  m.limit = &*d.rate_limit;
  m.shadow_mode = d.shadow_mode;
  m.quota_mode = d.quota_mode;
  if (d.metadata.kind == RlsValue::Kind::kMap) m.metadata = &d.metadata;
  for (size_t j = 0; j < d.more_limits.size(); ++j) {  // rate_limits: the others, likewise
    RlsMatch& e = m.more.emplace_back();
    e.limit = &d.more_limits[j];
    e.shadow_mode = m.shadow_mode;
    e.quota_mode = m.quota_mode;
    if (e.limit->limited()) set_key(e, node->more_paths[j]);
  }
  if (!m.limit->limited()) return m;
  if (d.detailed_metric) {  // every entry's key and value, whatever matched it
    m.metric.assign(domain);
    for (const RlsEntry& e : entries) m.metric.append(1, '.').append(e.key).append(1, '_').append(e.value);
  } else if (metric_values) {
    m.metric = std::move(metric);
  }
  if (!m.metric.empty()) m.metric_rule = node->label;
  set_key(m, node->path);
  return m;
}

void RlsConfig::apply_replaces(std::span<RlsMatch> matches) {
  std::unordered_set<std::string_view> replaced;
  for (const RlsMatch& m : matches) {
    if (m.limit) replaced.insert(m.limit->replaces.begin(), m.limit->replaces.end());
    for (const RlsMatch& e : m.more) replaced.insert(e.limit->replaces.begin(), e.limit->replaces.end());
  }
  if (replaced.empty()) return;
  auto is_replaced = [&](const RlsMatch& m) {
    return m.limit && !m.limit->name.empty() && replaced.contains(m.limit->name);
  };
  for (RlsMatch& m : matches) {
    std::erase_if(m.more, is_replaced);
    if (!is_replaced(m)) continue;
    if (m.more.empty()) {
      // The rate limit is replaced; a concurrency limit has no name to be replaced by.
      RlsMatch left;
      left.concurrency = m.concurrency;
      left.concurrency_key = std::move(m.concurrency_key);
      left.shadow_mode = m.concurrency && m.shadow_mode;
      m = std::move(left);
      continue;
    }
    // The descriptor's first limit is replaced, not its others: the next one takes its place.
    std::vector<RlsMatch> rest(std::make_move_iterator(m.more.begin() + 1), std::make_move_iterator(m.more.end()));
    RlsMatch next = std::move(m.more.front());
    next.metadata = m.metadata;
    next.metric = std::move(m.metric);
    next.metric_rule = m.metric_rule;
    next.more = std::move(rest);
    next.concurrency = m.concurrency;
    next.concurrency_key = std::move(m.concurrency_key);
    m = std::move(next);
  }
}

namespace {

// An override as Envoy sent it, made usable: the multiplier 0 read as 1. False if it cannot be
// honoured: no unit, or a period over 100 years (the config's own bound).
bool normalize(RlsLimitOverride& o) {
  if (o.unit_multiplier == 0) o.unit_multiplier = 1;
  if (o.unit == RlsUnit::kUnknown || rls_unit_seconds(o.unit) == 0) return false;
  return rls_unit_seconds(o.unit) * int64_t(o.unit_multiplier) <= int64_t(100) * 365 * 86400;
}

void append_counted(std::string& out, std::string_view bytes) {
  out.append(std::to_string(bytes.size())).append(1, ':').append(bytes);
}

// Takes a decimal number (at most `max`, no leading zero) and the `stop` after it from the front
// of `text`: an override's fields in its bucket key. False if malformed.
bool take_number(std::string_view& text, char stop, uint64_t max, uint64_t* out) {
  const size_t end = text.find(stop);
  if (end == 0 || end == std::string_view::npos || end > 10) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    v = v * 10 + uint64_t(text[i] - '0');
  }
  if (v > max || (end > 1 && text[0] == '0')) return false;  // one spelling per number
  *out = v;
  text.remove_prefix(end + 1);
  return true;
}

// The values part of a bucket key, "LEN:BYTES" each, into `out`; false if it is not that (a
// digest took its place).
bool split_counted(std::string_view text, std::vector<std::string_view>& out) {
  while (!text.empty()) {
    uint64_t n = 0;
    if (!take_number(text, ':', UINT32_MAX, &n) || n > text.size()) return false;
    out.push_back(text.substr(0, n));
    text.remove_prefix(n);
  }
  return true;
}

}  // namespace

std::string RlsConfig::describe_key(std::string_view key) const {
  if (!tree_ || key.size() < 2 || key[0] != kRlsKeyPrefix) return {};
  const size_t values_at = key.find(kRlsKeyValuesSep);
  if (values_at == std::string_view::npos) return {};
  const std::string_view path = key.substr(0, values_at);
  std::vector<std::string_view> values;
  const bool counted = split_counted(key.substr(values_at + 1), values);
  std::string out;
  if (key[1] == kRlsOverrideMark) {  // 0x1E 0x1C rpu ':' unit ':' multiplier 0x1F domain
    std::string_view rest = path.substr(2);
    uint64_t rpu = 0, unit = 0, multiplier = 0;
    if (!take_number(rest, ':', UINT32_MAX, &rpu) || !take_number(rest, ':', 7, &unit) ||
        !take_number(rest, kRlsKeyPathSep, UINT32_MAX, &multiplier) || !tree_->roots.contains(rest)) {
      return {};
    }
    out.append(rest).append(" (override ").append(std::to_string(rpu)).append(" per ");
    if (multiplier > 1) out.append(std::to_string(multiplier)).append(1, ' ');
    out.append(rls_unit_name(RlsUnit(unit))).append(multiplier > 1 ? "s)" : ")");
    if (!counted || values.size() % 2 != 0) return out + ": …";
    for (size_t i = 0; i < values.size(); i += 2) {
      out.append(i == 0 ? ": " : ", ").append(values[i]).append(1, '=').append(values[i + 1]);
    }
    return out;
  }
  size_t at = path.find(kRlsKeyPathSep);
  if (at == std::string_view::npos || !tree_->roots.contains(path.substr(1, at - 1))) return {};
  out.append(path.substr(1, at - 1));
  size_t next_value = 0, entries = 0;
  while (at != std::string_view::npos) {
    const size_t end = path.find(kRlsKeyPathSep, at + 1);
    if (at + 1 < path.size() && path[at + 1] == kMoreLimitMark) {  // another limit of the same node
      at = end;
      continue;
    }
    const auto it = tree_->by_node_path.find(path.substr(0, end));
    if (it == tree_->by_node_path.end()) return {};
    const Node& node = *it->second;
    out.append(entries++ == 0 ? ": " : ", ").append(node.descriptor->key).append(1, '=');
    if (!node.value_in_key) {
      out.append(node.descriptor->value.value_or(""));
    } else if (counted && next_value < values.size()) {
      out.append(values[next_value++]);
    } else {
      out.append("…");
    }
    at = end;
  }
  return out;
}

RlsMatch RlsConfig::match_override(std::string_view domain, std::span<const RlsEntry> entries,
                                   const RlsLimitOverride& limit) const {
  if (!tree_ || !tree_->roots.contains(domain)) return {};  // the reference's: no limit outside the config
  RlsLimitOverride spec = limit;
  std::optional<uint32_t> slot;
  if (normalize(spec)) slot = tree_->overrides.find_or_add(spec, modes_.shadow_all);
  if (!slot) {
    RlsMatch m = match(domain, entries);
    m.override_ignored = true;
    return m;
  }
  RlsMatch m;
  m.limit = &tree_->overrides.slots[*slot].limit;
  m.shadow_mode = modes_.shadow_all;
  m.quota_mode = modes_.quota_all;
  if (!m.limit->limited()) return m;  // requests_per_unit 0: blocks, no bucket
  m.key.reserve(32 + domain.size() + 8 * entries.size());
  m.key += kRlsKeyPrefix;
  m.key += kRlsOverrideMark;
  m.key.append(std::to_string(spec.requests_per_unit)).append(1, ':');
  m.key.append(std::to_string(int(spec.unit))).append(1, ':');
  m.key.append(std::to_string(spec.unit_multiplier)).append(1, kRlsKeyPathSep);
  m.key.append(domain).append(1, kRlsKeyValuesSep);
  m.path_bytes = m.key.size();
  if (m.path_bytes > kRlsMaxKeyPathBytes) {  // a domain too long to leave room for a digest of the values
    RlsMatch config_match = match(domain, entries);
    config_match.override_ignored = true;
    return config_match;
  }
  for (const RlsEntry& e : entries) {
    append_counted(m.key, e.key);
    append_counted(m.key, e.value);
  }
  return m;
}

const RlsLimit& RlsConfig::limit(uint32_t index) const {
  return index < limits_.size() ? *limits_[index] : tree_->overrides.slots[index - limits_.size()].limit;
}

const std::string& RlsConfig::label(uint32_t index) const {
  return index < limits_.size() ? labels_[index] : tree_->overrides.slots[index - limits_.size()].label;
}

std::optional<uint32_t> RlsConfig::limit_index(std::string_view key) const {
  if (!tree_ || key.empty() || key[0] != kRlsKeyPrefix) return std::nullopt;
  if (key.size() > 1 && key[1] == kRlsOverrideMark) {
    // An override's bucket: its limit is in the key, its domain must be one of ours.
    std::string_view rest = key.substr(2);
    uint64_t rpu = 0, unit = 0, multiplier = 0;
    if (!take_number(rest, ':', UINT32_MAX, &rpu) || !take_number(rest, ':', 7, &unit) ||
        !take_number(rest, kRlsKeyPathSep, UINT32_MAX, &multiplier)) {
      return std::nullopt;
    }
    const size_t end = rest.find(kRlsKeyValuesSep);
    if (end == std::string_view::npos || !tree_->roots.contains(rest.substr(0, end))) return std::nullopt;
    RlsLimitOverride spec{uint32_t(rpu), RlsUnit(unit), uint32_t(multiplier)};
    if (rpu == 0 || multiplier == 0 || !normalize(spec)) return std::nullopt;
    const std::optional<uint32_t> slot = tree_->overrides.find_or_add(spec, modes_.shadow_all);
    if (!slot) return std::nullopt;
    return uint32_t(limits_.size()) + *slot;
  }
  const size_t end = key.find(kRlsKeyValuesSep);
  if (end == std::string_view::npos) return std::nullopt;
  auto it = tree_->by_path.find(key.substr(0, end));
  if (it == tree_->by_path.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> RlsConfig::concurrency_index(std::string_view key) const {
  if (!tree_ || concurrency_.empty() || key.empty() || key[0] != kRlsKeyPrefix) return std::nullopt;
  const size_t end = key.find(kRlsKeyValuesSep);
  if (end == std::string_view::npos) return std::nullopt;
  auto it = tree_->concurrency_by_path.find(key.substr(0, end));
  if (it == tree_->concurrency_by_path.end()) return std::nullopt;
  return it->second;
}

}  // namespace tollgate
