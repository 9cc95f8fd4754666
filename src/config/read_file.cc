#include "read_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tollgate/config_error.h"

namespace tollgate {

std::string read_config_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, 0, 0, std::string("cannot read ") + what + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace tollgate
