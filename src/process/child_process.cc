#include "process/child_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace tollgate::process {
namespace {

// The program's path: argv[0] itself if it names a path, else the first executable match in PATH.
std::string resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  throw std::runtime_error("cannot start " + program + ": not found in PATH");
}

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// Waits for `pid` (retrying on EINTR); its status, or -1 if it cannot be waited for.
int reap(pid_t pid, int flags, bool* exited) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, flags);
  } while (r < 0 && errno == EINTR);
  *exited = r == pid || r < 0;  // r < 0: not our child any more (already reaped): nothing to wait for
  return r == pid ? status : -1;
}

}  // namespace

ChildProcess::ChildProcess(const LaunchSpec& spec) {
  if (spec.argv.empty()) throw std::invalid_argument("ChildProcess: no program");
  // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
  std::string program = resolve(spec.argv.front());
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const std::string& ours : spec.env) replaced = replaced || name_of(ours) == name_of(entry);
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), spec.env.begin(), spec.env.end());
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int log_fd = ::open(spec.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot open " + spec.log.string() + ": " + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {  // the child: async-signal-safe calls only
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::syscall(SYS_close_range, 3u, ~0u, 0u);
    ::execve(program.c_str(), argv.data(), envp.data());
    static const char kMsg[] = "ChildProcess: exec failed\n";
    [[maybe_unused]] const ssize_t w = ::write(2, kMsg, sizeof kMsg - 1);
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(log_fd);
  if (pid < 0) throw std::runtime_error("fork: " + std::string(std::strerror(fork_errno)));
  pid_ = pid;
}

ChildProcess::~ChildProcess() { kill(); }

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    kill();
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

void ChildProcess::signal(int signo) const {
  if (pid_ > 0) ::kill(pid_, signo);
}

std::optional<int> ChildProcess::poll() {
  if (pid_ <= 0) return std::nullopt;
  bool exited = false;
  const int status = reap(pid_, WNOHANG, &exited);
  if (!exited) return std::nullopt;
  pid_ = -1;
  return status;
}

std::optional<int> ChildProcess::wait_for(std::chrono::milliseconds limit) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (pid_ > 0) {
    if (auto status = poll()) return status;
    if (std::chrono::steady_clock::now() >= give_up) return std::nullopt;
    // Polling for a bounded wait on a child's exit (waitpid has no timeout): not synchronization.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::nullopt;
}

int ChildProcess::wait() {
  if (pid_ <= 0) return -1;
  bool exited = false;
  const int status = reap(pid_, 0, &exited);
  pid_ = -1;
  return status;
}

int ChildProcess::kill() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGKILL);
  return wait();
}

std::string describe_status(int status) {
  if (status < 0) return "was not running";
  if (WIFEXITED(status)) {
    return "exited with status " + std::to_string(WEXITSTATUS(status)) +
           (WEXITSTATUS(status) == 127 ? " (could not execute the program?)" : "");
  }
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped (status " + std::to_string(status) + ")";
}

std::string last_lines(const std::filesystem::path& file, size_t n) {
  std::ifstream in(file);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const std::string& l : lines) out += "    " + l + "\n";
  return out.empty() ? "    (empty)\n" : out;
}

std::string thread_stacks(pid_t pid) {
  const std::string command =
      "command -v gdb >/dev/null && gdb -p " + std::to_string(pid) + " -batch -ex 'thread apply all bt' 2>&1";
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    ::pclose(p);
  }
  return out.empty() ? "(no gdb)" : out;
}

namespace {

// The kernel's ephemeral range ("32768 60999" by default): source ports of outgoing connections.
std::pair<int, int> ephemeral_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 32768, hi = 60999;
  if (!(in >> lo >> hi) || lo > hi) return {32768, 60999};
  return {lo, hi};
}

// Whether `port` on 127.0.0.1 can be bound for TCP (without SO_REUSEADDR, so a lingering
// connection on it also counts as taken) and for UDP, right now.
bool bindable(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  bool ok = true;
  for (const int type : {SOCK_STREAM, SOCK_DGRAM}) {
    const int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
    ok = ok && fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0) ::close(fd);
  }
  return ok;
}

// A lock on `port` shared by every test process of this user (tests/pylib/tollgate_testing.py
// takes the same files): held until this process exits, so two processes never pick one number.
// True if the lock is ours now, or if there is no lock directory to use. The directory is a
// fixed one, not under $TMPDIR: tests give their daemons (and themselves) TMPDIRs of their own,
// which must be left empty, and a lock only works where every process looks.
bool reserve(uint16_t port) {
  static std::mutex mu;
  static std::vector<int> held;  // open for the process's life: closing would drop the lock
  const std::lock_guard<std::mutex> lock(mu);
  const std::filesystem::path dir = "/tmp/tollgate-test-ports-" + std::to_string(::getuid());
  ::mkdir(dir.c_str(), 0700);  // (exists already: fine)
  const int fd = ::open((dir / std::to_string(port)).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return true;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return false;
  }
  held.push_back(fd);
  return true;
}

}  // namespace

uint16_t free_loopback_port() {
  // Outside the ephemeral range: a port picked inside it can be taken, between the pick and the
  // child's bind, by any connection another test opens meanwhile (CI saw a daemon fail to start
  // with "Address already in use" that way).
  const auto [lo, hi] = ephemeral_range();
  int first = 10000, last = lo - 1;
  if (last - first < 2000) first = hi + 1, last = 65535;
  if (last - first < 2000) throw std::runtime_error("no loopback port range outside the ephemeral one");
  const int span = last - first + 1;
  const int start = int(std::random_device{}() % unsigned(span));
  for (int i = 0; i < span; ++i) {
    const auto port = uint16_t(first + (start + i) % span);
    if (bindable(port) && reserve(port) && bindable(port)) return port;
  }
  throw std::runtime_error("no free loopback port");
}

}  // namespace tollgate::process
