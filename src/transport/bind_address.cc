#include "bind_address.h"

#include <stdexcept>

#include "util/host_port.h"

namespace tollgate {

std::pair<boost::asio::ip::address, uint16_t> parse_bind_address(const std::string& bind) {
  std::string host, why;
  uint16_t port = 0;
  if (!split_host_port(bind, &host, &port, &why, /*allow_port_zero=*/true)) throw std::runtime_error("--bind " + why);
  boost::system::error_code ec;
  const auto ip = boost::asio::ip::make_address(host, ec);
  if (ec) throw std::runtime_error("--bind " + bind + ": host must be an IP address (" + ec.message() + ")");
  return {ip, port};
}

}  // namespace tollgate
