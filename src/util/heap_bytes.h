// What the heap costs for a block of n bytes, for the memory bounds the daemon prints at start
// (src/daemon/memory_bound.cc): glibc's malloc adds an 8-byte header, rounds up to 16, and never
// hands out less than 32.
#ifndef TOLLGATE_SRC_UTIL_HEAP_BYTES_H_
#define TOLLGATE_SRC_UTIL_HEAP_BYTES_H_

#include <algorithm>
#include <cstddef>

namespace tollgate {

constexpr size_t heap_block_bytes(size_t n) { return std::max<size_t>(32, (n + 8 + 15) / 16 * 16); }

// A std::string of up to `n` bytes: its object plus, beyond the 15 it holds inline, a block.
constexpr size_t heap_string_bytes(size_t n) { return 32 + (n > 15 ? heap_block_bytes(n + 1) : 0); }

}  // namespace tollgate

#endif  // TOLLGATE_SRC_UTIL_HEAP_BYTES_H_
