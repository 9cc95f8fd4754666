// tollgate-sim's second way into a daemon (scenario `front_end: rls`): Envoy's rate limit service.
// The scenario's rules become an RLS config in envoyproxy/ratelimit's format, and each check is a
// ShouldRateLimit call, so a local run measures the cluster as Envoy sees it: the gRPC front end,
// its queue to the node's thread, and the RLS bucket keys gossiped between the daemons.
//
// No gRPC header leaks from here: local_cluster.cc includes this file only.
#ifndef TOLLGATE_SIM_RLS_FRONT_END_H_
#define TOLLGATE_SIM_RLS_FRONT_END_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tollgate/rules.h"

namespace tollgate::sim {

// The request tollgate-sim sends for key K: domain kRlsDomain, one descriptor with the single
// entry {kRlsDescriptorKey: K}, hits_addend = the check's cost.
inline constexpr const char* kRlsDomain = "sim";
inline constexpr const char* kRlsDescriptorKey = "key";

// The RLS config (YAML, envoyproxy/ratelimit's format plus tollgate's burst/max_debt/
// charge_when_over) under which that request for key K gets the limit `rules.match(K)` gives K,
// each key its own bucket:
//   - an exact rule "K"           -> {key: key, value: "K"}
//   - a glob "P*" (one trailing *) -> {key: key, value: "P*"}: the reference server's prefix
//     wildcard. Wildcards are listed longest prefix first, ties in rule order, which is the rules
//     file's precedence (the first wildcard that matches wins in an RLS config);
//   - the default limit           -> {key: key} with no value, which matches any other value.
// A rate becomes requests_per_unit per unit x unit_multiplier (the largest of hour, minute and
// second that divides its period). Throws std::invalid_argument naming the rule for what an RLS
// config cannot say: a '*' anywhere but at the end, more than 4,294,967,295 tokens per period, or
// a period that is not whole seconds.
std::string rls_config_from_rules(const RuleSet& rules);

// Asynchronous ShouldRateLimit calls to one daemon, on gRPC's threads.
class RlsCaller {
 public:
  enum class Outcome : uint8_t { kAllowed, kDenied, kFailed };
  // Called once per call, on a gRPC thread; `error` says why when kFailed.
  using Done = std::function<void(Outcome, const std::string& error)>;

  // `target`: gRPC's address syntax, e.g. "unix:/tmp/x/node-0.rls.sock". The channel reconnects
  // within 50 ms of a restarted daemon listening again.
  explicit RlsCaller(const std::string& target);
  // Waits for the calls still out, each of which ends by its deadline.
  ~RlsCaller();
  RlsCaller(const RlsCaller&) = delete;
  RlsCaller& operator=(const RlsCaller&) = delete;

  // Asks whether `key` may spend `cost` (1 .. 2^32-1), giving up after `deadline`.
  void check_async(const std::string& key, int64_t cost, std::chrono::milliseconds deadline, Done done);
  // True once the channel is connected (trying for up to `timeout`).
  bool wait_connected(std::chrono::milliseconds timeout);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_RLS_FRONT_END_H_
