#ifndef TOLLGATE_SRC_RLS_GRPC_WIRE_H_
#define TOLLGATE_SRC_RLS_GRPC_WIRE_H_

// gRPC's unary request and response over HTTP/2, apart from HTTP/2 itself: what a server of our
// own (docs/rls-h2-plan.md) must read and write around the protobuf bytes. Pure: no sockets,
// threads or clocks. The rules are gRPC's doc/PROTOCOL-HTTP2.md and compression.md, with Envoy's
// client (the one that matters) as the reader of what we write.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tollgate::rls::wire {

// gRPC status codes this server answers with (grpc/grpc doc/statuscodes.md).
enum class Code : uint8_t {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kResourceExhausted = 8,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
};

// A refusal: the status and its grpc-message (one of this file's fixed sentences), or an HTTP
// status when the request is not gRPC at all (415 for a content-type that is not application/grpc).
struct Refusal {
  Code code = Code::kInternal;
  std::string_view message;
  int http_status = 200;
  bool operator==(const Refusal&) const = default;
};

// grpc-timeout: a positive TimeoutValue of at most 8 ASCII digits and one unit (H hours, M
// minutes, S seconds, m milliseconds, u microseconds, n nanoseconds). nullopt when malformed,
// which gRPC and Envoy both read as no deadline.
std::optional<std::chrono::nanoseconds> parse_timeout(std::string_view value);

// grpc-message: bytes 0x20-0x7E other than '%' as they are, every other byte as %XX.
std::string percent_encode(std::string_view message);

// The method a request's :path names. Paths are case-sensitive.
enum class Method : uint8_t { kUnknown, kShouldRateLimit, kHealthCheck, kHealthWatch };
Method method_of(std::string_view path);

// A request's headers as they arrive (nghttp2's on_header, already checked against HTTP/2's
// rules), kept only as far as deciding needs them, and their size counted as HTTP/2's
// SETTINGS_MAX_HEADER_LIST_SIZE counts it: name + value + 32 per field.
class RequestHeaders {
 public:
  explicit RequestHeaders(size_t max_list_bytes) : max_list_bytes_(max_list_bytes) {}

  // False once the list is over its cap (the stream is then refused, whatever follows).
  bool add(std::string_view name, std::string_view value);
  bool over_cap() const { return list_bytes_ > max_list_bytes_; }
  size_t list_bytes() const { return list_bytes_; }

  Method method() const { return method_; }
  // From grpc-timeout; nullopt when absent or malformed (timeout_malformed() tells them apart).
  std::optional<std::chrono::nanoseconds> timeout() const { return timeout_; }
  bool timeout_malformed() const { return timeout_malformed_; }
  // True when the request may carry messages compressed otherwise than identity.
  bool compressed_encoding() const { return compressed_encoding_; }

  // Why the request, whole headers in hand, cannot be served; nullopt when it can.
  std::optional<Refusal> refusal() const;

 private:
  size_t max_list_bytes_;
  size_t list_bytes_ = 0;
  Method method_ = Method::kUnknown;
  bool post_ = false;
  bool saw_method_ = false;
  bool grpc_content_type_ = false;
  bool compressed_encoding_ = false;
  bool timeout_malformed_ = false;
  std::optional<std::chrono::nanoseconds> timeout_;
};

// A unary request's body: DATA bytes in any chunks, one length-prefixed message out (a 1-byte
// compressed flag, a 4-byte big-endian length, the bytes). A message over the cap is refused
// from its prefix, before any of it is kept; so is a second message.
class MessageReader {
 public:
  MessageReader(size_t max_message_bytes, bool compressed_encoding)
      : max_message_bytes_(max_message_bytes), compressed_encoding_(compressed_encoding) {}

  // Takes the next DATA bytes. Once it returns a refusal, the stream is to be answered with it
  // and no more bytes are taken.
  std::optional<Refusal> feed(std::string_view bytes);
  // At END_STREAM: a refusal unless exactly one whole message arrived.
  std::optional<Refusal> finish() const;
  // The message's bytes, once finish() returned nullopt.
  std::string_view message() const { return message_; }

 private:
  size_t max_message_bytes_;
  bool compressed_encoding_;
  bool whole_ = false;
  std::optional<Refusal> refused_;
  uint8_t prefix_[5] = {};
  size_t prefix_size_ = 0;
  uint32_t length_ = 0;
  std::string message_;
};

// The response's one message: the 5-byte prefix (flag 0: we never compress) and the bytes.
std::string frame_message(std::string_view proto);

}  // namespace tollgate::rls::wire

#endif  // TOLLGATE_SRC_RLS_GRPC_WIRE_H_
