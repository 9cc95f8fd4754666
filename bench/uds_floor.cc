// tollgate-uds-floor: the machine's floor for a local check, measured. Two processes exchange
// a message of --size bytes over a Unix stream socket and back, paced like tollgate-load
// (--rate round trips a second), and it prints the round trip's p50, p99 and maximum in
// microseconds. A check through tollgated cannot be faster than this, and on a loaded host it
// slows down with it: compare a daemon's latency with this floor measured in the same run, under
// the same load (scripts/flood-latency does), not with a number from a quiet machine.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <thread>
#include <vector>

#include "util/percentile.h"

namespace {

using Clock = std::chrono::steady_clock;

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

using tollgate::cli::percentile;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tollgate-uds-floor: round trips of a message between two processes over a Unix socket, paced; "
      "prints p50/p99/max in microseconds (the floor a local tollgated check stands on)."};
  double rate = 1000, seconds = 10;
  size_t size = 64;
  app.add_option("--rate", rate, "Round trips per second")->check(CLI::Range(1.0, 1'000'000.0));
  app.add_option("--seconds", seconds, "How long to measure")->check(CLI::Range(0.1, 3600.0));
  app.add_option("--size", size, "Bytes each way (a check request of a short key is about 40)")
      ->check(CLI::Range(size_t(1), size_t(65536)));
  CLI11_PARSE(app, argc, argv);

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    std::perror("tollgate-uds-floor: socketpair");
    return 1;
  }
  const pid_t child = ::fork();
  if (child < 0) {
    std::perror("tollgate-uds-floor: fork");
    return 1;
  }
  std::vector<char> buf(size, 'x');
  if (child == 0) {  // the echo side
    ::close(fds[0]);
    while (read_all(fds[1], buf.data(), size) && write_all(fds[1], buf.data(), size)) {
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::vector<int64_t> rtt_us;
  const auto gap = std::chrono::nanoseconds(int64_t(1e9 / rate));
  const auto start = Clock::now(), end = start + std::chrono::nanoseconds(int64_t(seconds * 1e9));
  for (auto next = start; Clock::now() < end; next += gap) {
    std::this_thread::sleep_until(next);  // pacing, as tollgate-load paces its checks
    const auto sent = Clock::now();
    if (!write_all(fds[0], buf.data(), size) || !read_all(fds[0], buf.data(), size)) {
      std::cerr << "tollgate-uds-floor: the echo process went away\n";
      return 1;
    }
    rtt_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count());
    if (Clock::now() > next + std::chrono::seconds(1)) next = Clock::now();  // fell behind: no burst
  }
  ::close(fds[0]);
  ::waitpid(child, nullptr, 0);
  std::cout << "round_trips p50_us p99_us max_us\n"
            << rtt_us.size() << " " << percentile(rtt_us, 50) << " " << percentile(rtt_us, 99) << " "
            << *std::max_element(rtt_us.begin(), rtt_us.end()) << "\n";
  return 0;
}
