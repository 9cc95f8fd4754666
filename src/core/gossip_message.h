// What one node says to another, as the core sees it: no bytes, no sockets. The codec
// (src/codec) turns a GossipMessage into protobuf datagrams or frames and back; the simulator
// passes it between virtual nodes directly.
#ifndef TOLLGATE_SRC_CORE_GOSSIP_MESSAGE_H_
#define TOLLGATE_SRC_CORE_GOSSIP_MESSAGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/consumption.h"
#include "tollgate/types.h"

namespace tollgate {

// One row of the membership table as gossiped: a member's own heartbeat counter only ever grows
// within an incarnation, so the higher (incarnation, heartbeat) always wins a merge.
struct MemberRecord {
  NodeId id;
  std::string address;  // gossip address, "host:port"
  uint64_t incarnation = 0;
  uint64_t heartbeat = 0;
  bool left = false;  // the member announced that it leaves (this incarnation)
  friend bool operator==(const MemberRecord&, const MemberRecord&) = default;
};

// Balances from a peer on start (docs/design.md 6.5): a node that starts asks one peer for its
// state, page by page; the peer answers each request with the pages asked for.
inline constexpr size_t kMaxSyncPagesPerRequest = 64;
struct SyncRequest {
  uint64_t session = 0;         // the asker's random id for this transfer, != 0
  std::vector<uint32_t> pages;  // the pages wanted; empty: start the transfer (or is it ready?)
};
struct SyncPage {
  uint64_t session = 0;
  uint32_t page = 0;
  uint32_t pages = 0;                   // pages in the transfer; 0: still being prepared, ask again
  bool starting = false;                // with pages 0: the sender is waiting for its own transfer: ask another
  std::vector<OriginDigest> positions;  // the ledger positions the balances include
  std::vector<std::pair<std::string, int64_t>> balances;  // key, microtokens
  std::vector<ResetMark> resets;                          // the sender's reset epochs
};
using SyncPagePtr = std::shared_ptr<const SyncPage>;

// Bounds of GossipMessage's freshness stamps (the codec reserves their bytes by them).
inline constexpr uint64_t kMaxMessageSeq = (uint64_t{1} << 49) - 1;
inline constexpr uint64_t kMaxSentAtSeconds = (uint64_t{1} << 35) - 1;
// GossipMessage::relay_since and relay_through stay at or below it (2^35 batches of one life: 54
// years at 20 a second); a sender beyond it tells no stint.
inline constexpr uint64_t kMaxStintSeq = (uint64_t{1} << 35) - 1;

struct GossipMessage {
  NodeId sender;
  uint64_t sender_incarnation = 0;
  std::string sender_address;         // where the sender listens for gossip
  std::vector<BatchPtr> batches;      // consumption: the sender's own and relayed
  std::vector<MemberRecord> members;  // membership rows (heartbeat gossip)
  std::optional<Digest> digest;       // push-pull: what the sender has applied
  // Which origins `digest` speaks for: a large digest travels in parts, each covering a range of
  // origin ids (o with digest_from <= o, and o < *digest_until when set). Within the range, an
  // origin the digest does not list is one the sender has never seen; outside it, nothing is
  // said. The whole digest: "" and nullopt.
  NodeId digest_from;
  std::optional<NodeId> digest_until;
  bool digest_reply_wanted = false;  // push-pull request: answer with your digest too
  bool leaving = false;              // the sender is shutting down
  // Relay mode: the sender's group count (0: another mode), and whether the receiver, a member
  // of another group, is asked to relay the sender's own batches to its group.
  uint32_t relay_groups = 0;
  bool relay = false;
  // With `relay`: the sender's current stint with the receiver as its contact, the first and last
  // of its own seqs (this life) it sent the receiver: the receiver asks it for those it lacks
  // (node_repair.cc). 0: none sent yet.
  // Without `relay`, in a relay rows round to the members of the sender's group (minor 6): the
  // last of its own seqs and the last of its relay seqs (this life; 0: none), so a mate whose
  // last batch before a quiet spell was lost asks for it then, not at the next push-pull.
  uint64_t relay_since = 0;
  uint64_t relay_through = 0;
  // Asks the receiver for this member's row (its own when it is the receiver): the sender is
  // about to fail the member on silence (MembershipOptions::confirm_tries). Answered at once with
  // that one row, if the receiver has it alive. Empty: no question.
  NodeId row_wanted;
  // Balances from a peer on start: a request for pages, or one page (never split over parts).
  std::optional<SyncRequest> sync_request;
  SyncPagePtr sync_page;
  // Increases with every message of the sender's life (Node::message); a receiver answers a
  // digest request once per message_seq (parts of one split message share it).
  uint64_t message_seq = 0;  // at most kMaxMessageSeq
  // Set by decode: the sender's wall clock (s since the epoch) when it encoded the message; the
  // transport drops a message too far from its own clock (replays; docs/design.md, "Replay").
  uint64_t sent_at_s = 0;
  // Set by the transport that received the message: the address it came from, as the sender's
  // gossip address is written when known to the transport, else "ip:port"; empty when the
  // transport cannot tell (TCP: the source port is not the sender's). Not sent.
  std::string received_from;
};
using GossipMessagePtr = std::shared_ptr<const GossipMessage>;

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_GOSSIP_MESSAGE_H_
