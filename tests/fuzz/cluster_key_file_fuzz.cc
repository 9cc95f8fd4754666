// The cluster key file (src/codec/cluster_key.h): any text into parse_cluster_keys(), as the
// daemon and the embedded member read --cluster-key-file at start and on every reload.
//
// Contract: it returns keys or throws ConfigError naming the source (and, for a bad line, a line
// of the text), never anything else. What it accepts has one or two keys, each at least
// ClusterKeys::kMinKeyBytes long.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "codec/cluster_key.h"
#include "fuzz_util.h"
#include "tollgate/config_error.h"

namespace {

const std::string kSource = "fuzz-cluster.key";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = tollgate::fuzz::as_text(data, size);
  try {
    const tollgate::ClusterKeys keys = tollgate::parse_cluster_keys(text, kSource);
    FUZZ_CHECK(!keys.empty(), "a key file accepted with no key");
    FUZZ_CHECK(keys.keys().size() <= tollgate::ClusterKeys::kMaxKeys, "more keys accepted than a rotation uses");
    for (const std::string& k : keys.keys()) {
      FUZZ_CHECK(k.size() >= tollgate::ClusterKeys::kMinKeyBytes, "a key shorter than the minimum accepted");
    }
  } catch (const tollgate::ConfigError& e) {
    FUZZ_CHECK(std::string_view(e.what()).starts_with(kSource), "a ConfigError that does not name the file");
    const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
    FUZZ_CHECK(e.line() >= 0 && static_cast<size_t>(e.line()) <= lines, "a ConfigError naming no line of the file");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parse_cluster_keys threw something other than ConfigError: %s\n", e.what());
    FUZZ_CHECK(false, "parse_cluster_keys throws only ConfigError");
  }
  return 0;
}
