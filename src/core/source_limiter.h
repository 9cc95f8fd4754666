// SourceLimiter: a budget per gossip sender, checked before a datagram or frame is decoded or
// authenticated, so a peer (or anyone who can reach the gossip port) that sends far more than a
// member ever does costs one table lookup per excess datagram, not an HMAC and a parse, and
// cannot crowd out the other members. It is tollgate's own token bucket, applied to ourselves:
// cost = bytes received, per source address.
//
// The table holds at most max_sources addresses; once full, every new address shares one
// bucket ("other sources"), so a flood of spoofed source addresses cannot grow memory and
// shares one budget. Size max_sources above the cluster, so members never share it. Pure logic,
// the caller's steady clock; not thread-safe: one owner.
#ifndef TOLLGATE_SOURCE_LIMITER_H_
#define TOLLGATE_SOURCE_LIMITER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tollgate/clock.h"
#include "core/id_map.h"
#include "tollgate/limit.h"
#include "tollgate/token_bucket.h"

namespace tollgate {

struct SourceLimiterOptions {
  // Bytes per second a single source may send, and the burst it may send at once. A member
  // sends a few KB per round even in a busy mesh (each message is at most
  // max_batches_per_message batches); 4 MiB/s leaves two orders of magnitude of headroom.
  int64_t bytes_per_second = 4 << 20;
  int64_t burst_bytes = 4 << 20;
  size_t max_sources = 4096;
};

class SourceLimiter {
 public:
  explicit SourceLimiter(SourceLimiterOptions options = {});

  // May `source` deliver `bytes` at `now_ns`? False: drop it (counted).
  bool admit(std::string_view source, size_t bytes, MonoNanos now_ns);

  uint64_t dropped() const { return dropped_; }
  uint64_t dropped_bytes() const { return dropped_bytes_; }
  size_t sources() const { return table_.size(); }

 private:
  SourceLimiterOptions options_;
  Limit limit_;
  IdMap<TokenBucket> table_;
  uint64_t dropped_ = 0, dropped_bytes_ = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_SOURCE_LIMITER_H_
