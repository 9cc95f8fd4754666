// Gossip datagrams on a node with a cluster key, before authentication: any bytes into the
// authenticating decode(). Random bytes almost never carry a valid MAC, so this target covers
// the envelope, the version check and the MAC check; the seeds are sealed with
// fuzz::test_keys() and so also reach the parser behind it until a mutation breaks the MAC
// (gossip_payload fuzzes that parser directly). Contract: gossip_contract.h, and a message is
// never accepted unauthenticated.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "gossip_contract.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tollgate::DecodeResult r =
      tollgate::fuzz::check_decode(tollgate::fuzz::as_text(data, size), tollgate::fuzz::test_keys());
  FUZZ_CHECK(r.error != tollgate::DecodeError::kNone || r.authenticated,
             "a keyed node accepted an unauthenticated message");
  return 0;
}
