#include "http/token_file.h"

#include <sys/stat.h>

#include <cstdio>

#include "config/read_file.h"
#include "tollgate/config_error.h"

namespace tollgate::http {
namespace {

constexpr size_t kMinToken = 16, kMaxToken = 512;

bool token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~' || c == '+' || c == '/';
}

}  // namespace

std::string read_token_file(const std::string& path) {
  std::string text = read_config_file(path, "HTTP token file");
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (!text.empty() && text.back() == '\r') text.pop_back();
  if (text.size() < kMinToken || text.size() > kMaxToken) {
    throw ConfigError(path, 1, 0,
                      "the token has " + std::to_string(text.size()) + " characters; it must have " +
                          std::to_string(kMinToken) + " to " + std::to_string(kMaxToken) +
                          " (e.g. openssl rand -base64 32)");
  }
  size_t i = 0;
  while (i < text.size() && token_char(text[i])) ++i;
  while (i < text.size() && text[i] == '=') ++i;  // padding, at the end only
  if (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    char shown[8];
    std::snprintf(shown, sizeof shown, c >= 0x21 && c < 0x7f ? "'%c'" : "0x%02X", c);
    throw ConfigError(
        path, 1, int(i) + 1,
        std::string("the token may hold A-Z a-z 0-9 - . _ ~ + / and then '=' only (one line); found ") + shown);
  }
  return text;
}

std::optional<std::string> token_file_warning(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (st.st_mode & S_IRWXO) == 0) return std::nullopt;
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return path + ": HTTP token file is accessible to others (mode " + mode +
         "); anyone who can read it can spend every key over HTTP. Run: chmod 640 " + path;
}

}  // namespace tollgate::http
