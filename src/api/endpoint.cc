#include "api/endpoint.h"

#include <arpa/inet.h>
#include <sys/un.h>

#include <charconv>

namespace tollgate::api {
namespace {

constexpr std::string_view kUnixPrefix = "unix:";
constexpr std::string_view kTcpPrefix = "tcp:";
constexpr size_t kMaxUnixPathBytes = sizeof(sockaddr_un{}.sun_path) - 1;  // room for the NUL

std::optional<Endpoint> fail(std::string* error, std::string_view text, const std::string& why) {
  if (error) *error = "invalid endpoint \"" + std::string(text) + "\": " + why;
  return std::nullopt;
}

bool is_ipv4(const std::string& s) {
  in_addr addr{};
  return inet_pton(AF_INET, s.c_str(), &addr) == 1;
}

bool is_ipv6(const std::string& s) {
  in6_addr addr{};
  return inet_pton(AF_INET6, s.c_str(), &addr) == 1;
}

}  // namespace

std::string Endpoint::to_string() const {
  if (kind == Kind::kUnix) return std::string(kUnixPrefix) + path;
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(kTcpPrefix) + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool Endpoint::is_loopback() const {
  if (kind == Kind::kUnix) return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

std::optional<Endpoint> parse_endpoint(std::string_view text, std::string* error) {
  Endpoint ep;
  if (text.starts_with(kUnixPrefix)) {
    ep.kind = Endpoint::Kind::kUnix;
    ep.path = std::string(text.substr(kUnixPrefix.size()));
    if (ep.path.empty()) return fail(error, text, "the socket path is empty (expected unix:PATH)");
    if (ep.path.find('\0') != std::string::npos) {
      return fail(error, text, "the socket path contains a NUL byte");
    }
    if (ep.path.size() > kMaxUnixPathBytes) {
      return fail(error, text, "the socket path is " + std::to_string(ep.path.size()) +
                                   " bytes long; Unix sockets allow at most " +
                                   std::to_string(kMaxUnixPathBytes));
    }
    return ep;
  }
  if (text.starts_with(kTcpPrefix)) {
    ep.kind = Endpoint::Kind::kTcp;
    std::string_view rest = text.substr(kTcpPrefix.size());
    std::string_view host;
    std::string_view port;
    if (rest.starts_with("[")) {
      const size_t close = rest.find(']');
      if (close == std::string_view::npos) return fail(error, text, "missing ']' after the IPv6 address");
      host = rest.substr(1, close - 1);
      rest.remove_prefix(close + 1);
      if (!rest.starts_with(":")) return fail(error, text, "expected :PORT after ']'");
      port = rest.substr(1);
      ep.host = std::string(host);
      if (!is_ipv6(ep.host)) return fail(error, text, "\"" + ep.host + "\" is not an IPv6 address");
    } else {
      const size_t colon = rest.rfind(':');
      if (colon == std::string_view::npos) return fail(error, text, "expected tcp:HOST:PORT");
      host = rest.substr(0, colon);
      port = rest.substr(colon + 1);
      ep.host = host == "localhost" ? std::string("127.0.0.1") : std::string(host);
      if (ep.host.empty()) return fail(error, text, "the host is empty (expected tcp:HOST:PORT)");
      if (ep.host.find(':') != std::string::npos) {
        return fail(error, text, "write IPv6 addresses in brackets, e.g. tcp:[::1]:7070");
      }
      if (!is_ipv4(ep.host)) {
        return fail(error, text, "the host must be an IP address or localhost (names are not "
                                 "resolved), got \"" + ep.host + "\"");
      }
    }
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
      return fail(error, text, "the port must be a number from 0 to 65535, got \"" + std::string(port) + "\"");
    }
    ep.port = static_cast<uint16_t>(value);
    return ep;
  }
  return fail(error, text, "expected unix:PATH or tcp:HOST:PORT");
}

}  // namespace tollgate::api
