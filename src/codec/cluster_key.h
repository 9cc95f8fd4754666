// The shared secret that authenticates gossip (--cluster-key-file).
//
// The file holds one or two keys, one per line, each as hex (`tollgate keygen`, or
// `openssl rand -hex 32`),
// at least 32 bytes once decoded. `#` starts a comment; blank lines are ignored. The first key
// signs every message; every key listed verifies. So a key rotates without downtime:
//   1. everywhere: "OLD\nNEW"  (sign with OLD, accept both)
//   2. everywhere: "NEW\nOLD"  (sign with NEW, still accept OLD from nodes not yet at step 2)
//   3. everywhere: "NEW"
// Every node must finish a step before any node starts the next one.
#ifndef TOLLGATE_SRC_CODEC_CLUSTER_KEY_H_
#define TOLLGATE_SRC_CODEC_CLUSTER_KEY_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/config_error.h"

namespace tollgate {

class ClusterKeys {
 public:
  static constexpr size_t kMinKeyBytes = 32;  // HMAC-SHA256 output size: shorter keys weaken it
  static constexpr size_t kMaxKeys = 2;       // the signing key and one more during rotation

  // No key: messages are neither signed nor checked.
  ClusterKeys() = default;
  // `raw_keys` are the decoded key bytes, the signing key first. Throws std::invalid_argument
  // for more than kMaxKeys keys or a key shorter than kMinKeyBytes.
  explicit ClusterKeys(std::vector<std::string> raw_keys);
  // Overwrites the key bytes before freeing them (best effort: copies made by callers and the
  // file buffers of the OS are out of reach).
  ~ClusterKeys();
  ClusterKeys(const ClusterKeys&) = default;
  ClusterKeys& operator=(const ClusterKeys&) = default;
  ClusterKeys(ClusterKeys&&) noexcept = default;
  ClusterKeys& operator=(ClusterKeys&&) noexcept = default;

  bool empty() const { return keys_.empty(); }
  // The key that signs; precondition: !empty().
  const std::string& signing_key() const { return keys_.front(); }
  // Every key that verifies, the signing key first.
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  std::vector<std::string> keys_;
};

// Parses the key file format above from `text`; `source` names it in errors. Throws
// ConfigError "source:LINE[:COLUMN]: problem" for bad hex, an odd number of digits, a short key
// or a third key, and "source: no key ..." when nothing but comments is there: a key file that
// authenticates nothing is a mistake, not a way to turn authentication off.
ClusterKeys parse_cluster_keys(std::string_view text, const std::string& source);

// Reads and parses the key file at `path`. An unreadable file is a ConfigError too.
ClusterKeys load_cluster_keys(const std::string& path);

// A new random key in the key file's format: 32 bytes from OpenSSL's CSPRNG as 64 hex digits.
// Throws std::runtime_error if the generator fails (it never returns a weak key).
std::string generate_cluster_key_hex();

// A warning for the log when the file at `path` can be read or written by its group or by
// others (anyone who reads the key can forge every message); nullopt when it cannot, or when the
// file cannot be examined (load_cluster_keys reports that).
std::optional<std::string> cluster_key_file_warning(const std::string& path);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CODEC_CLUSTER_KEY_H_
