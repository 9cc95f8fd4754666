// Where a node's messages go: the one thing the pure core asks of the network. The daemon's
// transports encode and send them; the simulator delivers them in virtual time.
#ifndef TOLLGATE_SRC_CORE_OUTBOX_H_
#define TOLLGATE_SRC_CORE_OUTBOX_H_

#include <string>

#include "core/gossip_message.h"

namespace tollgate {

class Outbox {
 public:
  virtual ~Outbox() = default;
  // Sends `message` to the node listening at `address` ("host:port"). Must not call back into
  // the node.
  virtual void send(const std::string& address, const GossipMessagePtr& message) = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_OUTBOX_H_
