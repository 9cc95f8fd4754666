// Where the client API listens or connects: "unix:PATH" or "tcp:HOST:PORT". Shared by the daemon
// (--listen), the client library and the CLI (--endpoint). Pure parsing, no sockets.
#ifndef TOLLGATE_SRC_API_ENDPOINT_H_
#define TOLLGATE_SRC_API_ENDPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tollgate::api {

struct Endpoint {
  enum class Kind : uint8_t { kUnix, kTcp };
  Kind kind = Kind::kUnix;
  std::string path;   // kUnix: the socket file path (as given; may be relative)
  std::string host;   // kTcp: an IPv4 or IPv6 address literal, without brackets
  uint16_t port = 0;  // kTcp: 0 asks the server for an ephemeral port

  // "unix:/run/x.sock", "tcp:127.0.0.1:7070", "tcp:[::1]:7070": parse_endpoint reads it back.
  std::string to_string() const;
  // True for Unix sockets and for TCP on 127.0.0.0/8 or ::1. The daemon warns when it listens on
  // anything else: the API has no authentication.
  bool is_loopback() const;

  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

// Parses "unix:PATH" or "tcp:HOST:PORT".
//  - PATH is non-empty and shorter than 108 bytes (the kernel's sockaddr_un limit).
//  - HOST is an IPv4 literal (127.0.0.1), a bracketed IPv6 literal ([::1]) or "localhost"
//    (read as 127.0.0.1). Names are not resolved: a local API has no use for DNS, and a blocking
//    lookup has no place in a 2 ms deadline.
//  - PORT is a decimal number in [0, 65535].
// On failure returns nullopt and, if `error` is given, says what is wrong, quoting the input.
std::optional<Endpoint> parse_endpoint(std::string_view text, std::string* error = nullptr);

}  // namespace tollgate::api

#endif  // TOLLGATE_SRC_API_ENDPOINT_H_
