// The client API's framing: every message is a 4-byte big-endian length followed by that many
// bytes of a serialized protobuf message (proto/tollgate/v1/api.proto). Shared by the server
// (src/api) and the client library (src/client). No sockets here: the decoder works on bytes
// handed to it, so it is tested without any I/O.
#ifndef TOLLGATE_SRC_API_FRAMING_H_
#define TOLLGATE_SRC_API_FRAMING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace google::protobuf {
class MessageLite;
}

namespace tollgate::api {

// The protocol version every Request and Response carries (Request.version / Response.version).
inline constexpr uint32_t kApiVersion = 1;

inline constexpr size_t kFrameHeaderBytes = 4;
// Default largest request frame the server accepts (payload bytes, header not counted).
inline constexpr uint32_t kDefaultMaxFrameBytes = 64 * 1024;
// Largest response frame the client accepts. Responses are bounded by what the daemon puts in
// them (a 1000-check batch is ~60 KB, the member list of a 4096-node cluster ~400 KB), not by
// the request limit, so this is much larger; it only stops a corrupt stream from allocating GBs.
inline constexpr uint32_t kMaxResponseFrameBytes = 16 * 1024 * 1024;

// Writes `length` as 4 big-endian bytes at `out`.
void encode_frame_length(uint32_t length, unsigned char* out);
// Reads 4 big-endian bytes at `in`.
uint32_t decode_frame_length(const unsigned char* in);

// Appends one frame holding `message` to `out`. Returns false, leaving `out` unchanged, if the
// serialized message is larger than `max_frame_bytes` (or than 4 GiB - 1) or fails to serialize.
bool append_frame(const google::protobuf::MessageLite& message, uint32_t max_frame_bytes,
                  std::string& out);

// Splits a byte stream into frames. Bytes arrive in arbitrary pieces (feed); complete frames come
// out in order (next). A length above `max_frame_bytes` is reported as soon as its 4-byte header
// has arrived, before any of its payload is buffered, so a hostile 2 GiB length costs nothing.
// Memory held: at most one incomplete frame plus the last piece fed. Not thread-safe.
class FrameDecoder {
 public:
  enum class Status : uint8_t {
    kNeedMore,  // no complete frame buffered: feed more bytes
    kFrame,     // *payload is the next frame's payload
    kTooLarge,  // the next frame's length exceeds the limit; sticky until reset()
  };

  explicit FrameDecoder(uint32_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  // Appends received bytes.
  void feed(const char* data, size_t size);
  // Takes the next complete frame. On kFrame, *payload points into the decoder's buffer and stays
  // valid until the next call to feed(), next() or reset().
  Status next(std::string_view* payload);
  // Drops everything buffered and clears a kTooLarge state (a new connection).
  void reset();

  // The length header that caused kTooLarge.
  uint64_t rejected_length() const { return rejected_length_; }
  uint32_t max_frame_bytes() const { return max_frame_bytes_; }
  size_t buffered_bytes() const { return buffer_.size() - consumed_; }

 private:
  uint32_t max_frame_bytes_;
  std::string buffer_;
  size_t consumed_ = 0;  // bytes of buffer_ already returned as frames
  uint64_t rejected_length_ = 0;
  bool too_large_ = false;
};

}  // namespace tollgate::api

#endif  // TOLLGATE_SRC_API_FRAMING_H_
