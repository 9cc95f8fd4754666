// What the grant of a concurrency lease (a rule's `concurrency: N`; docs/design.md 6.7) said:
// shared by tollgate::Lease (the client library's) and tollgate::MemberLease (the embedded
// member's), which hold the lease itself and release it.
#ifndef TOLLGATE_LEASE_H_
#define TOLLGATE_LEASE_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace tollgate {

struct LeaseFacts {
  bool limited = false;                   // a concurrency rule governs the key
  int64_t in_flight = 0;                  // the key's slots held cluster-wide as the node saw it
  int64_t limit = 0;                      // its concurrency limit
  std::chrono::nanoseconds expires_in{};  // until the lease expires unless renewed
  std::string reason;                     // the outcome ("granted", "over the concurrency limit", ...)
};

}  // namespace tollgate

#endif  // TOLLGATE_LEASE_H_
