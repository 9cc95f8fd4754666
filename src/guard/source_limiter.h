// SourceLimiter: a budget per gossip sender, checked before a datagram or frame is decoded or
// authenticated, so a peer (or anyone who can reach the gossip port) that sends far more than a
// member ever does costs one table lookup per excess datagram, not an HMAC and a parse, and
// cannot crowd out the members. It is tollgate's own token bucket, applied to ourselves:
// cost = bytes received, per source.
//
// Sources are of two kinds, in separate tables, so that no flood of the other kind can take a
// member's place: members (a UDP source whose address:port is one this node gossips to, or a
// TCP connection that has delivered an authentic frame) and others (keyed by IP address alone,
// so changing ports gains nothing). Each table holds at most max_sources; once full, every new
// source of that kind shares one bucket ("other sources"), so a flood of spoofed addresses
// cannot grow memory and shares one budget. A source silent for forget_after is forgotten (two
// generations: the table ages out whole halves instead of tracking each entry's age), so
// reconnects on new ports and departed members never fill it for good.
//
// Pure logic, the caller's steady clock; not thread-safe: one owner.
#ifndef TOLLGATE_SRC_GUARD_SOURCE_LIMITER_H_
#define TOLLGATE_SRC_GUARD_SOURCE_LIMITER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/clock.h"
#include "core/id_map.h"
#include "core/token_bucket.h"
#include "tollgate/limit.h"

namespace tollgate {

struct SourceLimiterOptions {
  // Bytes per second a single source may send, and the burst it may send at once. A member
  // sends a few KB per round even in a busy mesh (each message is at most
  // max_batches_per_message batches); 4 MiB/s leaves two orders of magnitude of headroom.
  int64_t bytes_per_second = 4 << 20;
  int64_t burst_bytes = 4 << 20;
  size_t max_sources = 4096;  // per kind
  MonoNanos forget_after_ns = 60 * kNanosPerSecond;
};

enum class SourceKind : uint8_t { kMember, kOther };

class SourceLimiter {
 public:
  explicit SourceLimiter(SourceLimiterOptions options = {});

  // May `source` deliver `bytes` at `now_ns`? False: drop it (counted).
  bool admit(std::string_view source, SourceKind kind, size_t bytes, MonoNanos now_ns);

  uint64_t dropped() const { return dropped_; }
  uint64_t dropped_bytes() const { return dropped_bytes_; }
  // Sources remembered, of one kind.
  size_t sources(SourceKind kind) const;

 private:
  struct Generations {
    IdMap<TokenBucket> current, previous;
    MonoNanos rotated_at = 0;
    bool started = false;
  };
  TokenBucket& bucket(Generations& g, std::string_view source, MonoNanos now);

  SourceLimiterOptions options_;
  Limit limit_;
  Generations tables_[2];  // by SourceKind
  uint64_t dropped_ = 0, dropped_bytes_ = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_GUARD_SOURCE_LIMITER_H_
