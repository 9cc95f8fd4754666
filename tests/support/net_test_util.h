// Helpers the socket-level tests share: a TCP connection from a chosen loopback address (so one
// test can play several clients or hosts), running code on an io_context's thread, and waiting
// on state a test can observe.
#ifndef TOLLGATE_TESTS_SUPPORT_NET_TEST_UTIL_H_
#define TOLLGATE_TESTS_SUPPORT_NET_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdint>
#include <future>
#include <thread>
#include <utility>

namespace tollgate::testing {

// A blocking TCP socket connected from `source_ip` (any 127.0.0.0/8 address) to
// 127.0.0.1:`port`; -1 if that fails.
inline int tcp_connect_from(const char* source_ip, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source_ip, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Runs `f` on the thread running `io` and returns its result.
template <typename F>
auto run_on(boost::asio::io_context& io, F f) -> decltype(f()) {
  std::packaged_task<decltype(f())()> task(std::move(f));
  auto result = task.get_future();
  boost::asio::post(io, [&task] { task(); });
  return result.get();
}

// Polls `done` (state the test can observe, e.g. a counter) until it holds or `limit` passes;
// true if it held.
template <typename Predicate>
bool wait_until(Predicate done, std::chrono::milliseconds limit = std::chrono::milliseconds(20'000)) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_NET_TEST_UTIL_H_
