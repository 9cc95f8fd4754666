// Shared pieces of the client API tests: a temporary directory for socket files, a fake
// ApiHandler, an ApiServer running on its own io thread, and a raw blocking connection that
// speaks the framing by hand (so the server is tested without the client library).
#ifndef TOLLGATE_TESTS_API_TEST_SUPPORT_H_
#define TOLLGATE_TESTS_API_TEST_SUPPORT_H_

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "api/api_server.h"
#include "api/framing.h"
#include "request/request_handler.h"
#include "support/net_test_util.h"
#include "support/top_fixture.h"
#include "tollgate/v1/api.pb.h"

namespace tollgate::api::testing {

namespace pb = ::tollgate::v1::api;
using ::tollgate::testing::run_on;
using ::tollgate::testing::tcp_connect_from;
using ::tollgate::testing::wait_until;

// A fresh directory under /tmp, removed with everything in it on destruction. Short, so that
// socket paths stay under the 108-byte limit.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/tollgate-api-XXXXXX";
    if (::mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The limit the fake handler reports: 10/s, burst 5, max debt 5.
inline Limit fake_limit() { return Limit{Rate{10, 1'000'000'000}, 5, 5}; }

// Decides like a full bucket of 5 that never changes: cost <= 5 is allowed with 5 - cost left;
// more is denied. "unlimited" is not limited; "boom" throws. Thread-safe: the server calls it on
// its io thread while the test thread inspects it.
class FakeHandler : public RequestHandler {
 public:
  void check(std::span<const CheckItem> items, std::span<Decision> out) override {
    for (size_t i = 0; i < items.size(); ++i) out[i] = check_one(items[i].key, items[i].cost);
  }
  // Each check as check_one decides it; if any is denied, the others say kOtherCheckDenied.
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out) override {
    check(items, out);
    bool all = true;
    for (size_t i = 0; i < items.size(); ++i) all = all && out[i].allowed;
    if (all) return true;
    for (size_t i = 0; i < items.size(); ++i) {
      if (out[i].allowed && out[i].limited) {
        out[i].allowed = false;
        out[i].reason = DenyReason::kOtherCheckDenied;
      }
    }
    return false;
  }

  // The native API never refunds (only Envoy's rate limit service does): the bucket's answer to
  // a query.
  void refund(std::span<const CheckItem> items, std::span<Decision> out) override {
    for (size_t i = 0; i < items.size(); ++i) out[i] = check_one(items[i].key, 0);
  }

  Decision check_one(std::string_view key, int64_t cost) {
    std::function<Decision(std::string_view, int64_t)> hook;
    {
      std::lock_guard lock(mutex_);
      seen_.emplace_back(std::string(key), cost);
      hook = on_check_;
    }
    if (hook) return hook(key, cost);
    if (key == "boom") throw std::runtime_error("handler exploded");
    if (key == "unlimited") return Decision{true, 0, 0, DenyReason::kNone, false, {}};
    if (cost <= 5) return Decision{true, 5 - cost, 0, DenyReason::kNone, true, fake_limit()};
    return Decision{false, 5, kRetryNever, DenyReason::kCostExceedsBurst, true, fake_limit()};
  }

  std::vector<MemberInfo> members() override {
    return {{"node-a", "127.0.0.1:7001", MemberState::kAlive, 3, 40, 0, true},
            {"node-b", "127.0.0.1:7002", MemberState::kSuspect, 1, 12, 1'500'000'000, false}};
  }

  StatsList stats() override {
    std::lock_guard lock(mutex_);
    return {{"checks", static_cast<int64_t>(seen_.size())}, {"keys", 2}};
  }

  // support/top_fixture.h's two rules, filtered by the rule asked.
  std::vector<TopParts> top_parts(std::string_view rule) override {
    std::vector<TopParts> out;
    for (TopParts& p : tollgate::testing::two_rules_top()) {
      if (rule.empty() || p.rule == rule) out.push_back(std::move(p));
    }
    return out;
  }

  std::string set_faults(const FaultSettings& faults) override {
    std::lock_guard lock(mutex_);
    faults_ = faults;
    return faults.loss > 0.9 ? "loss above 0.9 would stop the cluster" : "";
  }

  // A reset: "governed" keys are limited (burst 5), "refuse" is refused by the daemon.
  ResetReply reset(std::string_view key) override {
    std::lock_guard lock(mutex_);
    resets_.emplace_back(key);
    if (key == "refuse") return {.error = "refused by the daemon", .limited = false, .remaining = 0};
    return {.error = "", .limited = key == "governed", .remaining = key == "governed" ? 5 : 0};
  }
  std::vector<std::string> resets() {
    std::lock_guard lock(mutex_);
    return resets_;
  }

  // Replaces the decision logic (e.g. to block, or to count calls).
  void set_on_check(std::function<Decision(std::string_view, int64_t)> hook) {
    std::lock_guard lock(mutex_);
    on_check_ = std::move(hook);
  }
  std::vector<std::pair<std::string, int64_t>> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  std::optional<FaultSettings> faults() {
    std::lock_guard lock(mutex_);
    return faults_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::string, int64_t>> seen_;
  std::optional<FaultSettings> faults_;
  std::vector<std::string> resets_;
  std::function<Decision(std::string_view, int64_t)> on_check_;
};

// An ApiServer on its own io thread. Runs server methods on that thread through on_io().
class ServerHarness {
 public:
  explicit ServerHarness(RequestHandler& handler) : handler_(handler), work_(boost::asio::make_work_guard(io_)) {
    thread_ = std::thread([this] { io_.run(); });
  }
  ~ServerHarness() {
    on_io([this] { server_.reset(); });
    work_.reset();
    thread_.join();
  }

  // Creates and starts a server (replacing any previous one, which is stopped first).
  std::string start(ApiServerOptions options) {
    return on_io([this, options]() {
      server_.reset();
      server_ = std::make_unique<ApiServer>(io_, handler_, options);
      return server_->start();
    });
  }
  std::string start_unix(const std::string& path, ApiServerOptions options = {}) {
    options.listen = {Endpoint{Endpoint::Kind::kUnix, path, "", 0}};
    return start(std::move(options));
  }
  // Drains the server; returns how many requests it had read when it began.
  uint64_t drain() {
    return on_io([this] {
      const uint64_t read = server_->counters().requests;
      server_->drain();
      return read;
    });
  }
  void stop() {
    on_io([this] {
      if (server_) server_->stop();
    });
  }
  ApiServerCounters counters() {
    return on_io([this] { return server_->counters(); });
  }
  StatsList stats() {
    return on_io([this] { return server_->stats(); });
  }
  std::vector<Endpoint> bound() {
    return on_io([this] { return server_->bound_endpoints(); });
  }

  template <typename F>
  auto on_io(F f) -> decltype(f()) {
    return run_on(io_, std::move(f));
  }
  boost::asio::io_context& io() { return io_; }

 private:
  RequestHandler& handler_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<ApiServer> server_;
  std::thread thread_;
};

// A blocking client socket speaking raw frames. Every read gives up after 20 s (SO_RCVTIMEO), so
// a server that wrongly stays silent fails the test instead of hanging it; no test relies on that
// timeout firing.
class RawConnection {
 public:
  enum class ReadStatus { kFrame, kClosed, kTimedOut };

  static std::unique_ptr<RawConnection> connect_unix(const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return nullptr;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      return nullptr;
    }
    return std::unique_ptr<RawConnection>(new RawConnection(fd));
  }

  // A TCP connection to 127.0.0.1:`port` from `source_ip` (any 127.0.0.0/8 address), so a test
  // can play several clients that the server tells apart by address.
  static std::unique_ptr<RawConnection> connect_tcp(uint16_t port, const char* source_ip = "127.0.0.1") {
    const int fd = tcp_connect_from(source_ip, port);
    if (fd < 0) return nullptr;
    return std::unique_ptr<RawConnection>(new RawConnection(fd));
  }

  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool send_bytes(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  bool send_request(const pb::Request& request) {
    std::string frame;
    if (!append_frame(request, UINT32_MAX, frame)) return false;
    return send_bytes(frame);
  }
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  // Reads one Response frame.
  ReadStatus read_response(pb::Response* response) {
    unsigned char header[kFrameHeaderBytes];
    if (ReadStatus s = read_exact(reinterpret_cast<char*>(header), sizeof header); s != ReadStatus::kFrame) return s;
    std::string payload(load_be32(header), '\0');
    if (ReadStatus s = read_exact(payload.data(), payload.size()); s != ReadStatus::kFrame) return s;
    if (!response->ParseFromString(payload)) ADD_FAILURE() << "server sent a frame that is not a Response";
    return ReadStatus::kFrame;
  }
  // True when the server has closed the connection (reads EOF or a reset, no more frames).
  bool reads_eof() {
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

 private:
  explicit RawConnection(int fd) : fd_(fd) {
    timeval tv{};
    tv.tv_sec = 20;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ReadStatus read_exact(char* out, size_t size) {
    while (size > 0) {
      const ssize_t n = ::recv(fd_, out, size, 0);
      if (n == 0) return ReadStatus::kClosed;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? ReadStatus::kTimedOut : ReadStatus::kClosed;
      out += n;
      size -= static_cast<size_t>(n);
    }
    return ReadStatus::kFrame;
  }
  int fd_;
};

inline pb::Request check_request(uint64_t id, const std::vector<std::pair<std::string, int64_t>>& checks) {
  pb::Request request;
  request.set_version(kApiVersion);
  request.set_id(id);
  for (const auto& [key, cost] : checks) {
    pb::Check& c = *request.mutable_check()->add_checks();
    c.set_key(key);
    c.set_cost(cost);
  }
  return request;
}

}  // namespace tollgate::api::testing

#endif  // TOLLGATE_TESTS_API_TEST_SUPPORT_H_
