// Randomness as the core sees it: passed in, never global, so a seed reproduces a run.
#ifndef TOLLGATE_SRC_CORE_RANDOM_H_
#define TOLLGATE_SRC_CORE_RANDOM_H_

#include <cstdint>

namespace tollgate {

class Random {
 public:
  virtual ~Random() = default;
  virtual uint64_t next_u64() = 0;
  // Uniform in [0, n), n > 0 (Lemire's multiply-shift; the bias is below 2^-32 for our n).
  uint64_t below(uint64_t n) {
    __extension__ typedef unsigned __int128 Wide;
    return uint64_t((Wide(next_u64()) * n) >> 64);
  }
};

// SplitMix64: small, fast, and fully determined by its seed. Not for secrets.
class SplitMix64 final : public Random {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() override {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_RANDOM_H_
