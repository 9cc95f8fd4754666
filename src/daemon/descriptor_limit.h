// The daemon's file descriptors must cover its connection limits (client API, TCP gossip), or
// accept() fails under a flood and starves every listener alike.
#ifndef TOLLGATE_SRC_DAEMON_DESCRIPTOR_LIMIT_H_
#define TOLLGATE_SRC_DAEMON_DESCRIPTOR_LIMIT_H_

#include <cstdint>
#include <string>

namespace tollgate {

// Raises this process's soft RLIMIT_NOFILE towards its hard limit when it is below `needed`.
// Returns "" when the limit now covers `needed`, or a warning that says what was needed, what
// the limit is and how to raise it (LimitNOFILE, ulimit -n).
std::string ensure_descriptor_limit(uint64_t needed);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_DESCRIPTOR_LIMIT_H_
