// Shared by the fuzz targets: contract checks that abort (so libFuzzer records the input as a
// crash, and the replay test fails), and the input layout of the stream targets.
#ifndef TOLLGATE_TESTS_FUZZ_FUZZ_UTIL_H_
#define TOLLGATE_TESTS_FUZZ_FUZZ_UTIL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

// Aborts with the broken contract when `cond` is false. Writes with fprintf, not std::cerr:
// targets that call chatty code silence the iostreams.
#define FUZZ_CHECK(cond, what)                                                                           \
  do {                                                                                                   \
    if (!(cond)) {                                                                                       \
      std::fprintf(stderr, "fuzz contract broken at %s:%d: %s (%s)\n", __FILE__, __LINE__, what, #cond); \
      std::abort();                                                                                      \
    }                                                                                                    \
  } while (false)

namespace tollgate::fuzz {

// The bytes a fuzzer hands over, as text.
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// The layout of the stream targets (gossip_frames, api_frames), so the fuzzer chooses where the
// socket reads split the stream:
//
//   byte 0      flags: bits 0-2 = n, the number of chunk lengths that follow; bits 3-7 are the
//               target's own options
//   bytes 1..n  chunk lengths, one byte each (0 = an empty read)
//   the rest    the stream: fed in chunks of those lengths, then whatever is left in one piece
//
// An input too short for its header is read as a stream of zero bytes with the flags it has.
struct StreamInput {
  uint8_t flags = 0;
  std::vector<std::string_view> chunks;  // in order; concatenated, they are `stream`
  std::string_view stream;
};

inline StreamInput split_stream_input(const uint8_t* data, size_t size) {
  StreamInput in;
  if (size == 0) return in;
  in.flags = data[0];
  const size_t n = in.flags & 0x7;
  if (size < 1 + n) return in;
  in.stream = as_text(data + 1 + n, size - 1 - n);
  size_t pos = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t len = std::min<size_t>(data[1 + i], in.stream.size() - pos);
    in.chunks.push_back(in.stream.substr(pos, len));
    pos += len;
  }
  if (pos < in.stream.size()) in.chunks.push_back(in.stream.substr(pos));
  return in;
}

// Reads a 4-byte big-endian length, as both framings write it.
inline uint32_t be32(std::string_view p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p.data());
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

// What a length-prefixed stream holds, read in one pass over all of it: the reference the
// incremental decoders (FrameReader, FrameReader) are compared with.
struct ReferenceFrames {
  std::vector<std::string_view> frames;
  bool too_large = false;  // stopped at a length above the limit
  size_t leftover = 0;     // bytes after the last frame, when not too_large
};

inline ReferenceFrames reference_frames(std::string_view stream, size_t max_frame_bytes) {
  ReferenceFrames ref;
  size_t pos = 0;
  while (stream.size() - pos >= 4) {
    const size_t length = be32(stream.substr(pos, 4));
    if (length > max_frame_bytes) {
      ref.too_large = true;
      return ref;
    }
    if (stream.size() - pos - 4 < length) break;
    ref.frames.push_back(stream.substr(pos + 4, length));
    pos += 4 + length;
  }
  ref.leftover = stream.size() - pos;
  return ref;
}

}  // namespace tollgate::fuzz

#endif  // TOLLGATE_TESTS_FUZZ_FUZZ_UTIL_H_
