// The client API's framing: every message is a 4-byte big-endian length followed by that many
// bytes of a serialized protobuf message (proto/tollgate/v1/api.proto). Shared by the server
// (src/api) and the client library (src/client); frames are read back with the one
// FrameReader (util/frame_reader.h). No sockets here.
#ifndef TOLLGATE_SRC_API_FRAMING_H_
#define TOLLGATE_SRC_API_FRAMING_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/frame_reader.h"

namespace google::protobuf {
class MessageLite;
}

namespace tollgate::api {

// The protocol version every Request and Response carries (Request.version / Response.version).
inline constexpr uint32_t kApiVersion = 1;

// Default largest request frame the server accepts (payload bytes, header not counted).
inline constexpr uint32_t kDefaultMaxFrameBytes = 64 * 1024;
// Largest response frame the client accepts. Responses are bounded by what the daemon puts in
// them (a 1000-check batch is ~60 KB, the member list of a 4096-node cluster ~400 KB), not by
// the request limit, so this is much larger; it only stops a corrupt stream from allocating GBs.
inline constexpr uint32_t kMaxResponseFrameBytes = 16 * 1024 * 1024;

// Appends one frame holding `message` to `out`. Returns false, leaving `out` unchanged, if the
// serialized message is larger than `max_frame_bytes` (or than 4 GiB - 1) or fails to serialize.
bool append_frame(const google::protobuf::MessageLite& message, uint32_t max_frame_bytes, std::string& out);

}  // namespace tollgate::api

#endif  // TOLLGATE_SRC_API_FRAMING_H_
