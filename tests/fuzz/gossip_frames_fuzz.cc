// Gossip over TCP: a byte stream cut into envelopes by FrameReader, as tcp_transport.cc reads
// it, each envelope then decoded. The input layout is fuzz_util.h's StreamInput, so the fuzzer
// also picks where the socket reads split the stream; flag bit 3 gives the node a cluster key,
// bits 4-5 pick max_frame_bytes.
//
// Contract: FrameReader returns the same frames, and ends in the same state (sticky kTooLarge,
// or the same bytes still buffered), however the stream is split, as one pass over the whole
// stream does; a length above the limit is refused as soon as its prefix is here; every frame
// meets decode()'s contract (gossip_contract.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "gossip_contract.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tollgate::FrameReader;
  const tollgate::fuzz::StreamInput in = tollgate::fuzz::split_stream_input(data, size);
  static const tollgate::ClusterKeys no_keys;
  const tollgate::ClusterKeys& keys = (in.flags & 0x08) ? tollgate::fuzz::test_keys() : no_keys;
  static constexpr size_t kLimits[] = {tollgate::kDefaultMaxFrameBytes, tollgate::kMinDatagramBytes, 256, 0};
  const size_t max_frame_bytes = kLimits[(in.flags >> 4) & 0x3];

  FrameReader reader(max_frame_bytes);
  std::vector<std::string> frames;  // copies: a frame views the reader's buffer until the next append
  bool too_large = false;
  for (std::string_view chunk : in.chunks) {
    reader.append(chunk);
    for (;;) {
      std::string_view frame;
      const FrameReader::Status s = reader.next(&frame);
      if (s == FrameReader::Status::kNeedMore) break;
      if (s == FrameReader::Status::kTooLarge) {
        too_large = true;
        FUZZ_CHECK(reader.buffered() == 0, "a refused stream keeps its bytes");
        break;
      }
      FUZZ_CHECK(!too_large, "a frame after kTooLarge");
      FUZZ_CHECK(frame.size() <= max_frame_bytes, "a frame above max_frame_bytes");
      frames.emplace_back(frame);
    }
  }

  const tollgate::fuzz::ReferenceFrames ref = tollgate::fuzz::reference_frames(in.stream, max_frame_bytes);
  FUZZ_CHECK(too_large == ref.too_large, "kTooLarge depends on how the stream is split");
  FUZZ_CHECK(frames.size() == ref.frames.size(), "the number of frames depends on how the stream is split");
  for (size_t i = 0; i < frames.size(); ++i)
    FUZZ_CHECK(frames[i] == ref.frames[i], "a frame differs from the stream's");
  if (too_large) {
    reader.append("more bytes after the refusal");
    std::string_view frame;
    FUZZ_CHECK(reader.next(&frame) == FrameReader::Status::kTooLarge && reader.buffered() == 0,
               "kTooLarge is not sticky");
  } else {
    FUZZ_CHECK(reader.buffered() == ref.leftover, "buffered() disagrees with the bytes after the last frame");
  }

  for (const std::string& frame : frames) tollgate::fuzz::check_decode(frame, keys);
  return 0;
}
