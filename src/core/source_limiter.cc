#include "core/source_limiter.h"

#include <algorithm>

namespace tollgate {

namespace {
constexpr std::string_view kOthers = "other sources";
}  // namespace

SourceLimiter::SourceLimiter(SourceLimiterOptions options) : options_(options) {
  limit_.rate = {std::clamp<int64_t>(options_.bytes_per_second, 1, kMaxTokens), kNanosPerSecond};
  limit_.burst = std::clamp<int64_t>(options_.burst_bytes, 1, kMaxTokens);
  limit_.max_debt = 0;
  options_.max_sources = std::max<size_t>(options_.max_sources, 2);
}

bool SourceLimiter::admit(std::string_view source, size_t bytes, MonoNanos now) {
  TokenBucket* bucket = table_.find(source);
  if (!bucket) {
    if (table_.size() + 1 >= options_.max_sources) source = kOthers;  // one slot kept for it
    auto [b, inserted] = table_.try_emplace(source);
    if (inserted) *b = TokenBucket(limit_, now);
    bucket = b;
  }
  // A datagram larger than the burst could never pass; it is charged as the whole burst.
  const int64_t cost = std::min<int64_t>(int64_t(bytes), limit_.burst);
  if (bucket->try_acquire(limit_, std::max<int64_t>(cost, 1), now).allowed) return true;
  ++dropped_;
  dropped_bytes_ += bytes;
  return false;
}

}  // namespace tollgate
