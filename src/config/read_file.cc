#include "read_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tollgate/config_error.h"

namespace tollgate {

std::string read_config_file(const std::string& path, const char* what) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer (and hold the node's thread).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw ConfigError(path, 0, 0, std::string("cannot read ") + what + ": " + std::strerror(errno));
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0) {
    problem = std::string("cannot read ") + what + ": " + std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    problem = std::string("is a directory, not a ") + what;
  } else if (!S_ISREG(st.st_mode)) {
    // /dev/null would read as an empty file (no rules: every limit lifted), /dev/zero forever.
    problem = std::string("is not a regular file; a ") + what + " must be one";
  } else if (uint64_t(st.st_size) > kMaxConfigFileBytes) {
    problem = std::string("the ") + what + " is " + std::to_string(st.st_size) + " bytes; at most " +
              std::to_string(kMaxConfigFileBytes);
  }
  std::string text;
  if (problem.empty()) {
    // Read to the end, never past the cap: a file may grow while it is read.
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        problem = std::string("cannot read ") + what + ": " + std::strerror(errno);
        break;
      }
      if (n == 0) break;
      text.append(buf, size_t(n));
      if (text.size() > kMaxConfigFileBytes) {
        problem = std::string("the ") + what + " is over " + std::to_string(kMaxConfigFileBytes) + " bytes";
        break;
      }
    }
  }
  ::close(fd);
  if (!problem.empty()) throw ConfigError(path, 0, 0, problem);
  return text;
}

std::string write_file_atomically(const std::string& path, std::string_view bytes) {
  // A new temporary beside the file, created exclusively (mkostemp: O_CREAT | O_EXCL), so a
  // symlink planted at a predictable name cannot redirect the write.
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return "cannot create a temporary file beside " + path + ": " + std::strerror(errno);
  if (::fchmod(fd, 0640) != 0) {
    const std::string why = "cannot set the mode of " + tmp + ": " + std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return why;
  }
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
