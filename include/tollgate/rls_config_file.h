// Loads an Envoy rate limit service config in envoyproxy/ratelimit's YAML format: one file, or a
// directory whose *.yaml and *.yml files each hold one domain.
//
//   domain: mongo_cps                 # required, unique across the files
//   descriptors:
//     - key: database                 # required
//       value: users                  # optional; absent = any value (one bucket per value),
//                                     # "pre*" = any value starting with "pre"
//       rate_limit:                   # optional
//         unit: second                # second, minute, hour, day, week, month (30 d), year (365 d)
//         requests_per_unit: 500      # 0 denies every request that costs anything
//         unit_multiplier: 1          # optional: the period is this many units
//         name: users_limit           # optional; what `replaces` refers to
//         replaces: [{name: other}]   # optional: in one request, this limit replaces those
//         unlimited: false            # true: always OK (no unit then)
//         burst: 500                  # tollgate: bucket capacity (default requests_per_unit)
//         max_debt: 500               # tollgate: how deep remote consumption may go (default burst)
//         charge_when_over: false     # tollgate: charge a denied cost all the same, into debt
//                                     # (Envoy's apply_on_stream_done: the cost is known after)
//       rate_limits: [{...}, {...}]   # tollgate: instead of rate_limit, several limits (up to
//                                     # 8), all or nothing: 10 a second and 1,000 a day
//       shadow_mode: false            # counted, never denies
//       quota_mode: false             # over alone does not deny: a request is over only when
//                                     # all its quota descriptors are (and no other one is)
//       metadata: {name: service_1}   # a mapping, returned in the response's dynamic metadata
//                                     # (--rls-response-metadata) when this descriptor passed
//       share_threshold: false        # with a wildcard value: all values share one bucket
//       detailed_metric: false        # accepted; affects metric names only
//       value_to_metric: false        # likewise
//       descriptors: [...]            # nested descriptors
//
// Errors are ConfigError "FILE:LINE:COLUMN: problem". Unknown and repeated fields are errors,
// never ignored. A file may nest descriptors at most kMaxRlsDescriptorDepth deep and hold at most
// kMaxRlsDescriptors (YAML aliases included, counted each time they are used), so that no file,
// however aliased, hangs or overflows the loader.
#ifndef TOLLGATE_RLS_CONFIG_FILE_H_
#define TOLLGATE_RLS_CONFIG_FILE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tollgate/config_error.h"
#include "tollgate/rls_config.h"

namespace tollgate {

inline constexpr size_t kMaxRlsDescriptorDepth = 64;
inline constexpr size_t kMaxRlsDescriptors = 100'000;
inline constexpr size_t kMaxRlsLimitsPerDescriptor = 8;  // `rate_limits:` entries

// One file's text and the name errors give it (usually its path).
struct RlsConfigText {
  std::string source;
  std::string text;
};

struct RlsLoadOptions {
  // A domain may be written in several files, whose top-level descriptors then form one domain
  // (the reference server's MERGE_DOMAIN_CONFIG); a key and value defined twice at one level is
  // still an error, naming the second file. Off: a domain in two files is an error.
  bool merge_domains = false;
  // Every descriptor in shadow mode (the reference server's SHADOW_MODE): RlsConfig's shadow_all.
  bool shadow_mode = false;
  // Every descriptor in quota mode (the reference server's QUOTA_MODE): RlsConfig's quota_all.
  bool quota_mode = false;
};

// Parses the files together.
std::shared_ptr<const RlsConfig> parse_rls_config(const std::vector<RlsConfigText>& files,
                                                  const RlsLoadOptions& options = {});

// The config of domains read elsewhere (one RlsDomain per file, or per xDS resource), merged by
// domain and moded as `options` say, as parse_rls_config does with its files. Throws ConfigError.
std::shared_ptr<const RlsConfig> make_rls_config(std::vector<RlsDomain> domains, const RlsLoadOptions& options = {});

// Reads `path`: a YAML file, or a directory of *.yaml / *.yml files (in name order; other files
// and subdirectories are skipped). A directory with no such file is an error.
std::shared_ptr<const RlsConfig> load_rls_config(const std::string& path, const RlsLoadOptions& options = {});

// True if `path` is a file, or a directory with at least one *.yaml or *.yml file: something
// load_rls_config(path) would read. Never throws.
bool rls_config_exists(const std::string& path);

// The files load_rls_config(path) reads, with their modification times and sizes folded into a
// fingerprint that changes when any of them changes, appears or disappears. Never throws.
std::string rls_config_fingerprint(const std::string& path);

}  // namespace tollgate

#endif  // TOLLGATE_RLS_CONFIG_FILE_H_
