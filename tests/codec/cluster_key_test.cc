#include "codec/cluster_key.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace tollgate {
namespace {

const std::string kHex32 = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const std::string kHex40 = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100deadbeefcafef00d";

// A key file with `text` in the test's temporary directory, removed afterwards.
class KeyFile {
 public:
  explicit KeyFile(const std::string& text, mode_t mode = 0600) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = ::testing::TempDir() + "tollgate-keys-" + info->name() + "-" + std::to_string(::getpid()) + ".txt";
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << text;
    ::chmod(path_.c_str(), mode);
  }
  ~KeyFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string error_of(const std::string& text, const std::string& source = "keys.txt") {
  try {
    parse_cluster_keys(text, source);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ClusterKeys, NoKeysMeansNoAuthentication) {
  EXPECT_TRUE(ClusterKeys{}.empty());
  EXPECT_TRUE(ClusterKeys{}.keys().empty());
}

TEST(ClusterKeys, LoadsOneOrTwoHexKeysTheFirstSigning) {
  const KeyFile one("# cluster key, rotated 2024-06-01\n\n" + kHex32 + "\n");
  const ClusterKeys k1 = load_cluster_keys(one.path());
  ASSERT_EQ(k1.keys().size(), 1u);
  EXPECT_EQ(k1.signing_key().size(), 32u);
  EXPECT_EQ(static_cast<unsigned char>(k1.signing_key()[1]), 0x11);

  const KeyFile two("  " + kHex40 + "  # new\r\n\t" + kHex32 + "\r\n# old one, remove after the rollout\r\n");
  const ClusterKeys k2 = load_cluster_keys(two.path());
  ASSERT_EQ(k2.keys().size(), 2u);
  EXPECT_EQ(k2.signing_key().size(), 40u);
  EXPECT_EQ(k2.keys()[1], k1.signing_key());
}

TEST(ClusterKeys, UpperCaseHexReadsTheSame) {
  std::string upper = kHex32;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(parse_cluster_keys(upper, "k").signing_key(), parse_cluster_keys(kHex32, "k").signing_key());
}

TEST(ClusterKeys, AShortKeyNamesTheFileAndLine) {
  EXPECT_EQ(error_of("# comment\n\n00112233445566778899\n").rfind("keys.txt:3: key is 10 bytes, need at least 32", 0),
            0u)
      << error_of("# comment\n\n00112233445566778899\n");
}

TEST(ClusterKeys, AThirdKeyIsAnError) {
  const std::string text = kHex32 + "\n" + kHex40 + "\n\n" + kHex32 + "\n";
  EXPECT_EQ(error_of(text).rfind("keys.txt:4: more than two keys", 0), 0u) << error_of(text);
}

TEST(ClusterKeys, AFileWithoutAKeyIsAnError) {
  EXPECT_EQ(error_of("").rfind("keys.txt: no key", 0), 0u) << error_of("");
  EXPECT_EQ(error_of("# only a comment\n   \n").rfind("keys.txt: no key", 0), 0u);
}

TEST(ClusterKeys, BadHexNamesTheLineAndColumn) {
  std::string bad = kHex32;
  bad[3] = 'g';
  EXPECT_EQ(error_of("\n  " + bad + "\n").rfind("keys.txt:2:6: expected a hex key", 0), 0u) << error_of("\n  " + bad);
  EXPECT_NE(error_of("\n  " + bad + "\n").find("found 'g'"), std::string::npos);
  // A key pasted with spaces in it.
  EXPECT_EQ(error_of(kHex32.substr(0, 32) + " " + kHex32.substr(32)).rfind("keys.txt:1:33:", 0), 0u);
  EXPECT_NE(error_of(kHex32.substr(0, 32) + " " + kHex32.substr(32)).find("found a space"), std::string::npos);
}

TEST(ClusterKeys, AnOddNumberOfDigitsIsAnError) {
  EXPECT_EQ(error_of(kHex32 + "a").rfind("keys.txt:1: odd number of hex digits (65)", 0), 0u) << error_of(kHex32 + "a");
}

TEST(ClusterKeys, AnUnreadableFileIsAConfigErrorNamingIt) {
  try {
    load_cluster_keys("/nonexistent/keys.txt");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/nonexistent/keys.txt: cannot read cluster key file", 0), 0u) << e.what();
  }
}

TEST(ClusterKeys, ErrorsFromAFileNameTheFile) {
  const KeyFile file("0011\n");
  try {
    load_cluster_keys(file.path());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.file(), file.path());
    EXPECT_EQ(e.line(), 1);
  }
}

TEST(ClusterKeys, AFileOthersCanReadIsWorthAWarning) {
  const KeyFile readable(kHex32 + "\n", 0644);
  const auto warning = cluster_key_file_warning(readable.path());
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("mode 0644"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("chmod 600"), std::string::npos) << *warning;

  const KeyFile group_only(kHex32 + "\n", 0640);
  EXPECT_TRUE(cluster_key_file_warning(group_only.path()).has_value());

  const KeyFile owner_only(kHex32 + "\n", 0600);
  EXPECT_FALSE(cluster_key_file_warning(owner_only.path()).has_value());
  EXPECT_FALSE(cluster_key_file_warning("/nonexistent/keys.txt").has_value());
}

TEST(ClusterKeys, TheConstructorEnforcesTheSameRules) {
  EXPECT_THROW(ClusterKeys({std::string(31, 'k')}), std::invalid_argument);
  EXPECT_THROW(ClusterKeys({std::string(32, 'a'), std::string(32, 'b'), std::string(32, 'c')}), std::invalid_argument);
  EXPECT_NO_THROW(ClusterKeys({std::string(32, 'a'), std::string(64, 'b')}));
}

}  // namespace
}  // namespace tollgate
