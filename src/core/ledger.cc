#include "core/ledger.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <string_view>
#include <utility>

#include "core/id_map.h"
#include "util/flat_table.h"

#include "core/key_table.h"

namespace tollgate {

size_t batch_bytes(const Batch& batch) {
  size_t bytes = sizeof(Batch) + batch.origin.capacity() + batch.entries.capacity() * sizeof(ConsumptionEntry);
  for (const ConsumptionEntry& e : batch.entries) bytes += e.key.capacity();
  bytes += batch.resets.capacity() * sizeof(ResetMark);
  for (const ResetMark& r : batch.resets) bytes += r.key.capacity();
  if (batch.counts) {
    bytes += sizeof(LeaseCounts) + batch.counts->entries.capacity() * sizeof(InflightEntry);
    for (const InflightEntry& e : batch.counts->entries) bytes += e.key.capacity();
  }
  if (batch.top) {
    bytes += sizeof(TopUnit) + batch.top->rule.capacity() + batch.top->entries.capacity() * sizeof(TopEntry);
    for (const TopEntry& e : batch.top->entries) bytes += e.key.capacity();
  }
  return bytes;
}

const char* merge_result_name(MergeResult r) {
  switch (r) {
    case MergeResult::kApplied:
      return "applied";
    case MergeResult::kDuplicate:
      return "duplicate";
    case MergeResult::kStaleIncarnation:
      return "stale incarnation";
    case MergeResult::kTooManyOrigins:
      return "too many origins";
    case MergeResult::kSelf:
      return "claims our node id";
  }
  return "unknown";
}

// ---- SeenWindow

namespace {

constexpr size_t kWords = SeenWindow::kBits / 64;

bool test_bit(const std::array<uint64_t, kWords>& bits, uint64_t i) { return (bits[i / 64] >> (i % 64)) & 1; }

// Shifts the bitmap toward bit 0 by n (bit n becomes bit 0).
void shift_down(std::array<uint64_t, kWords>& bits, uint64_t n) {
  if (n == 0) return;
  if (n >= SeenWindow::kBits) {
    bits.fill(0);
    return;
  }
  const size_t words = n / 64, rem = n % 64;
  for (size_t i = 0; i < kWords; ++i) {
    const size_t src = i + words;
    uint64_t v = src < kWords ? bits[src] >> rem : 0;
    if (rem != 0 && src + 1 < kWords) v |= bits[src + 1] << (64 - rem);
    bits[i] = v;
  }
}

// Set bits among the lowest n.
uint64_t count_low(const std::array<uint64_t, kWords>& bits, uint64_t n) {
  uint64_t count = 0;
  for (size_t i = 0; i < kWords && n > 0; ++i) {
    const uint64_t take = std::min<uint64_t>(n, 64);
    const uint64_t mask = take == 64 ? ~uint64_t(0) : (uint64_t(1) << take) - 1;
    count += uint64_t(std::popcount(bits[i] & mask));
    n -= take;
  }
  return count;
}

// A peer's digest by origin, for one missing_for(): open addressing over (hash, entry) sized
// once, with no copy of the ids. (A node of a 1,000-node cluster answers about two digests of
// 1,000 origins a second; a std::unordered_map allocated a node per origin each time.)
class DigestIndex {
 public:
  explicit DigestIndex(const Digest& d) : table_(2 * d.origins.size() + 2) {
    for (const OriginDigest& o : d.origins) {
      const uint64_t h = hash(o.origin);
      if (locate(o.origin, h) != Table::kNone) continue;  // listed twice: the first counts
      table_.slot(table_.claim(h)) = {h, &o};
    }
  }
  const OriginDigest* find(std::string_view origin) const {
    const size_t i = locate(origin, hash(origin));
    return i == Table::kNone ? nullptr : table_.slot(i).entry;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    const OriginDigest* entry = nullptr;
  };
  struct Policy {
    static bool empty(const Slot& s) { return s.entry == nullptr; }
    static size_t hash(const Slot& s) { return s.hash; }
  };
  using Table = FlatTable<Slot, Policy>;
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  size_t locate(std::string_view origin, uint64_t h) const {
    return table_.find(h, [&](const Slot& s) { return s.hash == h && s.entry->origin == origin; });
  }
  Table table_;  // sized at most half full for the digest: it never grows
};

}  // namespace

bool SeenWindow::contains(uint64_t seq) const {
  if (seq <= watermark) return true;
  const uint64_t offset = seq - watermark - 1;
  return offset < kBits && test_bit(above, offset);
}

bool SeenWindow::insert(uint64_t seq, uint64_t* abandoned) {
  if (seq == 0 || contains(seq)) return false;
  if (seq - watermark > kBits) {
    const uint64_t shift = seq - watermark - kBits;
    const uint64_t seen_leaving = count_low(above, std::min(shift, kBits));
    if (abandoned) *abandoned += shift - seen_leaving;
    shift_down(above, shift);
    watermark += shift;
  }
  const uint64_t offset = seq - watermark - 1;
  above[offset / 64] |= uint64_t(1) << (offset % 64);
  // Advance the watermark over the run of seen seqs just above it.
  uint64_t run = 0;
  for (size_t i = 0; i < kWords; ++i) {
    const int ones = std::countr_one(above[i]);
    run += uint64_t(ones);
    if (ones < 64) break;
  }
  shift_down(above, run);
  watermark += run;
  return true;
}

uint64_t SeenWindow::highest() const {
  for (size_t i = kWords; i-- > 0;) {
    if (above[i] != 0) return watermark + i * 64 + uint64_t(64 - std::countl_zero(above[i]));
  }
  return watermark;
}

// ---- Ledger

class Ledger::Impl {
 public:
  Impl(NodeId self, uint64_t incarnation, LedgerOptions options)
      : self_(std::move(self)), incarnation_(incarnation), options_(options) {
    relay_id_ = relay_origin(self_);
    OriginState& own = origins_[self_];
    own.current.incarnation = incarnation_;
  }

  BatchPtr seal(std::vector<ConsumptionEntry> entries, MonoNanos now, std::vector<ResetMark> resets) {
    return seal_as(self_, last_seq_, std::move(entries), now, std::move(resets));
  }

  BatchPtr seal_relay(std::vector<ConsumptionEntry> entries, MonoNanos now, std::vector<ResetMark> resets) {
    // The window of our relay batches is made at the first one, not at start: other modes never
    // relay, and their digests do not list it. A past life's relay batches, applied once after
    // a restart (how a restarted node relearns what it relayed), left a window of that life:
    // it becomes the previous one, so they stay duplicates.
    OriginState& st = *origins_.try_emplace(relay_id_).first;
    if (st.current.incarnation != incarnation_) {
      if (st.current.incarnation != 0) st.previous = st.current;
      st.current = SeenWindow{};
      st.current.incarnation = incarnation_;
    }
    return seal_as(relay_id_, last_relay_seq_, std::move(entries), now, std::move(resets));
  }

  void start_epoch() { ++epoch_; }

  BatchPtr seal_counts(LeaseCounts counts, MonoNanos now) {
    auto batch = std::make_shared<Batch>();
    batch->counts = std::make_shared<const LeaseCounts>(std::move(counts));
    return keep(std::move(batch), self_, last_seq_, now);
  }

  BatchPtr seal_top(TopUnit unit, MonoNanos now) {
    auto batch = std::make_shared<Batch>();
    batch->top = std::make_shared<const TopUnit>(std::move(unit));
    return keep(std::move(batch), self_, last_seq_, now);
  }

  BatchPtr keep(std::shared_ptr<Batch> batch, const NodeId& origin, uint64_t& last_seq, MonoNanos now) {
    batch->origin = origin;
    batch->incarnation = incarnation_;
    batch->seq = ++last_seq;
    origins_[origin].current.insert(batch->seq, nullptr);
    ++stats_.sealed;
    retain(batch, now);
    return batch;
  }

  BatchPtr seal_as(const NodeId& origin, uint64_t& last_seq, std::vector<ConsumptionEntry> entries, MonoNanos now,
                   std::vector<ResetMark> resets) {
    // Entries of the same key are combined, brought together by sorting on the key's hash (the
    // key breaks ties): integer comparisons. Comparing the keys themselves was half of a round's
    // time when a key flood (300,000 new keys/s) sealed 15,000 keys a round, and the round holds
    // up every check behind it.
    std::vector<std::pair<size_t, uint32_t>> order;  // (hash of the key, index in entries)
    order.reserve(entries.size());
    for (uint32_t i = 0; i < entries.size(); ++i) {
      if (entries[i].tokens != 0) order.emplace_back(std::hash<std::string_view>{}(entries[i].key), i);
    }
    std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : entries[a.second].key < entries[b.second].key;
    });
    std::vector<ConsumptionEntry> combined;
    combined.reserve(order.size());
    size_t last_hash = 0;
    for (const auto& [hash, i] : order) {
      ConsumptionEntry& e = entries[i];
      if (!combined.empty() && hash == last_hash && combined.back().key == e.key) {
        combined.back().tokens += e.tokens;
        combined.back().epoch = std::max(combined.back().epoch, e.epoch);
      } else {
        combined.push_back(std::move(e));
        last_hash = hash;
      }
    }
    // A key whose refunds cancel its consumption has nothing to tell.
    std::erase_if(combined, [](const ConsumptionEntry& e) { return e.tokens == 0; });
    if (combined.empty() && resets.empty()) return nullptr;
    auto batch = std::make_shared<Batch>();
    batch->entries = std::move(combined);
    batch->resets = std::move(resets);
    return keep(std::move(batch), origin, last_seq, now);
  }

  MergeResult merge(const BatchPtr& batch, KeyTable& table, MonoNanos now, ResetFilter* resets) {
    SeenWindow* window = nullptr;
    const MergeResult verdict = classify(*batch, /*create=*/true, &window);
    if (verdict != MergeResult::kApplied) {
      count(verdict);
      return verdict;
    }
    window->insert(batch->seq, &stats_.abandoned);
    if (resets) {
      for (const ResetMark& r : batch->resets) resets->reset(r, now);
    }
    for (const ConsumptionEntry& e : batch->entries) {
      if (!resets || resets->counts(e, now)) table.charge_remote(e.key, e.tokens, now);
    }
    if (resets && batch->counts) resets->lease_counts(*batch, now);
    if (resets && batch->top) resets->top_unit(*batch, now);
    stats_.entries_applied += batch->entries.size();
    ++stats_.applied;
    retain(batch, now);
    return MergeResult::kApplied;
  }

  Digest digest(const OriginFilter& include) const {
    Digest d;
    d.origins.reserve(origins_.size());
    origins_.for_each([&](const NodeId& origin, const OriginState& state) {
      if (!include || include(origin)) d.origins.push_back({origin, state.current, state.previous});
    });
    return d;
  }

  std::vector<BatchPtr> missing_for(const Digest& peer, const NodeId& from, const std::optional<NodeId>& until,
                                    const OriginFilter& include) const {
    const DigestIndex windows(peer);
    std::vector<BatchPtr> out;
    for (const Retained& r : retained_) {
      const Batch& b = *r.batch;
      if (b.origin < from || (until && !(b.origin < *until))) continue;  // another part's origin
      if (r.epoch != epoch_ || (include && !include(b.origin))) continue;
      const OriginDigest* found = windows.find(b.origin);
      if (!found) {
        out.push_back(r.batch);
        continue;
      }
      const OriginDigest& o = *found;
      bool lacks;
      if (b.incarnation == o.current.incarnation) {
        lacks = !o.current.contains(b.seq);
      } else if (b.incarnation > o.current.incarnation) {
        lacks = true;
      } else if (b.incarnation == o.previous.incarnation) {
        lacks = !o.previous.contains(b.seq);
      } else {
        lacks = b.incarnation > o.previous.incarnation;  // older still: the peer would drop it
      }
      if (lacks) out.push_back(r.batch);
    }
    return out;
  }

  bool windows_of(std::string_view origin, OriginDigest* out) const {
    const OriginState* st = origins_.find(origin);
    if (!st) return false;
    out->current = st->current;
    out->previous = st->previous;
    return true;
  }

  void expire(MonoNanos now) {
    while (!retained_.empty() && now - retained_.front().at_ns > options_.retention_ns) drop_oldest();
  }

  Digest own_positions() const {
    Digest d;
    for (const auto& [origin, last] : {std::pair{self_, last_seq_}, std::pair{relay_id_, last_relay_seq_}}) {
      OriginDigest o;
      o.origin = origin;
      o.current.incarnation = incarnation_;
      o.current.watermark = last;  // every seq of this life up to it was sealed here
      d.origins.push_back(std::move(o));
    }
    return d;
  }

  // `into` becomes the union of itself and `w`, a window of the same incarnation.
  static void unite(SeenWindow& into, const SeenWindow& w) {
    SeenWindow lower = w;
    if (w.watermark > into.watermark) std::swap(into, lower);
    // Every seq of `lower` above into's watermark is within into's 256 bits: nothing slides.
    uint64_t abandoned = 0;
    for (size_t i = 0; i < SeenWindow::kBits; ++i) {
      if (((lower.above[i / 64] >> (i % 64)) & 1) == 0) continue;
      const uint64_t seq = lower.watermark + 1 + i;
      if (seq > into.watermark) into.insert(seq, &abandoned);
    }
  }

  void restore(const Digest& positions) {
    for (const OriginDigest& o : positions.origins) {
      const bool ours = o.origin == self_ || o.origin == relay_id_;
      if (ours && o.current.incarnation >= incarnation_) continue;  // only a previous life's
      OriginState* st = origins_.find(o.origin);
      if (!st) {
        if (origins_.size() >= options_.max_origins) continue;
        st = origins_.try_emplace(o.origin).first;
      }
      // Merged with what this life may already know: the newer of each window, and the union of
      // two windows of one incarnation (a peer's positions taken on start, Node's sync: seqs
      // either side applied count as applied).
      for (const SeenWindow& w : {o.previous, o.current}) {
        if (w.incarnation == 0) continue;
        if (w.incarnation > st->current.incarnation) {
          st->previous = st->current;
          st->current = w;
        } else if (w.incarnation == st->current.incarnation) {
          unite(st->current, w);
        } else if (w.incarnation == st->previous.incarnation) {
          unite(st->previous, w);
        } else if (w.incarnation > st->previous.incarnation) {
          st->previous = w;
        }
      }
    }
  }

  void forget_origin(const NodeId& origin) {
    if (origin == self_) return;
    origins_.erase(origin);
    origins_.erase(relay_origin(origin));  // its relaying too
  }

  LedgerStats stats() const {
    LedgerStats s = stats_;
    s.origins = origins_.size();
    s.retained_batches = retained_.size();
    s.retained_bytes = retained_bytes_;
    s.bytes = origins_.heap_bytes() + retained_bytes_ + retained_.size() * sizeof(Retained);
    return s;
  }

  const NodeId& self() const { return self_; }
  uint64_t incarnation() const { return incarnation_; }
  uint64_t last_seq() const { return last_seq_; }
  uint64_t last_relay_seq() const { return last_relay_seq_; }

  void start_incarnation(uint64_t incarnation) {
    if (incarnation <= incarnation_) return;
    OriginState& own = *origins_.try_emplace(self_).first;
    own.previous = own.current;
    own.current = SeenWindow{};
    own.current.incarnation = incarnation;
    if (OriginState* relayed = origins_.find(relay_id_)) {
      relayed->previous = relayed->current;
      relayed->current = SeenWindow{};
      relayed->current.incarnation = incarnation;
    }
    incarnation_ = incarnation;
    last_seq_ = 0;
    last_relay_seq_ = 0;
  }

 private:
  struct OriginState {
    SeenWindow current;
    SeenWindow previous;
  };
  struct Retained {
    BatchPtr batch;
    MonoNanos at_ns;
    size_t bytes;
    uint64_t epoch;  // start_epoch() calls before it was retained
  };

  // Decides what merge() would do with `b` and, for kApplied, which window records it. With
  // `create`, sets up state for a new origin or a new incarnation.
  MergeResult classify(const Batch& b, bool create, SeenWindow** window) {
    const bool relayed = b.origin == relay_id_;
    if (b.origin == self_ || relayed) {
      // Our current life: everything genuine was sealed here. A newer life, or a seq we never
      // sealed, means another process is using our node id.
      const uint64_t last = relayed ? last_relay_seq_ : last_seq_;
      if (b.incarnation > incarnation_ || (b.incarnation == incarnation_ && b.seq > last)) {
        return MergeResult::kSelf;
      }
    }
    OriginState* found = origins_.find(b.origin);
    if (!found) {
      if (origins_.size() >= options_.max_origins) return MergeResult::kTooManyOrigins;
      if (!create) return MergeResult::kApplied;
      found = origins_.try_emplace(b.origin).first;
      found->current.incarnation = b.incarnation;
    }
    OriginState& st = *found;
    SeenWindow* w;
    if (b.incarnation == st.current.incarnation) {
      w = &st.current;
    } else if (b.incarnation > st.current.incarnation) {
      if (!create) return MergeResult::kApplied;
      st.previous = st.current;  // the origin restarted: keep its last life's window
      st.current = SeenWindow{};
      st.current.incarnation = b.incarnation;
      w = &st.current;
    } else if (b.incarnation == st.previous.incarnation) {
      w = &st.previous;
    } else if (b.incarnation > st.previous.incarnation) {
      // A life between the two we track, heard of late: it replaces the older one.
      if (!create) return MergeResult::kApplied;
      st.previous = SeenWindow{};
      st.previous.incarnation = b.incarnation;
      w = &st.previous;
    } else {
      return MergeResult::kStaleIncarnation;
    }
    if (w->contains(b.seq) || b.seq == 0) return MergeResult::kDuplicate;
    *window = w;
    return MergeResult::kApplied;
  }

  void count(MergeResult r) {
    switch (r) {
      case MergeResult::kDuplicate:
        ++stats_.duplicates;
        break;
      case MergeResult::kStaleIncarnation:
        ++stats_.stale;
        break;
      case MergeResult::kTooManyOrigins:
        ++stats_.origin_overflow;
        break;
      case MergeResult::kSelf:
        ++stats_.self_conflicts;
        break;
      case MergeResult::kApplied:
        break;
    }
  }

  void retain(const BatchPtr& batch, MonoNanos now) {
    const size_t bytes = batch_bytes(*batch);
    retained_.push_back({batch, now, bytes, epoch_});
    retained_bytes_ += bytes;
    while (retained_bytes_ > options_.max_retained_bytes && retained_.size() > 1) drop_oldest();
  }

  void drop_oldest() {
    retained_bytes_ -= retained_.front().bytes;
    retained_.pop_front();
  }

  NodeId self_;
  uint64_t incarnation_;
  LedgerOptions options_;
  uint64_t last_seq_ = 0;
  NodeId relay_id_;  // relay_origin(self_)
  uint64_t last_relay_seq_ = 0;
  uint64_t epoch_ = 0;
  IdMap<OriginState> origins_;
  std::deque<Retained> retained_;
  size_t retained_bytes_ = 0;
  LedgerStats stats_;
};

Ledger::Ledger(NodeId self, uint64_t incarnation, LedgerOptions options)
    : impl_(std::make_unique<Impl>(std::move(self), incarnation, options)) {}
Ledger::~Ledger() = default;
Ledger::Ledger(Ledger&&) noexcept = default;
Ledger& Ledger::operator=(Ledger&&) noexcept = default;

const NodeId& Ledger::self() const { return impl_->self(); }
uint64_t Ledger::incarnation() const { return impl_->incarnation(); }
uint64_t Ledger::last_seq() const { return impl_->last_seq(); }
uint64_t Ledger::last_relay_seq() const { return impl_->last_relay_seq(); }
BatchPtr Ledger::seal_relay(std::vector<ConsumptionEntry> entries, MonoNanos now_ns, std::vector<ResetMark> resets) {
  return impl_->seal_relay(std::move(entries), now_ns, std::move(resets));
}
BatchPtr Ledger::seal_counts(LeaseCounts counts, MonoNanos now_ns) {
  return impl_->seal_counts(std::move(counts), now_ns);
}

BatchPtr Ledger::seal_top(TopUnit unit, MonoNanos now_ns) { return impl_->seal_top(std::move(unit), now_ns); }
BatchPtr Ledger::seal(std::vector<ConsumptionEntry> entries, MonoNanos now_ns, std::vector<ResetMark> resets) {
  return impl_->seal(std::move(entries), now_ns, std::move(resets));
}
MergeResult Ledger::merge(const BatchPtr& batch, KeyTable& table, MonoNanos now_ns, ResetFilter* resets) {
  return impl_->merge(batch, table, now_ns, resets);
}
Digest Ledger::digest() const { return impl_->digest({}); }
Digest Ledger::own_positions() const { return impl_->own_positions(); }
void Ledger::restore(const Digest& positions) { impl_->restore(positions); }
Digest Ledger::digest(const OriginFilter& include) const { return impl_->digest(include); }
std::vector<BatchPtr> Ledger::missing_for(const Digest& peer, const NodeId& from, const std::optional<NodeId>& until,
                                          const OriginFilter& include) const {
  return impl_->missing_for(peer, from, until, include);
}
void Ledger::expire(MonoNanos now_ns) { impl_->expire(now_ns); }
bool Ledger::windows_of(std::string_view origin, OriginDigest* out) const { return impl_->windows_of(origin, out); }
void Ledger::forget_origin(const NodeId& origin) { impl_->forget_origin(origin); }
LedgerStats Ledger::stats() const { return impl_->stats(); }
void Ledger::start_incarnation(uint64_t incarnation) { impl_->start_incarnation(incarnation); }
void Ledger::start_epoch() { impl_->start_epoch(); }

}  // namespace tollgate
