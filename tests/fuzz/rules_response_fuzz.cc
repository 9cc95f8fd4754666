// A rules service's answer, as raw bytes on the socket, into the rules retriever's fetch
// (src/retriever/rules_retriever.h): whatever a compromised, broken or impersonated rules
// service (or whoever sits on a plain-http path to it) sends back.
//
// Input: the stream layout of fuzz_util.h: the bytes the fake service writes after reading the
// request, split into sends as the fuzzer chooses; then it closes.
//
// Contract: the fetch ends exactly once, within its timeout (no hang on a response that never
// ends); a new body only for a 200 and never over the body limit; "not modified" only for a
// 304; a failure always says why; nothing crashes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

#include "fuzz_util.h"
#include "retriever/rules_retriever.h"

namespace {

using namespace tollgate;

constexpr size_t kMaxBody = 1024;

// A listening socket on loopback, made once.
struct Listener {
  int fd = -1;
  uint16_t port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0, "a listening socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "bind on loopback");
    FUZZ_CHECK(::listen(fd, 16) == 0, "listen");
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
};

// The fake rules service: one connection, the request read (to its blank line), the input's
// chunks written, closed.
void serve_once(int listen_fd, const fuzz::StreamInput& in) {
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    request.append(buffer, size_t(n));
  }
  for (std::string_view chunk : in.chunks) {
    if (!chunk.empty() && ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0) break;
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Listener listener;
  const fuzz::StreamInput in = fuzz::split_stream_input(data, size);
  std::thread service([&] { serve_once(listener.fd, in); });

  HttpUrl url;
  url.host = "127.0.0.1";
  url.port = std::to_string(listener.port);
  url.target = "/rules.yaml";
  url.host_header = "127.0.0.1:" + url.port;
  FetchLimits limits;
  limits.timeout = std::chrono::milliseconds(2'000);
  limits.max_body_bytes = kMaxBody;

  boost::asio::io_context io;
  int calls = 0;
  FetchResult result;
  const auto started = std::chrono::steady_clock::now();
  fetch_http(io, url, "\"v1\"", limits, [&](FetchResult r) {
    ++calls;
    result = std::move(r);
  });
  io.run();
  const auto took = std::chrono::steady_clock::now() - started;
  service.join();

  FUZZ_CHECK(calls == 1, "a fetch ends exactly once");
  FUZZ_CHECK(took < std::chrono::seconds(4), "a fetch ends within its timeout");
  const std::string_view stream = in.stream;
  switch (result.kind) {
    case FetchResult::Kind::kNew:
      FUZZ_CHECK(stream.starts_with("HTTP/1.1 200") || stream.starts_with("HTTP/1.0 200"), "a new body only for a 200");
      FUZZ_CHECK(result.body.size() <= kMaxBody, "never a body over the limit");
      break;
    case FetchResult::Kind::kNotModified:
      FUZZ_CHECK(stream.starts_with("HTTP/1.1 304") || stream.starts_with("HTTP/1.0 304"),
                 "not modified only for a 304");
      break;
    case FetchResult::Kind::kFailed:
      FUZZ_CHECK(!result.error.empty(), "a failure says why");
      break;
  }
  return 0;
}
