#include "api/framing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tollgate/v1/api.pb.h"

namespace tollgate::api {
namespace {

namespace pb = ::tollgate::v1::api;

pb::Request sample_request(uint64_t id, const std::string& key) {
  pb::Request request;
  request.set_version(kApiVersion);
  request.set_id(id);
  pb::Check& check = *request.mutable_check()->add_checks();
  check.set_key(key);
  check.set_cost(3);
  return request;
}

TEST(Framing, LengthIsFourBytesBigEndian) {
  unsigned char bytes[4];
  store_be32(0x01020304u, bytes);
  EXPECT_EQ(bytes[0], 0x01);
  EXPECT_EQ(bytes[1], 0x02);
  EXPECT_EQ(bytes[2], 0x03);
  EXPECT_EQ(bytes[3], 0x04);
  EXPECT_EQ(load_be32(bytes), 0x01020304u);
  store_be32(0xFFFFFFFFu, bytes);
  EXPECT_EQ(load_be32(bytes), 0xFFFFFFFFu);
}

TEST(Framing, FramesRoundTripWhenFedOneByteAtATime) {
  std::string stream;
  ASSERT_TRUE(append_frame(sample_request(1, "a"), kDefaultMaxFrameBytes, stream));
  ASSERT_TRUE(append_frame(sample_request(2, std::string(300, 'k')), kDefaultMaxFrameBytes, stream));
  ASSERT_TRUE(append_frame(pb::Request(), kDefaultMaxFrameBytes, stream));  // an empty message: length 0

  FrameReader decoder(kDefaultMaxFrameBytes);
  std::vector<pb::Request> decoded;
  for (char byte : stream) {
    decoder.append(std::string_view(&byte, 1));
    std::string_view payload;
    while (decoder.next(&payload) == FrameReader::Status::kFrame) {
      pb::Request r;
      ASSERT_TRUE(r.ParseFromArray(payload.data(), static_cast<int>(payload.size())));
      decoded.push_back(r);
    }
  }
  ASSERT_EQ(decoded.size(), 3u);
  EXPECT_EQ(decoded[0].id(), 1u);
  EXPECT_EQ(decoded[0].check().checks(0).key(), "a");
  EXPECT_EQ(decoded[1].id(), 2u);
  EXPECT_EQ(decoded[1].check().checks(0).key(), std::string(300, 'k'));
  EXPECT_EQ(decoded[1].check().checks(0).cost(), 3);
  EXPECT_EQ(decoded[2].id(), 0u);
  EXPECT_EQ(decoder.buffered(), 0u);
}

TEST(Framing, ManyFramesInOnePieceComeOutInOrder) {
  std::string stream;
  for (uint64_t id = 1; id <= 50; ++id)
    ASSERT_TRUE(append_frame(sample_request(id, "k"), kDefaultMaxFrameBytes, stream));
  FrameReader decoder(kDefaultMaxFrameBytes);
  decoder.append(std::string_view(stream.data(), stream.size()));
  std::string_view payload;
  for (uint64_t id = 1; id <= 50; ++id) {
    ASSERT_EQ(decoder.next(&payload), FrameReader::Status::kFrame);
    pb::Request r;
    ASSERT_TRUE(r.ParseFromArray(payload.data(), static_cast<int>(payload.size())));
    EXPECT_EQ(r.id(), id);
  }
  EXPECT_EQ(decoder.next(&payload), FrameReader::Status::kNeedMore);
}

TEST(Framing, EncodingRefusesAMessageAboveTheLimit) {
  std::string out = "prefix";
  EXPECT_FALSE(append_frame(sample_request(1, std::string(200, 'x')), 100, out));
  EXPECT_EQ(out, "prefix");  // unchanged
  EXPECT_TRUE(append_frame(sample_request(1, std::string(10, 'x')), 100, out));
}

TEST(Framing, OversizedLengthIsRejectedFromTheHeaderAlone) {
  FrameReader decoder(1024);
  // A frame of exactly the limit is fine.
  std::string exact(4 + 1024, 'x');
  store_be32(1024, reinterpret_cast<unsigned char*>(exact.data()));
  decoder.append(std::string_view(exact.data(), exact.size()));
  std::string_view payload;
  ASSERT_EQ(decoder.next(&payload), FrameReader::Status::kFrame);
  EXPECT_EQ(payload.size(), 1024u);

  // One byte more is rejected as soon as the 4 header bytes are in, with no payload sent at all.
  unsigned char header[4];
  store_be32(1025, header);
  decoder.append(std::string_view(reinterpret_cast<const char*>(header), 4));
  EXPECT_EQ(decoder.next(&payload), FrameReader::Status::kTooLarge);
  EXPECT_EQ(decoder.rejected_length(), 1025u);
  // Sticky: more bytes do not revive the stream.
  decoder.append(std::string_view("abcd", 4));
  EXPECT_EQ(decoder.next(&payload), FrameReader::Status::kTooLarge);
  decoder.reset();
  EXPECT_EQ(decoder.next(&payload), FrameReader::Status::kNeedMore);
}

TEST(Framing, TwoGigabyteLengthBuffersNothingBeyondWhatArrived) {
  FrameReader decoder(kDefaultMaxFrameBytes);
  unsigned char header[4];
  store_be32(0x80000000u, header);  // 2 GiB
  decoder.append(std::string_view(reinterpret_cast<const char*>(header), 4));
  std::string_view payload;
  EXPECT_EQ(decoder.next(&payload), FrameReader::Status::kTooLarge);
  EXPECT_EQ(decoder.rejected_length(), 0x80000000u);
  EXPECT_LE(decoder.buffered(), 4u);
}

TEST(Framing, APartialHeaderOrPayloadWaitsForMore) {
  std::string stream;
  ASSERT_TRUE(append_frame(sample_request(7, "key"), kDefaultMaxFrameBytes, stream));
  FrameReader decoder(kDefaultMaxFrameBytes);
  std::string_view payload;
  decoder.append(std::string_view(stream.data(), 2));
  EXPECT_EQ(decoder.next(&payload), FrameReader::Status::kNeedMore);
  decoder.append(std::string_view(stream.data() + 2, stream.size() - 3));
  EXPECT_EQ(decoder.next(&payload), FrameReader::Status::kNeedMore);
  decoder.append(std::string_view(stream.data() + stream.size() - 1, 1));
  EXPECT_EQ(decoder.next(&payload), FrameReader::Status::kFrame);
}

}  // namespace
}  // namespace tollgate::api
