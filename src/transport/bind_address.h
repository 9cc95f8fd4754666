// The --bind address, shared by the UDP and TCP transports (same host and port number).
#ifndef TOLLGATE_SRC_TRANSPORT_BIND_ADDRESS_H_
#define TOLLGATE_SRC_TRANSPORT_BIND_ADDRESS_H_

#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <string>
#include <utility>

namespace tollgate {

// Parses "IP:PORT" (port 0: any free port). Host names are refused: a daemon binds to an
// interface, and a lookup at start-up would make it depend on DNS. Throws std::runtime_error
// starting "--bind ..." that says what is wrong.
std::pair<boost::asio::ip::address, uint16_t> parse_bind_address(const std::string& bind);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_TRANSPORT_BIND_ADDRESS_H_
