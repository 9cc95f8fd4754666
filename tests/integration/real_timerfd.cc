// Preloaded ahead of libfaketime by ClusterHardening.WallClockJumpsMoveNoBucketAndFailNoPeer:
// timerfd_settime and timerfd_gettime go straight to the kernel.
//
// libfaketime shifts the absolute time given to timerfd_settime by its offset, even with
// FAKETIME_DONT_FAKE_MONOTONIC. Boost.Asio arms its timerfd at the absolute time 1 ns when a timer
// is already due, so under an offset that timer never fired and every later timer of the daemon
// (its rounds, its leave) stopped for good: the node never sent what it admitted and never left
// on SIGTERM. That happened only when a timer was due at the moment Asio re-armed, so on a loaded
// machine now and then. The daemon's clock is steady_clock; only the wall clock is to be faked.
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

extern "C" {

int timerfd_settime(int fd, int flags, const struct itimerspec* new_value, struct itimerspec* old_value) {
  return static_cast<int>(::syscall(SYS_timerfd_settime, fd, flags, new_value, old_value));
}

int timerfd_gettime(int fd, struct itimerspec* current) {
  return static_cast<int>(::syscall(SYS_timerfd_gettime, fd, current));
}

}  // extern "C"
