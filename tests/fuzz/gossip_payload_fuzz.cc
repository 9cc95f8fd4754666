// The parser behind the MAC: the input is the payload (a serialized tollgate.v1.Gossip, or any
// bytes) that a peer holding the cluster key sent. The codec has no narrower entry point than
// decode() for an authenticated payload, so the input is sealed with fuzz::test_keys() first,
// exactly as a keyed peer's encoder would, and decode() then reaches the Gossip parser and the
// content rules on every run. Contract: gossip_contract.h; a sealed envelope never fails as
// unauthenticated or of another version.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "gossip_contract.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tollgate::ClusterKeys& keys = tollgate::fuzz::test_keys();
  const std::string envelope = tollgate::fuzz::seal_payload(tollgate::fuzz::as_text(data, size), keys);
  const tollgate::DecodeResult r = tollgate::fuzz::check_decode(envelope, keys);
  FUZZ_CHECK(r.error != tollgate::DecodeError::kBadMac && r.error != tollgate::DecodeError::kMissingMac &&
                 r.error != tollgate::DecodeError::kUnknownVersion,
             "a correctly sealed envelope failed authentication or the version check");
  return 0;
}
