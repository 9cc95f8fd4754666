// A fresh directory for one test: unique (mkdtemp), so tests that run at once never share one,
// and removed when the test is done, unless it failed: then it is kept for a look and its path
// is printed. Every suite that needs files on disk takes one of these.
#ifndef TOLLGATE_TESTS_SUPPORT_TEMP_DIR_H_
#define TOLLGATE_TESTS_SUPPORT_TEMP_DIR_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tollgate::testing {

class TempDir {
 public:
  // "$TMPDIR/tollgate-<prefix>-XXXXXX".
  explicit TempDir(std::string_view prefix) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / ("tollgate-" + std::string(prefix) + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
    }
    path_ = pattern;
  }
  ~TempDir() {
    if (::testing::Test::HasFailure()) {
      std::cerr << "kept for a look: " << path_.string() << "\n";
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }
  std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_TEMP_DIR_H_
