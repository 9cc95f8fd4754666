// Helpers shared by the codec tests: sample messages, deep comparison, and envelopes crafted by
// hand (other versions, invalid content) that the encoder itself would never produce.
#ifndef TOLLGATE_TESTS_CODEC_CODEC_TEST_UTIL_H_
#define TOLLGATE_TESTS_CODEC_CODEC_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "tollgate/v1/gossip.pb.h"

namespace tollgate::codec_test {

inline ClusterKeys key_a() { return ClusterKeys({std::string(32, 'A')}); }
inline ClusterKeys key_b() { return ClusterKeys({std::string(40, 'B')}); }

inline BatchPtr batch(const std::string& origin, uint64_t incarnation, uint64_t seq,
                      std::vector<ConsumptionEntry> entries) {
  return std::make_shared<const Batch>(Batch{origin, incarnation, seq, std::move(entries)});
}

inline SeenWindow window(uint64_t incarnation, uint64_t watermark, std::array<uint64_t, 4> above = {}) {
  SeenWindow w;
  w.incarnation = incarnation;
  w.watermark = watermark;
  w.above = above;
  return w;
}

// A message that sets every field to something other than its default.
inline GossipMessage full_message() {
  GossipMessage m;
  m.sender = "node-a";
  m.sender_incarnation = 1'700'000'000'123ULL;
  m.sender_address = "10.0.0.1:7946";
  m.batches.push_back(batch("node-a", 1'700'000'000'123ULL, 42, {{"user:1", 3}, {"user:2", 1'000'000'000'000}}));
  m.batches.push_back(batch("node-c", 9, 1, {{"", 1}, {std::string(256, 'k'), 7}}));
  m.members.push_back({"node-b", "10.0.0.2:7946", 5, 1234, false});
  m.members.push_back({"node-c", "", 9, 0, true});
  Digest d;
  d.origins.push_back({"node-a", window(3, 100, {1, 0, 0, 1ULL << 63}), window(2, 55, {0xff, 0, 0, 0})});
  d.origins.push_back({"node-b", window(7, 0), SeenWindow{}});
  d.origins.push_back({"node-c", SeenWindow{}, SeenWindow{}});
  m.digest = d;
  m.digest_reply_wanted = true;
  m.leaving = true;
  return m;
}

inline void expect_same_batches(const std::vector<BatchPtr>& a, const std::vector<BatchPtr>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->origin, b[i]->origin) << "batch " << i;
    EXPECT_EQ(a[i]->incarnation, b[i]->incarnation) << "batch " << i;
    EXPECT_EQ(a[i]->seq, b[i]->seq) << "batch " << i;
    EXPECT_EQ(a[i]->entries, b[i]->entries) << "batch " << i;
  }
}

inline void expect_same_origins(const std::vector<OriginDigest>& a, const std::vector<OriginDigest>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].origin, b[i].origin) << "origin " << i;
    EXPECT_EQ(a[i].current, b[i].current) << "origin " << i;
    EXPECT_EQ(a[i].previous, b[i].previous) << "origin " << i;
  }
}

inline void expect_same_message(const GossipMessage& a, const GossipMessage& b) {
  EXPECT_EQ(a.sender, b.sender);
  EXPECT_EQ(a.sender_incarnation, b.sender_incarnation);
  EXPECT_EQ(a.sender_address, b.sender_address);
  expect_same_batches(a.batches, b.batches);
  EXPECT_EQ(a.members, b.members);
  ASSERT_EQ(a.digest.has_value(), b.digest.has_value());
  if (a.digest) expect_same_origins(a.digest->origins, b.digest->origins);
  EXPECT_EQ(a.digest_reply_wanted, b.digest_reply_wanted);
  EXPECT_EQ(a.leaving, b.leaving);
  EXPECT_EQ(a.relay_groups, b.relay_groups);
  EXPECT_EQ(a.relay, b.relay);
  EXPECT_EQ(a.relay_since, b.relay_since);
  EXPECT_EQ(a.relay_through, b.relay_through);
}

// The MAC as gossip.proto specifies it, computed with OpenSSL's one-shot HMAC() rather than the
// codec's own code path.
inline std::string spec_mac(const std::string& key, uint32_t major, uint32_t minor, const std::string& payload) {
  std::string input("tollgate-gossip", 15);
  input.push_back('\0');
  for (uint32_t v : {major, minor}) {
    for (int shift = 24; shift >= 0; shift -= 8) input.push_back(static_cast<char>((v >> shift) & 0xff));
  }
  input += payload;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(input.data()),
       input.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

// An envelope around `gossip`, signed with the first of `keys` unless there is none.
inline std::string craft(const v1::Gossip& gossip, const ClusterKeys& keys, uint32_t major = kProtocolVersionMajor,
                         uint32_t minor = kProtocolVersionMinor) {
  v1::Envelope e;
  e.set_version_major(major);
  e.set_version_minor(minor);
  e.set_payload(gossip.SerializeAsString());
  if (!keys.empty()) e.set_mac(spec_mac(keys.signing_key(), major, minor, e.payload()));
  return e.SerializeAsString();
}

// A valid Gossip with a header and one batch, to be broken by the caller.
inline v1::Gossip valid_gossip() {
  v1::Gossip g;
  g.set_sender("node-a");
  g.set_sender_incarnation(1);
  g.set_sender_address("127.0.0.1:1");
  v1::Batch* b = g.add_batches();
  b->set_origin("node-a");
  b->set_incarnation(1);
  b->set_seq(1);
  v1::Entry* e = b->add_entries();
  e->set_key("k");
  e->set_tokens(1);
  return g;
}

}  // namespace tollgate::codec_test

#endif  // TOLLGATE_TESTS_CODEC_CODEC_TEST_UTIL_H_
