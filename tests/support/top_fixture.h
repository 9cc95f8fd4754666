// What a node could hold of two rules' top-K (issue 41), for the doors that answer it (GET
// /v1/top, the native TopRequest, `tollgate top`): "user:*" with this node's summary and one
// member's unit (2 members), "ip:*" with this node's tokens only. Merged with k = 1, user:* is
// busiest (95 denials, user:hot in [79, 80], error bound 2, a key not listed at most 7).
#ifndef TOLLGATE_TESTS_SUPPORT_TOP_FIXTURE_H_
#define TOLLGATE_TESTS_SUPPORT_TOP_FIXTURE_H_

#include <memory>
#include <vector>

#include "core/top_keys.h"

namespace tollgate::testing {

// In the order a node need not answer in: ip:* first.
inline std::vector<TopParts> two_rules_top() {
  TopParts user;
  user.rule = "user:*";
  user.members = 2;
  user.own[0].push_back(PublishedTop{{{"user:hot", 50, 0}, {"user:\"q\"", 5, 0}}, 0, 55});
  user.units.push_back(std::make_shared<const TopUnit>(TopUnit{"user:*", 0, 40, 2, 3000, {{"user:hot", 30, 1}}}));
  TopParts ip;
  ip.rule = "ip:*";
  ip.members = 1;
  ip.own[1].push_back(PublishedTop{{{"ip:1", 7, 0}}, 0, 7});
  return {ip, user};
}

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_TOP_FIXTURE_H_
