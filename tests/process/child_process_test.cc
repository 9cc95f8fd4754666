// The launcher of local tollgated processes (src/process/child_process.h): environment, log,
// exit status, a stop that times out, and what the child inherits.
#include "process/child_process.h"

#include "support/temp_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace tollgate::process {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

class ChildProcessTest : public ::testing::Test {
 protected:
  std::string read(const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  const testing::TempDir temp_{"child"};
  const fs::path& dir_ = temp_.path();
};

TEST_F(ChildProcessTest, RunsWithItsEnvironmentOnTopOfOursAndLogsBothStreams) {
  ::setenv("TOLLGATE_CHILD_A", "ours", 1);
  ::setenv("TOLLGATE_CHILD_B", "kept", 1);
  ChildProcess child({.argv = {"sh", "-c", "echo A=$TOLLGATE_CHILD_A B=$TOLLGATE_CHILD_B; echo err >&2; exit 3"},
                      .env = {"TOLLGATE_CHILD_A=theirs"},
                      .log = dir_ / "log"});
  EXPECT_TRUE(child.running());
  const int status = child.wait();
  EXPECT_FALSE(child.running());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_EQ(describe_status(status), "exited with status 3");
  EXPECT_EQ(read(dir_ / "log"), "A=theirs B=kept\nerr\n");
  EXPECT_EQ(last_lines(dir_ / "log", 1), "    err\n");
}

TEST_F(ChildProcessTest, AChildThatIgnoresTheSignalIsReportedStillRunningThenKilled) {
  ChildProcess child(
      {.argv = {"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"}, .log = dir_ / "log"});
  // Wait until the trap is set (the child says so), so that SIGTERM meets it.
  for (int i = 0; i < 2000 && read(dir_ / "log").empty(); ++i) ::usleep(5000);
  ASSERT_EQ(read(dir_ / "log"), "ready\n");
  child.signal(SIGTERM);
  EXPECT_FALSE(child.wait_for(milliseconds(200)).has_value());
  EXPECT_TRUE(child.running());
  const int status = child.kill();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_FALSE(child.poll().has_value());  // reaped once, not again
}

TEST_F(ChildProcessTest, InheritsNoDescriptorButItsLog) {
  // Not close-on-exec, as a client socket may be; at a number ls would not open itself.
  const int opened = ::open("/dev/null", O_RDONLY);
  const int leaked = ::dup2(opened, 57);
  ::close(opened);
  ASSERT_EQ(leaked, 57);
  ChildProcess child({.argv = {"sh", "-c", "ls /proc/self/fd"}, .log = dir_ / "log"});
  EXPECT_EQ(child.wait(), 0);
  ::close(leaked);
  // 0, 1, 2, and the descriptor ls opens to read the directory: not 57.
  EXPECT_EQ(read(dir_ / "log").find(std::to_string(leaked) + "\n"), std::string::npos) << read(dir_ / "log");
}

TEST_F(ChildProcessTest, AProgramNotInPathOrALogThatCannotBeOpenedIsAnError) {
  EXPECT_THROW(ChildProcess({.argv = {"tollgate-no-such-program"}, .log = dir_ / "log"}), std::runtime_error);
  EXPECT_THROW(ChildProcess({.argv = {"true"}, .log = dir_ / "no-dir" / "log"}), std::runtime_error);
  ChildProcess missing({.argv = {(dir_ / "missing").string()}, .log = dir_ / "log"});
  const int status = missing.wait();
  EXPECT_EQ(describe_status(status), "exited with status 127 (could not execute the program?)");
}

TEST_F(ChildProcessTest, ADestroyedChildIsKilledAndReaped) {
  pid_t pid;
  {
    ChildProcess child({.argv = {"sleep", "60"}, .log = dir_ / "log"});
    pid = child.pid();
    ASSERT_GT(pid, 0);
  }
  EXPECT_EQ(::kill(pid, 0), -1);  // no such process: killed and reaped, not a zombie
  EXPECT_EQ(errno, ESRCH);
}

TEST(FreeLoopbackPort, IsFreeForTcpAndUdp) { EXPECT_GT(free_loopback_port(), 0); }

// CI once saw a daemon fail to bind a port picked this way ("Address already in use"): it was
// in the ephemeral range, and another test's outgoing connection took it first. A port is now
// outside that range, and held for the process's life (a lock file), so no other pick, here or
// in another test process, returns it again.
TEST(FreeLoopbackPort, IsOutsideTheEphemeralRangeAndNeverPickedTwice) {
  int lo = 32768, hi = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo >> hi;
  std::set<uint16_t> seen;
  for (int i = 0; i < 64; ++i) {
    const uint16_t port = free_loopback_port();
    EXPECT_TRUE(port < lo || port > hi) << port;
    EXPECT_TRUE(seen.insert(port).second) << port << " twice";
  }
}

}  // namespace
}  // namespace tollgate::process
