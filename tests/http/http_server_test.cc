// The HTTP server's way onto the node's thread (src/http/http_server.h, through request::NodeQueue):
// a check the node cannot take now is answered 503 at once (`http.node_busy`), one that waited
// past the node wait is answered 503 undecided (`http.node_wait_expired`), and after stop()
// checks are answered 503 undecided. The node's io_context is driven by the test, so "the node
// is busy" is a fact here, not a timing.
#include "http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "core/key_table.h"
#include "support/table_handler.h"
#include "tollgate/rules_file.h"

namespace tollgate::http {
namespace {

// Counts the checks that reach the node (`items`); rules "k*": 5/s, burst 5, at time 0. Also,
// for checks decided on the HTTP thread, how many and where (read by the test's thread).
struct CountingHandler : testing::TableHandler {
  CountingHandler()
      : testing::TableHandler(parse_rules("rules:\n  - {match: \"k*\", rate: 5/s, burst: 5}\n", "rules.yaml")) {
    faults_answer = "no";
  }
  void check(std::span<const CheckItem> in, std::span<Decision> out) override {
    testing::TableHandler::check(in, out);
    decided_on = std::this_thread::get_id();
    decided += in.size();
  }
  std::atomic<size_t> decided{0};
  std::atomic<std::thread::id> decided_on{};
};

// One GET on a fresh connection, sent now; read() waits for the whole answer.
class Get {
 public:
  Get(const std::string& address, const std::string& target) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval timeout{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(std::stoi(address.substr(address.rfind(':') + 1))));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string request = "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    EXPECT_EQ(::send(fd_, request.data(), request.size(), MSG_NOSIGNAL), ssize_t(request.size()));
  }
  ~Get() { ::close(fd_); }
  // The status line and body of the answer ("" when none came within 10 s).
  std::string read() {
    std::string all;
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd_, buffer, sizeof buffer, 0)) > 0;) all.append(buffer, size_t(n));
    const size_t body = all.find("\r\n\r\n");
    return all.substr(0, all.find("\r\n")) + (body == std::string::npos ? "" : " " + all.substr(body + 4));
  }

 private:
  int fd_ = -1;
};

int64_t stat(const StatsList& stats, const std::string& name) {
  for (const auto& [n, v] : stats) {
    if (n == name) return v;
  }
  ADD_FAILURE() << name;
  return -1;
}

class HttpServerNodeQueue : public ::testing::Test {
 protected:
  void start(size_t max_pending, std::chrono::milliseconds node_wait, bool on_http_thread = false) {
    HttpServerOptions o;
    o.listen = "127.0.0.1:0";
    o.max_pending = max_pending;
    o.node_wait = node_wait;
    o.decide_on_http_thread = on_http_thread;
    server_ = std::make_unique<HttpServer>(node_io_, handler_, o);
    ASSERT_EQ(server_->start(nullptr), "");
  }
  // Until the HTTP thread has queued `n` checks for the node (it runs on its own).
  void wait_queued(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (stat(server_->stats(), "http.requests") < int64_t(n) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_GE(stat(server_->stats(), "http.requests"), int64_t(n));
  }

  // The node's thread, one turn: waits for the HTTP thread to queue something.
  void run_node_once() { ASSERT_EQ(node_io_.run_one_for(std::chrono::seconds(10)), 1u); }

  boost::asio::io_context node_io_;  // run by the test only
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ =
      boost::asio::make_work_guard(node_io_);
  CountingHandler handler_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerNodeQueue, BeyondMaxPendingACheckIsAnswered503AtOnceUndecided) {
  start(1, std::chrono::seconds(60));
  Get first(server_->address(), "/v1/check?key=k1");
  wait_queued(1);
  Get second(server_->address(), "/v1/check?key=k2");
  const std::string busy = second.read();  // while the first waits for the node
  EXPECT_NE(busy.find("503"), std::string::npos) << busy;
  EXPECT_EQ(stat(server_->stats(), "http.node_busy"), 1);
  EXPECT_EQ(handler_.items, 0u);
  run_node_once();  // the node takes the first
  EXPECT_NE(first.read().find("200"), std::string::npos);
  EXPECT_EQ(handler_.items, 1u);
}

// A node wait of 0: whenever the node gets to it, the check has waited too long.
TEST_F(HttpServerNodeQueue, ACheckThatWaitedPastTheNodeWaitIs503Undecided) {
  start(16, std::chrono::milliseconds(0));
  Get waiting(server_->address(), "/v1/check?key=k1");
  run_node_once();
  const std::string answer = waiting.read();
  EXPECT_NE(answer.find("503"), std::string::npos) << answer;
  EXPECT_NE(answer.find("overloaded"), std::string::npos) << answer;
  EXPECT_EQ(stat(server_->stats(), "http.node_wait_expired"), 1);
  EXPECT_EQ(handler_.items, 0u);  // never decided, never charged
}

TEST_F(HttpServerNodeQueue, AfterStopChecksAre503Undecided) {
  start(16, std::chrono::seconds(60));
  server_->stop();  // the node is leaving
  Get late(server_->address(), "/v1/check?key=k1");
  run_node_once();
  const std::string answer = late.read();
  EXPECT_NE(answer.find("503"), std::string::npos) << answer;
  EXPECT_NE(answer.find("shutting down"), std::string::npos) << answer;
  EXPECT_EQ(handler_.items, 0u);
}

// Issue 38: with the key table concurrent, a check is decided on the HTTP thread as it is read,
// with no hop to the node's thread and back (the node's io_context never runs here); what is not
// a check (members) still goes to the node.
TEST_F(HttpServerNodeQueue, OnTheHttpThreadAChecksIsDecidedThereAndOtherRequestsStillGoToTheNode) {
  start(16, std::chrono::seconds(60), /*on_http_thread=*/true);
  Get check(server_->address(), "/v1/check?key=k1");
  const std::string answer = check.read();
  EXPECT_NE(answer.find("200"), std::string::npos) << answer;
  EXPECT_EQ(handler_.decided.load(), 1u);
  EXPECT_NE(handler_.decided_on.load(), std::this_thread::get_id());
  EXPECT_EQ(node_io_.poll(), 0u) << "nothing was queued for the node";
  Get members(server_->address(), "/v1/members");
  run_node_once();  // members come from the node's thread
  EXPECT_NE(members.read().find("200"), std::string::npos);
}

TEST_F(HttpServerNodeQueue, OnTheHttpThreadAfterStopChecksAre503Undecided) {
  start(16, std::chrono::seconds(60), /*on_http_thread=*/true);
  server_->stop();  // the node is leaving: it seals what was charged right after this
  Get late(server_->address(), "/v1/check?key=k1");
  const std::string answer = late.read();
  EXPECT_NE(answer.find("503"), std::string::npos) << answer;
  EXPECT_NE(answer.find("shutting down"), std::string::npos) << answer;
  EXPECT_EQ(handler_.decided.load(), 0u);
}

TEST_F(HttpServerNodeQueue, EveryStatIsDeclared) {
  start(16, std::chrono::seconds(60));
  StatCatalog catalog;
  catalog.add(HttpServer::stat_defs());
  for (const auto& [name, value] : server_->stats()) EXPECT_NE(catalog.find(name), nullptr) << name;
}

}  // namespace
}  // namespace tollgate::http
