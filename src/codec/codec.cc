#include "codec/codec.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "mac.h"
#include "tollgate/v1/gossip.pb.h"

namespace tollgate {
namespace {

namespace pb = ::tollgate::v1;
using codec_internal::envelope_mac;
using codec_internal::envelope_mac_matches;
using codec_internal::kMacBytes;

// Size arithmetic below assumes one-byte tags, i.e. field numbers below 16.
static_assert(pb::Gossip::kSyncPageFieldNumber < 16 && pb::Gossip::kLeavingFieldNumber < 16 &&
              pb::Envelope::kMacFieldNumber < 16 && pb::Batch::kRefundsFieldNumber < 16 &&
              pb::Member::kLeftFieldNumber < 16 && pb::Digest::kEndsBeforeFieldNumber < 16 &&
              pb::OriginDigest::kPreviousFieldNumber < 16 && pb::Batch::kResetsFieldNumber < 16 &&
              pb::Entry::kEpochFieldNumber < 16 && pb::Batch::kCountsFieldNumber < 16);

size_t varint_bytes(uint64_t v) { return google::protobuf::io::CodedOutputStream::VarintSize64(v); }

// A length-delimited field (bytes or message) with a `body`-byte body, one-byte tag.
size_t field_bytes(size_t body) { return 1 + varint_bytes(body) + body; }

// A varint field as proto3 writes it: left out when zero.
size_t varint_field_bytes(uint64_t v) { return v == 0 ? 0 : 1 + varint_bytes(v); }

// A bytes field as proto3 writes it: left out when empty.
size_t bytes_field_bytes(size_t len) { return len == 0 ? 0 : field_bytes(len); }

bool valid_id(std::string_view id) { return !id.empty() && id.size() <= kMaxNodeIdBytes; }

// tokens < 0: a refund (on the wire, in Batch.refunds with the opposite sign).
bool valid_entry(const ConsumptionEntry& e) {
  return e.key.size() <= kMaxKeyBytes && e.tokens != 0 && e.tokens != std::numeric_limits<int64_t>::min();
}

uint64_t magnitude(int64_t tokens) { return tokens < 0 ? uint64_t(-tokens) : uint64_t(tokens); }

bool valid_reset(const ResetMark& r) { return r.key.size() <= kMaxKeyBytes && r.epoch >= 1; }

bool valid_counts(const LeaseCounts& c) {
  return c.from.size() <= kMaxKeyBytes && c.until.size() <= kMaxKeyBytes &&
         std::all_of(c.entries.begin(), c.entries.end(), [](const InflightEntry& e) {
           return !e.key.empty() && e.key.size() <= kMaxKeyBytes && e.count >= 0 && e.count <= kMaxLeaseCount;
         });
}

bool valid_top(const TopUnit& t) {
  if (t.rule.empty() || t.rule.size() > kMaxKeyBytes || t.metric > 1 || t.entries.size() > kMaxTopEntries) return false;
  std::unordered_set<std::string_view> keys;
  for (size_t i = 0; i < t.entries.size(); ++i) {
    const TopEntry& e = t.entries[i];
    if (e.key.empty() || e.key.size() > kMaxKeyBytes || e.error > e.count) return false;
    if (i > 0 && e.count > t.entries[i - 1].count) return false;
    if (!keys.insert(e.key).second) return false;
  }
  return true;
}

// Entries a batch puts in a message, for kMaxEntriesPerMessage.
size_t batch_entries(const Batch& b) {
  return b.entries.size() + b.resets.size() + (b.counts ? b.counts->entries.size() : 0) +
         (b.top ? b.top->entries.size() : 0);
}

bool valid_batch(const Batch& b) {
  const bool alone = b.entries.empty() && b.resets.empty();
  return valid_id(b.origin) && b.seq >= 1 && std::all_of(b.entries.begin(), b.entries.end(), valid_entry) &&
         std::all_of(b.resets.begin(), b.resets.end(), valid_reset) &&
         (!b.counts || (alone && !b.top && valid_counts(*b.counts))) && (!b.top || (alone && valid_top(*b.top)));
}

bool valid_member(const MemberRecord& m) { return valid_id(m.id) && m.address.size() <= kMaxAddressBytes; }

// --- C++ -> protobuf ----------------------------------------------------------------------------

void to_pb(const ResetMark& r, pb::Reset* out) {
  out->set_key(r.key);
  out->set_epoch(r.epoch);
}

void to_pb(const Batch& b, pb::Batch* out) {
  out->set_origin(b.origin);
  out->set_incarnation(b.incarnation);
  out->set_seq(b.seq);
  out->mutable_entries()->Reserve(static_cast<int>(b.entries.size()));
  for (const ConsumptionEntry& e : b.entries) {
    pb::Entry* entry = e.tokens > 0 ? out->add_entries() : out->add_refunds();
    entry->set_key(e.key);
    entry->set_tokens(int64_t(magnitude(e.tokens)));
    entry->set_epoch(e.epoch);
  }
  for (const ResetMark& r : b.resets) to_pb(r, out->add_resets());
  if (b.counts) {
    pb::LeaseCounts* c = out->mutable_counts();
    for (const InflightEntry& e : b.counts->entries) {
      pb::Inflight* i = c->add_entries();
      i->set_key(e.key);
      i->set_count(uint64_t(e.count));
    }
    c->set_refresh(b.counts->refresh);
    c->set_from(b.counts->from);
    c->set_until(b.counts->until);
  }
  if (b.top) {
    pb::TopUnit* t = out->mutable_top();
    t->set_rule(b.top->rule);
    t->set_metric(b.top->metric);
    t->set_total(b.top->total);
    t->set_threshold(b.top->threshold);
    t->set_ttl_ms(b.top->ttl_ms);
    for (const TopEntry& e : b.top->entries) {
      pb::TopKey* k = t->add_entries();
      k->set_key(e.key);
      k->set_count(e.count);
      k->set_error(e.error);
    }
  }
}

void to_pb(const MemberRecord& m, pb::Member* out) {
  out->set_id(m.id);
  out->set_address(m.address);
  out->set_incarnation(m.incarnation);
  out->set_heartbeat(m.heartbeat);
  out->set_left(m.left);
}

// Trailing zero words of the bitmap are left out: most windows have nothing above the
// watermark, and a digest of a thousand origins must fit in few datagrams.
void to_pb(const SeenWindow& w, pb::Window* out) {
  out->set_incarnation(w.incarnation);
  out->set_watermark(w.watermark);
  size_t words = w.above.size();
  while (words > 0 && w.above[words - 1] == 0) --words;
  for (size_t i = 0; i < words; ++i) out->add_above(w.above[i]);
}

void to_pb(const OriginDigest& o, pb::OriginDigest* out) {
  out->set_origin(o.origin);
  // An absent window reads as SeenWindow{}, so an empty one need not be sent (a node that never
  // restarted has no previous window).
  if (o.current != SeenWindow{}) to_pb(o.current, out->mutable_current());
  if (o.previous != SeenWindow{}) to_pb(o.previous, out->mutable_previous());
}

void to_pb(const SyncRequest& r, pb::SyncRequest* out) {
  out->set_session(r.session);
  for (uint32_t p : r.pages) out->add_pages(p);
}

void to_pb(const SyncPage& page, pb::SyncPage* out) {
  out->set_session(page.session);
  out->set_page(page.page);
  out->set_pages(page.pages);
  out->set_starting(page.starting);
  for (const OriginDigest& o : page.positions) to_pb(o, out->add_positions());
  for (const auto& [key, microtokens] : page.balances) {
    pb::Balance* b = out->add_balances();
    b->set_key(key);
    b->set_microtokens(microtokens);
  }
  for (const ResetMark& r : page.resets) to_pb(r, out->add_resets());
}

// --- protobuf -> C++, with the content rules of gossip.proto -----------------------------------
// Each returns false when the content breaks a rule.

bool from_pb(const pb::Window& w, SeenWindow* out) {
  if (static_cast<size_t>(w.above_size()) > out->above.size()) return false;
  out->incarnation = w.incarnation();
  out->watermark = w.watermark();
  for (int i = 0; i < w.above_size(); ++i) out->above[static_cast<size_t>(i)] = w.above(i);
  return true;
}

bool from_pb(const pb::Reset& r, ResetMark* out) {
  if (r.key().size() > kMaxKeyBytes || r.epoch() == 0) return false;
  *out = ResetMark{r.key(), r.epoch()};
  return true;
}

bool from_pb(const pb::Batch& b, BatchPtr* out) {
  Batch batch;
  batch.origin = b.origin();
  batch.incarnation = b.incarnation();
  batch.seq = b.seq();
  batch.entries.reserve(static_cast<size_t>(b.entries_size() + b.refunds_size()));
  for (const pb::Entry& e : b.entries()) {
    if (e.tokens() <= 0) return false;
    batch.entries.push_back({e.key(), e.tokens(), e.epoch()});
  }
  for (const pb::Entry& e : b.refunds()) {
    if (e.tokens() <= 0) return false;
    batch.entries.push_back({e.key(), -e.tokens(), e.epoch()});
  }
  batch.resets.resize(static_cast<size_t>(b.resets_size()));
  for (int i = 0; i < b.resets_size(); ++i) {
    if (!from_pb(b.resets(i), &batch.resets[static_cast<size_t>(i)])) return false;
  }
  if (b.has_counts()) {
    LeaseCounts counts;
    counts.entries.reserve(static_cast<size_t>(b.counts().entries_size()));
    for (const pb::Inflight& e : b.counts().entries()) {
      if (e.count() > uint64_t(kMaxLeaseCount)) return false;
      counts.entries.push_back({e.key(), int64_t(e.count())});
    }
    counts.refresh = b.counts().refresh();
    counts.from = b.counts().from();
    counts.until = b.counts().until();
    batch.counts = std::make_shared<const LeaseCounts>(std::move(counts));
  }
  if (b.has_top()) {
    const pb::TopUnit& t = b.top();
    if (t.entries_size() > int(kMaxTopEntries)) return false;
    TopUnit unit{t.rule(), t.metric(), t.total(), t.threshold(), t.ttl_ms(), {}};
    unit.entries.reserve(static_cast<size_t>(t.entries_size()));
    for (const pb::TopKey& k : t.entries()) unit.entries.push_back({k.key(), k.count(), k.error()});
    batch.top = std::make_shared<const TopUnit>(std::move(unit));
  }
  if (!valid_batch(batch)) return false;
  *out = std::make_shared<const Batch>(std::move(batch));
  return true;
}

bool from_pb(const pb::Member& m, MemberRecord* out) {
  *out = MemberRecord{m.id(), m.address(), m.incarnation(), m.heartbeat(), m.left()};
  return valid_member(*out);
}

bool from_pb(const pb::Digest& d, Digest* out, DigestRange* range) {
  out->origins.reserve(static_cast<size_t>(d.origins_size()));
  for (const pb::OriginDigest& o : d.origins()) {
    OriginDigest origin;
    origin.origin = o.origin();
    if (!valid_id(origin.origin)) return false;
    // Strictly increasing: no origin twice, and the range of a part is well defined.
    if (!out->origins.empty() && !(out->origins.back().origin < origin.origin)) return false;
    if (!from_pb(o.current(), &origin.current) || !from_pb(o.previous(), &origin.previous)) return false;
    out->origins.push_back(std::move(origin));
  }
  range->from.clear();
  range->until.reset();
  if (d.starts_at_first_origin()) {
    if (out->origins.empty()) return false;
    range->from = out->origins.front().origin;
  }
  if (d.has_ends_before()) {
    if (!valid_id(d.ends_before())) return false;
    if (!out->origins.empty() && !(out->origins.back().origin < d.ends_before())) return false;
    if (!(range->from < d.ends_before())) return false;
    range->until = d.ends_before();
  }
  return true;
}

bool from_pb(const pb::SyncRequest& r, SyncRequest* out) {
  if (r.session() == 0 || static_cast<size_t>(r.pages_size()) > kMaxSyncPagesPerRequest) return false;
  out->session = r.session();
  out->pages.assign(r.pages().begin(), r.pages().end());
  return true;
}

bool from_pb(const pb::SyncPage& p, SyncPagePtr* out) {
  if (p.session() == 0) return false;
  if (p.pages() == 0 ? (p.page() != 0 || p.positions_size() + p.balances_size() + p.resets_size() > 0)
                     : (p.page() >= p.pages() || p.starting())) {
    return false;
  }
  auto page = std::make_shared<SyncPage>();
  page->session = p.session();
  page->page = p.page();
  page->pages = p.pages();
  page->starting = p.starting();
  page->positions.resize(static_cast<size_t>(p.positions_size()));
  for (int i = 0; i < p.positions_size(); ++i) {
    const pb::OriginDigest& o = p.positions(i);
    OriginDigest& d = page->positions[static_cast<size_t>(i)];
    d.origin = o.origin();
    if (!valid_id(d.origin) || !from_pb(o.current(), &d.current) || !from_pb(o.previous(), &d.previous)) return false;
  }
  page->balances.reserve(static_cast<size_t>(p.balances_size()));
  for (const pb::Balance& b : p.balances()) {
    if (b.key().size() > kMaxKeyBytes) return false;
    page->balances.emplace_back(b.key(), b.microtokens());
  }
  page->resets.resize(static_cast<size_t>(p.resets_size()));
  for (int i = 0; i < p.resets_size(); ++i) {
    if (!from_pb(p.resets(i), &page->resets[static_cast<size_t>(i)])) return false;
  }
  *out = std::move(page);
  return true;
}

// --- Envelopes ----------------------------------------------------------------------------------

// Bytes of an envelope around a `payload`-byte payload.
size_t envelope_bytes(size_t payload, bool signed_message) {
  return varint_field_bytes(kProtocolVersionMajor) + varint_field_bytes(kProtocolVersionMinor) +
         bytes_field_bytes(payload) + (signed_message ? field_bytes(kMacBytes) : 0);
}

// The largest payload whose envelope fits in max_bytes.
size_t payload_budget(size_t max_bytes, bool signed_message) {
  const size_t fixed = envelope_bytes(0, signed_message);
  size_t budget = max_bytes - fixed - 1 - varint_bytes(max_bytes);  // at worst the length varint
  while (envelope_bytes(budget + 1, signed_message) <= max_bytes) ++budget;
  return budget;
}

std::string seal_envelope(const pb::Gossip& gossip, const ClusterKeys& keys) {
  pb::Envelope envelope;
  envelope.set_version_major(kProtocolVersionMajor);
  envelope.set_version_minor(kProtocolVersionMinor);
  envelope.set_payload(gossip.SerializeAsString());
  if (!keys.empty()) {
    const auto mac = envelope_mac(keys.signing_key(), kProtocolVersionMajor, kProtocolVersionMinor, envelope.payload());
    envelope.set_mac(mac.data(), mac.size());
  }
  return envelope.SerializeAsString();
}

// The header fields every part repeats. `reserve` sets both flags, for the size the header may
// take in any part.
// The header reserves message_seq at 7 varint bytes and sent_at_s at 5, not 10 each, so that the
// largest items still fit the smallest datagram: 2^49 messages of one life (17 years at a
// million a second) and 2^35 seconds (the year 3058) are never reached; larger values are
// clamped (Node saturates its count there).

pb::Gossip header_of(const GossipMessage& m, bool reserve, uint64_t sent_at_s) {
  pb::Gossip header;
  header.set_sender(m.sender);
  header.set_sender_incarnation(m.sender_incarnation);
  header.set_sender_address(m.sender_address);
  header.set_leaving(m.leaving || reserve);
  header.set_digest_reply_wanted(reserve);
  header.set_message_seq(reserve ? kMaxMessageSeq : std::min(m.message_seq, kMaxMessageSeq));
  header.set_sent_at_s(reserve ? kMaxSentAtSeconds : std::min(sent_at_s, kMaxSentAtSeconds));
  header.set_relay_groups(reserve ? kMaxRelayGroups : std::min(m.relay_groups, kMaxRelayGroups));
  header.set_relay(m.relay || reserve);
  // A relay stint (both 0 in other messages) is reserved at 5 varint bytes a seq. It goes to a
  // contact with batches, never with a digest: a message with both is sent without it, so the
  // largest digest origin still fits the smallest datagram beside the largest header.
  const bool stint = !m.digest && (m.relay_since != 0 || m.relay_through != 0);
  if (stint) {
    header.set_relay_since(reserve ? kMaxStintSeq : std::min(m.relay_since, kMaxStintSeq));
    header.set_relay_through(reserve ? kMaxStintSeq : std::min(m.relay_through, kMaxStintSeq));
  }
  header.set_row_wanted(m.row_wanted);  // (only in messages that carry nothing else)
  return header;
}

// The largest header any valid sender can have.
size_t worst_header_bytes() {
  GossipMessage m;
  m.sender.assign(kMaxSenderIdBytes, 'x');
  m.sender_incarnation = std::numeric_limits<uint64_t>::max();
  m.sender_address.assign(kMaxAddressBytes, 'x');
  m.relay_through = 1;  // a contact's batches travel with the stint
  return header_of(m, /*reserve=*/true, 0).ByteSizeLong();
}

// Splits a message into Gossip parts whose payloads each fit in `budget` bytes and the
// per-message caps, in order: batches, members, then the digest by origin ranges.
class Packer {
 public:
  Packer(const GossipMessage& message, size_t budget, EncodeStats* stats, uint64_t sent_at_s)
      : message_(message), budget_(budget), stats_(stats), sent_at_s_(sent_at_s) {
    header_bytes_ = header_of(message, /*reserve=*/true, 0).ByteSizeLong();
    start_part();
  }

  std::vector<pb::Gossip> pack() {
    for (const BatchPtr& batch : message_.batches) add_batch(batch);
    for (const MemberRecord& member : message_.members) add_member(member);
    size_t reply_part = 0;  // the part that asks for a digest back
    if (message_.digest) reply_part = add_digest(*message_.digest);
    if (message_.sync_request) {
      pb::SyncRequest r;
      to_pb(*message_.sync_request, &r);
      add_alone(field_bytes(r.ByteSizeLong()), [&] { *current_.mutable_sync_request() = std::move(r); });
    }
    if (message_.sync_page) {
      pb::SyncPage p;
      to_pb(*message_.sync_page, &p);
      add_alone(field_bytes(p.ByteSizeLong()), [&] { *current_.mutable_sync_page() = std::move(p); });
    }
    if (parts_.empty() || used_ > header_bytes_) finish_part();
    if (message_.digest_reply_wanted) parts_[reply_part].set_digest_reply_wanted(true);
    return std::move(parts_);
  }

 private:
  void start_part() {
    current_ = header_of(message_, /*reserve=*/false, sent_at_s_);
    used_ = header_bytes_;
    batches_ = entries_ = members_ = 0;
  }
  void finish_part() {
    parts_.push_back(std::move(current_));
    start_part();
  }
  bool fresh() const { return used_ == header_bytes_; }

  // A field that is never split (a sync request or page): into this part if it fits, else the
  // next; left out and counted if it would not fit even alone (split_transfer sizes pages so
  // that it always does).
  template <typename Put>
  void add_alone(size_t bytes, Put put) {
    if (header_bytes_ + bytes > budget_) {
      ++stats_->dropped_sync;
      return;
    }
    if (used_ + bytes > budget_) finish_part();
    put();
    used_ += bytes;
  }

  void add_batch(const BatchPtr& batch) {
    if (!batch || !valid_batch(*batch) || batch_entries(*batch) > kMaxEntriesPerMessage) {
      ++stats_->dropped_batches;
      return;
    }
    pb::Batch b;
    to_pb(*batch, &b);
    const size_t bytes = field_bytes(b.ByteSizeLong());
    if (header_bytes_ + bytes > budget_) {  // would not fit even alone: see max_batch_bytes_for
      ++stats_->dropped_batches;
      return;
    }
    const size_t n = batch_entries(*batch);
    if (used_ + bytes > budget_ || batches_ == kMaxBatchesPerMessage || entries_ + n > kMaxEntriesPerMessage) {
      finish_part();
    }
    *current_.add_batches() = std::move(b);
    used_ += bytes;
    ++batches_;
    entries_ += n;
  }

  void add_member(const MemberRecord& member) {
    if (!valid_member(member)) {
      ++stats_->dropped_members;
      return;
    }
    pb::Member m;
    to_pb(member, &m);
    const size_t bytes = field_bytes(m.ByteSizeLong());
    if (used_ + bytes > budget_ || members_ == kMaxMembersPerMessage) finish_part();
    *current_.add_members() = std::move(m);
    used_ += bytes;
    ++members_;
  }

  // Adds the digest, split by origin ranges over as many parts as it needs. Returns the index
  // of the part that holds its start.
  size_t add_digest(const Digest& digest) {
    std::vector<const OriginDigest*> sorted;
    sorted.reserve(digest.origins.size());
    for (const OriginDigest& o : digest.origins) {
      if (valid_id(o.origin)) {
        sorted.push_back(&o);
      } else {
        ++stats_->dropped_digest_origins;
      }
    }
    std::sort(sorted.begin(), sorted.end(),
              [](const OriginDigest* a, const OriginDigest* b) { return a->origin < b->origin; });
    const auto repeated = std::unique(sorted.begin(), sorted.end(), [](const OriginDigest* a, const OriginDigest* b) {
      return a->origin == b->origin;
    });
    stats_->dropped_digest_origins += static_cast<size_t>(sorted.end() - repeated);
    sorted.erase(repeated, sorted.end());

    std::vector<pb::OriginDigest> origins(sorted.size());
    std::vector<size_t> origin_bytes(sorted.size());
    for (size_t i = 0; i < sorted.size(); ++i) {
      to_pb(*sorted[i], &origins[i]);
      origin_bytes[i] = field_bytes(origins[i].ByteSizeLong());
    }

    const size_t n = sorted.size();
    std::optional<size_t> start_part;  // where the digest's first part went
    size_t i = 0;
    for (;;) {
      pb::Digest* part = current_.mutable_digest();
      size_t body = 0;
      if (start_part) {
        part->set_starts_at_first_origin(true);
        body += 2;
      }
      size_t count = 0;
      for (; i < n && count < kMaxDigestOriginsPerMessage; ++i, ++count) {
        // Room for this origin, and for the end of the range should the part end right after it.
        const size_t end_bytes = i + 1 < n ? field_bytes(sorted[i + 1]->origin.size()) : 0;
        if (used_ + field_bytes(body + origin_bytes[i] + end_bytes) > budget_) break;
        *part->add_origins() = std::move(origins[i]);
        body += origin_bytes[i];
      }
      if (count == 0 && (i < n || used_ + field_bytes(body) > budget_)) {
        // Not even one origin (or an empty digest) fits beside what this part holds already.
        current_.clear_digest();
        if (!fresh()) {
          finish_part();
          continue;
        }
        // Alone in a part and still too large: cannot happen for a valid origin at or above
        // kMinDatagramBytes. Leave it out rather than loop; it falls into no part's range.
        ++stats_->dropped_digest_origins;
        ++i;
        if (i < n) continue;
        if (!start_part) {  // the digest must still be there, if empty
          current_.mutable_digest();
          used_ += field_bytes(0);
          start_part = parts_.size();
        }
        return *start_part;
      }
      if (i < n) {
        part->set_ends_before(sorted[i]->origin);
        body += field_bytes(sorted[i]->origin.size());
      }
      used_ += field_bytes(body);
      if (!start_part) start_part = parts_.size();
      if (i == n) return *start_part;
      finish_part();
    }
  }

  const GossipMessage& message_;
  const size_t budget_;
  EncodeStats* stats_;
  size_t header_bytes_ = 0;
  std::vector<pb::Gossip> parts_;
  pb::Gossip current_;
  size_t used_ = 0;  // payload bytes of current_, its header counted at the reserved size
  size_t batches_ = 0, entries_ = 0, members_ = 0;
  uint64_t sent_at_s_;
};

std::vector<std::string> encode_envelopes(const GossipMessage& message, const ClusterKeys& keys, size_t max_bytes,
                                          EncodeStats* stats, uint64_t sent_at_s, const char* what) {
  if (max_bytes < kMinDatagramBytes || max_bytes > kMaxMessageBytes) {
    throw std::invalid_argument(std::string(what) + " of " + std::to_string(max_bytes) + " bytes: must be between " +
                                std::to_string(kMinDatagramBytes) + " and " + std::to_string(kMaxMessageBytes));
  }
  if (!valid_id(message.sender) || message.sender.size() > kMaxSenderIdBytes) {
    throw std::invalid_argument("sender id must be 1 to " + std::to_string(kMaxSenderIdBytes) + " bytes");
  }
  if (message.sender_address.size() > kMaxAddressBytes) {
    throw std::invalid_argument("sender address must be at most " + std::to_string(kMaxAddressBytes) + " bytes");
  }
  EncodeStats ignored;
  const bool signed_message = !keys.empty();
  const size_t budget = payload_budget(max_bytes, signed_message);
  std::vector<pb::Gossip> parts = Packer(message, budget, stats ? stats : &ignored, sent_at_s).pack();

  std::vector<std::string> out;
  out.reserve(parts.size());
  for (const pb::Gossip& part : parts) {
    out.push_back(seal_envelope(part, keys));
    // The packer's arithmetic is exact or errs on the safe side; this guards the contract.
    if (out.back().size() > max_bytes) throw std::logic_error("codec: an encoded part exceeds its size limit");
  }
  return out;
}

DecodeResult fail(DecodeError e) {
  DecodeResult r;
  r.error = e;
  return r;
}

}  // namespace

const char* decode_error_name(DecodeError e) {
  switch (e) {
    case DecodeError::kNone:
      return "none";
    case DecodeError::kMalformed:
      return "malformed";
    case DecodeError::kUnknownVersion:
      return "unknown_version";
    case DecodeError::kBadMac:
      return "bad_mac";
    case DecodeError::kMissingMac:
      return "missing_mac";
    case DecodeError::kTooLarge:
      return "too_large";
    case DecodeError::kInvalidContent:
      return "invalid_content";
  }
  return "unknown";
}

std::vector<std::string> encode_datagrams(const GossipMessage& message, const ClusterKeys& keys,
                                          size_t max_datagram_bytes, EncodeStats* stats, uint64_t sent_at_s) {
  return encode_envelopes(message, keys, max_datagram_bytes, stats, sent_at_s, "max datagram");
}

std::vector<std::string> encode_frames(const GossipMessage& message, const ClusterKeys& keys, size_t max_frame_bytes,
                                       EncodeStats* stats, uint64_t sent_at_s) {
  std::vector<std::string> frames = encode_envelopes(message, keys, max_frame_bytes, stats, sent_at_s, "max frame");
  for (std::string& frame : frames) {
    char prefix[kFrameHeaderBytes];
    store_be32(static_cast<uint32_t>(frame.size()), prefix);
    frame.insert(0, prefix, sizeof prefix);
  }
  return frames;
}

FrameReader gossip_frame_reader(size_t max_frame_bytes) {
  if (max_frame_bytes > kMaxMessageBytes) {
    throw std::invalid_argument("max frame of " + std::to_string(max_frame_bytes) + " bytes: at most " +
                                std::to_string(kMaxMessageBytes));
  }
  return FrameReader(static_cast<uint32_t>(max_frame_bytes));
}

DecodeResult decode(std::string_view bytes, const ClusterKeys& keys) {
  if (bytes.size() > kMaxMessageBytes) return fail(DecodeError::kTooLarge);
  pb::Envelope envelope;
  if (!envelope.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return fail(DecodeError::kMalformed);
  if (envelope.version_major() == 0) return fail(DecodeError::kMalformed);  // not one of ours
  if (envelope.version_major() != kProtocolVersionMajor) return fail(DecodeError::kUnknownVersion);

  DecodeResult result;
  if (!keys.empty()) {
    if (envelope.mac().empty()) return fail(DecodeError::kMissingMac);
    if (!envelope_mac_matches(keys, envelope.version_major(), envelope.version_minor(), envelope.payload(),
                              envelope.mac())) {
      return fail(DecodeError::kBadMac);
    }
    result.authenticated = true;
  }

  pb::Gossip gossip;
  if (!gossip.ParseFromString(envelope.payload())) return fail(DecodeError::kMalformed);

  size_t entries = 0;
  for (const pb::Batch& b : gossip.batches()) {
    entries += static_cast<size_t>(b.entries_size() + b.refunds_size() + b.resets_size() +
                                   (b.has_counts() ? b.counts().entries_size() : 0) +
                                   (b.has_top() ? b.top().entries_size() : 0));
  }
  if (static_cast<size_t>(gossip.batches_size()) > kMaxBatchesPerMessage || entries > kMaxEntriesPerMessage ||
      static_cast<size_t>(gossip.members_size()) > kMaxMembersPerMessage ||
      static_cast<size_t>(gossip.digest().origins_size()) > kMaxDigestOriginsPerMessage ||
      static_cast<size_t>(gossip.sync_page().positions_size()) > kMaxDigestOriginsPerMessage ||
      static_cast<size_t>(gossip.sync_page().balances_size() + gossip.sync_page().resets_size()) >
          kMaxEntriesPerMessage) {
    return fail(DecodeError::kTooLarge);
  }

  GossipMessage m;
  m.sender = gossip.sender();
  m.sender_incarnation = gossip.sender_incarnation();
  m.sender_address = gossip.sender_address();
  m.digest_reply_wanted = gossip.digest_reply_wanted();
  m.leaving = gossip.leaving();
  m.message_seq = gossip.message_seq();
  m.sent_at_s = gossip.sent_at_s();
  m.relay_groups = gossip.relay_groups();
  m.relay = gossip.relay();
  m.relay_since = gossip.relay_since();
  m.relay_through = gossip.relay_through();
  m.row_wanted = gossip.row_wanted();
  if (!valid_id(m.sender) || m.sender.size() > kMaxSenderIdBytes || m.sender_address.size() > kMaxAddressBytes ||
      m.relay_groups > kMaxRelayGroups || (!m.row_wanted.empty() && !valid_id(m.row_wanted))) {
    return fail(DecodeError::kInvalidContent);
  }

  m.batches.resize(static_cast<size_t>(gossip.batches_size()));
  for (int i = 0; i < gossip.batches_size(); ++i) {
    if (!from_pb(gossip.batches(i), &m.batches[static_cast<size_t>(i)])) return fail(DecodeError::kInvalidContent);
  }
  m.members.resize(static_cast<size_t>(gossip.members_size()));
  for (int i = 0; i < gossip.members_size(); ++i) {
    if (!from_pb(gossip.members(i), &m.members[static_cast<size_t>(i)])) return fail(DecodeError::kInvalidContent);
  }
  if (gossip.has_digest()) {
    m.digest.emplace();
    if (!from_pb(gossip.digest(), &*m.digest, &result.digest_range)) return fail(DecodeError::kInvalidContent);
  }
  if (gossip.has_sync_request()) {
    m.sync_request.emplace();
    if (!from_pb(gossip.sync_request(), &*m.sync_request)) return fail(DecodeError::kInvalidContent);
  }
  if (gossip.has_sync_page() && !from_pb(gossip.sync_page(), &m.sync_page)) return fail(DecodeError::kInvalidContent);
  result.message = std::move(m);
  return result;
}

size_t encoded_batch_bytes(const Batch& batch) {
  pb::Batch b;
  to_pb(batch, &b);
  return field_bytes(b.ByteSizeLong());
}

size_t max_batch_bytes_for(size_t max_datagram_bytes) {
  if (max_datagram_bytes < kMinDatagramBytes) {
    throw std::invalid_argument("max datagram of " + std::to_string(max_datagram_bytes) + " bytes: at least " +
                                std::to_string(kMinDatagramBytes));
  }
  return payload_budget(max_datagram_bytes, /*signed_message=*/true) - worst_header_bytes();
}

std::vector<SyncPage> split_transfer(std::vector<OriginDigest> positions,
                                     std::vector<std::pair<std::string, int64_t>> balances,
                                     std::vector<ResetMark> resets, size_t max_datagram_bytes) {
  const size_t budget = max_batch_bytes_for(max_datagram_bytes);  // a field next to any header
  // A page's body: session, then page and pages at their largest.
  const size_t base = 1 + 8 + 2 * varint_field_bytes(std::numeric_limits<uint32_t>::max());
  std::vector<SyncPage> pages;
  size_t body = base;
  auto room_for = [&](size_t bytes) {
    if (pages.empty() || (body > base && field_bytes(body + bytes) > budget)) {
      pages.emplace_back();
      body = base;
    }
    body += bytes;
  };
  for (OriginDigest& o : positions) {
    if (!valid_id(o.origin)) continue;  // never exported: a ledger holds valid ids only
    pb::OriginDigest d;
    to_pb(o, &d);
    room_for(field_bytes(d.ByteSizeLong()));
    pages.back().positions.push_back(std::move(o));
  }
  for (auto& [key, microtokens] : balances) {
    if (key.size() > kMaxKeyBytes) continue;  // never in a table: its keys are bounded by it
    pb::Balance b;
    b.set_key(key);
    b.set_microtokens(microtokens);
    room_for(field_bytes(b.ByteSizeLong()));
    pages.back().balances.emplace_back(std::move(key), microtokens);
  }
  for (ResetMark& r : resets) {
    if (r.key.size() > kMaxKeyBytes || r.epoch == 0) continue;  // never in a node's epochs
    pb::Reset m;
    to_pb(r, &m);
    room_for(field_bytes(m.ByteSizeLong()));
    pages.back().resets.push_back(std::move(r));
  }
  if (pages.empty()) pages.emplace_back();  // an empty transfer is one empty page
  for (size_t i = 0; i < pages.size(); ++i) {
    pages[i].page = static_cast<uint32_t>(i);
    pages[i].pages = static_cast<uint32_t>(pages.size());
  }
  return pages;
}

std::vector<std::vector<ConsumptionEntry>> split_for_sealing(std::vector<ConsumptionEntry> entries,
                                                             const NodeId& origin, size_t max_batch_bytes) {
  // A batch's body: origin, then incarnation and seq at their largest, then the entries.
  const size_t base = bytes_field_bytes(origin.size()) + 2 * varint_field_bytes(std::numeric_limits<uint64_t>::max());
  std::vector<std::vector<ConsumptionEntry>> runs;
  size_t body = base;
  for (ConsumptionEntry& e : entries) {
    const size_t entry_body =
        bytes_field_bytes(e.key.size()) + varint_field_bytes(magnitude(e.tokens)) + varint_field_bytes(e.epoch);
    const size_t bytes = field_bytes(entry_body);
    if (runs.empty() || (body > base && field_bytes(body + bytes) > max_batch_bytes)) {
      runs.emplace_back();
      body = base;
    }
    runs.back().push_back(std::move(e));
    body += bytes;
  }
  return runs;
}

}  // namespace tollgate
