// Reading a whole configuration file, for every loader in src/config; writing one safely.
#ifndef TOLLGATE_SRC_CONFIG_READ_FILE_H_
#define TOLLGATE_SRC_CONFIG_READ_FILE_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace tollgate {

// The most a configuration file may hold (rules, RLS config, peers, keys, --config).
inline constexpr size_t kMaxConfigFileBytes = 4u << 20;

// The bytes of the regular file at `path` (symlinks followed). Throws ConfigError naming the
// path: "cannot read WHAT: <errno text>", a directory, a device or FIFO (/dev/null would read as
// an empty file), or more than kMaxConfigFileBytes.
std::string read_config_file(const std::string& path, const char* what);

// Replaces the file at `path` with `bytes` so that a reader (or a crash) sees the old contents
// or the new, never a mix: written to a new PATH.tmp.XXXXXX (created exclusively, mode 0640),
// flushed to disk, renamed over it.
// "" on success, else what failed with the errno text.
std::string write_file_atomically(const std::string& path, std::string_view bytes);

// A file's path, modification time and size: what changes when it is edited or replaced
// ("missing" if it cannot be read), for watching a file by polling.
std::string file_fingerprint(const std::string& path);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_READ_FILE_H_
