// Which transport carries a node's gossip (--transport): one name for the daemon's options and
// the node's host.
#ifndef TOLLGATE_SRC_HOST_TRANSPORT_KIND_H_
#define TOLLGATE_SRC_HOST_TRANSPORT_KIND_H_

#include <cstdint>

namespace tollgate {

enum class TransportKind : uint8_t { kUdp, kTcp };

}  // namespace tollgate

#endif  // TOLLGATE_SRC_HOST_TRANSPORT_KIND_H_
