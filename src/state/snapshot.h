// A node's state on disk (tollgated --state-dir, issue 35): the file format around
// proto/tollgate/state/v1/state.proto, written atomically and read back whole or not at all.
//
//   "TGSTATE\0" | be32 version (1) | HMAC-SHA256 (32 bytes) | Snapshot message
//
// The MAC is OpenSSL's HMAC-SHA256 under the cluster's signing key (any key of the cluster key
// file verifies, so a rotation does not orphan a snapshot; without a key, an empty key: a
// checksum, no authenticity) of "tollgate-state" 0x00 | be32 version | the message. It refuses a
// torn or corrupted file, and one written by another cluster, before anything of it is used.
#ifndef TOLLGATE_SRC_STATE_SNAPSHOT_H_
#define TOLLGATE_SRC_STATE_SNAPSHOT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "codec/cluster_key.h"
#include "core/node.h"

namespace tollgate::state {

inline constexpr uint32_t kFormatVersion = 1;
// The most a state file may hold: about 20 million keys of 50 bytes.
inline constexpr size_t kMaxStateFileBytes = size_t{1} << 30;

// The file's bytes for `s`, written at wall time `written_unix_ns`. Throws std::length_error when
// they would be more than kMaxStateFileBytes (the reader's bound), std::runtime_error if
// serializing or OpenSSL fails.
std::string encode(const NodeState& s, int64_t written_unix_ns, const ClusterKeys& keys);

struct Loaded {
  NodeState state;
  int64_t written_unix_ns = 0;
};

// The state in `bytes`, read from `path` (named in errors). Throws ConfigError saying what is
// wrong: not a state file, another format version, truncated or corrupted, or written under
// another cluster key.
Loaded decode(std::string_view bytes, const ClusterKeys& keys, const std::string& path);

// The file at `path`, or nullopt if there is none (a first start; an empty file is a file, which
// decode() refuses). Throws ConfigError when it exists but cannot be read, or is larger than
// kMaxStateFileBytes.
std::optional<std::string> read_file(const std::string& path);

}  // namespace tollgate::state

#endif  // TOLLGATE_SRC_STATE_SNAPSHOT_H_
