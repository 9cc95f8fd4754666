#include "tollgate/peers_file.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "read_file.h"
#include "tollgate/config_error.h"

namespace tollgate {

bool split_host_port(std::string_view address, std::string* host, uint16_t* port, std::string* error,
                     bool allow_port_zero) {
  auto fail = [&](const std::string& why) {
    if (error) *error = "address \"" + std::string(address) + "\": " + why;
    return false;
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return fail("expected host:port");
  std::string_view h = address.substr(0, colon);
  const std::string_view p = address.substr(colon + 1);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) return fail("missing host");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || (value == 0 && !allow_port_zero) || value > 65535) {
    return fail("port must be a number from 1 to 65535");
  }
  if (host) *host = std::string(h);
  if (port) *port = uint16_t(value);
  return true;
}

std::vector<PeerSpec> parse_peers(std::string_view text, const std::string& source) {
  std::vector<PeerSpec> peers;
  std::unordered_map<std::string, int> id_line, address_line;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    std::string line(text.substr(pos, eol - pos));
    pos = eol + 1;
    ++line_no;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string id, address, extra;
    if (!(fields >> id)) continue;  // blank or comment
    if (!(fields >> address)) throw ConfigError(source, line_no, 0, "peer \"" + id + "\" has no address (expected: id host:port)");
    if (fields >> extra) throw ConfigError(source, line_no, 0, "unexpected \"" + extra + "\" after the address (expected: id host:port)");
    std::string why;
    if (!split_host_port(address, nullptr, nullptr, &why)) throw ConfigError(source, line_no, 0, why);
    if (auto [it, fresh] = id_line.emplace(id, line_no); !fresh) {
      throw ConfigError(source, line_no, 0, "peer id \"" + id + "\" already listed at line " + std::to_string(it->second));
    }
    if (auto [it, fresh] = address_line.emplace(address, line_no); !fresh) {
      throw ConfigError(source, line_no, 0, "address " + address + " already listed at line " + std::to_string(it->second));
    }
    peers.push_back({id, address});
  }
  return peers;
}

std::vector<PeerSpec> load_peers_file(const std::string& path) {
  return parse_peers(read_config_file(path, "peers file"), path);
}

}  // namespace tollgate
