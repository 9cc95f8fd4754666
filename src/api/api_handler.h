// What the client API server asks of the daemon. The server runs on the daemon's single node
// thread (one io_context), so implementations are called on that thread and may touch the node
// directly; they must not block.
#ifndef TOLLGATE_SRC_API_API_HANDLER_H_
#define TOLLGATE_SRC_API_API_HANDLER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tollgate/fault_spec.h"
#include "tollgate/limit.h"
#include "tollgate/token_bucket.h"

namespace tollgate {

struct CheckResult {
  Decision decision;
  std::optional<Limit> limit;  // the governing limit; empty when no rule governs the key
};

struct MemberReport {
  std::string id;
  std::string address;
  std::string state;  // alive, suspect, dead, unreachable, left
  uint64_t incarnation = 0;
  int64_t last_heard_ms = 0;  // milliseconds since last heard from; 0 for the node itself
  bool self = false;
};

// Named counters and gauges, in a stable order, for `tollgate stats`.
using StatsReport = std::vector<std::pair<std::string, int64_t>>;

class ApiHandler {
 public:
  virtual ~ApiHandler() = default;
  virtual CheckResult check(std::string_view key, int64_t cost) = 0;
  virtual std::vector<MemberReport> members() = 0;
  virtual StatsReport stats() = 0;
  // Replaces the fault settings (an empty FaultSpec clears them). Returns an error text, or "".
  virtual std::string set_faults(const FaultSpec& faults) = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_API_API_HANDLER_H_
