// The static membership's peers file: one peer per line, `id host:port`, '#' starts a comment.
//
//   # id     gossip address
//   node-a   10.0.1.5:7946
//   node-b   10.0.1.6:7946
//
// Duplicate ids or addresses, a missing or malformed address and extra fields are errors
// (ConfigError naming file and line): a typo must not silently shrink the cluster.
#ifndef TOLLGATE_SRC_CONFIG_PEERS_FILE_H_
#define TOLLGATE_SRC_CONFIG_PEERS_FILE_H_

#include <string>
#include <string_view>
#include <vector>

#include "core/membership.h"

namespace tollgate {

std::vector<PeerSpec> parse_peers(std::string_view text, const std::string& source);
std::vector<PeerSpec> load_peers_file(const std::string& path);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_PEERS_FILE_H_
