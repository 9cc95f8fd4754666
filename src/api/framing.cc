#include "api/framing.h"

#include <google/protobuf/message_lite.h>

#include <limits>

namespace tollgate::api {

bool append_frame(const google::protobuf::MessageLite& message, uint32_t max_frame_bytes, std::string& out) {
  const size_t size = message.ByteSizeLong();
  if (size > max_frame_bytes || size > std::numeric_limits<uint32_t>::max()) return false;
  const size_t start = out.size();
  out.resize(start + kFrameHeaderBytes + size);
  auto* header = reinterpret_cast<unsigned char*>(out.data() + start);
  store_be32(static_cast<uint32_t>(size), header);
  if (!message.SerializeToArray(out.data() + start + kFrameHeaderBytes, static_cast<int>(size))) {
    out.resize(start);
    return false;
  }
  return true;
}

}  // namespace tollgate::api
