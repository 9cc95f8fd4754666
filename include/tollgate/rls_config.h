// Envoy rate limit service (RLS) limits: envoyproxy/ratelimit's configuration model (domains of
// descriptor trees, each node optionally carrying a limit), its matching, and the mapping of each
// matched limit onto one cluster-wide tollgate bucket.
//
// Matching follows envoyproxy/ratelimit (docs/rls-notes.md section 2): a request descriptor's
// entries walk down its domain's tree from the top level; at each level the child with the same
// key and value wins, then the first wildcard child (a value with a '*' anywhere, '*' matching any
// run of characters, as glob_match in tollgate/rules.h; file order) that the value matches, then
// the child with that key and no value. A limit applies only
// if the node reached by the last entry has one: a descriptor shorter or longer than the tree is
// not limited. A node reached through a valueless or wildcard child gives each distinct value its
// own bucket, unless `share_threshold` makes the values under a wildcard share one.
//
// Bucket keys are self-describing so that every node of the cluster, given the same config,
// finds the same limit for a key it only hears about through gossip (RuleSet::match):
//   0x1E domain 0x1F node-path 0x1D values
// where node-path names the matched tree node by its keys and configured values (config text
// may not contain control characters, so the separators are unambiguous) and values are the
// request's values at the valueless and (unshared) wildcard levels, each as "LEN:BYTES". The limit
// is found from the part before 0x1D alone, so front ends may replace an over-long values part
// by a digest of it. The limit itself is not in the key: a reload that keeps a node's limit keeps
// its buckets' balances.
//
// Immutable once built; share it between threads with shared_ptr<const RlsConfig>.
#ifndef TOLLGATE_RLS_CONFIG_H_
#define TOLLGATE_RLS_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/limit.h"

namespace tollgate {

// RateLimitResponse.RateLimit.Unit's numbers. MONTH is 30 days and YEAR 365, as in the
// reference server.
enum class RlsUnit : uint8_t {
  kUnknown = 0,
  kSecond = 1,
  kMinute = 2,
  kHour = 3,
  kDay = 4,
  kMonth = 5,
  kYear = 6,
  kWeek = 7
};

// Seconds in one unit; 0 for kUnknown.
int64_t rls_unit_seconds(RlsUnit unit);
// "second", "minute", ... Never null.
const char* rls_unit_name(RlsUnit unit);
// Case-insensitive "second" .. "year", "week". False for anything else (including "unknown").
bool parse_rls_unit(std::string_view text, RlsUnit* out);

// The first byte of every RLS bucket key, and the separators inside it.
inline constexpr char kRlsKeyPrefix = '\x1e';
inline constexpr char kRlsKeyPathSep = '\x1f';
inline constexpr char kRlsKeyValuesSep = '\x1d';
// The second byte of the bucket key of a descriptor that carries Envoy's limit override:
//   0x1E 0x1C requests_per_unit ':' unit ':' unit_multiplier 0x1F domain 0x1D entries
// where entries are every entry of the descriptor as "LEN:KEY" "LEN:VALUE": one cluster-wide
// bucket per overriding limit and descriptor, whose limit every node reads from the key.
inline constexpr char kRlsOverrideMark = '\x1c';
// The domain and node path of a bucket key (everything before the values) may take at most this
// many bytes, so that a digest of the values always fits the key table's 256-byte keys.
inline constexpr size_t kRlsMaxKeyPathBytes = 192;

// A `rate_limit` block as configured, with the bucket it becomes.
struct RlsLimit {
  std::string name;                // `name`; "" when not given
  bool unlimited = false;          // `unlimited: true`: always OK, never counted
  uint32_t requests_per_unit = 0;  // 0 blocks every request that costs anything
  RlsUnit unit = RlsUnit::kUnknown;
  uint32_t unit_multiplier = 1;       // `unit_multiplier`: the period is this many units
  std::vector<std::string> replaces;  // names of limits this one replaces within a request
  // tollgate's extensions: `burst` (default requests_per_unit) and `max_debt` (default burst).
  std::optional<int64_t> burst;
  std::optional<int64_t> max_debt;
  bool charge_when_over = false;  // tollgate: charge a denied cost all the same (Limit)
  // The token bucket: rate requests_per_unit per (unit x unit_multiplier), set by RlsConfig.
  // Meaningful only when limited().
  Limit bucket;

  bool limited() const { return !unlimited && requests_per_unit > 0; }
};

// Envoy's limit override on one request descriptor (a route's rate_limits[].limit, often set
// from dynamic metadata): the limit Envoy chose instead of the config's.
struct RlsLimitOverride {
  uint32_t requests_per_unit = 0;  // 0 blocks every request that costs anything, as the config's
  RlsUnit unit = RlsUnit::kUnknown;
  uint32_t unit_multiplier = 1;  // 0 is read as 1
};

// tollgate's `concurrency:` on a descriptor (issue 40; operations.md, "Concurrency behind Envoy"):
// at most `limit` of the descriptor's requests in flight at once across the cluster. A request's
// hits_addend acquires that many slots, one with is_negative_hits (Envoy's apply_on_stream_done)
// releases them; a stream whose end never comes is freed after `ttl_ns`. Not in the reference
// server, which rejects the field.
struct RlsConcurrency {
  int64_t limit = 0;                 // >= 1
  int64_t ttl_ns = 300'000'000'000;  // `lease_ttl`, 5 minutes unless given
};

// A value of a descriptor's `metadata` (YAML, typed as the reference server's Go YAML reader
// types it: true/false, numbers, null, strings, lists and mappings), returned in the response's
// dynamic metadata for the descriptors that passed.
struct RlsValue {
  enum class Kind : uint8_t { kNull, kBool, kNumber, kString, kList, kMap };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;                // kString
  std::vector<RlsValue> items;     // kList; kMap: the values, in file order
  std::vector<std::string> names;  // kMap: the keys, one per value in `items`
};

// One descriptor of a domain's tree, as configured.
struct RlsDescriptor {
  std::string key;
  std::optional<std::string> value;  // absent: any value; with a '*' anywhere: a wildcard
  std::optional<RlsLimit> rate_limit;
  // tollgate's `rate_limits:` (a list, instead of `rate_limit`): the first is `rate_limit`, the
  // others are here. Several limits on one descriptor, all or nothing like a request's
  // descriptors: 10 a second and 1,000 a day on the same key and value.
  std::vector<RlsLimit> more_limits;
  std::optional<RlsConcurrency> concurrency;  // tollgate's `concurrency` (and `lease_ttl`)
  bool shadow_mode = false;                   // counted as usual, never denies
  // Over-limit quota descriptors do not deny alone: a request is over only when every quota
  // descriptor of it is (and no other descriptor is over). The reference server's quota_mode.
  bool quota_mode = false;
  RlsValue metadata;  // kMap, or kNull when none
  // Per-value counts (tollgated's tollgate_rls_value_hits_total, RlsMatch::metric): this
  // descriptor's every request entry, key and value; or, on the way down, this level's value.
  bool detailed_metric = false;
  bool value_to_metric = false;
  bool share_threshold = false;  // only with a wildcard value: all matching values share one bucket
  std::vector<RlsDescriptor> descriptors;
  int line = 0;  // where it came from (1-based), for error messages
  int column = 0;
  // The file it came from, when not its domain's (a domain merged from several files); its
  // children's too. Empty: the domain's.
  std::string source;
};

struct RlsDomain {
  std::string domain;
  std::vector<RlsDescriptor> descriptors;
  std::string source;  // the file it came from
  int line = 0;        // where its `domain` field is (1-based), for error messages
  int column = 0;
};

// One entry of a request descriptor.
struct RlsEntry {
  std::string_view key;
  std::string_view value;
};

// How one request descriptor resolves against the config.
struct RlsMatch {
  // The governing limit, or null: no limit applies (unknown domain, no match, or replaced).
  const RlsLimit* limit = nullptr;
  bool shadow_mode = false;
  bool quota_mode = false;
  // The descriptor's `metadata` (null when it has none, or for an override).
  const RlsValue* metadata = nullptr;
  // With detailed_metric or value_to_metric on the way to a limited descriptor: the name the
  // reference server's stats would give this request's values ("web.path_/a.user_123"), and
  // the limit's own name (label()) it counts under. Empty otherwise.
  std::string metric;
  std::string_view metric_rule;
  // The descriptor's other limits (RlsDescriptor::more_limits), each resolved like this one
  // (its own limit and bucket key; the same flags).
  std::vector<RlsMatch> more;
  // The bucket key, when limit->limited(); else empty.
  std::string key;
  // The descriptor's concurrency limit (RlsDescriptor::concurrency), or null; and the key its
  // leases are counted under (the bucket key's form, whether or not a rate limit applies too).
  const RlsConcurrency* concurrency = nullptr;
  std::string concurrency_key;
  // Bytes of `key` (and of concurrency_key) before the values (prefix, domain, node path and the
  // 0x1D separator).
  size_t path_bytes = 0;
  // The descriptor carried a limit override that could not be honoured (no unit, a period over
  // 100 years, a domain too long for its bucket key's path, or kMaxOverrideLimits distinct
  // overrides in use already): this is the config's
  // match instead. Front ends count it.
  bool override_ignored = false;
};

// Switches over a whole config (the reference server's environment settings).
struct RlsModes {
  // Every descriptor (and every limit override) acts as if it had shadow_mode: true, the
  // reference server's global SHADOW_MODE: counted as usual, never denying.
  bool shadow_all = false;
  // Every descriptor (and every limit override) acts as if it had quota_mode: true, the
  // reference server's global QUOTA_MODE: a request is over only when all its limits are.
  bool quota_all = false;
};

class RlsConfig {
 public:
  RlsConfig();  // no domains
  // Compiles the trees. Throws ConfigError naming the file, line and column of the descriptor for
  // what the loader should already have rejected: duplicate domains, duplicate key/value pairs
  // at one level, an empty key, control characters in config text (names included), a path too long for a
  // bucket key, a limit with no unit, `unlimited` together with a unit, a bad burst or max_debt,
  // `replaces` naming the limit itself or an empty name, `share_threshold` without a wildcard.
  explicit RlsConfig(std::vector<RlsDomain> domains, RlsModes modes = {});
  ~RlsConfig();
  RlsConfig(RlsConfig&&) noexcept;
  RlsConfig& operator=(RlsConfig&&) noexcept;

  bool has_domain(std::string_view domain) const;
  const std::vector<RlsDomain>& domains() const { return domains_; }

  // Resolves one descriptor, without `replaces` (see apply_replaces).
  RlsMatch match(std::string_view domain, std::span<const RlsEntry> entries) const;

  // Resolves a descriptor that carries Envoy's limit override, as the reference server does: in a
  // domain of the config the override wins (the config's tree is not consulted; no shadow mode,
  // no name, replaces nothing), in another domain there is no limit. Its bucket is one per
  // overriding limit and descriptor (kRlsOverrideMark). An override that cannot be honoured gives
  // match() with override_ignored set, never no limit.
  RlsMatch match_override(std::string_view domain, std::span<const RlsEntry> entries,
                          const RlsLimitOverride& limit) const;
  // How many distinct override limits (requests_per_unit, unit, multiplier) one config serves.
  static constexpr uint32_t kMaxOverrideLimits = 64;

  // The request-level `replaces` rule of the reference server: gathers the names every matched
  // limit replaces, then clears each match (limit = null, key empty) whose limit's name is one.
  static void apply_replaces(std::span<RlsMatch> matches);

  // For RuleSet: the index of the limit governing bucket key `key` (one made by match(), with
  // any values part), or nullopt if `key` is not one of this config's.
  std::optional<uint32_t> limit_index(std::string_view key) const;
  // The limit at an index from limit_index (always limited()).
  const RlsLimit& limit(uint32_t index) const;
  bool shadow_all() const { return modes_.shadow_all; }
  bool quota_all() const { return modes_.quota_all; }
  // The configured limits (indices 0 .. limit_count() - 1).
  size_t limit_count() const { return limits_.size(); }
  // Every index limit_index can return: the configured limits, then kMaxOverrideLimits slots for
  // override limits (each taken when its limit is first used, by any thread).
  size_t limit_slots() const { return limits_.size() + kMaxOverrideLimits; }
  // For RuleSet: the index of the concurrency limit counting the leases of `key` (a
  // concurrency_key made by match()), or nullopt.
  std::optional<uint32_t> concurrency_index(std::string_view key) const;
  // The concurrency limits, by concurrency_index, and their labels (as label() names limits).
  size_t concurrency_count() const { return concurrency_.size(); }
  const RlsConcurrency& concurrency(uint32_t index) const { return *concurrency_[index]; }
  const std::string& concurrency_label(uint32_t index) const { return concurrency_labels_[index]; }
  // The limit at an index from limit_index as metrics name it, in the reference server's style:
  // the domain, then each level's key, "_value" when it has one ("_a*b" for a wildcard),
  // joined with '.': "web.path_/a.user"; an override limit's is "(override 10 per minute)" ("" for
  // an override slot not used yet).
  const std::string& label(uint32_t index) const;
  // A bucket (or concurrency) key as the request descriptor it stands for, for people (top-K,
  // the operator's page): "web: path=/x, user=alice", an override's "web (override 10 per
  // minute): path=/x"; a shared wildcard level shows its pattern ("user=a*"), a values part
  // replaced by a digest "…" for each value. "" when `key` is not one of this config's.
  std::string describe_key(std::string_view key) const;

 private:
  struct Node;
  struct Tree;
  std::vector<RlsDomain> domains_;
  std::vector<const RlsLimit*> limits_;             // the limited ones, into domains_
  std::vector<std::string> labels_;                 // label(i) of limits_[i]
  std::vector<const RlsConcurrency*> concurrency_;  // into domains_
  std::vector<std::string> concurrency_labels_;
  RlsModes modes_;
  std::unique_ptr<Tree> tree_;
};

}  // namespace tollgate

#endif  // TOLLGATE_RLS_CONFIG_H_
