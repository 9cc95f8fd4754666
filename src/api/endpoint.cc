#include "api/endpoint.h"

#include "util/host_port.h"

#include <arpa/inet.h>
#include <sys/un.h>

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
      return fail(error, text,
                  "the socket path is " + std::to_string(ep.path.size()) + " bytes long; Unix sockets allow at most " +
                      std::to_string(kMaxUnixPathBytes));
    }
    return ep;
  }
  if (text.starts_with(kTcpPrefix)) {
    ep.kind = Endpoint::Kind::kTcp;
    const std::string_view rest = text.substr(kTcpPrefix.size());
    std::string why;
    const bool bracketed = rest.starts_with('[');
    if (!bracketed && rest.substr(0, rest.rfind(':')).find(':') != std::string_view::npos) {
      return fail(error, text, "write IPv6 addresses in brackets, e.g. tcp:[::1]:7070");
    }
    if (!split_host_port(rest, &ep.host, &ep.port, &why, /*allow_port_zero=*/true)) return fail(error, text, why);
    if (bracketed) {
      if (!is_ipv6(ep.host)) return fail(error, text, "\"" + ep.host + "\" is not an IPv6 address");
      return ep;
    }
    if (ep.host == "localhost") ep.host = "127.0.0.1";
    if (!is_ipv4(ep.host)) {
      return fail(error, text,
                  "the host must be an IP address or localhost (names are not resolved), got \"" + ep.host + "\"");
    }
    return ep;
  }
  return fail(error, text, "expected unix:PATH or tcp:HOST:PORT");
}

}  // namespace tollgate::api
