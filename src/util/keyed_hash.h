// KeyedHash: the hash of keys that callers choose (every door's keys), keyed with a secret so
// that nobody who does not know it can pick keys that collide in a table (hash flooding: with
// an unkeyed hash, keys crafted offline cluster in the key table's index and each check walks a
// long run). XXH3 from xxHash (Debian's libxxhash-dev, inlined: nothing to link) with a custom
// secret expanded from 128 bits of key by XXH3_generateSecret. Chosen over SipHash (libsodium's
// SipHash-2-4, highwayhash's SipHash-1-3) for the check's cost: on a 21-byte key, 42
// instructions against 94 for std::hash and 170-214 for SipHash (callgrind), and the issue's
// bound is 5 % of a check's ~260. XXH3 is not a PRF: its known multicollisions need the secret
// (xxhash.h, "seed-dependent"); FlatTable's probe bound (util/flat_table.h) is the backstop if
// the secret ever leaked. docs/operations.md (threat model, the key table) says the same.
#ifndef TOLLGATE_SRC_UTIL_KEYED_HASH_H_
#define TOLLGATE_SRC_UTIL_KEYED_HASH_H_

#include <array>
#include <cstdint>
#include <string_view>

#define XXH_INLINE_ALL
#include <xxhash.h>
#undef XXH_INLINE_ALL

namespace tollgate {

class KeyedHash {
 public:
  using Key = std::array<uint64_t, 2>;

  explicit KeyedHash(const Key& key) { XXH3_generateSecret(secret_, sizeof secret_, key.data(), sizeof(Key)); }

  uint64_t operator()(std::string_view s) const {
    return XXH3_64bits_withSecret(s.data(), s.size(), secret_, sizeof secret_);
  }

 private:
  alignas(64) unsigned char secret_[192];  // XXH3's own default secret's size (>= XXH3_SECRET_SIZE_MIN)
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_KEYED_HASH_H_
