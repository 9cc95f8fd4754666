// The most memory tollgated can hold at its settings (issue 34, finding 8): the key table's
// bound from its own structures (KeyTable::memory_bound), each door's from its caps, and a base
// for the process itself. Printed at start, and checked against the memory limit it runs under
// (the cgroup's memory.max, or --memory-limit): a daemon whose settings let a flood take it past
// its limit is an OOM kill waiting to happen, and every client fails open while it restarts.
#ifndef TOLLGATE_SRC_DAEMON_MEMORY_BOUND_H_
#define TOLLGATE_SRC_DAEMON_MEMORY_BOUND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tollgate {

struct DaemonOptions;

struct MemoryPart {
  std::string name;  // "keys", "client API", ...
  uint64_t bytes = 0;
  std::string from;  // the settings it follows from, for the operator
};

// The parts, at these options.
std::vector<MemoryPart> memory_bound(const DaemonOptions& options);
uint64_t total_bytes(const std::vector<MemoryPart>& parts);
// "1.2 GiB: keys 870 MiB (--max-keys 1000000 of up to 256 bytes), ..."
std::string describe(const std::vector<MemoryPart>& parts);
std::string mebibytes(uint64_t bytes);

// memory.max of the cgroup (v2) this process is in; nullopt when unlimited or unknown.
// `proc_cgroup` and `cgroup_root` are for tests.
std::optional<uint64_t> cgroup_memory_max(const std::string& proc_cgroup = "/proc/self/cgroup",
                                          const std::string& cgroup_root = "/sys/fs/cgroup");

// "512M", "2G", "1048576": bytes (K, M, G are binary); nullopt with `why` otherwise.
std::optional<uint64_t> parse_memory_size(const std::string& text, std::string* why);

}  // namespace tollgate

#endif  // TOLLGATE_SRC_DAEMON_MEMORY_BOUND_H_
