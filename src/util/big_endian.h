// Fixed-width big-endian integers: the one encoding of the length prefixes and MAC inputs.
#ifndef TOLLGATE_SRC_UTIL_BIG_ENDIAN_H_
#define TOLLGATE_SRC_UTIL_BIG_ENDIAN_H_

#include <cstdint>

namespace tollgate {

// Writes `v` as 4 big-endian bytes at `out`.
inline void store_be32(uint32_t v, unsigned char* out) {
  out[0] = static_cast<unsigned char>(v >> 24);
  out[1] = static_cast<unsigned char>(v >> 16);
  out[2] = static_cast<unsigned char>(v >> 8);
  out[3] = static_cast<unsigned char>(v);
}
inline void store_be32(uint32_t v, char* out) { store_be32(v, reinterpret_cast<unsigned char*>(out)); }

// Reads 4 big-endian bytes at `in`.
inline uint32_t load_be32(const unsigned char* in) {
  return (uint32_t{in[0]} << 24) | (uint32_t{in[1]} << 16) | (uint32_t{in[2]} << 8) | uint32_t{in[3]};
}
inline uint32_t load_be32(const char* in) { return load_be32(reinterpret_cast<const unsigned char*>(in)); }

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_BIG_ENDIAN_H_
