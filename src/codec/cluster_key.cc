#include "codec/cluster_key.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <utility>

namespace tollgate {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void cleanse(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
}

// Shown for a character that is not a hex digit: itself when printable, else its code.
std::string describe(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u > 0x20 && u < 0x7f) return std::string("'") + c + "'";
  if (c == ' ') return "a space";
  if (c == '\t') return "a tab";
  char code[8];
  std::snprintf(code, sizeof code, "0x%02x", u);
  return std::string("byte ") + code;
}

}  // namespace

ClusterKeys::ClusterKeys(std::vector<std::string> raw_keys) : keys_(std::move(raw_keys)) {
  if (keys_.size() > kMaxKeys) {
    throw std::invalid_argument("ClusterKeys: " + std::to_string(keys_.size()) + " keys, at most 2");
  }
  for (const std::string& k : keys_) {
    if (k.size() < kMinKeyBytes) {
      throw std::invalid_argument("ClusterKeys: key of " + std::to_string(k.size()) + " bytes, need at least " +
                                  std::to_string(kMinKeyBytes));
    }
  }
}

ClusterKeys::~ClusterKeys() {
  for (std::string& k : keys_) cleanse(k);
}

ClusterKeys parse_cluster_keys(std::string_view text, const std::string& source) {
  // Whatever key bytes are still here when we leave (an error, or nothing was moved out) are
  // wiped first.
  std::vector<std::string> keys;
  std::string key;
  struct Wipe {
    std::vector<std::string>& keys;
    std::string& key;
    ~Wipe() {
      for (std::string& k : keys) cleanse(k);
      cleanse(key);
    }
  } wipe{keys, key};

  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    ++line_no;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;

    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    // Trim spaces, tabs and the \r of CRLF files; the key itself may not contain any.
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) continue;  // blank or comment only
    const size_t last = line.find_last_not_of(" \t\r");
    const std::string_view hex = line.substr(first, last - first + 1);

    if (keys.size() == ClusterKeys::kMaxKeys) {
      throw ConfigError(source, line_no, 0,
                        "more than two keys (the first signs, both verify; remove the retired one)");
    }
    for (size_t i = 0; i < hex.size(); ++i) {
      if (hex_value(hex[i]) < 0) {
        throw ConfigError(source, line_no, static_cast<int>(first + i) + 1,
                          "expected a hex key (e.g. from `openssl rand -hex 32`), found " + describe(hex[i]));
      }
    }
    if (hex.size() % 2 != 0) {
      throw ConfigError(source, line_no, 0,
                        "odd number of hex digits (" + std::to_string(hex.size()) + "): a byte is two digits");
    }
    const size_t bytes = hex.size() / 2;
    if (bytes < ClusterKeys::kMinKeyBytes) {
      throw ConfigError(source, line_no, 0,
                        "key is " + std::to_string(bytes) + " bytes, need at least " +
                            std::to_string(ClusterKeys::kMinKeyBytes) + " (e.g. from `openssl rand -hex 32`)");
    }
    key.clear();
    key.reserve(bytes);
    for (size_t i = 0; i < hex.size(); i += 2) {
      key.push_back(static_cast<char>(hex_value(hex[i]) * 16 + hex_value(hex[i + 1])));
    }
    keys.push_back(std::move(key));
    key = std::string();
  }
  if (keys.empty()) {
    throw ConfigError(source, 0, 0,
                      "no key (expected one or two hex keys, one per line, e.g. from `openssl rand -hex 32`)");
  }
  return ClusterKeys(std::move(keys));
}

ClusterKeys load_cluster_keys(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw ConfigError(path, 0, 0, std::string("cannot read cluster key file: ") + std::strerror(errno));
  // Two 32-byte keys in hex with comments take well under a kilobyte; anything near this is the
  // wrong file.
  constexpr std::streamoff kMaxFileBytes = 64 << 10;
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxFileBytes) {
    throw ConfigError(path, 0, 0, "not a cluster key file: larger than 64 KiB");
  }
  // Read in one go into a buffer of the final size, so no stray copy of the text is left behind
  // by a growing buffer; the buffer is wiped on the way out.
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(text.data(), size);
  struct Wipe {
    std::string& text;
    ~Wipe() { cleanse(text); }
  } wipe{text};
  if (in.gcount() != size) {
    throw ConfigError(path, 0, 0, std::string("cannot read cluster key file: ") + std::strerror(errno));
  }
  return parse_cluster_keys(text, path);
}

std::string generate_cluster_key_hex() {
  unsigned char bytes[ClusterKeys::kMinKeyBytes];
  if (RAND_bytes(bytes, sizeof bytes) != 1) throw std::runtime_error("OpenSSL's random generator failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  OPENSSL_cleanse(bytes, sizeof bytes);
  return hex;
}

std::optional<std::string> cluster_key_file_warning(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  const mode_t others = st.st_mode & (S_IRWXG | S_IRWXO);
  if (others == 0) return std::nullopt;
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return path + ": cluster key file is accessible to its group or to others (mode " + mode +
         "); anyone who can read it can forge gossip. Run: chmod 600 " + path;
}

}  // namespace tollgate
