// HMAC-SHA256 of an envelope (OpenSSL 3 EVP_MAC), as gossip.proto defines it.
#ifndef TOLLGATE_SRC_CODEC_MAC_H_
#define TOLLGATE_SRC_CODEC_MAC_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "codec/cluster_key.h"

namespace tollgate::codec_internal {

inline constexpr size_t kMacBytes = 32;
using Mac = std::array<unsigned char, kMacBytes>;

// HMAC-SHA256(key, "tollgate-gossip" 0x00 || be32(major) || be32(minor) || payload). The version
// is covered so that an attacker cannot make a receiver read a payload under another version.
// Throws std::runtime_error only if OpenSSL itself fails (no HMAC or SHA-256 available).
Mac envelope_mac(std::string_view key, uint32_t major, uint32_t minor, std::string_view payload);

// HMAC-SHA256(key, parts[0] || parts[1] || ...), OpenSSL's EVP_MAC, fed part by part (no copy of
// a large payload). Throws std::runtime_error only if OpenSSL itself fails.
Mac hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);

// True if `mac` is the envelope MAC under any of `keys`, compared in constant time.
// Precondition: !keys.empty().
bool envelope_mac_matches(const ClusterKeys& keys, uint32_t major, uint32_t minor, std::string_view payload,
                          std::string_view mac);

}  // namespace tollgate::codec_internal

#endif  // TOLLGATE_SRC_CODEC_MAC_H_
