// Node's transfer of balances from a peer on start (issue 35; docs/design.md 6.5): what the
// asking side and the serving side keep. Private to the node (node.cc, node_sync.cc).
#ifndef TOLLGATE_SRC_CORE_NODE_SYNC_H_
#define TOLLGATE_SRC_CORE_NODE_SYNC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/node.h"
#include "core/random.h"

namespace tollgate {

// A transfer prepared for one asker (Node::Sync::served).
struct SyncServed {
  uint64_t incarnation = 0;  // the asker's life, and the last message of it answered: a
  uint64_t last_seq = 0;     // replayed request is ignored
  uint64_t session = 0;
  bool active = false;  // preparing or ready (at most kMaxServed at once)
  MonoNanos last_asked = 0;
  NodeState state;  // while preparing: taken a slice per round
  uint64_t cursor = 0;
  std::vector<SyncPage> building;  // while preparing: the pages cut so far
  bool ready = false;
  std::vector<SyncPagePtr> pages;
  size_t sent_this_round = 0;
};

struct Node::Sync {
  // --- Asking (the node that starts) ---
  bool asking = false;   // until the transfer is taken or the deadline passes
  bool started = false;  // the first round has looked for someone to ask
  // A heal transfer (Node::heal_from): from the member that came back, checks answered as usual
  // meanwhile, only long-window keys taken, and not its positions.
  bool heal = false;
  MonoNanos last_heal = 0;
  MonoNanos last_progress = 0;  // of any transfer: the deadline counts from it
  // Sessions and whom to ask: drawn from a stream of their own, seeded by the node's id and life,
  // so that asking leaves the node's randomness (its gossip targets) as it was. A session only
  // tells one transfer from another; messages are authenticated, so it need not be secret.
  SplitMix64 random{0};
  // The transfer under way: a random session, the peer asked (its address, then its id once
  // it answers), and what came so far.
  uint64_t session = 0;
  std::string target;
  NodeId peer;
  MonoNanos session_progress = 0;
  uint32_t pages = 0;  // 0: not known yet
  std::vector<bool> received;
  size_t received_count = 0;
  std::vector<OriginDigest> positions;
  struct Taken {
    std::string key;
    int64_t balance;
    MonoNanos at;  // when its page arrived: refill counts from then, never from before
  };
  std::vector<Taken> balances;
  std::vector<ResetMark> resets;
  // Members that answered that they are starting too: not asked again. When every live member
  // is, the whole cluster is starting, and nobody has more than it started with.
  std::unordered_set<NodeId> starting;

  void forget_transfer() {
    session = 0;
    target.clear();
    peer.clear();
    pages = 0;
    received.clear();
    received_count = 0;
    positions.clear();
    balances.clear();
    resets.clear();
  }

  // --- Serving (any node that is not waiting for its own) ---
  using Served = SyncServed;
  std::unordered_map<NodeId, Served> served;  // by asker; entries go when membership forgets it
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_NODE_SYNC_H_
