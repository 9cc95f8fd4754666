// Gossip datagrams on a node without a cluster key: any bytes a UDP socket can receive, straight
// into decode(). Such a node trusts unsigned messages and ignores MACs, so everything behind the
// envelope is reached. Contract: gossip_contract.h.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "gossip_contract.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tollgate::DecodeResult r =
      tollgate::fuzz::check_decode(tollgate::fuzz::as_text(data, size), tollgate::ClusterKeys());
  FUZZ_CHECK(r.error != tollgate::DecodeError::kBadMac && r.error != tollgate::DecodeError::kMissingMac,
             "a keyless node checked a MAC");
  return 0;
}
