// An Endpoint as the socket address to bind or connect to: the one conversion, shared by the
// server's listeners and the client library's two kinds of connection. Header-only (Asio).
#ifndef TOLLGATE_SRC_API_SOCKET_ADDRESS_H_
#define TOLLGATE_SRC_API_SOCKET_ADDRESS_H_

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <optional>
#include <string>

#include "api/endpoint.h"

namespace tollgate::api {

// The socket address of `ep`, or nullopt (and why in *error) when its host is not an address.
inline std::optional<boost::asio::generic::stream_protocol::endpoint> socket_address(const Endpoint& ep,
                                                                                     std::string* error) {
  namespace asio = boost::asio;
  if (ep.kind == Endpoint::Kind::kUnix) return asio::local::stream_protocol::endpoint(ep.path);
  boost::system::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(ep.host, ec);
  if (ec) {
    if (error) *error = "bad address " + ep.host + ": " + ec.message();
    return std::nullopt;
  }
  return asio::ip::tcp::endpoint(ip, ep.port);
}

}  // namespace tollgate::api

#endif  // TOLLGATE_SRC_API_SOCKET_ADDRESS_H_
