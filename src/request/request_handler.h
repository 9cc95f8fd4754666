// The daemon's request path: the one entry every front end calls (the Unix-socket API's
// dispatch, and the gRPC and HTTP front ends). Front ends translate their protocol into these
// calls and the answers back; none of them touches the node.
//
// Threading, as the daemon calls it: every call is made on the node's thread (an Asio handler on
// the node's io_context: the native API's connections, and the jobs gRPC and HTTP queue there
// through NodeQueue), except check() and check_all(), which the native API's worker threads
// (--threads N, src/daemon/api_workers.h) also make directly, at once, when the node's key table
// is concurrent. An implementation is therefore safe for concurrent check()/check_all() calls
// beside one node-thread caller. No call waits for I/O or for another thread's work: check_all()
// holds its keys' shards only while it decides them.
#ifndef TOLLGATE_SRC_REQUEST_REQUEST_HANDLER_H_
#define TOLLGATE_SRC_REQUEST_REQUEST_HANDLER_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/node.h"
#include "tollgate/types.h"

namespace tollgate {

// Checks a front end hands the node in one go, at most, when a request holds more and they need
// not be decided together (not all or nothing): the rest wait for the next turn, so one client's
// large batch never holds the node's thread, and the other clients' checks, for long.
inline constexpr int kChecksPerSlice = 16;

// Why `key` cannot be reset, or "": every door that resets a key asks this first.
inline std::string reset_key_problem(std::string_view key, size_t max_key_bytes) {
  if (key.empty()) return "reset: no key given";
  if (key.size() > max_key_bytes) {
    return "reset: the key is " + std::to_string(key.size()) + " bytes, longer than any key a bucket holds (" +
           std::to_string(max_key_bytes) + ")";
  }
  if (is_reserved_key(key)) return "reset: a key whose first byte is 0x1E is an Envoy bucket's, not resettable here";
  return "";
}

// A key's bucket as this node holds it, read without a check (GET /v1/balance).
struct KeyBalance {
  bool limited = false;  // a rule governs the key (else nothing below is set)
  bool held = false;     // this node holds a bucket for it; else it starts full at its first check
  std::string rule;      // RuleSet::label of the governing rule
  Limit limit;
  int64_t balance_microtokens = 0;  // held: refilled to now; negative is debt
};

// The rules in force (GET /v1/rules): each limit by its label, with this node's counters.
struct RuleInForce {
  std::string label;  // RuleSet::label: as /metrics and /v1/top name it
  Limit limit;
  RuleCounters counts;  // this node's checks under it since start
};
struct RulesInForce {
  int64_t version = 0;  // content_version of the rules text (0: none)
  std::vector<RuleInForce> rules;
  size_t omitted = 0;  // rules beyond the `max` asked for (RLS configs may hold thousands)
};

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Decides items[i] into out[i] (out.size() == items.size()), in order, each against its key's
  // bucket: its Decision carries the governing limit, found by the same table probe.
  virtual void check(std::span<const CheckItem> items, std::span<Decision> out) = 0;
  // The same, all or nothing (KeyTable::allow_all): if any check is denied, none is charged and
  // those that would have passed say kOtherCheckDenied. Returns whether all passed.
  virtual bool check_all(std::span<const CheckItem> items, std::span<Decision> out) = 0;
  // Gives items[i].cost tokens back to items[i].key's bucket (Node::refund: never above burst,
  // spread to every node like consumption); out[i] is the bucket after it, as a cost-0 query
  // reports it. For Envoy's is_negative_hits; called like check().
  virtual void refund(std::span<const CheckItem> items, std::span<Decision> out) = 0;
  virtual std::vector<MemberInfo> members() = 0;
  virtual StatsList stats() = 0;
  // Per-rule counters by RuleSet::label (Node::rule_counters), for /metrics. None by default.
  virtual std::vector<std::pair<std::string, RuleCounters>> rule_counters() { return {}; }
  // Top-K (Node::top_parts): what to merge, off the node's thread, for one rule ("": all).
  // None by default.
  virtual std::vector<TopParts> top_parts(std::string_view rule) {
    (void)rule;
    return {};
  }
  // The first `max` rules in force, in precedence order. None by default.
  virtual RulesInForce rules_in_force(size_t max) {
    (void)max;
    return {};
  }
  // `key`'s bucket on this node, read without charging or touching it for eviction; nullopt
  // where the front end cannot read one.
  virtual std::optional<KeyBalance> balance(std::string_view key) {
    (void)key;
    return std::nullopt;
  }
  // Per concurrency rule, its leases (Node::rule_leases), for /metrics. None by default.
  virtual std::vector<std::pair<std::string, RuleLeases>> rule_leases() { return {}; }
  // Replaces the fault settings (empty settings clear them). Returns an error text, or "".
  virtual std::string set_faults(const FaultSettings& faults) = 0;
  // Makes `key` full again at every node (Node::reset). Front ends that cannot say so.
  virtual ResetReply reset(std::string_view key) {
    (void)key;
    return {.error = "resetting a key is not available here", .limited = false, .remaining = 0};
  }
  // Concurrency leases (Node::acquire, release, renew; docs/design.md 6.7), from any thread like
  // check(). Front ends that hold none refuse.
  virtual LeaseGrant acquire(std::string_view key, int64_t count, int64_t ttl_ns) {
    (void)key, (void)count, (void)ttl_ns;
    return {};
  }
  virtual bool release(const LeaseId& id) {
    (void)id;
    return false;
  }
  // The lease's time left (nanoseconds) after renewing it, or nullopt when none is held.
  virtual std::optional<int64_t> renew(const LeaseId& id, int64_t ttl_ns) {
    (void)id, (void)ttl_ns;
    return std::nullopt;
  }
  // Leases by key, for Envoy's concurrency descriptors (rls/decide.cc; Node::acquire_anonymous,
  // owe_release, release_anonymous), from any thread like check(). Front ends that hold none
  // grant nothing.
  virtual LeaseGrant acquire_anonymous(std::string_view key, int64_t count, int64_t ttl_ns) {
    (void)key, (void)count, (void)ttl_ns;
    return {};
  }
  virtual void owe_release(std::string_view key, int64_t count) { (void)key, (void)count; }
  // Slots of `key` held cluster-wide as this node sees them (LeaseTable::in_flight).
  virtual int64_t in_flight(std::string_view key) {
    (void)key;
    return 0;
  }
  virtual AnonymousRelease release_anonymous(std::string_view key, int64_t count) {
    (void)key, (void)count;
    return {};
  }
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_REQUEST_REQUEST_HANDLER_H_
