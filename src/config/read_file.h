// Reading a whole configuration file, for every loader in src/config; writing one safely.
#ifndef TOLLGATE_SRC_CONFIG_READ_FILE_H_
#define TOLLGATE_SRC_CONFIG_READ_FILE_H_

#include <string>
#include <string_view>

namespace tollgate {

// The bytes of the file at `path`. Throws ConfigError "PATH: cannot read WHAT: <errno text>".
std::string read_config_file(const std::string& path, const char* what);

// Replaces the file at `path` with `bytes` so that a reader (or a crash) sees the old contents
// or the new, never a mix: written to PATH.tmp (mode 0640), flushed to disk, renamed over it.
// "" on success, else what failed with the errno text.
std::string write_file_atomically(const std::string& path, std::string_view bytes);

// A file's path, modification time and size: what changes when it is edited or replaced
// ("missing" if it cannot be read), for watching a file by polling.
std::string file_fingerprint(const std::string& path);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_READ_FILE_H_
