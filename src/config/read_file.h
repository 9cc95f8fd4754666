// Reading a whole configuration file, for every loader in src/config.
#ifndef TOLLGATE_SRC_CONFIG_READ_FILE_H_
#define TOLLGATE_SRC_CONFIG_READ_FILE_H_

#include <string>

namespace tollgate {

// The bytes of the file at `path`. Throws ConfigError "PATH: cannot read WHAT: <errno text>".
std::string read_config_file(const std::string& path, const char* what);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CONFIG_READ_FILE_H_
