// "host:port" and "[v6]:port": the one parser of network addresses, for the peers file, --bind,
// --seeds, the transports and the client API's tcp: endpoints.
#ifndef TOLLGATE_SRC_UTIL_HOST_PORT_H_
#define TOLLGATE_SRC_UTIL_HOST_PORT_H_

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace tollgate {

// Splits "host:port" or "[v6]:port" into *host (brackets removed) and *port, either may be null.
// Without brackets the last ':' separates the port ("::1:80" is host "::1"). The port is a number
// in 1..65535, or 0..65535 with `allow_port_zero` ("pick a free port"). Returns false, with
// *error (if given) = `address "TEXT": why`, otherwise.
inline bool split_host_port(std::string_view address, std::string* host, uint16_t* port, std::string* error,
                            bool allow_port_zero = false) {
  auto fail = [&](const std::string& why) {
    if (error) *error = "address \"" + std::string(address) + "\": " + why;
    return false;
  };
  std::string_view h, p;
  if (address.starts_with('[')) {
    const size_t close = address.find(']');
    if (close == std::string_view::npos) return fail("missing ']' after the IPv6 address");
    h = address.substr(1, close - 1);
    const std::string_view rest = address.substr(close + 1);
    if (!rest.starts_with(':')) return fail("expected :PORT after ']'");
    p = rest.substr(1);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return fail("expected host:port");
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
  }
  if (h.empty()) return fail("missing host");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || (value == 0 && !allow_port_zero) ||
      value > 65535) {
    return fail(allow_port_zero ? "port must be a number from 0 to 65535" : "port must be a number from 1 to 65535");
  }
  if (host) *host = std::string(h);
  if (port) *port = uint16_t(value);
  return true;
}

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_HOST_PORT_H_
