// The client's side of the API protocol, without I/O: stamping and framing a request, the one
// validation of an answer frame, and turning results into the library's types. Shared by both
// of the client's paths (the io thread's connection and the callers' own connections).
#ifndef TOLLGATE_SRC_CLIENT_PROTOCOL_H_
#define TOLLGATE_SRC_CLIENT_PROTOCOL_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "tollgate/client.h"
#include "tollgate/v1/api.pb.h"

namespace tollgate::client {

namespace pb = ::tollgate::v1::api;

// `timeout` from now; waits longer than a year are treated as a year, so the sum cannot overflow.
inline std::chrono::steady_clock::time_point deadline_after(std::chrono::nanoseconds timeout) {
  return std::chrono::steady_clock::now() + std::min<std::chrono::nanoseconds>(timeout, std::chrono::hours(24 * 365));
}

// Stamps `request` with the API version and `id`, and frames it into *frame. False, leaving
// *frame empty, when the frame would exceed `max_request_bytes`.
bool frame_request(pb::Request& request, uint64_t id, uint32_t max_request_bytes, std::string* frame);

// What an answer frame says.
struct ResponseCheck {
  enum class Kind : uint8_t {
    kAnswer,           // *response answers the call with its id
    kCallError,        // *response is for the call with its id, which fails with `error`
    kConnectionError,  // about the connection, not one call: drop it (`error` says why)
  };
  Kind kind = Kind::kAnswer;
  std::string error;
};
// Parses `payload` into *response and judges it: a frame that does not parse, or an error with
// id 0 (the daemon closes the connection after it), is about the connection; an answer in
// another API version fails its call.
ResponseCheck validate_response(std::string_view payload, pb::Response* response);

// One check's result as the library reports it.
CheckReply check_reply(const pb::Result& result);
// The error text of a response that is not the expected kind.
std::string unexpected_body(const pb::Response& response, const char* expected);

// What to say of a frame whose length prefix is `length` and too large: when its four bytes spell
// "HTTP", the endpoint is an HTTP server (--http-listen), not the client API (--listen).
std::string oversized_frame_error(uint64_t length);

}  // namespace tollgate::client

#endif  // TOLLGATE_SRC_CLIENT_PROTOCOL_H_
