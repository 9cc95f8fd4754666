#include "codec/codec.h"

#include <google/protobuf/unknown_field_set.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "core/key_table.h"
#include "core/ledger.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

using codec_test::batch;
using codec_test::craft;
using codec_test::expect_same_batches;
using codec_test::expect_same_message;
using codec_test::expect_same_origins;
using codec_test::full_message;
using codec_test::key_a;
using codec_test::key_b;
using codec_test::valid_gossip;
using codec_test::window;

// Decodes a datagram that must be accepted.
GossipMessage decode_ok(const std::string& bytes, const ClusterKeys& keys) {
  DecodeResult r = decode(bytes, keys);
  EXPECT_EQ(r.error, DecodeError::kNone) << decode_error_name(r.error);
  EXPECT_TRUE(r.message.has_value());
  return r.message ? *r.message : GossipMessage{};
}

// A message big enough to need many datagrams: batches of several origins, membership rows and
// a digest of `origins` origins, given in an order that is not sorted.
GossipMessage big_message(size_t batches, size_t members, size_t origins) {
  GossipMessage m;
  m.sender = "node-000";
  m.sender_incarnation = 77;
  m.sender_address = "10.1.2.3:7946";
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < batches; ++i) {
    std::vector<ConsumptionEntry> entries;
    const size_t n = 1 + rng() % 20;
    for (size_t k = 0; k < n; ++k) {
      entries.push_back({"tenant:" + std::to_string(rng() % 1000) + ":user:" + std::to_string(k),
                         static_cast<int64_t>(1 + rng() % 100000)});
    }
    m.batches.push_back(batch("node-" + std::to_string(i % 17), 1 + i % 3, 1 + i, std::move(entries)));
  }
  for (size_t i = 0; i < members; ++i) {
    m.members.push_back(
        {"node-" + std::to_string(i), "10.1.2." + std::to_string(i % 250) + ":7946", i, i * 31, i % 5 == 0});
  }
  Digest d;
  for (size_t i = 0; i < origins; ++i) {
    const size_t id = (i * 7919) % origins;  // a permutation: unsorted input
    d.origins.push_back({"origin-" + std::to_string(id), window(id + 1, id * 3, {id, 0, id % 2, 0}),
                         id % 4 == 0 ? window(id, 9) : SeenWindow{}});
  }
  m.digest = d;
  m.digest_reply_wanted = true;
  return m;
}

TEST(Codec, RoundTripsEveryFieldSigned) {
  const GossipMessage m = full_message();
  const auto datagrams = encode_datagrams(m, key_a());
  ASSERT_EQ(datagrams.size(), 1u);
  const DecodeResult r = decode(datagrams[0], key_a());
  ASSERT_EQ(r.error, DecodeError::kNone) << decode_error_name(r.error);
  EXPECT_TRUE(r.authenticated);
  EXPECT_TRUE(r.digest_range.whole());
  expect_same_message(*r.message, m);
}

// Relay (minor 2) and relay repair (minor 5): the sender's group count, the relay flag and the
// stint a contact is told, in every part of a split message.
TEST(Codec, RoundTripsTheRelayFieldsInEveryPart) {
  GossipMessage m = full_message();
  m.digest.reset();  // (a stint travels with batches, never with a digest: below)
  m.relay_groups = 32;
  m.relay = true;
  m.relay_since = 17;
  m.relay_through = kMaxStintSeq;
  for (int i = 0; i < 200; ++i) m.members.push_back({"node-" + std::to_string(i), "10.0.9.9:7946", 1, 1, false});
  const auto datagrams = encode_datagrams(m, key_a(), kMinDatagramBytes);
  ASSERT_GT(datagrams.size(), 1u);
  for (const std::string& d : datagrams) {
    const GossipMessage got = decode_ok(d, key_a());
    EXPECT_EQ(got.relay_groups, 32u);
    EXPECT_TRUE(got.relay);
    EXPECT_EQ(got.relay_since, 17u);
    EXPECT_EQ(got.relay_through, kMaxStintSeq);
  }
  m.digest = full_message().digest;
  const GossipMessage got = decode_ok(encode_datagrams(m, key_a()).at(0), key_a());
  EXPECT_EQ(got.relay_since, 0u);
  EXPECT_EQ(got.relay_through, 0u);
}

TEST(Codec, RoundTripsEveryFieldUnsignedWithoutAKey) {
  const GossipMessage m = full_message();
  const auto datagrams = encode_datagrams(m, ClusterKeys{});
  ASSERT_EQ(datagrams.size(), 1u);
  const DecodeResult r = decode(datagrams[0], ClusterKeys{});
  ASSERT_EQ(r.error, DecodeError::kNone);
  EXPECT_FALSE(r.authenticated);
  expect_same_message(*r.message, m);
}

// A refund travels in Batch.refunds as a positive figure, so that a node of an earlier version,
// which skips that field, keeps the tokens spent (under-admits) instead of dropping the batch.
TEST(Codec, RefundsTravelApartFromConsumption) {
  GossipMessage m;
  m.sender = "node-a";
  m.batches.push_back(batch("node-a", 1, 1, {{"spent", 5}, {"given-back", -3}}));
  const auto datagrams = encode_datagrams(m, ClusterKeys{}, kDefaultMaxDatagramBytes, nullptr);
  ASSERT_EQ(datagrams.size(), 1u);
  const GossipMessage got = decode_ok(datagrams[0], ClusterKeys{});
  ASSERT_EQ(got.batches.size(), 1u);
  EXPECT_EQ(got.batches[0]->entries, (std::vector<ConsumptionEntry>{{"spent", 5}, {"given-back", -3}}));
  // On the wire: the consumption in `entries`, the refund in `refunds`, both positive.
  v1::Envelope envelope;
  ASSERT_TRUE(envelope.ParseFromString(datagrams[0]));
  v1::Gossip gossip;
  ASSERT_TRUE(gossip.ParseFromString(envelope.payload()));
  ASSERT_EQ(gossip.batches_size(), 1);
  ASSERT_EQ(gossip.batches(0).entries_size(), 1);
  EXPECT_EQ(gossip.batches(0).entries(0).key(), "spent");
  EXPECT_EQ(gossip.batches(0).entries(0).tokens(), 5);
  ASSERT_EQ(gossip.batches(0).refunds_size(), 1);
  EXPECT_EQ(gossip.batches(0).refunds(0).key(), "given-back");
  EXPECT_EQ(gossip.batches(0).refunds(0).tokens(), 3);
}

TEST(Codec, AbsentOptionalPartsStayAbsent) {
  GossipMessage m;
  m.sender = "n";
  const auto datagrams = encode_datagrams(m, key_a());
  ASSERT_EQ(datagrams.size(), 1u);
  const GossipMessage got = decode_ok(datagrams[0], key_a());
  expect_same_message(got, m);
  EXPECT_FALSE(got.digest.has_value());

  m.digest = Digest{};  // present but empty: "I have seen nothing", not "no digest"
  const GossipMessage with_empty = decode_ok(encode_datagrams(m, key_a()).at(0), key_a());
  ASSERT_TRUE(with_empty.digest.has_value());
  EXPECT_TRUE(with_empty.digest->origins.empty());
}

TEST(Codec, DecodedBatchesAreSharedImmutableBatches) {
  const GossipMessage got = decode_ok(encode_datagrams(full_message(), key_a()).at(0), key_a());
  ASSERT_EQ(got.batches.size(), 2u);
  const BatchPtr& b = got.batches[0];
  EXPECT_EQ(b.use_count(), 1);
  static_assert(std::is_same_v<decltype(b), const std::shared_ptr<const Batch>&>);
}

TEST(Codec, MacIsHmacSha256OverTheVersionAndThePayload) {
  const auto datagrams = encode_datagrams(full_message(), key_a());
  v1::Envelope e;
  ASSERT_TRUE(e.ParseFromString(datagrams.at(0)));
  EXPECT_EQ(e.version_major(), 1u);
  EXPECT_EQ(e.version_minor(), 8u);
  EXPECT_EQ(e.mac().size(), 32u);
  EXPECT_EQ(e.mac(), codec_test::spec_mac(key_a().signing_key(), 1, 8, e.payload()));
}

TEST(Codec, SplitsAcrossDatagramsUnderMaxDatagram) {
  const GossipMessage m = big_message(300, 150, 700);
  EncodeStats stats;
  const auto datagrams = encode_datagrams(m, key_a(), kDefaultMaxDatagramBytes, &stats);
  EXPECT_EQ(stats.dropped_batches + stats.dropped_members + stats.dropped_digest_origins, 0u);
  ASSERT_GT(datagrams.size(), 10u);

  GossipMessage merged;
  std::vector<DigestRange> ranges;
  std::vector<std::vector<OriginDigest>> digest_parts;
  int reply_wanted = 0;
  size_t total_bytes = 0;
  for (const std::string& d : datagrams) {
    EXPECT_LE(d.size(), kDefaultMaxDatagramBytes);
    total_bytes += d.size();
    const DecodeResult r = decode(d, key_a());  // each part alone
    ASSERT_EQ(r.error, DecodeError::kNone) << decode_error_name(r.error);
    const GossipMessage& part = *r.message;
    EXPECT_EQ(part.sender, m.sender);
    EXPECT_EQ(part.sender_incarnation, m.sender_incarnation);
    EXPECT_EQ(part.sender_address, m.sender_address);
    EXPECT_EQ(part.leaving, m.leaving);
    reply_wanted += part.digest_reply_wanted;
    merged.batches.insert(merged.batches.end(), part.batches.begin(), part.batches.end());
    merged.members.insert(merged.members.end(), part.members.begin(), part.members.end());
    if (part.digest) {
      for (const OriginDigest& o : part.digest->origins) EXPECT_TRUE(r.digest_range.covers(o.origin)) << o.origin;
      ranges.push_back(r.digest_range);
      digest_parts.push_back(part.digest->origins);
    }
  }
  EXPECT_EQ(reply_wanted, 1) << "a split message asks for one digest back, not one per part";
  expect_same_batches(merged.batches, m.batches);
  EXPECT_EQ(merged.members, m.members);

  // The digest parts list every origin once, in order, and their ranges tile the id space.
  std::vector<OriginDigest> expected = m.digest->origins;
  std::sort(expected.begin(), expected.end(), [](const auto& a, const auto& b) { return a.origin < b.origin; });
  std::vector<OriginDigest> listed;
  for (const auto& p : digest_parts) listed.insert(listed.end(), p.begin(), p.end());
  expect_same_origins(listed, expected);
  ASSERT_GT(ranges.size(), 1u);
  EXPECT_EQ(ranges.front().from, "");
  EXPECT_FALSE(ranges.back().until.has_value());
  for (size_t i = 0; i + 1 < ranges.size(); ++i) {
    ASSERT_TRUE(ranges[i].until.has_value());
    EXPECT_EQ(*ranges[i].until, ranges[i + 1].from) << "ranges " << i << " and " << i + 1 << " must meet";
  }
  // Packing is dense: fewer than one extra datagram's worth of slack per datagram on average.
  EXPECT_GT(total_bytes, datagrams.size() * kDefaultMaxDatagramBytes * 8 / 10);
}

TEST(Codec, EveryPartRepeatsTheLeavingFlag) {
  GossipMessage m = big_message(50, 0, 0);
  m.leaving = true;
  const auto datagrams = encode_datagrams(m, ClusterKeys{});
  ASSERT_GT(datagrams.size(), 1u);
  for (const std::string& d : datagrams) EXPECT_TRUE(decode_ok(d, ClusterKeys{}).leaving);
}

TEST(Codec, ReplyWantedWithoutADigestGoesInTheFirstPart) {
  GossipMessage m = big_message(50, 0, 0);
  m.digest.reset();
  m.digest_reply_wanted = true;
  const auto datagrams = encode_datagrams(m, ClusterKeys{});
  ASSERT_GT(datagrams.size(), 1u);
  for (size_t i = 0; i < datagrams.size(); ++i) {
    EXPECT_EQ(decode_ok(datagrams[i], ClusterKeys{}).digest_reply_wanted, i == 0) << i;
  }
}

TEST(Codec, AMessageThatFitsIsOneFrameAndFramesSplitWhenItDoesNot) {
  const GossipMessage m = big_message(300, 150, 700);
  const auto one = encode_frames(m, key_a());
  ASSERT_EQ(one.size(), 1u);
  FrameReader reader = gossip_frame_reader();
  reader.append(one[0]);
  std::string_view frame;
  ASSERT_EQ(reader.next(&frame), FrameReader::Status::kFrame);
  GossipMessage got = decode_ok(std::string(frame), key_a());
  std::sort(got.digest->origins.begin(), got.digest->origins.end(),
            [](const auto& a, const auto& b) { return a.origin < b.origin; });
  GossipMessage sorted = m;
  std::sort(sorted.digest->origins.begin(), sorted.digest->origins.end(),
            [](const auto& a, const auto& b) { return a.origin < b.origin; });
  expect_same_message(got, sorted);

  const auto several = encode_frames(m, key_a(), 4096);
  ASSERT_GT(several.size(), 1u);
  FrameReader small(4096);
  size_t batches = 0;
  for (const std::string& f : several) {
    EXPECT_LE(f.size(), 4096u + 4);
    small.append(f);
    ASSERT_EQ(small.next(&frame), FrameReader::Status::kFrame);
    batches += decode_ok(std::string(frame), key_a()).batches.size();
  }
  EXPECT_EQ(batches, m.batches.size());
}

TEST(Codec, ABatchTooLargeForAnyDatagramIsLeftOutAndCounted) {
  GossipMessage m;
  m.sender = "node-a";
  std::vector<ConsumptionEntry> huge;
  for (int i = 0; i < 100; ++i) huge.push_back({std::string(100, 'a' + i % 26) + std::to_string(i), 1});
  m.batches.push_back(batch("node-a", 1, 1, {{"small", 1}}));
  m.batches.push_back(batch("node-a", 1, 2, huge));
  m.batches.push_back(batch("node-a", 1, 3, {{"small", 2}}));
  EncodeStats stats;
  const auto datagrams = encode_datagrams(m, key_a(), kDefaultMaxDatagramBytes, &stats);
  EXPECT_EQ(stats.dropped_batches, 1u);
  ASSERT_EQ(datagrams.size(), 1u);
  const GossipMessage got = decode_ok(datagrams[0], key_a());
  ASSERT_EQ(got.batches.size(), 2u);
  EXPECT_EQ(got.batches[0]->seq, 1u);
  EXPECT_EQ(got.batches[1]->seq, 3u);

  // The same batch travels in a TCP frame, whose limit is far larger.
  EncodeStats frame_stats;
  encode_frames(m, key_a(), kDefaultMaxFrameBytes, &frame_stats);
  EXPECT_EQ(frame_stats.dropped_batches, 0u);
}

TEST(Codec, InvalidItemsAreLeftOutOfEncodingAndCounted) {
  GossipMessage m;
  m.sender = "node-a";
  m.batches.push_back(batch("node-a", 1, 0, {{"k", 1}}));                    // seq 0
  m.batches.push_back(batch("node-a", 1, 1, {{"k", 0}}));                    // tokens 0
  m.batches.push_back(batch("node-a", 1, 1, {{"k", INT64_MIN}}));            // a refund with no opposite
  m.batches.push_back(batch("", 1, 1, {{"k", 1}}));                          // no origin
  m.batches.push_back(batch("node-a", 1, 2, {{std::string(257, 'k'), 1}}));  // key too long
  m.batches.push_back(nullptr);
  m.batches.push_back(batch("node-a", 1, 3, {{"k", 1}}));  // fine
  m.members.push_back({"", "a:1", 1, 1, false});
  m.members.push_back({"node-b", std::string(257, 'a'), 1, 1, false});
  m.members.push_back({"node-c", "c:1", 1, 1, false});
  Digest d;
  d.origins.push_back({"x", window(1, 1), {}});
  d.origins.push_back({"x", window(1, 2), {}});
  d.origins.push_back({"", window(1, 1), {}});
  m.digest = d;
  EncodeStats stats;
  const auto datagrams = encode_datagrams(m, ClusterKeys{}, kDefaultMaxDatagramBytes, &stats);
  EXPECT_EQ(stats.dropped_batches, 6u);
  EXPECT_EQ(stats.dropped_members, 2u);
  EXPECT_EQ(stats.dropped_digest_origins, 2u);
  ASSERT_EQ(datagrams.size(), 1u);
  const GossipMessage got = decode_ok(datagrams[0], ClusterKeys{});  // what is sent always decodes
  EXPECT_EQ(got.batches.size(), 1u);
  EXPECT_EQ(got.members.size(), 1u);
  EXPECT_EQ(got.digest->origins.size(), 1u);
}

TEST(Codec, EncodingRefusesAnImpossibleLimitOrSender) {
  GossipMessage m;
  m.sender = "node-a";
  EXPECT_THROW(encode_datagrams(m, key_a(), kMinDatagramBytes - 1), std::invalid_argument);
  EXPECT_THROW(encode_frames(m, key_a(), kMaxMessageBytes + 1), std::invalid_argument);
  EXPECT_NO_THROW(encode_datagrams(m, key_a(), kMinDatagramBytes));
  m.sender = "";
  EXPECT_THROW(encode_datagrams(m, key_a()), std::invalid_argument);
  m.sender = std::string(kMaxNodeIdBytes + 1, 'n');
  EXPECT_THROW(encode_datagrams(m, key_a()), std::invalid_argument);
  m.sender = "node-a";
  m.sender_address = std::string(kMaxAddressBytes + 1, 'a');
  EXPECT_THROW(encode_datagrams(m, key_a()), std::invalid_argument);
}

// The largest valid items next to the largest valid header, at the smallest datagram allowed.
TEST(Codec, TheLargestItemsFitInTheSmallestDatagram) {
  GossipMessage m;
  m.sender = std::string(kMaxSenderIdBytes, 's');
  m.relay_groups = kMaxRelayGroups;
  m.relay = true;
  m.relay_since = m.relay_through = kMaxStintSeq;
  m.sender_incarnation = std::numeric_limits<uint64_t>::max();
  m.sender_address = std::string(kMaxAddressBytes, 'a');
  m.batches.push_back(batch(std::string(kMaxNodeIdBytes, 'o'), std::numeric_limits<uint64_t>::max(),
                            std::numeric_limits<uint64_t>::max(),
                            {{std::string(kMaxKeyBytes, 'k'), std::numeric_limits<int64_t>::max()}}));
  m.members.push_back({std::string(kMaxNodeIdBytes, 'm'), std::string(kMaxAddressBytes, 'a'),
                       std::numeric_limits<uint64_t>::max(), std::numeric_limits<uint64_t>::max(), true});
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  const SeenWindow full = window(max, max, {max, max, max, max});
  Digest d;
  for (char c : {'p', 'q', 'r'}) d.origins.push_back({std::string(kMaxNodeIdBytes, c), full, full});
  m.digest = d;
  m.digest_reply_wanted = true;
  m.leaving = true;

  EncodeStats stats;
  const auto datagrams = encode_datagrams(m, key_a(), kMinDatagramBytes, &stats);
  EXPECT_EQ(stats.dropped_batches + stats.dropped_members + stats.dropped_digest_origins, 0u);
  size_t batches = 0, members = 0, origins = 0;
  for (const std::string& dg : datagrams) {
    EXPECT_LE(dg.size(), kMinDatagramBytes);
    const GossipMessage got = decode_ok(dg, key_a());
    batches += got.batches.size();
    members += got.members.size();
    if (got.digest) origins += got.digest->origins.size();
  }
  EXPECT_EQ(batches, 1u);
  EXPECT_EQ(members, 1u);
  EXPECT_EQ(origins, 3u);
}

// Balances from a peer on start: every page of a transfer of the largest items fits one datagram
// of the smallest size from the largest sender, signed, and decodes to what was cut.
TEST(Codec, TransferPagesFitOneDatagramAndRoundTrip) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  const SeenWindow full = window(max, max, {max, max, max, max});
  std::vector<OriginDigest> positions;
  for (int i = 0; i < 40; ++i)
    positions.push_back({std::string(kMaxNodeIdBytes - 3, 'o') + std::to_string(100 + i), full, full});
  std::vector<std::pair<std::string, int64_t>> balances;
  for (int i = 0; i < 300; ++i) {
    balances.emplace_back(std::string(size_t(i % 2 ? kMaxKeyBytes - 3 : 5), 'k') + std::to_string(100 + i),
                          i % 3 == 0 ? std::numeric_limits<int64_t>::min() / 2 : int64_t(i) * 977 - 100'000);
  }
  const auto want_positions = positions;
  const auto want_balances = balances;
  const std::vector<SyncPage> pages = split_transfer(positions, balances, {}, kMinDatagramBytes);
  ASSERT_GT(pages.size(), 100u);
  GossipMessage m;
  m.sender = std::string(kMaxSenderIdBytes, 's');
  m.sender_incarnation = max;
  m.sender_address = std::string(kMaxAddressBytes, 'a');
  m.relay_groups = kMaxRelayGroups;
  m.relay = true;
  std::vector<OriginDigest> got_positions;
  std::vector<std::pair<std::string, int64_t>> got_balances;
  for (const SyncPage& page : pages) {
    EXPECT_EQ(page.pages, pages.size());
    auto p = std::make_shared<SyncPage>(page);
    p->session = max;
    m.sync_page = p;
    EncodeStats stats;
    const auto datagrams = encode_datagrams(m, key_a(), kMinDatagramBytes, &stats);
    ASSERT_EQ(datagrams.size(), 1u) << "page " << page.page;
    EXPECT_EQ(stats.dropped_sync, 0u);
    const GossipMessage got = decode_ok(datagrams[0], key_a());
    ASSERT_TRUE(got.sync_page);
    EXPECT_EQ(got.sync_page->page, page.page);
    EXPECT_EQ(got.sync_page->session, max);
    got_positions.insert(got_positions.end(), got.sync_page->positions.begin(), got.sync_page->positions.end());
    got_balances.insert(got_balances.end(), got.sync_page->balances.begin(), got.sync_page->balances.end());
  }
  expect_same_origins(got_positions, want_positions);
  EXPECT_EQ(got_balances, want_balances);
}

// Resets (docs/design.md 6.6): a batch's resets and its entries' epochs travel, a reset-only
// batch included, and a reset of epoch 0 is refused.
TEST(Codec, ResetsAndEpochsRoundTripAndAResetOfEpochZeroIsRefused) {
  GossipMessage m;
  m.sender = "n1";
  m.sender_address = "10.0.0.1:7946";
  auto b = std::make_shared<Batch>(Batch{"n1", 3, 7, {{"k", 5, 2}, {"r", -4, 9}}, {{"k", 2}, {"z", 11}}});
  m.batches.push_back(b);
  m.batches.push_back(std::make_shared<Batch>(Batch{"n1", 3, 8, {}, {{"only", 1}}}));
  const GossipMessage got = decode_ok(encode_datagrams(m, key_a()).at(0), key_a());
  ASSERT_EQ(got.batches.size(), 2u);
  EXPECT_EQ(got.batches[0]->entries, b->entries);
  EXPECT_EQ(got.batches[0]->resets, b->resets);
  EXPECT_TRUE(got.batches[1]->entries.empty());
  EXPECT_EQ(got.batches[1]->resets, (std::vector<ResetMark>{{"only", 1}}));

  v1::Gossip g = valid_gossip();
  v1::Reset* r = g.mutable_batches(0)->add_resets();
  r->set_key("k");
  EXPECT_EQ(decode(craft(g, key_a()), key_a()).error, DecodeError::kInvalidContent);  // epoch 0
  r->set_epoch(1);
  EXPECT_EQ(decode(craft(g, key_a()), key_a()).error, DecodeError::kNone);
  r->set_key(std::string(kMaxKeyBytes + 1, 'k'));
  EXPECT_EQ(decode(craft(g, key_a()), key_a()).error, DecodeError::kInvalidContent);
}

TEST(Codec, TopUnitsRoundTripAndAUnitThatBreaksItsBoundsIsRefused) {
  GossipMessage m;
  m.sender = "n1";
  m.sender_address = "10.0.0.1:7946";
  auto b = std::make_shared<Batch>(Batch{"n1", 3, 9, {}, {}});
  b->top =
      std::make_shared<const TopUnit>(TopUnit{"user:*", 1, 900, 12, 3000, {{"user:a", 40, 2}, {"user:\x01b", 40, 0}}});
  m.batches.push_back(b);
  const GossipMessage got = decode_ok(encode_datagrams(m, key_a()).at(0), key_a());
  ASSERT_EQ(got.batches.size(), 1u);
  ASSERT_TRUE(got.batches[0]->top);
  EXPECT_EQ(*got.batches[0]->top, *b->top);
  EXPECT_TRUE(got.batches[0]->entries.empty());

  auto error = [](const std::function<void(v1::TopUnit&)>& change, bool alone = true) {
    v1::Gossip g = valid_gossip();
    v1::Batch& x = *g.mutable_batches(0);
    if (alone) {
      x.clear_entries();
      x.clear_refunds();
      x.clear_resets();
    }
    v1::TopUnit& t = *x.mutable_top();
    t.set_rule("r");
    v1::TopKey* k = t.add_entries();
    k->set_key("a");
    k->set_count(10);
    k->set_error(3);
    change(t);
    return decode(craft(g, key_a()), key_a()).error;
  };
  EXPECT_EQ(error([](v1::TopUnit&) {}), DecodeError::kNone);
  EXPECT_EQ(error([](v1::TopUnit&) {}, /*alone=*/false), DecodeError::kInvalidContent);  // beside consumption
  EXPECT_EQ(error([](v1::TopUnit& t) { t.set_rule(""); }), DecodeError::kInvalidContent);
  EXPECT_EQ(error([](v1::TopUnit& t) { t.set_metric(2); }), DecodeError::kInvalidContent);
  EXPECT_EQ(error([](v1::TopUnit& t) { t.mutable_entries(0)->set_error(11); }), DecodeError::kInvalidContent);
  EXPECT_EQ(error([](v1::TopUnit& t) { t.mutable_entries(0)->set_key(""); }), DecodeError::kInvalidContent);
  EXPECT_EQ(error([](v1::TopUnit& t) {  // counts must not increase
              v1::TopKey* k = t.add_entries();
              k->set_key("b");
              k->set_count(11);
            }),
            DecodeError::kInvalidContent);
  EXPECT_EQ(error([](v1::TopUnit& t) {  // a key twice
              v1::TopKey* k = t.add_entries();
              k->set_key("a");
              k->set_count(1);
            }),
            DecodeError::kInvalidContent);
  EXPECT_EQ(error([](v1::TopUnit& t) {
              for (size_t i = 0; i < kMaxTopEntries; ++i) {
                v1::TopKey* k = t.add_entries();
                k->set_key("k" + std::to_string(i));
              }
            }),
            DecodeError::kInvalidContent);
}

TEST(Codec, LeaseCountsRoundTripAndACountsBatchWithConsumptionIsRefused) {
  GossipMessage m;
  m.sender = "n1";
  m.sender_address = "10.0.0.1:7946";
  auto b = std::make_shared<Batch>(Batch{"n1", 3, 9, {}, {}});
  b->counts = std::make_shared<const LeaseCounts>(LeaseCounts{{{"job:a", 2}, {"job:b", 0}}, true, "job:a", "job:c"});
  m.batches.push_back(b);
  const GossipMessage got = decode_ok(encode_datagrams(m, key_a()).at(0), key_a());
  ASSERT_EQ(got.batches.size(), 1u);
  ASSERT_TRUE(got.batches[0]->counts);
  EXPECT_EQ(got.batches[0]->counts->entries, b->counts->entries);
  EXPECT_TRUE(got.batches[0]->counts->refresh);
  EXPECT_EQ(got.batches[0]->counts->from, "job:a");
  EXPECT_EQ(got.batches[0]->counts->until, "job:c");
  EXPECT_TRUE(got.batches[0]->entries.empty());

  auto error = [](const std::function<void(v1::Batch&)>& change) {
    v1::Gossip g = valid_gossip();
    change(*g.mutable_batches(0));
    return decode(craft(g, key_a()), key_a()).error;
  };
  // valid_gossip's batch has consumption: counts beside it are refused.
  EXPECT_EQ(error([](v1::Batch& x) { x.mutable_counts()->add_entries()->set_key("k"); }), DecodeError::kInvalidContent);
  auto counts_only = [](v1::Batch& x) {
    x.clear_entries();
    x.clear_refunds();
    x.clear_resets();
    x.mutable_counts()->add_entries()->set_key("k");
  };
  EXPECT_EQ(error(counts_only), DecodeError::kNone);
  EXPECT_EQ(error([&](v1::Batch& x) {
              counts_only(x);
              x.mutable_counts()->mutable_entries(0)->set_count(uint64_t{1} << 63);
            }),
            DecodeError::kInvalidContent);
  EXPECT_EQ(error([&](v1::Batch& x) {
              counts_only(x);
              x.mutable_counts()->mutable_entries(0)->set_key("");
            }),
            DecodeError::kInvalidContent);
  EXPECT_EQ(error([&](v1::Batch& x) {
              counts_only(x);
              x.mutable_counts()->set_until(std::string(kMaxKeyBytes + 1, 'k'));
            }),
            DecodeError::kInvalidContent);
}

TEST(Codec, SyncRequestsRoundTripAndMalformedTransfersAreRefused) {
  GossipMessage m;
  m.sender = "n1";
  m.sender_address = "10.0.0.1:7946";
  m.sync_request = SyncRequest{.session = 9, .pages = {0, 5, 63}};
  const GossipMessage got = decode_ok(encode_datagrams(m, key_a()).at(0), key_a());
  ASSERT_TRUE(got.sync_request);
  EXPECT_EQ(got.sync_request->session, 9u);
  EXPECT_EQ(got.sync_request->pages, (std::vector<uint32_t>{0, 5, 63}));

  auto refused = [](const std::function<void(v1::Gossip&)>& change) {
    v1::Gossip g = valid_gossip();
    change(g);
    return decode(craft(g, key_a()), key_a()).error;
  };
  EXPECT_EQ(refused([](v1::Gossip& g) { g.mutable_sync_request()->set_session(0); }), DecodeError::kInvalidContent);
  EXPECT_EQ(refused([](v1::Gossip& g) {
              g.mutable_sync_request()->set_session(1);
              for (uint32_t i = 0; i <= kMaxSyncPagesPerRequest; ++i) g.mutable_sync_request()->add_pages(i);
            }),
            DecodeError::kInvalidContent);
  EXPECT_EQ(refused([](v1::Gossip& g) {
              g.mutable_sync_page()->set_session(1);
              g.mutable_sync_page()->set_page(3);
              g.mutable_sync_page()->set_pages(3);
            }),
            DecodeError::kInvalidContent);
  EXPECT_EQ(refused([](v1::Gossip& g) {  // "preparing" carries nothing
              g.mutable_sync_page()->set_session(1);
              g.mutable_sync_page()->add_balances()->set_key("k");
            }),
            DecodeError::kInvalidContent);
  EXPECT_EQ(refused([](v1::Gossip& g) {
              g.mutable_sync_page()->set_session(1);
              g.mutable_sync_page()->set_pages(1);
              g.mutable_sync_page()->add_balances()->set_key(std::string(kMaxKeyBytes + 1, 'k'));
            }),
            DecodeError::kInvalidContent);
  EXPECT_EQ(refused([](v1::Gossip& g) {
              g.mutable_sync_page()->set_session(1);
              g.mutable_sync_page()->set_pages(1);
              g.mutable_sync_page()->add_positions()->set_origin("");
            }),
            DecodeError::kInvalidContent);
}

TEST(Codec, SealedRunsFitInOneDatagramFromAnySender) {
  const size_t max_batch = max_batch_bytes_for(kDefaultMaxDatagramBytes);
  EXPECT_GT(max_batch, 790u);  // 799 since a contact's batches travel with a stint (13 bytes)
  EXPECT_LT(max_batch, kDefaultMaxDatagramBytes);
  std::mt19937_64 rng(11);
  std::vector<ConsumptionEntry> pending;
  for (int i = 0; i < 500; ++i) {
    pending.push_back({std::string(1 + rng() % kMaxKeyBytes, static_cast<char>('a' + i % 26)),
                       static_cast<int64_t>(1 + rng() % 1'000'000'000)});
  }
  const NodeId origin = "node-with-a-fairly-long-id.example.internal:7946";
  const auto runs = split_for_sealing(pending, origin, max_batch);
  ASSERT_GT(runs.size(), 1u);

  // Every entry lands in exactly one run, in order.
  std::vector<ConsumptionEntry> rejoined;
  for (const auto& run : runs) rejoined.insert(rejoined.end(), run.begin(), run.end());
  EXPECT_EQ(rejoined, pending);

  // The worst sender relays them: the longest id and address, signed.
  GossipMessage m;
  m.sender = std::string(kMaxSenderIdBytes, 's');
  m.sender_incarnation = std::numeric_limits<uint64_t>::max();
  m.sender_address = std::string(kMaxAddressBytes, 'a');
  m.leaving = true;
  m.digest_reply_wanted = true;
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < runs.size(); ++i) {
    Batch sealed{origin, max, max, runs[i]};
    EXPECT_LE(encoded_batch_bytes(sealed), max_batch) << "run " << i;
    if (i + 1 < runs.size()) {  // and runs are full: the next entry would not have fit
      sealed.entries.push_back(runs[i + 1].front());
      EXPECT_GT(encoded_batch_bytes(sealed), max_batch) << "run " << i;
      sealed.entries.pop_back();
    }
    m.batches = {std::make_shared<const Batch>(sealed)};
    EncodeStats stats;
    EXPECT_EQ(encode_datagrams(m, key_a(), kDefaultMaxDatagramBytes, &stats).size(), 1u);
    EXPECT_EQ(stats.dropped_batches, 0u);
  }
  EXPECT_TRUE(split_for_sealing({}, origin, max_batch).empty());
  EXPECT_THROW(max_batch_bytes_for(kMinDatagramBytes - 1), std::invalid_argument);
}

TEST(Codec, AMessageOfAnUnknownMajorVersionIsRejectedNotMisread) {
  const v1::Gossip g = valid_gossip();
  for (uint32_t major : {2u, 3u, 1000u}) {
    EXPECT_EQ(decode(craft(g, key_a(), major), key_a()).error, DecodeError::kUnknownVersion) << major;
    EXPECT_EQ(decode(craft(g, ClusterKeys{}, major), ClusterKeys{}).error, DecodeError::kUnknownVersion) << major;
  }
  // No version at all is not an envelope of ours.
  EXPECT_EQ(decode(craft(g, ClusterKeys{}, 0), ClusterKeys{}).error, DecodeError::kMalformed);
}

TEST(Codec, AHigherMinorVersionWithUnknownFieldsIsRead) {
  v1::Gossip g = valid_gossip();
  // A field a newer minor version might add (number 99, a string).
  g.GetReflection()->MutableUnknownFields(&g)->AddLengthDelimited(99, "new");
  const DecodeResult r = decode(craft(g, key_a(), 1, 7), key_a());
  ASSERT_EQ(r.error, DecodeError::kNone) << decode_error_name(r.error);
  EXPECT_EQ(r.message->batches.size(), 1u);
}

TEST(Codec, TheMacCoversTheVersion) {
  v1::Envelope e;
  ASSERT_TRUE(e.ParseFromString(encode_datagrams(full_message(), key_a()).at(0)));
  e.set_version_minor(kProtocolVersionMinor + 1);  // same payload and MAC, another minor version
  EXPECT_EQ(decode(e.SerializeAsString(), key_a()).error, DecodeError::kBadMac);
}

TEST(Codec, AFlippedBitInThePayloadFailsTheMac) {
  v1::Envelope original;
  ASSERT_TRUE(original.ParseFromString(encode_datagrams(full_message(), key_a()).at(0)));
  for (size_t byte = 0; byte < original.payload().size(); ++byte) {
    v1::Envelope e = original;
    (*e.mutable_payload())[byte] ^= static_cast<char>(1 << (byte % 8));
    EXPECT_EQ(decode(e.SerializeAsString(), key_a()).error, DecodeError::kBadMac) << "byte " << byte;
  }
}

TEST(Codec, NoSingleBitFlipOfASignedDatagramIsAccepted) {
  const std::string original = encode_datagrams(full_message(), key_a()).at(0);
  for (size_t bit = 0; bit < original.size() * 8; ++bit) {
    std::string d = original;
    d[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    EXPECT_NE(decode(d, key_a()).error, DecodeError::kNone) << "bit " << bit;
  }
}

TEST(Codec, KeysRotateWithoutDowntime) {
  const std::string a(32, 'A'), b(48, 'B');
  const std::string signed_by_a = encode_datagrams(full_message(), ClusterKeys({a})).at(0);
  EXPECT_EQ(decode(signed_by_a, ClusterKeys({a})).error, DecodeError::kNone);
  EXPECT_EQ(decode(signed_by_a, ClusterKeys({a, b})).error, DecodeError::kNone);
  EXPECT_EQ(decode(signed_by_a, ClusterKeys({b, a})).error, DecodeError::kNone);
  EXPECT_EQ(decode(signed_by_a, ClusterKeys({b})).error, DecodeError::kBadMac);

  // Step 2 of a rotation: {B, A} signs with B, which {A, B} nodes (still at step 1) accept.
  const std::string signed_by_b_a = encode_datagrams(full_message(), ClusterKeys({b, a})).at(0);
  EXPECT_EQ(decode(signed_by_b_a, ClusterKeys({a, b})).error, DecodeError::kNone);
  EXPECT_EQ(decode(signed_by_b_a, ClusterKeys({a})).error, DecodeError::kBadMac);
}

TEST(Codec, AnUnsignedMessageIsRejectedWhenAKeyIsConfigured) {
  const std::string unsigned_datagram = encode_datagrams(full_message(), ClusterKeys{}).at(0);
  EXPECT_EQ(decode(unsigned_datagram, key_a()).error, DecodeError::kMissingMac);
}

TEST(Codec, ASignedMessageIsReadUnverifiedWithoutAKey) {
  const DecodeResult r = decode(encode_datagrams(full_message(), key_a()).at(0), ClusterKeys{});
  EXPECT_EQ(r.error, DecodeError::kNone);
  EXPECT_FALSE(r.authenticated);
}

TEST(Codec, AMacOfTheWrongLengthIsBad) {
  v1::Envelope e;
  ASSERT_TRUE(e.ParseFromString(encode_datagrams(full_message(), key_a()).at(0)));
  e.mutable_mac()->pop_back();
  EXPECT_EQ(decode(e.SerializeAsString(), key_a()).error, DecodeError::kBadMac);
  e.mutable_mac()->append("xy");
  EXPECT_EQ(decode(e.SerializeAsString(), key_a()).error, DecodeError::kBadMac);
}

TEST(Codec, TruncatedDatagramsAreRejected) {
  for (const ClusterKeys& keys : {ClusterKeys{}, key_a()}) {
    const std::string d = encode_datagrams(full_message(), keys).at(0);
    for (size_t n = 0; n < d.size(); ++n) {
      EXPECT_NE(decode(std::string_view(d).substr(0, n), keys).error, DecodeError::kNone) << n << " bytes";
    }
  }
}

// What every accepted message must satisfy, whatever bytes it came from.
void expect_valid(const DecodeResult& r) {
  ASSERT_TRUE(r.message.has_value());
  const GossipMessage& m = *r.message;
  EXPECT_FALSE(m.sender.empty());
  EXPECT_LE(m.sender.size(), kMaxNodeIdBytes);
  for (const BatchPtr& b : m.batches) {
    ASSERT_NE(b, nullptr);
    EXPECT_FALSE(b->origin.empty());
    EXPECT_GE(b->seq, 1u);
    for (const ConsumptionEntry& e : b->entries) {
      EXPECT_NE(e.tokens, 0);  // below 0: a refund
      EXPECT_NE(e.tokens, INT64_MIN);
      EXPECT_LE(e.key.size(), kMaxKeyBytes);
    }
  }
  for (const MemberRecord& mr : m.members) EXPECT_FALSE(mr.id.empty());
  if (m.digest) {
    for (size_t i = 0; i < m.digest->origins.size(); ++i) {
      EXPECT_TRUE(r.digest_range.covers(m.digest->origins[i].origin));
      if (i > 0) {
        EXPECT_LT(m.digest->origins[i - 1].origin, m.digest->origins[i].origin);
      }
    }
  }
}

TEST(Codec, RandomAndMutatedInputsAreRejectedOrValidNeverACrash) {
  std::mt19937_64 rng(20240601);
  std::map<DecodeError, int> seen;
  // Random bytes.
  for (int i = 0; i < 3000; ++i) {
    std::string bytes(rng() % 1500, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const DecodeResult r = decode(bytes, ClusterKeys{});
    ++seen[r.error];
    if (r.error == DecodeError::kNone) expect_valid(r);
  }
  // Mutations of real datagrams: flipped, overwritten, inserted and deleted bytes.
  const std::string unsigned_datagram = encode_datagrams(full_message(), ClusterKeys{}).at(0);
  const std::string signed_datagram = encode_datagrams(full_message(), key_a()).at(0);
  int accepted_unsigned = 0;
  for (int i = 0; i < 6000; ++i) {
    const bool with_key = i % 2 == 1;
    std::string d = with_key ? signed_datagram : unsigned_datagram;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !d.empty(); ++k) {
      const size_t at = rng() % d.size();
      switch (rng() % 4) {
        case 0:
          d[at] ^= static_cast<char>(1 << (rng() % 8));
          break;
        case 1:
          d[at] = static_cast<char>(rng());
          break;
        case 2:
          d.insert(at, 1, static_cast<char>(rng()));
          break;
        default:
          d.erase(at, 1);
          break;
      }
    }
    const DecodeResult r = decode(d, with_key ? key_a() : ClusterKeys{});
    ++seen[r.error];
    if (r.error != DecodeError::kNone) continue;
    if (with_key) {
      EXPECT_EQ(d, signed_datagram) << "a changed signed datagram was accepted";
    } else {
      ++accepted_unsigned;
      expect_valid(r);
    }
  }
  // The fuzzing reached past the envelope into every kind of rejection.
  for (DecodeError e :
       {DecodeError::kMalformed, DecodeError::kBadMac, DecodeError::kInvalidContent, DecodeError::kUnknownVersion}) {
    EXPECT_GT(seen[e], 0) << decode_error_name(e);
  }
  EXPECT_GT(accepted_unsigned, 0);
}

TEST(Codec, InvalidContentIsRejected) {
  struct Case {
    const char* what;
    void (*breaks)(v1::Gossip&);
  };
  const Case cases[] =
      {
          {"no sender", [](v1::Gossip& g) { g.clear_sender(); }},
          {"sender too long", [](v1::Gossip& g) { g.set_sender(std::string(257, 's')); }},
          {"address too long", [](v1::Gossip& g) { g.set_sender_address(std::string(257, 'a')); }},
          {"seq 0", [](v1::Gossip& g) { g.mutable_batches(0)->set_seq(0); }},
          {"tokens 0", [](v1::Gossip& g) { g.mutable_batches(0)->mutable_entries(0)->set_tokens(0); }},
          {"negative tokens", [](v1::Gossip& g) { g.mutable_batches(0)->mutable_entries(0)->set_tokens(-5); }},
          {"refund of 0", [](v1::Gossip& g) { g.mutable_batches(0)->add_refunds()->set_key("r"); }},
          {"negative refund",
           [](v1::Gossip& g) {
    v1::Entry* e = g.mutable_batches(0)->add_refunds();
    e->set_key("r");
    e->set_tokens(-5);
           }},
          {"empty origin", [](v1::Gossip& g) { g.mutable_batches(0)->clear_origin(); }},
          {"origin too long", [](v1::Gossip& g) { g.mutable_batches(0)->set_origin(std::string(257, 'o')); }},
          {"key too long",
           [](v1::Gossip& g) { g.mutable_batches(0)->mutable_entries(0)->set_key(std::string(257, 'k')); }},
          {"member without id", [](v1::Gossip& g) { g.add_members()->set_address("a:1"); }},
          {"member address too long",
           [](v1::Gossip& g) {
    v1::Member* m = g.add_members();
    m->set_id("m");
    m->set_address(std::string(257, 'a'));
           }},
             {"window of five words",
              [](v1::Gossip& g) {
    v1::OriginDigest* o = g.mutable_digest()->add_origins();
    o->set_origin("o");
    for (int i = 0; i < 5; ++i) o->mutable_current()->add_above(1);
              }},
      {"digest origin empty", [](v1::Gossip& g) { g.mutable_digest()->add_origins(); }},
      {"digest origins out of order",
       [](v1::Gossip& g) {
    g.mutable_digest()->add_origins()->set_origin("b");
    g.mutable_digest()->add_origins()->set_origin("a");
       }},
      {"digest origin twice",
       [](v1::Gossip& g) {
    g.mutable_digest()->add_origins()->set_origin("a");
    g.mutable_digest()->add_origins()->set_origin("a");
       }},
      {"range starting at a first origin that is not there",
       [](v1::Gossip& g) { g.mutable_digest()->set_starts_at_first_origin(true); }},
      {"range ending at or before its last origin",
       [](v1::Gossip& g) {
    g.mutable_digest()->add_origins()->set_origin("b");
    g.mutable_digest()->set_ends_before("b");
       }},
      {"range ending with an empty id", [](v1::Gossip& g) { g.mutable_digest()->set_ends_before(""); }},
      };
  for (const Case& c : cases) {
    v1::Gossip g = valid_gossip();
    c.breaks(g);
    EXPECT_EQ(decode(craft(g, ClusterKeys{}), ClusterKeys{}).error, DecodeError::kInvalidContent) << c.what;
    EXPECT_EQ(decode(craft(g, key_a()), key_a()).error, DecodeError::kInvalidContent) << c.what;
  }
  // And the unbroken one is fine, so each case above fails for its own reason.
  EXPECT_EQ(decode(craft(valid_gossip(), key_a()), key_a()).error, DecodeError::kNone);
}

TEST(Codec, EmptyKeysAndEmptyBatchesAreValid) {
  v1::Gossip g = valid_gossip();
  g.mutable_batches(0)->mutable_entries(0)->clear_key();  // "" is a key like any other
  v1::Batch* empty = g.add_batches();
  empty->set_origin("node-a");
  empty->set_seq(2);
  EXPECT_EQ(decode(craft(g, ClusterKeys{}), ClusterKeys{}).error, DecodeError::kNone);
}

TEST(Codec, MessagesOverTheSizeOrCountCapsAreTooLarge) {
  EXPECT_EQ(decode(std::string(kMaxMessageBytes + 1, '\0'), ClusterKeys{}).error, DecodeError::kTooLarge);

  v1::Gossip g = valid_gossip();
  v1::Batch* b = g.mutable_batches(0);
  for (size_t i = 0; i < kMaxEntriesPerMessage; ++i) {
    v1::Entry* e = b->add_entries();
    e->set_key("k");
    e->set_tokens(1);
  }
  EXPECT_EQ(decode(craft(g, key_a()), key_a()).error, DecodeError::kTooLarge);

  v1::Gossip members = valid_gossip();
  for (size_t i = 0; i <= kMaxMembersPerMessage; ++i) members.add_members()->set_id("m");
  EXPECT_EQ(decode(craft(members, ClusterKeys{}), ClusterKeys{}).error, DecodeError::kTooLarge);
}

TEST(Codec, DecodeErrorsHaveDistinctNames) {
  std::set<std::string> names;
  for (DecodeError e : {DecodeError::kNone, DecodeError::kMalformed, DecodeError::kUnknownVersion, DecodeError::kBadMac,
                        DecodeError::kMissingMac, DecodeError::kTooLarge, DecodeError::kInvalidContent}) {
    names.insert(decode_error_name(e));
  }
  EXPECT_EQ(names.size(), 7u);
  EXPECT_STREQ(decode_error_name(DecodeError::kUnknownVersion), "unknown_version");
}

TEST(DigestRange, CoversOriginsFromItsStartUpToButExcludingItsEnd) {
  const DigestRange whole;
  EXPECT_TRUE(whole.whole());
  EXPECT_TRUE(whole.covers("anything"));
  const DigestRange middle{"b", "d"};
  EXPECT_FALSE(middle.whole());
  EXPECT_FALSE(middle.covers("a"));
  EXPECT_TRUE(middle.covers("b"));
  EXPECT_TRUE(middle.covers("c-long-id"));
  EXPECT_FALSE(middle.covers("d"));
  // Bytewise order: bytes above 0x7f sort after ASCII, as on every node.
  const DigestRange high{"z", std::nullopt};
  EXPECT_TRUE(high.covers("\xc3\xa9"));
}

// The point of digest ranges: a peer that answers every part of a split digest with the
// batches in that part's range sends exactly what one unsplit digest would draw, each batch
// once, and nothing for the origins a part does not speak for.
TEST(Codec, AnsweringEachDigestPartForItsRangeRepairsExactlyOnce) {
  auto rules = std::make_shared<RuleSet>(std::vector<Rule>{}, std::nullopt);  // nothing limited
  KeyTable table_a(rules), table_b(rules);
  Ledger a("node-a", 1), b("node-b", 1);
  std::mt19937_64 rng(3);
  for (int origin = 0; origin < 400; ++origin) {
    const std::string id = "origin-" + std::to_string(origin);
    for (uint64_t seq = 1; seq <= 3; ++seq) {
      const BatchPtr bp = batch(id, 1, seq, {{"k" + std::to_string(seq), 1}});
      a.merge(bp, table_a, 0);
      // b has all of some origins, part of others, and has never heard of the rest.
      if (origin % 3 == 0 || (origin % 3 == 1 && seq != 2)) b.merge(bp, table_b, 0);
    }
  }
  const std::vector<BatchPtr> expected = a.missing_for(b.digest());

  GossipMessage request;
  request.sender = "node-b";
  request.digest = b.digest();
  const auto datagrams = encode_datagrams(request, key_a());
  ASSERT_GT(datagrams.size(), 2u);
  std::multiset<const Batch*> answered;
  for (const std::string& d : datagrams) {
    const DecodeResult r = decode(d, key_a());
    ASSERT_EQ(r.error, DecodeError::kNone);
    ASSERT_TRUE(r.message->digest.has_value());
    for (const BatchPtr& bp : a.missing_for(*r.message->digest)) {
      if (r.digest_range.covers(bp->origin)) answered.insert(bp.get());
    }
  }
  std::multiset<const Batch*> want;
  for (const BatchPtr& bp : expected) want.insert(bp.get());
  EXPECT_EQ(answered, want);
  EXPECT_EQ(want.size(), 133u * 3 + 133u);  // origins b never heard of, and the seq-2 holes
}

}  // namespace
}  // namespace tollgate
