// The version of a configuration file's contents, as operators see it in `tollgate rules
// check`, the daemon's stats (rules_version) and /metrics (tollgate_rules_version): the first
// 48 bits of the SHA-256 of the bytes, as a decimal number (exact in a Prometheus float).
#ifndef TOLLGATE_SRC_CONFIG_CONTENT_VERSION_H_
#define TOLLGATE_SRC_CONFIG_CONTENT_VERSION_H_

#include <cstdint>
#include <string_view>

namespace tollgate {

int64_t content_version(std::string_view bytes);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_CONTENT_VERSION_H_
