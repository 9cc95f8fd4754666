// The daemon's request path reduced to a real KeyTable on a hand-driven clock: what the front
// ends' tests and fuzz targets (HTTP routes and server, the RLS decision, the client API's frames)
// decide against, with counts of what reached it (a refused request must not).
#ifndef TOLLGATE_TESTS_SUPPORT_TABLE_HANDLER_H_
#define TOLLGATE_TESTS_SUPPORT_TABLE_HANDLER_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/key_table.h"
#include "core/lease_table.h"
#include "core/random.h"
#include "request/request_handler.h"
#include "request/table_reads.h"
#include "tollgate/rules.h"

namespace tollgate::testing {

class TableHandler : public RequestHandler {
 public:
  explicit TableHandler(std::shared_ptr<const RuleSet> rules, KeyTableOptions options = {})
      : rules_(std::move(rules)), options_(options), table_(rules_, options_) {
    clear_leases();
  }

  // Empty again, the clock and the counts at 0: a fuzz target that keeps its handler across
  // inputs starts each from the same state.
  void clear() {
    table_ = KeyTable(rules_, options_);
    clear_leases();
    now = 0;
    calls = checks = check_alls = refunds = 0;
    items = 0;
  }

  void check(std::span<const CheckItem> in, std::span<Decision> out) override {
    ++calls;
    ++checks;
    items += in.size();
    for (size_t i = 0; i < in.size(); ++i) {
      now += tick;
      out[i] = table_.allow(in[i].key, in[i].cost, now);
    }
  }
  bool check_all(std::span<const CheckItem> in, std::span<Decision> out) override {
    ++calls;
    ++check_alls;
    items += in.size();
    now += tick;
    return table_.allow_all(in, out, now);
  }
  void refund(std::span<const CheckItem> in, std::span<Decision> out) override {
    ++calls;
    ++refunds;
    items += in.size();
    for (size_t i = 0; i < in.size(); ++i) {
      now += tick;
      out[i] = table_.refund(in[i].key, in[i].cost, now);
    }
  }
  std::vector<MemberInfo> members() override {
    ++calls;
    return members_list;
  }
  StatsList stats() override {
    ++calls;
    return {{"checks", int64_t(items)}, {"keys", int64_t(keys())}};
  }
  std::string set_faults(const FaultSettings&) override { return faults_answer; }
  std::optional<KeyBalance> balance(std::string_view key) override {
    ++calls;
    return read_balance(table_, key, now);
  }
  RulesInForce rules_in_force(size_t max) override {
    ++calls;
    return read_rules_in_force(table_, rules_version, max);
  }
  // Leases against a real LeaseTable (the rules' concurrency limits), at `now`.
  LeaseGrant acquire(std::string_view key, int64_t count, int64_t ttl_ns) override {
    ++calls;
    return leases->acquire(key, count, ttl_ns, now);
  }
  bool release(const LeaseId& id) override {
    ++calls;
    return leases->release(id);
  }
  std::vector<std::pair<std::string, RuleLeases>> rule_leases() override { return leases->rule_leases(); }
  LeaseGrant acquire_anonymous(std::string_view key, int64_t count, int64_t ttl_ns) override {
    ++calls;
    return leases->acquire_anonymous(key, count, ttl_ns, now);
  }
  void owe_release(std::string_view key, int64_t count) override {
    ++calls;
    leases->owe_release(key, count, now);
  }
  int64_t in_flight(std::string_view key) override { return leases->in_flight(key); }
  AnonymousRelease release_anonymous(std::string_view key, int64_t count) override {
    ++calls;
    return leases->release_anonymous(key, count, now);
  }
  std::optional<int64_t> renew(const LeaseId& id, int64_t ttl_ns) override {
    ++calls;
    const std::optional<MonoNanos> until = leases->renew(id, ttl_ns, now);
    if (!until) return std::nullopt;
    return *until - now;
  }

  std::vector<TopParts> top_parts(std::string_view rule) override {
    ++calls;
    top_rule_asked = std::string(rule);
    std::vector<TopParts> out;
    for (const TopParts& p : top_answer) {
      if (rule.empty() || p.rule == rule) out.push_back(p);
    }
    return out;
  }

  size_t keys() const { return table_.stats().keys; }
  KeyTable& table() { return table_; }

  MonoNanos now = 0;   // the time checks are decided at
  MonoNanos tick = 0;  // added to `now` before each check (and once per check_all)
  int calls = 0;       // every call that reached the node
  int checks = 0;      // check() calls
  int check_alls = 0;  // check_all() calls
  int refunds = 0;     // refund() calls
  size_t items = 0;    // the checks they carried
  std::vector<MemberInfo> members_list;
  std::string faults_answer;         // set_faults' answer: "" done, else why not
  int64_t rules_version = 0;         // what rules_in_force() says
  std::vector<TopParts> top_answer;  // what top_parts() holds (filtered by the rule asked)
  std::string top_rule_asked;
  // Under the rules' concurrency limits; ids from a fixed seed (clear() starts it again).
  std::unique_ptr<LeaseTable> leases;

 private:
  void clear_leases() {
    leases = std::make_unique<LeaseTable>(LeaseTableOptions{},
                                          [r = std::make_shared<SplitMix64>(7)](uint8_t* out, size_t n) {
      for (size_t i = 0; i < n; ++i) out[i] = uint8_t(r->next_u64());
    });
    leases->set_rules(rules_);
  }
  std::shared_ptr<const RuleSet> rules_;
  KeyTableOptions options_;
  KeyTable table_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_TABLE_HANDLER_H_
