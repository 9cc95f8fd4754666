// Node's relay repair (issue 39; node_repair.cc): the gaps it asks about and, as a sender, the
// seqs each contact was sent. Private to the node (node.cc, node_repair.cc).
#ifndef TOLLGATE_SRC_CORE_NODE_REPAIR_H_
#define TOLLGATE_SRC_CORE_NODE_REPAIR_H_

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "core/node.h"

namespace tollgate {

struct Node::Repair {
  struct Gap {
    MonoNanos noticed = 0;
    uint32_t tries = 0;
  };
  // Within the group: mates (by id) whose own or relay batches show a gap here, or that told us
  // of a last seq we lack (rows rounds: GossipMessage::relay_since, relay_through).
  struct MateGap {
    Gap gap;
    uint64_t incarnation = 0;     // the mate's life the told seqs belong to
    uint64_t own = 0, relay = 0;  // its last own and relay seqs, as told (0: none told)
  };
  std::unordered_map<NodeId, MateGap> mates;
  // Across groups: members of other groups that made us their contact, and the seqs of theirs
  // they say they sent us (their current stint with us), while we lack some.
  struct Told {
    uint64_t incarnation = 0;  // the sender's life the seqs belong to
    uint64_t since = 0, through = 0;
    Gap gap;
  };
  std::unordered_map<NodeId, Told> senders;
  // As a sender: by group, each contact we had (a member's life) and the range of our seqs it
  // was sent, for the ledger's retention.
  struct Stint {
    NodeId contact;
    uint64_t contact_incarnation = 0;
    uint64_t incarnation = 0;  // ours, when we sent them
    uint64_t first = 0, last = 0;
    MonoNanos at = 0;  // when `last` was sent
  };
  std::vector<std::deque<Stint>> stints;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_NODE_REPAIR_H_
