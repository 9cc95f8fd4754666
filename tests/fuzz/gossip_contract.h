// What decode() (include/tollgate/codec.h) promises about any bytes, checked on one envelope.
// Shared by the gossip fuzz targets and, for sealing, by the corpus generator.
#ifndef TOLLGATE_TESTS_FUZZ_GOSSIP_CONTRACT_H_
#define TOLLGATE_TESTS_FUZZ_GOSSIP_CONTRACT_H_

#include <string>
#include <string_view>

#include "codec/codec.h"

namespace tollgate::fuzz {

// The cluster key of the keyed targets and of the sealed seeds (make_corpus.cc). Fixed, so a
// seed sealed with it passes authentication in every run.
const ClusterKeys& test_keys();

// An envelope of the current version holding `payload` (a serialized tollgate.v1.Gossip, or
// any bytes), MAC'd with keys.signing_key() unless `keys` is empty: exactly what a peer that
// holds the key would send, whatever the payload.
std::string seal_payload(std::string_view payload, const ClusterKeys& keys);

// The payload of an envelope, or "" when `envelope` does not parse as one.
std::string payload_of(std::string_view envelope);

// Decodes `envelope` under `keys` and aborts if the result breaks the codec's contract:
//   - message set exactly when error == kNone; authenticated exactly when accepted with a key;
//   - with a key, what is accepted is accepted without one too (a keyless node trusts signed
//     messages), and decodes to the same message;
//   - an accepted message obeys the content rules (ids, sizes, seq >= 1, tokens != 0 (below 0 a refund), caps,
//     strictly increasing digest origins inside the digest's range);
//   - it re-encodes without loss: encode_datagrams at kMaxMessageBytes drops nothing and decodes
//     back to the same message, and encoding that again gives the same bytes;
//   - it re-encodes into kMinDatagramBytes datagrams: every part fits, each decodes on its own,
//     no member or digest origin is dropped, only batches larger than max_batch_bytes_for() are,
//     and the digest's parts cover contiguous ranges that hold exactly its origins.
// Returns the result for target-specific checks.
DecodeResult check_decode(std::string_view envelope, const ClusterKeys& keys);

}  // namespace tollgate::fuzz

#endif  // TOLLGATE_TESTS_FUZZ_GOSSIP_CONTRACT_H_
