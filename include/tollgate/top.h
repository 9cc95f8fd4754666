// Who is being limited, cluster-wide (issue 41; docs/design.md 7.8): what `tollgate top`,
// Client::top() and GET /v1/top answer for a rule. Counts are bounds, not estimates: each key's
// true count over the window lies in [lower, upper], and a key not listed weighs at most
// `unreported_bound`.
#ifndef TOLLGATE_TOP_H_
#define TOLLGATE_TOP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tollgate {

// Keys per metric an answer lists: 10 unless asked, at most 100.
inline constexpr size_t kDefaultTopKeys = 10;
inline constexpr size_t kMaxTopKeys = 100;

// A key of a rule's top: its true total over the members' summaries lies in [lower, upper].
struct MergedKey {
  std::string key;
  uint64_t lower = 0;
  uint64_t upper = 0;
  // For an Envoy bucket's key (first byte 0x1E): its descriptor, "web: path=/x, user=alice"
  // (RlsConfig::describe_key); "" for any other key.
  std::string descriptor;
};

// One metric of a rule's top (denied checks, or tokens admitted).
struct MergedTop {
  std::vector<MergedKey> keys;  // by upper bound, largest first (ties: lower, then key)
  uint64_t total = 0;           // the summaries' total weight
  // Every reported interval is at most this wide: the sum of the summaries' thresholds.
  uint64_t error_bound = 0;
  // A key not reported weighs at most this: error_bound, or the upper bound of the first key
  // left out beyond `k` if that is larger.
  uint64_t unreported_bound = 0;
};

// What top-K says of one rule cluster-wide: the merge of the live members' summaries over the
// last one to two --top-window.
struct RuleTop {
  std::string rule;              // RuleSet::label: the rule's match, as /metrics names it
  MergedTop denied, tokens;      // checks its own bucket denied; tokens admitted
  size_t members_reporting = 0;  // whose summaries are merged (this node included, if it counted)
};

}  // namespace tollgate

#endif  // TOLLGATE_TOP_H_
