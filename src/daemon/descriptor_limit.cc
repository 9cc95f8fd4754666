#include "daemon/descriptor_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tollgate {

std::string ensure_descriptor_limit(uint64_t needed) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0)
    return std::string("cannot read the descriptor limit: ") + std::strerror(errno);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < needed) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? rlim_t(needed) : std::min<rlim_t>(limit.rlim_max, needed);
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return {};
  return "the file descriptor limit is " + std::to_string(limit.rlim_cur) + " (hard " + std::to_string(limit.rlim_max) +
         ") but the connection limits need about " + std::to_string(needed) +
         ": under a flood of connections accept() will fail. Raise it (systemd: LimitNOFILE=65536; shell: ulimit -n) "
         "or lower --api-max-connections";
}

}  // namespace tollgate
