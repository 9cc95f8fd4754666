// The gossip wire format: GossipMessage <-> bytes, for UDP datagrams and TCP frames.
//
// Every datagram or frame is one protobuf Envelope (proto/tollgate/v1/gossip.proto) holding the
// protocol version, a serialized Gossip and, when the cluster has a key, an HMAC-SHA256 over
// both (OpenSSL). A message too large for one datagram is split into several, each of which
// repeats the sender fields and decodes on its own, so losing one loses only its contents.
//
// What is split, and what is not:
//   - Batches never: a batch is the ledger's atomic unit (origin, incarnation, seq). A node seals
//     its consumption in runs that fit (split_for_sealing with max_batch_bytes_for), so every
//     batch, its own or relayed by any node, fits in one datagram. A batch that still does not
//     fit (sealed under a larger limit, or invalid) is left out and counted in EncodeStats.
//   - Members: row by row.
//   - The digest: by ranges of origin ids (its origins travel sorted by id). Each part says
//     which range it speaks for (DecodeResult::digest_range); the receiver answers a part with
//     the batches of Ledger::missing_for(digest) whose origin is in that range. Without the
//     range, a part would read as "the sender has never seen the origins I do not list" and
//     draw every retained batch of those origins.
//
// Decoding never trusts the input: its size is bounded (kMaxMessageBytes) before it is parsed,
// counts are capped (the per-message caps below) before anything is built from the parsed
// form, no length field is used to allocate, and content the ledger or membership would
// misbehave on rejects the whole message, with a reason to count.
// Thread-safe: every function is pure.
#ifndef TOLLGATE_SRC_CODEC_CODEC_H_
#define TOLLGATE_SRC_CODEC_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codec/cluster_key.h"
#include "core/consumption.h"
#include "core/gossip_message.h"
#include "util/frame_reader.h"

namespace tollgate {

inline constexpr uint32_t kProtocolVersionMajor = 1;
inline constexpr uint32_t kProtocolVersionMinor = 8;  // 1: message_seq, sent_at_s; 2: relay; 3: sync; 4: resets; 5:
                                                      // relay repair; 6: mates' last seqs; 7: lease counts; 8: top-K

inline constexpr size_t kDefaultMaxDatagramBytes = 1400;  // Ethernet MTU minus headers, with room
// The smallest allowed max_datagram_bytes: the IPv6 minimum MTU (1280) minus the IPv6 and UDP
// headers. The largest header (ids and address at their limits, signed) plus the largest single
// batch entry, member row or digest origin fits in it.
inline constexpr size_t kMinDatagramBytes = 1232;
inline constexpr size_t kDefaultMaxFrameBytes = size_t{1} << 20;  // TCP: envelope bytes per frame
// decode() refuses larger input, and max_frame_bytes may not exceed it. Parsing allocates at
// most about 40 bytes per input byte (an empty digest origin: 2 bytes on the wire, a protobuf
// object in memory), so this bounds what one message can cost: 40 MB for a 1 MiB frame. With a
// key, the payload is parsed only once its MAC checks out.
inline constexpr size_t kMaxMessageBytes = size_t{4} << 20;

// Sizes the decoder accepts; the encoder never produces more.
inline constexpr size_t kMaxNodeIdBytes = 256;  // origins, member ids
// A sender's id, at most: a relaying node's batches are named by its id and kRelayOriginSuffix,
// which must fit kMaxNodeIdBytes (tollgated's --node-id is limited to this too).
inline constexpr size_t kMaxSenderIdBytes = kMaxNodeIdBytes - kRelayOriginSuffix.size();
inline constexpr uint32_t kMaxRelayGroups = 65536;            // Gossip.relay_groups at most (--relay-groups)
inline constexpr size_t kMaxAddressBytes = 256;               // "host:port"
inline constexpr size_t kMaxKeyBytes = 256;                   // as KeyTableOptions::max_key_bytes's default
inline constexpr int64_t kMaxLeaseCount = 1'000'000'000'000;  // a count in Batch.counts, as a limit (kMaxTokens)
inline constexpr size_t kMaxTopEntries = 256;                 // keys in one Batch.top
inline constexpr size_t kMaxBatchesPerMessage = 16384;
inline constexpr size_t kMaxEntriesPerMessage = 65536;  // over all batches of one message
inline constexpr size_t kMaxMembersPerMessage = 16384;
inline constexpr size_t kMaxDigestOriginsPerMessage = 65536;

// What the encoder left out of a message, for the node's counters. Each is a contract breach
// upstream (see the header comment), so non-zero values deserve a log line.
struct EncodeStats {
  size_t dropped_batches = 0;         // larger than one datagram or frame, or invalid content
  size_t dropped_members = 0;         // invalid: empty or over-long id, over-long address
  size_t dropped_digest_origins = 0;  // invalid or repeated origin id
  size_t dropped_sync = 0;            // a sync request or page larger than one datagram or frame
};

// Encodes `message` into envelopes of at most max_datagram_bytes each (the whole datagram,
// MAC included), as few as the content needs: always at least one. Signed with
// keys.signing_key() unless `keys` is empty. Throws std::invalid_argument when
// max_datagram_bytes is outside [kMinDatagramBytes, kMaxMessageBytes] or the sender id
// (1..kMaxNodeIdBytes) or address (up to kMaxAddressBytes) is invalid: the daemon checks both
// at start-up, so this is a programming error. Adds what it left out to `*stats` if given.
// `sent_at_s` is the sender's wall clock (Gossip.sent_at_s); the transports pass the time of
// encoding.
std::vector<std::string> encode_datagrams(const GossipMessage& message, const ClusterKeys& keys,
                                          size_t max_datagram_bytes = kDefaultMaxDatagramBytes,
                                          EncodeStats* stats = nullptr, uint64_t sent_at_s = 0);

// As encode_datagrams, for a TCP stream: each element is one frame, a 4-byte big-endian length
// followed by an envelope of at most max_frame_bytes (which has the same bounds as
// max_datagram_bytes). Usually one frame; a message larger than that (a big repair) is split the
// same way, so a peer's FrameReader with the same limit never has to refuse it.
std::vector<std::string> encode_frames(const GossipMessage& message, const ClusterKeys& keys,
                                       size_t max_frame_bytes = kDefaultMaxFrameBytes, EncodeStats* stats = nullptr,
                                       uint64_t sent_at_s = 0);

// A reader of TCP gossip frames (util/frame_reader.h) with a limit of `max_frame_bytes`. Throws
// std::invalid_argument when that exceeds kMaxMessageBytes, what decode() accepts.
FrameReader gossip_frame_reader(size_t max_frame_bytes = kDefaultMaxFrameBytes);

enum class DecodeError : uint8_t {
  kNone,
  kMalformed,       // not a protobuf Envelope/Gossip, or no version at all
  kUnknownVersion,  // an envelope of a major version other than kProtocolVersionMajor
  kBadMac,          // signed, but by none of our keys (or the bytes were changed)
  kMissingMac,      // we have a key and the message is unsigned (a node without the key file?)
  kTooLarge,        // over kMaxMessageBytes, or over a per-message count cap
  kInvalidContent,  // parses, but breaks a rule of the format (gossip.proto): empty or
                    // over-long id, over-long key, seq 0, tokens <= 0, unsorted digest, ...
};
// A short lowercase name with underscores ("bad_mac"), for counters and logs.
const char* decode_error_name(DecodeError e);

// Which origins a received digest speaks for: ids `o` with from <= o and, when `until` is set,
// o < until (bytewise, as std::string compares). Within the range an origin the digest does not
// list is one the sender has never seen; outside it, the digest says nothing.
struct DigestRange {
  NodeId from;                  // "" = from the very start
  std::optional<NodeId> until;  // none = to the very end
  bool covers(const NodeId& origin) const { return from <= origin && (!until || origin < *until); }
  bool whole() const { return from.empty() && !until; }
  friend bool operator==(const DigestRange&, const DigestRange&) = default;
};

struct DecodeResult {
  std::optional<GossipMessage> message;  // set exactly when error == kNone
  DecodeError error = DecodeError::kNone;
  // A MAC was checked and matched. False when the cluster has no key: such a node accepts
  // unsigned and signed messages alike, since it cannot check the MAC and trusts unsigned
  // messages anyway; this keeps a rollout that turns authentication on connected.
  bool authenticated = false;
  DigestRange digest_range;  // meaningful when message->digest is set
};

// Decodes one envelope (a datagram, or a frame from FrameReader). With a key configured, only
// messages signed by one of `keys` are accepted; without one, any MAC is ignored (see
// DecodeResult::authenticated). The version is checked before the MAC, since a future major
// version may authenticate differently. Never throws on bad input.
DecodeResult decode(std::string_view bytes, const ClusterKeys& keys);

// --- Sealing batches that fit -------------------------------------------------------------

// Bytes `batch` takes inside a message.
size_t encoded_batch_bytes(const Batch& batch);

// The largest encoded_batch_bytes() that fits in one datagram of max_datagram_bytes next to any
// valid header, signed: so a batch within it travels from any node that relays it. That is
// max_datagram_bytes - 572: 828 bytes of a 1400-byte datagram, room for about 25 entries with
// 20-byte keys. Throws std::invalid_argument when max_datagram_bytes is below kMinDatagramBytes.
size_t max_batch_bytes_for(size_t max_datagram_bytes);

// Cuts a transfer of balances from a peer on start (docs/design.md 6.5) into pages, in order,
// each of which fits one datagram of max_datagram_bytes next to any valid header, signed (and so
// one frame of that many bytes). Sets each page's number and the count; the session is the
// sender's to set. Always at least one page.
std::vector<SyncPage> split_transfer(std::vector<OriginDigest> positions,
                                     std::vector<std::pair<std::string, int64_t>> balances,
                                     std::vector<ResetMark> resets, size_t max_datagram_bytes);

// Splits one round's consumption (as from KeyTable::take_pending) into runs, in order, each of
// which Ledger::seal turns into a batch by `origin` of at most max_batch_bytes (assuming the
// largest incarnation and seq). Seal each run on its own: a round then takes several seqs.
// Entries must be valid (key up to kMaxKeyBytes, tokens != 0: below 0 a refund); an entry too large for any batch
// still gets a run of its own, and the encoder then drops that batch and counts it.
std::vector<std::vector<ConsumptionEntry>> split_for_sealing(std::vector<ConsumptionEntry> entries,
                                                             const NodeId& origin, size_t max_batch_bytes);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CODEC_CODEC_H_
