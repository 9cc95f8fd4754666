#include "config/content_version.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace tollgate {

int64_t content_version(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1 || len < 6) {
    throw std::runtime_error("OpenSSL SHA-256 failed");
  }
  int64_t v = 0;
  for (int i = 0; i < 6; ++i) v = (v << 8) | md[i];
  return v;
}

}  // namespace tollgate
