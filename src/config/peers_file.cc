#include "config/peers_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "read_file.h"
#include "tollgate/config_error.h"
#include "util/host_port.h"

namespace tollgate {

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
    if (!(fields >> address))
      throw ConfigError(source, line_no, 0, "peer \"" + id + "\" has no address (expected: id host:port)");
    if (fields >> extra)
      throw ConfigError(source, line_no, 0, "unexpected \"" + extra + "\" after the address (expected: id host:port)");
    std::string why;
    if (!split_host_port(address, nullptr, nullptr, &why)) throw ConfigError(source, line_no, 0, why);
    if (auto [it, fresh] = id_line.emplace(id, line_no); !fresh) {
      throw ConfigError(source, line_no, 0,
                        "peer id \"" + id + "\" already listed at line " + std::to_string(it->second));
    }
    if (auto [it, fresh] = address_line.emplace(address, line_no); !fresh) {
      throw ConfigError(source, line_no, 0,
                        "address " + address + " already listed at line " + std::to_string(it->second));
    }
    peers.push_back({id, address});
  }
  return peers;
}

std::vector<PeerSpec> load_peers_file(const std::string& path) {
  return parse_peers(read_config_file(path, "peers file"), path);
}

}  // namespace tollgate
