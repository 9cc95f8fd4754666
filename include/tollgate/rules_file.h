// Loads a RuleSet from the YAML rules file:
//
//   rules:
//     - match: "api:login:*"   # an exact key, or a glob where * matches any run of characters
//       rate: 5/s              # N/s, N/min, N/h, N/d, N/w or N/month (30 days)
//       burst: 10
//       max_debt: 10           # optional; default = burst
//       charge_when_over: false # optional: true charges a denied cost all the same, into debt
//                               # (costs known after the work; see Limit::charge_when_over)
//       shadow: false          # optional: true tries the limit without enforcing it: what it
//                              # would deny passes, uncharged, counted as shadow-denied
//     - match: "jobs:*"
//       concurrency: 2         # at most 2 leases of each key held at once, cluster-wide
//       lease_ttl: 5m          # optional (default 60s): a lease not renewed or released by then
//                              # expires by itself. A rule may have a rate, a concurrency or both.
//   default:                   # optional; without it a key that matches no rule is not limited
//     rate: 100/s
//     burst: 100
//
// Unknown fields, duplicate fields, duplicate `match` patterns and out-of-range numbers are
// errors, not warnings: a typo in a limit must not silently leave a key unlimited.
// Errors are ConfigError naming the file, line and column.
#ifndef TOLLGATE_RULES_FILE_H_
#define TOLLGATE_RULES_FILE_H_

#include <memory>
#include <string>
#include <string_view>

#include "tollgate/config_error.h"
#include "tollgate/rules.h"

namespace tollgate {

// Parses rules from `text`; `source` names it in errors (usually the file path).
std::shared_ptr<const RuleSet> parse_rules(std::string_view text, const std::string& source);

// Reads and parses the file at `path`. A missing or unreadable file is a ConfigError too.
std::shared_ptr<const RuleSet> load_rules_file(const std::string& path);

}  // namespace tollgate

#endif  // TOLLGATE_RULES_FILE_H_
