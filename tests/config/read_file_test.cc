// Reading and writing configuration files (src/config/read_file.h): what is refused, and that
// the atomic write cannot be redirected.
#include "config/read_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "support/temp_dir.h"
#include "tollgate/config_error.h"

namespace tollgate {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The cache used to be written through PATH.tmp, a name anyone who can write to the directory
// can plant a symlink at (issue 34, finding 11): the write then went wherever it pointed.
TEST(ReadFile, TheAtomicWriteDoesNotFollowASymlinkPlantedAtItsTemporaryName) {
  const testing::TempDir temp("read-file");
  const fs::path& dir = temp.path();
  std::ofstream(dir / "victim") << "untouched\n";
  fs::create_symlink(dir / "victim", dir / "rules.cache.tmp");
  ASSERT_EQ(write_file_atomically((dir / "rules.cache").string(), "rules: []\n"), "");
  EXPECT_EQ(slurp(dir / "rules.cache"), "rules: []\n");
  EXPECT_EQ(slurp(dir / "victim"), "untouched\n");
  EXPECT_EQ(fs::status(dir / "rules.cache").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  // Nothing left behind but the file, the victim and the planted link.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 3);
}

TEST(ReadFile, AFileOverTheCapIsRefusedNamingItsSize) {
  const fs::path path = fs::temp_directory_path() / ("tollgate-big-" + std::to_string(getpid()) + ".yaml");
  {
    std::ofstream out(path);
    out << std::string(kMaxConfigFileBytes + 1, '#');
  }
  try {
    read_config_file(path.string(), "rules file");
    ADD_FAILURE() << "read a file over the cap";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("at most " + std::to_string(kMaxConfigFileBytes)), std::string::npos)
        << e.what();
  }
  fs::remove(path);
}

}  // namespace
}  // namespace tollgate
