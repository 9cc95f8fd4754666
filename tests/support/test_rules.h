// Small helpers shared by the core's tests.
#ifndef TOLLGATE_TESTS_SUPPORT_TEST_RULES_H_
#define TOLLGATE_TESTS_SUPPORT_TEST_RULES_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "tollgate/rules.h"

namespace tollgate::testing {

inline Limit per_second(int64_t rate, int64_t burst, int64_t max_debt) {
  return Limit{Rate{rate, kNanosPerSecond}, burst, max_debt};
}

// A RuleSet with one glob rule and no default: keys outside `pattern` are unlimited.
inline std::shared_ptr<const RuleSet> one_rule(const std::string& pattern, Limit limit) {
  return std::make_shared<RuleSet>(std::vector<Rule>{{pattern, limit, 0}}, std::nullopt);
}

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_TEST_RULES_H_
