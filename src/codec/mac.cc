#include "mac.h"

#include "util/big_endian.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <memory>
#include <stdexcept>

namespace tollgate::codec_internal {
namespace {

// Domain separation: a MAC made for gossip is never valid for anything else that might one day
// share the key (the client API, say), and vice versa. The terminating NUL is part of it.
constexpr char kContext[] = "tollgate-gossip";

// Fetched once: fetching looks the algorithm up in the provider tables under a lock. An EVP_MAC
// may be shared by threads; each MAC computation gets its own context.
EVP_MAC* hmac_algorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  return mac;
}

struct MacContextFree {
  void operator()(EVP_MAC_CTX* ctx) const { EVP_MAC_CTX_free(ctx); }
};

}  // namespace

Mac envelope_mac(std::string_view key, uint32_t major, uint32_t minor, std::string_view payload) {
  char version[8];
  store_be32(major, version);
  store_be32(minor, version + 4);
  return hmac_sha256(key,
                     {std::string_view(kContext, sizeof kContext), std::string_view(version, sizeof version), payload});
}

Mac hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  EVP_MAC* algorithm = hmac_algorithm();
  if (algorithm == nullptr) throw std::runtime_error("OpenSSL: HMAC is not available");
  std::unique_ptr<EVP_MAC_CTX, MacContextFree> ctx(EVP_MAC_CTX_new(algorithm));
  if (!ctx) throw std::runtime_error("OpenSSL: cannot create an HMAC context");

  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  Mac out{};
  size_t out_len = 0;
  bool ok = EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) == 1;
  for (const std::string_view part : parts) {
    ok = ok && EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  }
  ok = ok && EVP_MAC_final(ctx.get(), out.data(), &out_len, out.size()) == 1 && out_len == out.size();
  if (!ok) throw std::runtime_error("OpenSSL: HMAC-SHA256 failed");
  return out;
}

bool envelope_mac_matches(const ClusterKeys& keys, uint32_t major, uint32_t minor, std::string_view payload,
                          std::string_view mac) {
  if (mac.size() != kMacBytes) return false;
  // Constant-time per comparison, so the MAC cannot be guessed byte by byte from timing. Which
  // key matched (the loop stops early) tells an observer nothing useful.
  for (const std::string& key : keys.keys()) {
    const Mac expected = envelope_mac(key, major, minor, payload);
    if (CRYPTO_memcmp(expected.data(), mac.data(), kMacBytes) == 0) return true;
  }
  return false;
}

}  // namespace tollgate::codec_internal
