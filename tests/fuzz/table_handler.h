// The request path the front-end fuzz targets decide against (http_routes, rls_request): a real
// KeyTable of 64 keys, so that buckets drain and keys get evicted as inputs accumulate, and a
// count of the calls that reached it (a refused request must not).
#ifndef TOLLGATE_TESTS_FUZZ_TABLE_HANDLER_H_
#define TOLLGATE_TESTS_FUZZ_TABLE_HANDLER_H_

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "api/request_handler.h"
#include "core/key_table.h"
#include "tollgate/rules.h"

namespace tollgate::fuzz {

class TableHandler : public RequestHandler {
 public:
  explicit TableHandler(std::shared_ptr<const RuleSet> rules)
      : rules_(std::move(rules)), table_(rules_, KeyTableOptions{.max_keys = 64}) {}
  // Empty again: a target that keeps its handler across inputs starts each from the same state.
  void reset() {
    table_ = KeyTable(rules_, KeyTableOptions{.max_keys = 64});
    now = 0;
    calls = 0;
  }
  void check(std::span<const CheckItem> items, std::span<Decision> out) override {
    ++calls;
    for (size_t i = 0; i < items.size(); ++i) out[i] = table_.allow(items[i].key, items[i].cost, now);
  }
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out) override {
    ++calls;
    return table_.allow_all(items, out, now);
  }
  std::vector<MemberInfo> members() override {
    ++calls;
    return {MemberInfo{"me", "127.0.0.1:1", MemberState::kAlive, 1, 1, 0, true}};
  }
  StatsList stats() override {
    ++calls;
    return {{"checks", 1}, {"keys", int64_t(table_.stats().keys)}};
  }
  std::string set_faults(const FaultSettings&) override { return "no"; }
  size_t keys() const { return table_.stats().keys; }

  MonoNanos now = 0;
  int calls = 0;

 private:
  std::shared_ptr<const RuleSet> rules_;
  KeyTable table_;
};

}  // namespace tollgate::fuzz

#endif  // TOLLGATE_TESTS_FUZZ_TABLE_HANDLER_H_
