#include "guard/source_limiter.h"

#include <algorithm>
#include <utility>

namespace tollgate {

namespace {
constexpr std::string_view kOthers = "other sources";
}  // namespace

SourceLimiter::SourceLimiter(SourceLimiterOptions options) : options_(options) {
  limit_.rate = {std::clamp<int64_t>(options_.bytes_per_second, 1, kMaxTokens), kNanosPerSecond};
  limit_.burst = std::clamp<int64_t>(options_.burst_bytes, 1, kMaxTokens);
  limit_.max_debt = 0;
  options_.max_sources = std::max<size_t>(options_.max_sources, 2);
  options_.forget_after_ns = std::max<MonoNanos>(options_.forget_after_ns, 2);
}

size_t SourceLimiter::sources(SourceKind kind) const {
  const Generations& g = tables_[static_cast<size_t>(kind)];
  return g.current.size() + g.previous.size();
}

TokenBucket& SourceLimiter::bucket(Generations& g, std::string_view source, MonoNanos now) {
  // Every half of forget_after, what was not used since the previous turn is dropped: a source
  // is forgotten between forget_after/2 and forget_after after it last sent.
  const MonoNanos half = options_.forget_after_ns / 2;
  if (!g.started) {
    g.started = true;
    g.rotated_at = now;
  } else if (now - g.rotated_at >= options_.forget_after_ns) {
    g.current.clear();
    g.previous.clear();
    g.rotated_at = now;
  } else if (now - g.rotated_at >= half) {
    g.previous = std::move(g.current);
    g.current.clear();
    g.rotated_at = now;
  }
  if (TokenBucket* b = g.current.find(source)) return *b;
  if (const TokenBucket* old = g.previous.find(source)) {
    const TokenBucket kept = *old;
    g.previous.erase(source);
    auto [b, inserted] = g.current.try_emplace(source);
    *b = kept;
    return *b;
  }
  // One slot is kept for the shared bucket.
  if (g.current.size() + g.previous.size() + 1 >= options_.max_sources) {
    if (source != kOthers) return bucket(g, kOthers, now);
  }
  auto [b, inserted] = g.current.try_emplace(source);
  if (inserted) *b = TokenBucket(limit_, now);
  return *b;
}

bool SourceLimiter::admit(std::string_view source, SourceKind kind, size_t bytes, MonoNanos now) {
  TokenBucket& b = bucket(tables_[static_cast<size_t>(kind)], source, now);
  // A datagram larger than the burst could never pass; it is charged as the whole burst.
  const int64_t cost = std::min<int64_t>(int64_t(bytes), limit_.burst);
  if (b.try_acquire(limit_, std::max<int64_t>(cost, 1), now).allowed) return true;
  ++dropped_;
  dropped_bytes_ += bytes;
  return false;
}

}  // namespace tollgate
