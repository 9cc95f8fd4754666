// What travels between daemons: batches of one node's admitted consumption.
#ifndef TOLLGATE_CONSUMPTION_H_
#define TOLLGATE_CONSUMPTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tollgate {

// A node's identity in the cluster (its --node-id; by default its gossip address).
using NodeId = std::string;

// `tokens` of `key` admitted by one node.
struct ConsumptionEntry {
  std::string key;
  int64_t tokens = 0;
  friend bool operator==(const ConsumptionEntry&, const ConsumptionEntry&) = default;
};

// One node's consumption over one dissemination round, named by (origin, incarnation, seq).
// Sequence numbers start at 1 and are dense within an incarnation: every sealed batch gets the
// next one, so a receiver can tell a duplicate from news and a gap from the end. A node that
// restarts takes a higher incarnation and starts again at seq 1. Immutable once sealed: shared
// by pointer between the ledger, the retransmit queue and (in the simulator) every node.
struct Batch {
  NodeId origin;
  uint64_t incarnation = 0;
  uint64_t seq = 0;
  std::vector<ConsumptionEntry> entries;  // at most one entry per key
};
using BatchPtr = std::shared_ptr<const Batch>;

// Approximate heap footprint of a batch, for memory accounting.
size_t batch_bytes(const Batch& batch);

}  // namespace tollgate

#endif  // TOLLGATE_CONSUMPTION_H_
