#include "api/framing.h"

#include <google/protobuf/message_lite.h>

#include <limits>

namespace tollgate::api {

void encode_frame_length(uint32_t length, unsigned char* out) {
  out[0] = static_cast<unsigned char>(length >> 24);
  out[1] = static_cast<unsigned char>(length >> 16);
  out[2] = static_cast<unsigned char>(length >> 8);
  out[3] = static_cast<unsigned char>(length);
}

uint32_t decode_frame_length(const unsigned char* in) {
  return (uint32_t{in[0]} << 24) | (uint32_t{in[1]} << 16) | (uint32_t{in[2]} << 8) | uint32_t{in[3]};
}

bool append_frame(const google::protobuf::MessageLite& message, uint32_t max_frame_bytes,
                  std::string& out) {
  const size_t size = message.ByteSizeLong();
  if (size > max_frame_bytes || size > std::numeric_limits<uint32_t>::max()) return false;
  const size_t start = out.size();
  out.resize(start + kFrameHeaderBytes + size);
  auto* header = reinterpret_cast<unsigned char*>(out.data() + start);
  encode_frame_length(static_cast<uint32_t>(size), header);
  if (!message.SerializeToArray(out.data() + start + kFrameHeaderBytes, static_cast<int>(size))) {
    out.resize(start);
    return false;
  }
  return true;
}

void FrameDecoder::feed(const char* data, size_t size) {
  // Compact first, so the buffer holds at most one partial frame plus this piece.
  if (consumed_ > 0) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(data, size);
}

FrameDecoder::Status FrameDecoder::next(std::string_view* payload) {
  if (too_large_) return Status::kTooLarge;
  const size_t available = buffer_.size() - consumed_;
  if (available < kFrameHeaderBytes) return Status::kNeedMore;
  const auto* header = reinterpret_cast<const unsigned char*>(buffer_.data() + consumed_);
  const uint32_t length = decode_frame_length(header);
  if (length > max_frame_bytes_) {
    too_large_ = true;
    rejected_length_ = length;
    return Status::kTooLarge;
  }
  if (available - kFrameHeaderBytes < length) return Status::kNeedMore;
  *payload = std::string_view(buffer_.data() + consumed_ + kFrameHeaderBytes, length);
  consumed_ += kFrameHeaderBytes + length;
  return Status::kFrame;
}

void FrameDecoder::reset() {
  buffer_.clear();
  consumed_ = 0;
  rejected_length_ = 0;
  too_large_ = false;
}

}  // namespace tollgate::api
