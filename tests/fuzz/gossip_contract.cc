#include "gossip_contract.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "fuzz_util.h"
#include "mac.h"
#include "tollgate/v1/gossip.pb.h"

namespace tollgate::fuzz {
namespace {

bool valid_id(const std::string& id) { return !id.empty() && id.size() <= kMaxNodeIdBytes; }

bool same_batch(const Batch& a, const Batch& b) {
  auto same_top = [](const Batch& x, const Batch& y) { return !x.top ? !y.top : y.top && *x.top == *y.top; };
  return a.origin == b.origin && a.incarnation == b.incarnation && a.seq == b.seq && a.entries == b.entries &&
         same_top(a, b);
}

bool same_origin(const OriginDigest& a, const OriginDigest& b) {
  return a.origin == b.origin && a.current == b.current && a.previous == b.previous;
}

bool same_origins(const std::vector<OriginDigest>& a, const std::vector<OriginDigest>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same_origin(a[i], b[i])) return false;
  }
  return true;
}

// The content rules of gossip.proto, as decode() enforces them.
void check_content(const DecodeResult& r) {
  const GossipMessage& m = *r.message;
  FUZZ_CHECK(valid_id(m.sender), "accepted an invalid sender id");
  FUZZ_CHECK(m.sender_address.size() <= kMaxAddressBytes, "accepted an over-long sender address");
  FUZZ_CHECK(m.batches.size() <= kMaxBatchesPerMessage, "accepted more batches than the cap");
  size_t entries = 0;
  for (const BatchPtr& b : m.batches) {
    FUZZ_CHECK(b != nullptr, "a decoded batch is null");
    FUZZ_CHECK(valid_id(b->origin), "accepted a batch with an invalid origin");
    FUZZ_CHECK(b->seq >= 1, "accepted a batch with seq 0");
    for (const ConsumptionEntry& e : b->entries) {
      FUZZ_CHECK(e.key.size() <= kMaxKeyBytes, "accepted an over-long key");
      FUZZ_CHECK(e.tokens != 0 && e.tokens != INT64_MIN, "accepted an entry of 0 tokens, or a refund with no opposite");
    }
    entries += b->entries.size();
    if (b->top) {  // a top-K unit (minor 8): alone in its batch, its bounds consistent
      const TopUnit& t = *b->top;
      FUZZ_CHECK(b->entries.empty() && b->resets.empty() && !b->counts, "accepted a top unit beside other content");
      FUZZ_CHECK(!t.rule.empty() && t.rule.size() <= kMaxKeyBytes && t.metric <= 1, "accepted a bad top unit header");
      FUZZ_CHECK(t.entries.size() <= kMaxTopEntries, "accepted more top keys than the cap");
      for (size_t i = 0; i < t.entries.size(); ++i) {
        FUZZ_CHECK(!t.entries[i].key.empty() && t.entries[i].key.size() <= kMaxKeyBytes, "accepted a bad top key");
        FUZZ_CHECK(t.entries[i].error <= t.entries[i].count, "accepted a top key whose error exceeds its count");
        FUZZ_CHECK(i == 0 || t.entries[i].count <= t.entries[i - 1].count, "accepted top keys out of order");
      }
      entries += t.entries.size();
    }
  }
  FUZZ_CHECK(entries <= kMaxEntriesPerMessage, "accepted more entries than the cap");
  FUZZ_CHECK(m.members.size() <= kMaxMembersPerMessage, "accepted more members than the cap");
  for (const MemberRecord& member : m.members) {
    FUZZ_CHECK(valid_id(member.id), "accepted a member with an invalid id");
    FUZZ_CHECK(member.address.size() <= kMaxAddressBytes, "accepted a member with an over-long address");
  }
  if (m.digest) {
    const auto& origins = m.digest->origins;
    FUZZ_CHECK(origins.size() <= kMaxDigestOriginsPerMessage, "accepted more digest origins than the cap");
    for (size_t i = 0; i < origins.size(); ++i) {
      FUZZ_CHECK(valid_id(origins[i].origin), "accepted a digest origin with an invalid id");
      FUZZ_CHECK(i == 0 || origins[i - 1].origin < origins[i].origin, "accepted unsorted or repeated digest origins");
      FUZZ_CHECK(r.digest_range.covers(origins[i].origin), "a digest origin lies outside the digest's range");
    }
    if (r.digest_range.until) {
      FUZZ_CHECK(r.digest_range.from < *r.digest_range.until, "accepted an empty digest range");
    }
  }
}

// The parts of one message, decoded, put back together.
struct Reassembled {
  std::vector<BatchPtr> batches;
  std::vector<MemberRecord> members;
  std::optional<Digest> digest;
  size_t reply_wanted_parts = 0;
};

Reassembled reassemble(const GossipMessage& original, const std::vector<std::string>& parts, const ClusterKeys& keys,
                       size_t max_bytes) {
  Reassembled out;
  std::optional<NodeId> next_from;  // where the next digest part's range must start
  bool digest_ended = false;
  for (const std::string& part : parts) {
    FUZZ_CHECK(part.size() <= max_bytes, "an encoded part exceeds its size limit");
    const DecodeResult r = decode(part, keys);
    FUZZ_CHECK(r.error == DecodeError::kNone, "a re-encoded part does not decode");
    FUZZ_CHECK(r.authenticated == !keys.empty(), "a re-encoded part is not authenticated under its own key");
    const GossipMessage& m = *r.message;
    FUZZ_CHECK(m.sender == original.sender && m.sender_incarnation == original.sender_incarnation &&
                   m.sender_address == original.sender_address && m.leaving == original.leaving &&
                   m.message_seq == std::min(original.message_seq, kMaxMessageSeq) &&
                   m.relay_groups == original.relay_groups && m.relay == original.relay,
               "a re-encoded part lost the sender fields");
    out.batches.insert(out.batches.end(), m.batches.begin(), m.batches.end());
    out.members.insert(out.members.end(), m.members.begin(), m.members.end());
    if (m.digest_reply_wanted) ++out.reply_wanted_parts;
    if (!m.digest) continue;
    // Digest parts come in order and cover contiguous ranges: "" up to the first part's end,
    // each later part from its first origin, the last one to the very end.
    FUZZ_CHECK(!digest_ended, "a digest part after the one that ends the range");
    if (!out.digest) {
      out.digest.emplace();
      FUZZ_CHECK(r.digest_range.from.empty(), "the first digest part does not start at the beginning");
    } else {
      FUZZ_CHECK(next_from && r.digest_range.from == *next_from, "digest parts leave a gap or overlap");
    }
    out.digest->origins.insert(out.digest->origins.end(), m.digest->origins.begin(), m.digest->origins.end());
    if (r.digest_range.until) {
      next_from = r.digest_range.until;
    } else {
      digest_ended = true;
    }
  }
  FUZZ_CHECK(!out.digest || digest_ended, "the digest parts do not reach the end of the range");
  return out;
}

// Encodes the decoded message again at the largest size: nothing may be dropped or changed.
void check_lossless(const GossipMessage& m, const ClusterKeys& keys) {
  EncodeStats stats;
  std::vector<std::string> parts = encode_datagrams(m, keys, kMaxMessageBytes, &stats);
  FUZZ_CHECK(stats.dropped_batches == 0 && stats.dropped_members == 0 && stats.dropped_digest_origins == 0,
             "the encoder dropped content the decoder accepted");
  const Reassembled back = reassemble(m, parts, keys, kMaxMessageBytes);
  FUZZ_CHECK(back.batches.size() == m.batches.size(), "batches lost in a round trip");
  for (size_t i = 0; i < m.batches.size(); ++i) {
    FUZZ_CHECK(same_batch(*back.batches[i], *m.batches[i]), "a batch changed in a round trip");
  }
  FUZZ_CHECK(back.members == m.members, "members changed in a round trip");
  FUZZ_CHECK(back.digest.has_value() == m.digest.has_value(), "the digest appeared or vanished in a round trip");
  if (m.digest) FUZZ_CHECK(same_origins(back.digest->origins, m.digest->origins), "the digest changed in a round trip");
  FUZZ_CHECK(back.reply_wanted_parts == (m.digest_reply_wanted ? 1u : 0u),
             "digest_reply_wanted changed in a round trip");

  // The encoder is deterministic, so what it produced re-encodes to the same bytes.
  GossipMessage again = m;
  again.batches = back.batches;
  again.members = back.members;
  again.digest = back.digest;
  FUZZ_CHECK(encode_datagrams(again, keys, kMaxMessageBytes) == parts, "encoding is not deterministic");
}

// Encodes the decoded message into the smallest datagrams allowed.
void check_small_datagrams(const GossipMessage& m, const ClusterKeys& keys) {
  EncodeStats stats;
  const std::vector<std::string> parts = encode_datagrams(m, keys, kMinDatagramBytes, &stats);
  FUZZ_CHECK(!parts.empty(), "no datagram at all");
  // codec.h: the largest header plus the largest member row or digest origin fits in
  // kMinDatagramBytes, so only batches may be left out.
  FUZZ_CHECK(stats.dropped_members == 0, "a valid member row was dropped at kMinDatagramBytes");
  FUZZ_CHECK(stats.dropped_digest_origins == 0, "a valid digest origin was dropped at kMinDatagramBytes");
  const Reassembled back = reassemble(m, parts, keys, kMinDatagramBytes);

  // Batches: the same order, less those too large for one datagram, and every batch within
  // max_batch_bytes_for() (what a node seals) must travel.
  FUZZ_CHECK(back.batches.size() + stats.dropped_batches == m.batches.size(), "batches neither sent nor counted");
  const size_t fits = max_batch_bytes_for(kMinDatagramBytes);
  size_t j = 0;
  for (const BatchPtr& b : m.batches) {
    if (j < back.batches.size() && same_batch(*back.batches[j], *b)) {
      ++j;
    } else {
      FUZZ_CHECK(encoded_batch_bytes(*b) > fits, "a batch within max_batch_bytes_for() was dropped");
    }
  }
  FUZZ_CHECK(j == back.batches.size(), "the parts hold batches out of order or not in the message");
  FUZZ_CHECK(back.members == m.members, "members changed across datagrams");
  FUZZ_CHECK(back.digest.has_value() == m.digest.has_value(), "the digest appeared or vanished across datagrams");
  if (m.digest)
    FUZZ_CHECK(same_origins(back.digest->origins, m.digest->origins), "the digest changed across datagrams");
  FUZZ_CHECK(back.reply_wanted_parts == (m.digest_reply_wanted ? 1u : 0u),
             "digest_reply_wanted is not on exactly one part");
}

}  // namespace

const ClusterKeys& test_keys() {
  static const ClusterKeys keys({std::string("tollgate fuzz test key, 32 bytes+")});
  return keys;
}

std::string seal_payload(std::string_view payload, const ClusterKeys& keys) {
  ::tollgate::v1::Envelope envelope;
  envelope.set_version_major(kProtocolVersionMajor);
  envelope.set_version_minor(kProtocolVersionMinor);
  envelope.set_payload(payload.data(), payload.size());
  if (!keys.empty()) {
    const auto mac =
        codec_internal::envelope_mac(keys.signing_key(), kProtocolVersionMajor, kProtocolVersionMinor, payload);
    envelope.set_mac(mac.data(), mac.size());
  }
  return envelope.SerializeAsString();
}

std::string payload_of(std::string_view envelope) {
  ::tollgate::v1::Envelope e;
  if (!e.ParseFromArray(envelope.data(), static_cast<int>(envelope.size()))) return {};
  return e.payload();
}

DecodeResult check_decode(std::string_view envelope, const ClusterKeys& keys) {
  DecodeResult r = decode(envelope, keys);
  FUZZ_CHECK(r.message.has_value() == (r.error == DecodeError::kNone), "message set iff no error");
  FUZZ_CHECK(r.authenticated == (r.error == DecodeError::kNone && !keys.empty()),
             "authenticated iff accepted under a key");
  FUZZ_CHECK(std::strcmp(decode_error_name(r.error), "unknown") != 0, "an error without a name");
  if (r.error != DecodeError::kNone) return r;

  check_content(r);
  if (!keys.empty()) {
    const DecodeResult open = decode(envelope, ClusterKeys());
    FUZZ_CHECK(open.error == DecodeError::kNone && !open.authenticated,
               "a keyless node refuses what a keyed one accepts");
    FUZZ_CHECK(open.digest_range == r.digest_range && open.message->members == r.message->members &&
                   open.message->batches.size() == r.message->batches.size(),
               "what is behind the MAC decodes differently without the key");
  }
  check_lossless(*r.message, keys);
  check_small_datagrams(*r.message, keys);
  return r;
}

}  // namespace tollgate::fuzz
