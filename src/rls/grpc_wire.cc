#include "rls/grpc_wire.h"

#include <algorithm>

namespace tollgate::rls::wire {
namespace {

constexpr Refusal kNotGrpc{Code::kInternal, "content-type is not application/grpc", 415};
constexpr Refusal kNotPost{Code::kInternal, "a gRPC call is a POST", 405};
constexpr Refusal kUnknownMethod{Code::kUnimplemented, "unknown method"};
constexpr Refusal kHeadersOverCap{Code::kResourceExhausted, "request headers over the cap"};
constexpr Refusal kTooLarge{Code::kResourceExhausted, "request message over the cap"};
constexpr Refusal kFlagWithoutEncoding{Code::kInternal, "compressed flag set without a grpc-encoding"};
constexpr Refusal kCompressed{Code::kUnimplemented, "compressed requests are not accepted (identity only)"};
constexpr Refusal kBadFlag{Code::kInternal, "malformed message prefix"};
constexpr Refusal kSecondMessage{Code::kUnimplemented, "request cardinality violation: more than one message"};
constexpr Refusal kNoMessage{Code::kUnimplemented, "request cardinality violation: no message"};
constexpr Refusal kTruncated{Code::kInternal, "truncated message"};

// HTTP/2's count of a header field in SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 6.5.2).
constexpr size_t kFieldOverhead = 32;

}  // namespace

std::optional<std::chrono::nanoseconds> parse_timeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  const std::string_view digits = value.substr(0, value.size() - 1);
  int64_t n = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');  // at most 8 digits: no overflow
  }
  if (n == 0) return std::nullopt;  // TimeoutValue is positive
  using std::chrono::nanoseconds;
  switch (value.back()) {
    case 'H':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::hours(n));
    case 'M':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::minutes(n));
    case 'S':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::seconds(n));
    case 'm':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::milliseconds(n));
    case 'u':
      return std::chrono::duration_cast<nanoseconds>(std::chrono::microseconds(n));
    case 'n':
      return nanoseconds(n);
    default:
      return std::nullopt;
  }
}

std::string percent_encode(std::string_view message) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7E && c != '%') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

Method method_of(std::string_view path) {
  if (path == "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit") return Method::kShouldRateLimit;
  if (path == "/grpc.health.v1.Health/Check") return Method::kHealthCheck;
  if (path == "/grpc.health.v1.Health/Watch") return Method::kHealthWatch;
  return Method::kUnknown;
}

bool RequestHeaders::add(std::string_view name, std::string_view value) {
  list_bytes_ += name.size() + value.size() + kFieldOverhead;
  if (over_cap()) return false;
  if (name == ":path") {
    method_ = method_of(value);
  } else if (name == ":method") {
    saw_method_ = true;
    post_ = value == "POST";
  } else if (name == "content-type") {
    // application/grpc, or application/grpc+proto and the like (Envoy's own test: not grpc-web).
    constexpr std::string_view kGrpc = "application/grpc";
    grpc_content_type_ = value.starts_with(kGrpc) &&
                         (value.size() == kGrpc.size() || value[kGrpc.size()] == '+' || value[kGrpc.size()] == ';');
  } else if (name == "grpc-encoding") {
    compressed_encoding_ = value != "identity";
  } else if (name == "grpc-timeout") {
    timeout_ = parse_timeout(value);
    timeout_malformed_ = !timeout_;
  }
  return true;
}

std::optional<Refusal> RequestHeaders::refusal() const {
  if (over_cap()) return kHeadersOverCap;
  if (saw_method_ && !post_) return kNotPost;
  if (!grpc_content_type_) return kNotGrpc;
  if (method_ == Method::kUnknown) return kUnknownMethod;
  return std::nullopt;
}

std::optional<Refusal> MessageReader::feed(std::string_view bytes) {
  if (refused_) return refused_;
  while (!bytes.empty()) {
    if (whole_) return refused_ = kSecondMessage;
    if (prefix_size_ < 5) {
      const size_t take = std::min(bytes.size(), 5 - prefix_size_);
      std::copy_n(bytes.data(), take, prefix_ + prefix_size_);
      prefix_size_ += take;
      bytes.remove_prefix(take);
      if (prefix_size_ < 5) return std::nullopt;
      if (prefix_[0] > 1) return refused_ = kBadFlag;
      if (prefix_[0] == 1) return refused_ = compressed_encoding_ ? kCompressed : kFlagWithoutEncoding;
      length_ = uint32_t(prefix_[1]) << 24 | uint32_t(prefix_[2]) << 16 | uint32_t(prefix_[3]) << 8 | prefix_[4];
      if (length_ > max_message_bytes_) return refused_ = kTooLarge;
      message_.reserve(length_);
      whole_ = length_ == 0;
      continue;
    }
    const size_t take = std::min<size_t>(bytes.size(), length_ - message_.size());
    message_.append(bytes.data(), take);
    bytes.remove_prefix(take);
    whole_ = message_.size() == length_;
  }
  return std::nullopt;
}

std::optional<Refusal> MessageReader::finish() const {
  if (refused_) return refused_;
  if (prefix_size_ == 0) return kNoMessage;
  if (!whole_) return kTruncated;
  return std::nullopt;
}

std::string frame_message(std::string_view proto) {
  std::string out(5, '\0');
  const auto n = uint32_t(proto.size());
  out[1] = char(n >> 24);
  out[2] = char(n >> 16 & 0xFF);
  out[3] = char(n >> 8 & 0xFF);
  out[4] = char(n & 0xFF);
  out.append(proto);
  return out;
}

}  // namespace tollgate::rls::wire
