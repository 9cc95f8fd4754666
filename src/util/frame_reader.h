// Cuts a byte stream into length-prefixed frames: a 4-byte big-endian length, then that many
// bytes. The one reader of the client API's stream (server and client) and of TCP gossip.
//
// Bytes arrive in arbitrary pieces (append); complete frames come out in order (next). A length
// above max_frame_bytes is reported as soon as its 4-byte header has arrived, before any of its
// payload is buffered, so a hostile 4 GiB length costs nothing; the stream cannot be trusted or
// resynchronised after that, so kTooLarge is sticky until reset(). Memory held: at most about
// twice one incomplete frame plus the last piece appended. No sockets; not thread-safe.
#ifndef TOLLGATE_SRC_UTIL_FRAME_READER_H_
#define TOLLGATE_SRC_UTIL_FRAME_READER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/big_endian.h"

namespace tollgate {

inline constexpr size_t kFrameHeaderBytes = 4;

class FrameReader {
 public:
  enum class Status : uint8_t {
    kFrame,     // *frame is the next frame's payload
    kNeedMore,  // no complete frame buffered: append more bytes
    kTooLarge,  // the next frame's length exceeds the limit; sticky until reset()
  };

  explicit FrameReader(uint32_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  // Appends received bytes. Ignored once kTooLarge was reported.
  void append(std::string_view bytes) {
    if (too_large_) return;
    // Drop what was returned already once it is most of the buffer, so the buffer stays within
    // about two frames without moving the rest on every append.
    if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
      buffer_.erase(0, consumed_);
      consumed_ = 0;
    }
    buffer_.append(bytes);
  }

  // Takes the next complete frame. On kFrame, *frame views this reader's buffer and stays valid
  // until the next append() or reset().
  Status next(std::string_view* frame) {
    if (too_large_) return Status::kTooLarge;
    const size_t available = buffer_.size() - consumed_;
    if (available < kFrameHeaderBytes) return Status::kNeedMore;
    const uint32_t length = load_be32(buffer_.data() + consumed_);
    if (length > max_frame_bytes_) {
      too_large_ = true;
      rejected_length_ = length;
      buffer_.clear();
      buffer_.shrink_to_fit();
      consumed_ = 0;
      return Status::kTooLarge;
    }
    if (available - kFrameHeaderBytes < length) return Status::kNeedMore;
    *frame = std::string_view(buffer_).substr(consumed_ + kFrameHeaderBytes, length);
    consumed_ += kFrameHeaderBytes + length;
    return Status::kFrame;
  }

  // Drops everything buffered and clears a kTooLarge state (a new connection).
  void reset() {
    buffer_.clear();
    consumed_ = 0;
    rejected_length_ = 0;
    too_large_ = false;
  }

  // Bytes appended but not yet returned as frames.
  size_t buffered() const { return buffer_.size() - consumed_; }
  // The length header that caused kTooLarge.
  uint64_t rejected_length() const { return rejected_length_; }
  uint32_t max_frame_bytes() const { return max_frame_bytes_; }
  // Changes the limit for the frames not yet returned (a connection that has proven itself may
  // send larger frames than a stranger).
  void set_max_frame_bytes(uint32_t max_frame_bytes) { max_frame_bytes_ = max_frame_bytes; }

 private:
  uint32_t max_frame_bytes_;
  std::string buffer_;
  size_t consumed_ = 0;  // bytes of buffer_ already returned as frames
  uint64_t rejected_length_ = 0;
  bool too_large_ = false;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_FRAME_READER_H_
