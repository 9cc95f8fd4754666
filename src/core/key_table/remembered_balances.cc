#include "core/key_table/remembered_balances.h"

#include <vector>

namespace tollgate::key_table {

size_t RememberedBalances::locate(size_t hash) const {
  const size_t h = stored(hash);
  return table_.find(h, [h](size_t x) { return x == h; });
}

const Remembered* RememberedBalances::find(size_t hash) const {
  const size_t i = locate(hash);
  return i == Table::kNone ? nullptr : &table_.value(i);
}

std::optional<Remembered> RememberedBalances::take(size_t hash) {
  if (table_.empty()) return std::nullopt;
  const size_t i = locate(hash);
  if (i == Table::kNone) return std::nullopt;
  std::optional<Remembered> r = table_.value(i);
  table_.erase(i);
  return r;
}

size_t RememberedBalances::remember(size_t hash, const TokenBucket& bucket, const Limit& limit) {
  size_t forgotten = 0;
  while (table_.size() >= capacity_ && !(light_.empty() && heavy_.empty())) {
    auto& order = light_.empty() ? heavy_ : light_;
    const auto [old_hash, generation] = order.front();
    order.pop_front();
    const size_t i = locate(old_hash);
    if (i != Table::kNone && table_.value(i).generation == generation) {
      table_.erase(i);
      ++forgotten;
    }
  }
  const Remembered value{bucket, limit, ++generation_};
  if (const size_t i = locate(hash); i != Table::kNone) {
    table_.value(i) = value;
  } else {
    const size_t h = stored(hash);
    const size_t at = table_.claim(h);
    table_.slot(at) = h;
    table_.value(at) = value;
  }
  const bool light = bucket.raw_balance_microtokens() > limit.burst * kMicrotokensPerToken / 2;
  (light ? light_ : heavy_).emplace_back(hash, value.generation);
  // A balance that comes back (its key returns) leaves a stale entry here, which only the
  // front's expiry pops; behind a debt that refills over a day they piled up, one per eviction,
  // without bound. Compacted once they outnumber what can be remembered: amortised O(1).
  if (light_.size() + heavy_.size() > 2 * capacity_ + kOrderSlack) {
    for (auto* order : {&light_, &heavy_}) {
      std::erase_if(*order, [this](const std::pair<size_t, uint64_t>& e) {
        const Remembered* r = find(e.first);
        return !r || r->generation != e.second;
      });
    }
  }
  return forgotten;
}

void RememberedBalances::expire(MonoNanos now, size_t max_scan) {
  // A stale queue entry (the key came back, or was remembered again later) is skipped.
  for (auto* order : {&light_, &heavy_}) {
    for (size_t n = 0; n < max_scan && !order->empty(); ++n) {
      const auto [hash, generation] = order->front();
      const size_t i = locate(hash);
      if (i != Table::kNone && table_.value(i).generation == generation) {
        Remembered& r = table_.value(i);
        if (!r.bucket.full_at(r.limit, now)) break;
        table_.erase(i);
      }
      order->pop_front();
    }
  }
}

size_t RememberedBalances::bytes() const {
  return table_.bytes() + (light_.size() + heavy_.size()) * sizeof(std::pair<size_t, uint64_t>);
}

size_t RememberedBalances::bound_bytes(size_t capacity) {
  // FlatTable: at most half full, grown early (from a quarter full) when a run gets long: at most
  // 8 slots per entry, and 12 while the old array is copied into the new.
  constexpr size_t kSlotsPerEntry = 12;
  size_t b = capacity * kSlotsPerEntry * (sizeof(size_t) + sizeof(Remembered));
  b += (2 * capacity + kOrderSlack) * sizeof(std::pair<size_t, uint64_t>) * 5 / 4;  // the deques' blocks
  return b;
}

}  // namespace tollgate::key_table
