#include "read_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "tollgate/config_error.h"

namespace tollgate {

std::string read_config_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, 0, 0, std::string("cannot read ") + what + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) return "cannot create " + tmp + ": " + std::strerror(errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = "cannot write " + tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return why;
    }
    done += size_t(n);
  }
  const bool synced = ::fsync(fd) == 0;
  if (!(::close(fd) == 0 && synced)) {
    const std::string why = "cannot flush " + tmp + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  }
  // The rename itself, to disk: without it a power cut could bring the old contents back.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

std::string file_fingerprint(const std::string& path) {
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  if (ec) return "missing";
  const auto size = std::filesystem::file_size(path, ec);
  return path + '\0' + std::to_string(mtime) + '\0' + std::to_string(ec ? 0 : size);
}

}  // namespace tollgate
