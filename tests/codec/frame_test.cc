#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec_test_util.h"

namespace tollgate {
namespace {

using Status = FrameReader::Status;

std::string frame_of(const std::string& body) {
  const auto n = static_cast<uint32_t>(body.size());
  std::string f{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                static_cast<char>(n)};
  return f + body;
}

TEST(FrameReader, WaitsUntilAFrameIsComplete) {
  const std::string f = frame_of("hello, frame");
  FrameReader reader = gossip_frame_reader();
  std::string_view frame;
  for (size_t i = 0; i + 1 < f.size(); ++i) {
    reader.append(f.substr(i, 1));
    EXPECT_EQ(reader.next(&frame), Status::kNeedMore) << i;
  }
  reader.append(f.substr(f.size() - 1));
  ASSERT_EQ(reader.next(&frame), Status::kFrame);
  EXPECT_EQ(frame, "hello, frame");
  EXPECT_EQ(reader.next(&frame), Status::kNeedMore);
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(FrameReader, CutsSeveralFramesOutOfOneBuffer) {
  FrameReader reader = gossip_frame_reader();
  reader.append(frame_of("one") + frame_of("") + frame_of("three") + frame_of("fo"));
  reader.append("ur");  // the length of "four" arrived, then the rest of it
  std::string_view frame;
  std::vector<std::string> got;
  while (reader.next(&frame) == Status::kFrame) got.emplace_back(frame);
  EXPECT_EQ(got, (std::vector<std::string>{"one", "", "three", "fo"}));
  EXPECT_EQ(reader.buffered(), 2u);  // "ur" is the start of the next frame's length
}

TEST(FrameReader, RefusesAnOversizeLengthAsSoonAsItArrives) {
  FrameReader reader(1024);
  std::string_view frame;
  reader.append(std::string("\x00\x00\x04", 3));
  EXPECT_EQ(reader.next(&frame), Status::kNeedMore);
  reader.append(std::string("\x01", 1));  // 1025 bytes announced, none of them sent
  EXPECT_EQ(reader.next(&frame), Status::kTooLarge);
  EXPECT_EQ(reader.buffered(), 0u);
  // The stream is lost: it stays refused, and nothing more is buffered.
  reader.append(frame_of("fine"));
  EXPECT_EQ(reader.next(&frame), Status::kTooLarge);
  EXPECT_EQ(reader.buffered(), 0u);

  FrameReader huge = gossip_frame_reader();
  huge.append("\xff\xff\xff\xff");
  EXPECT_EQ(huge.next(&frame), Status::kTooLarge);
}

TEST(FrameReader, AcceptsAFrameOfExactlyTheLimit) {
  FrameReader reader(1024);
  reader.append(frame_of(std::string(1024, 'x')));
  std::string_view frame;
  ASSERT_EQ(reader.next(&frame), Status::kFrame);
  EXPECT_EQ(frame.size(), 1024u);
}

TEST(FrameReader, ALimitAboveTheDecoderLimitIsRefused) {
  EXPECT_THROW(gossip_frame_reader(kMaxMessageBytes + 1), std::invalid_argument);
}

TEST(FrameReader, AnEmptyFrameDecodesAsMalformed) {
  FrameReader reader = gossip_frame_reader();
  reader.append(frame_of(""));
  std::string_view frame;
  ASSERT_EQ(reader.next(&frame), Status::kFrame);
  EXPECT_EQ(decode(frame, ClusterKeys{}).error, DecodeError::kMalformed);
}

TEST(FrameReader, EncodedFramesSurviveAnyChunkingOfTheStream) {
  GossipMessage m = codec_test::full_message();
  std::string stream;
  int sent = 0;
  for (int i = 0; i < 50; ++i) {
    m.sender_incarnation = static_cast<uint64_t>(i);
    for (const std::string& f : encode_frames(m, codec_test::key_a(), 2048)) {
      stream += f;
      ++sent;
    }
  }
  std::mt19937_64 rng(5);
  FrameReader reader(2048);
  std::vector<uint64_t> incarnations;
  std::string_view frame;
  for (size_t pos = 0; pos < stream.size();) {
    const size_t n = std::min<size_t>(1 + rng() % 700, stream.size() - pos);
    reader.append(std::string_view(stream).substr(pos, n));
    pos += n;
    while (reader.next(&frame) == Status::kFrame) {
      const DecodeResult r = decode(frame, codec_test::key_a());
      ASSERT_EQ(r.error, DecodeError::kNone) << decode_error_name(r.error);
      incarnations.push_back(r.message->sender_incarnation);
    }
  }
  ASSERT_EQ(incarnations.size(), static_cast<size_t>(sent));
  EXPECT_TRUE(std::is_sorted(incarnations.begin(), incarnations.end()));
  EXPECT_EQ(reader.buffered(), 0u);
}

}  // namespace
}  // namespace tollgate
