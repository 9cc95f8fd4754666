// Starting and stopping the tollgated processes of a local cluster: the one launcher of
// tollgate-sim's local back end (sim/local_cluster.cc) and of the integration tests
// (tests/integration/cluster_test.cc), so that both start a daemon the same way and see how it
// ended the same way (issue #33).
//
// A ChildProcess writes its stdout and stderr to a log file, runs in a process group of its own,
// dies with its parent (PR_SET_PDEATHSIG: no orphan daemon even if the parent is SIGKILLed), and
// inherits no descriptor but its log (the parent's client sockets are not close-on-exec).
#ifndef TOLLGATE_SRC_PROCESS_CHILD_PROCESS_H_
#define TOLLGATE_SRC_PROCESS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tollgate::process {

struct LaunchSpec {
  // argv[0] is the program: a path, or a name looked up in PATH (a wrapper such as valgrind).
  std::vector<std::string> argv = {};
  // "NAME=value" entries the child's environment has on top of this process's (each replaces a
  // variable of the same name).
  std::vector<std::string> env = {};
  // stdout and stderr, appended (created 0644).
  std::filesystem::path log = {};
};

class ChildProcess {
 public:
  ChildProcess() = default;
  // Starts it. Throws std::runtime_error naming what failed (the log, the program, fork).
  explicit ChildProcess(const LaunchSpec& spec);
  // A child still running is killed (SIGKILL) and reaped.
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // -1 once it has been reaped (or was never started).
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // Sends `signo` if it runs.
  void signal(int signo) const;
  // Its waitpid status if it has exited (it is reaped then), without waiting.
  std::optional<int> poll();
  // Its waitpid status once it exits, or nullopt if it still runs after `limit`.
  std::optional<int> wait_for(std::chrono::milliseconds limit);
  // Waits however long it takes; -1 if it was not running.
  int wait();
  // SIGKILL and wait; -1 if it was not running.
  int kill();

 private:
  pid_t pid_ = -1;
};

// "exited with status 3", "was killed by signal Killed", ...
std::string describe_status(int status);
// The last `n` lines of a file, each indented by four spaces; "    (empty)\n" if none.
std::string last_lines(const std::filesystem::path& file, size_t n);
// Every thread's stack of a running process, by gdb if the machine has it; "(no gdb)" if not.
std::string thread_stacks(pid_t pid);
// A loopback port free for both TCP and UDP right now (tollgated binds both on one number),
// outside the kernel's ephemeral range (no outgoing connection can take it before the child binds
// it) and reserved for this process's life against every other test process that picks ports
// this way. Throws std::runtime_error if none.
uint16_t free_loopback_port();

}  // namespace tollgate::process

#endif  // TOLLGATE_SRC_PROCESS_CHILD_PROCESS_H_
