// tollgate::Client against a real ApiServer (fake handler) on a temporary Unix socket, and against
// sockets that never answer.
#include "tollgate/client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "test_support.h"

namespace tollgate::api::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Generous deadline for calls that must be answered by the daemon: the machine may be loaded,
// and these tests are about what is answered, not how fast.
constexpr auto kPatient = 10s;

ClientOptions options_for(const std::string& path) {
  ClientOptions options;
  options.endpoint = "unix:" + path;
  options.deadline = kPatient;
  options.admin_timeout = kPatient;
  options.reconnect_initial = 1ms;
  options.reconnect_max = 20ms;
  return options;
}

// A Unix socket that is bound and listening but never accepts: connecting succeeds (the kernel
// queues the connection) and requests are written into the void. A daemon that never answers.
class SilentListener {
 public:
  explicit SilentListener(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
  }
  ~SilentListener() { ::close(fd_); }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;

  // Writes `bytes` to every connection it accepts (as a server of another protocol would), the
  // client's background connection and its direct ones alike, until stop_answering().
  void answer_each(const std::string& bytes) {
    for (;;) {
      const int conn = ::accept(fd_, nullptr, nullptr);
      ASSERT_GE(conn, 0);
      if (stop_.load()) {
        ::close(conn);
        return;
      }
      EXPECT_EQ(::write(conn, bytes.data(), bytes.size()), ssize_t(bytes.size()));
      ::shutdown(conn, SHUT_WR);
      conns_.push_back(conn);
    }
  }
  // Ends answer_each(): the flag, then one connection of our own to wake its accept().
  void stop_answering(const std::string& path) {
    stop_.store(true);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
  }
  std::vector<int> conns_;  // closed by the test when it is done

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false};
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("api.sock");
    ASSERT_EQ(server_.start_unix(path_), "");
  }
  // Makes the handler hold the first check until the returned promise is set (or destroyed),
  // and answer the n-th check with remaining n * 100, so a test can tell whose answer it got.
  std::promise<void> hold_first_check() {
    std::promise<void> release;
    auto calls = std::make_shared<std::atomic<int>>(0);
    handler_.set_on_check([released = release.get_future().share(), calls](std::string_view, int64_t) {
      const int n = ++*calls;
      if (n == 1) released.wait();
      return Decision{true, /*remaining=*/n * 100, 0, DenyReason::kNone, true, fake_limit()};
    });
    return release;
  }
  // With the handler holding the first check: a call that gives up on it after 50 ms (and fails
  // open), then, once the handler lets go, the next call's reply.
  static CheckReply give_up_then_check_again(Client& client, std::promise<void>& release) {
    const CheckReply gave_up = client.check("slow", 1, 50ms);
    EXPECT_EQ(gave_up.source, ReplySource::kFailOpen);
    EXPECT_TRUE(gave_up.allowed);
    EXPECT_NE(gave_up.error, "");
    release.set_value();
    return client.check("next", 1);
  }
  TempDir dir_;
  std::string path_;
  FakeHandler handler_;
  ServerHarness server_{handler_};
};

TEST_F(ClientTest, CheckIsDecidedByTheDaemon) {
  Client client(options_for(path_));
  const CheckReply reply = client.check("api:login:alice", 2);
  EXPECT_EQ(reply.source, ReplySource::kDaemon) << reply.error;
  EXPECT_TRUE(reply.from_daemon());
  EXPECT_EQ(reply.error, "");
  EXPECT_TRUE(reply.allowed);
  EXPECT_EQ(reply.remaining, 3);
  EXPECT_EQ(reply.retry_after_ns, 0);
  EXPECT_EQ(reply.reason, DenyReason::kNone);
  EXPECT_TRUE(reply.limited);
  ASSERT_TRUE(reply.has_limit());
  EXPECT_EQ(reply.limit, fake_limit());

  const CheckReply denied = client.check("k", 6);
  EXPECT_TRUE(denied.from_daemon());
  EXPECT_FALSE(denied.allowed);
  EXPECT_EQ(denied.reason, DenyReason::kCostExceedsBurst);
  EXPECT_EQ(denied.retry_after_ns, kRetryNever);

  const CheckReply unlimited = client.check("unlimited");
  EXPECT_TRUE(unlimited.allowed);
  EXPECT_FALSE(unlimited.limited);
  EXPECT_FALSE(unlimited.has_limit());

  // Keys are bytes, not text.
  const std::string binary_key("\xff\x00\xfe", 3);
  EXPECT_TRUE(client.check(binary_key).from_daemon());
  EXPECT_EQ(handler_.seen().back().first, binary_key);
  EXPECT_EQ(client.counters().daemon_replies, 4u);
  EXPECT_TRUE(client.connected());
}

TEST_F(ClientTest, BatchRepliesComeInOrder) {
  Client client(options_for(path_));
  const std::vector<CheckItem> items = {{"a", 1}, {"b", 9}, {"unlimited", 1}};
  const std::vector<CheckReply> replies = client.check_batch(items);
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_TRUE(replies[0].allowed);
  EXPECT_EQ(replies[0].remaining, 4);
  EXPECT_FALSE(replies[1].allowed);
  EXPECT_FALSE(replies[2].limited);
  for (const CheckReply& r : replies) EXPECT_TRUE(r.from_daemon());
  EXPECT_EQ(handler_.seen().size(), 3u);  // one request, three checks
  EXPECT_EQ(server_.counters().requests, 1u);
  EXPECT_TRUE(client.check_batch(std::vector<CheckItem>{}).empty());
}

TEST_F(ClientTest, AsyncCheckCallsBackOnce) {
  Client client(options_for(path_));
  std::promise<CheckReply> done;
  client.check_async("k", 1, [&done](CheckReply r) { done.set_value(std::move(r)); });
  auto future = done.get_future();
  ASSERT_EQ(future.wait_for(kPatient), std::future_status::ready);
  const CheckReply reply = future.get();
  EXPECT_TRUE(reply.from_daemon()) << reply.error;
  EXPECT_EQ(reply.remaining, 4);
}

TEST_F(ClientTest, ConcurrentCallersAreAllAnswered) {
  Client client(options_for(path_));
  constexpr int kThreads = 4;
  constexpr int kChecksPerThread = 200;
  std::atomic<int> from_daemon{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kChecksPerThread; ++i) {
        // Each thread uses its own cost, so a reply routed to the wrong caller would show.
        const int64_t cost = t + 1;
        const CheckReply r = client.check("k" + std::to_string(t), cost);
        if (r.from_daemon() && r.remaining == 5 - cost) ++from_daemon;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(from_daemon.load(), kThreads * kChecksPerThread);
  EXPECT_EQ(handler_.seen().size(), static_cast<size_t>(kThreads * kChecksPerThread));
}

TEST_F(ClientTest, AdminCalls) {
  Client client(options_for(path_));
  std::string error;
  const auto members = client.members(&error);
  ASSERT_TRUE(members) << error;
  ASSERT_EQ(members->size(), 2u);
  EXPECT_EQ((*members)[0].id, "node-a");
  EXPECT_TRUE((*members)[0].self);
  EXPECT_EQ((*members)[1].address, "127.0.0.1:7002");
  EXPECT_EQ((*members)[1].state, MemberState::kSuspect);
  EXPECT_EQ((*members)[1].incarnation, 1u);
  EXPECT_EQ((*members)[1].heartbeat, 12u);
  EXPECT_EQ((*members)[1].last_heard_ns, 1'500'000'000);

  const auto stats = client.stats(&error);
  ASSERT_TRUE(stats) << error;
  ASSERT_EQ(stats->size(), 2u);
  EXPECT_EQ((*stats)[1], (std::pair<std::string, int64_t>{"keys", 2}));

  FaultSettings faults;
  faults.drop_to = {"node-b", "node-c"};
  faults.delay_ms = 25;
  EXPECT_EQ(client.set_faults(faults), "");
  ASSERT_TRUE(handler_.faults());
  EXPECT_EQ(handler_.faults()->drop_to, faults.drop_to);
  EXPECT_EQ(handler_.faults()->delay_ms, 25);
  faults.loss = 0.95;
  EXPECT_EQ(client.set_faults(faults), "loss above 0.9 would stop the cluster");
}

TEST_F(ClientTest, DaemonErrorsBecomeFallbackReplies) {
  ApiServerOptions options;
  options.max_checks_per_batch = 2;
  ASSERT_EQ(server_.start_unix(path_, options), "");
  Client client(options_for(path_));
  const std::vector<CheckItem> items = {{"a", 1}, {"b", 1}, {"c", 1}};
  const auto replies = client.check_batch(items);
  ASSERT_EQ(replies.size(), 3u);
  for (const CheckReply& r : replies) {
    EXPECT_EQ(r.source, ReplySource::kFailOpen);
    EXPECT_TRUE(r.allowed);
    EXPECT_NE(r.error.find("3 checks exceeds the limit of 2"), std::string::npos) << r.error;
  }
  EXPECT_TRUE(client.check("a").from_daemon());  // the connection is still good
}

// A daemon's error answer (here: a batch over its limit) is a fallback too: denied when the
// client fails closed.
TEST_F(ClientTest, FailClosedDeniesOnADaemonError) {
  ApiServerOptions server_options;
  server_options.max_checks_per_batch = 2;
  ASSERT_EQ(server_.start_unix(path_, server_options), "");
  ClientOptions options = options_for(path_);
  options.fail_open = false;
  Client client(options);
  const std::vector<CheckItem> items = {{"a", 1}, {"b", 1}, {"c", 1}};
  for (const CheckReply& r : client.check_batch(items)) {
    EXPECT_FALSE(r.allowed);
    EXPECT_EQ(r.source, ReplySource::kFailClosed);
    EXPECT_NE(r.error.find("exceeds the limit of 2"), std::string::npos) << r.error;
  }
  EXPECT_TRUE(client.check("a").from_daemon());
}

TEST_F(ClientTest, ARequestTooLargeToSendFailsWithoutBeingSent) {
  ClientOptions options = options_for(path_);
  options.max_request_bytes = 100;
  Client client(options);
  const CheckReply reply = client.check(std::string(200, 'k'));
  EXPECT_EQ(reply.source, ReplySource::kFailOpen);
  EXPECT_NE(reply.error.find("exceeds max_request_bytes (100)"), std::string::npos) << reply.error;
  EXPECT_TRUE(client.check("small").from_daemon());
  EXPECT_EQ(handler_.seen().size(), 1u);
}

TEST_F(ClientTest, ALateReplyIsDroppedAndNotGivenToTheNextCaller) {
  // The first check blocks in the handler until the test has seen the client give up on it.
  std::promise<void> release = hold_first_check();
  ClientOptions options = options_for(path_);
  options.direct_connections = 0;  // both calls on the io thread's one connection
  Client client(options);
  ASSERT_TRUE(client.wait_connected(kPatient));
  // Answered in order on the same connection: the late answer (remaining 100) arrives first and
  // must be dropped; the next call must get its own (remaining 200).
  const CheckReply next = give_up_then_check_again(client, release);
  ASSERT_TRUE(next.from_daemon()) << next.error;
  EXPECT_EQ(next.remaining, 200);
  EXPECT_EQ(client.counters().late_replies, 1u);
}

TEST(ClientOddData, NodeIdsThatAreNotUtf8DoNotBreakMembers) {
  // Node ids can be learned from the network; the API carries them as bytes.
  class OddHandler : public FakeHandler {
   public:
    std::vector<MemberInfo> members() override {
      return {{std::string("n\xff\x00d", 4), "127.0.0.1:1", MemberState::kAlive, 1, 0, 0, true}};
    }
  };
  TempDir dir;
  OddHandler handler;
  ServerHarness server(handler);
  ASSERT_EQ(server.start_unix(dir.file("api.sock")), "");
  Client client(options_for(dir.file("api.sock")));
  std::string error;
  const auto members = client.members(&error);
  ASSERT_TRUE(members) << error;
  ASSERT_EQ(members->size(), 1u);
  EXPECT_EQ((*members)[0].id, std::string("n\xff\x00d", 4));
  EXPECT_TRUE(client.check("k").from_daemon());  // and the connection is fine
}

// --- no daemon, or one that never answers --------------------------------------------------------

TEST(ClientWithoutDaemon, FailsOpenAtOnceWhenNothingListens) {
  TempDir dir;
  ClientOptions options;
  options.endpoint = "unix:" + dir.file("nobody.sock");
  options.deadline = 5s;  // not what bounds the call: the connect fails at once
  Client client(options);
  const auto start = Clock::now();
  const CheckReply reply = client.check("k");
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_TRUE(reply.allowed);
  EXPECT_EQ(reply.source, ReplySource::kFailOpen);
  EXPECT_FALSE(reply.from_daemon());
  EXPECT_NE(reply.error.find("nobody.sock"), std::string::npos) << reply.error;
  EXPECT_FALSE(client.connected());
  // While reconnecting in the background, later calls also fail at once.
  const auto again = Clock::now();
  EXPECT_EQ(client.check("k").source, ReplySource::kFailOpen);
  EXPECT_LT(Clock::now() - again, 1s);
  EXPECT_EQ(client.counters().fallback_replies, 2u);
}

TEST(ClientWithoutDaemon, FailClosedDenies) {
  TempDir dir;
  ClientOptions options;
  options.endpoint = "unix:" + dir.file("nobody.sock");
  options.fail_open = false;
  Client client(options);
  const CheckReply reply = client.check("k");
  EXPECT_FALSE(reply.allowed);
  EXPECT_EQ(reply.source, ReplySource::kFailClosed);
  EXPECT_STREQ(reply_source_name(reply.source), "fail-closed");
  const auto replies = client.check_batch(std::vector<CheckItem>{{"a", 1}, {"b", 1}});
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_FALSE(replies[1].allowed);
  std::string error;
  EXPECT_FALSE(client.members(&error));
  EXPECT_NE(error, "");
  EXPECT_NE(client.set_faults({}), "");
}

// --endpoint at tollgated's HTTP port instead of its client API: the answer's first four bytes,
// "HTTP", read as a length prefix of 1,213,486,160 bytes. The error says what it is (issue 37,
// item 13).
TEST(ClientWithoutDaemon, AnHttpServerAtTheEndpointIsNamedInTheError) {
  TempDir dir;
  const std::string path = dir.file("http.sock");
  SilentListener http(path);
  // Every connection gets the answer: which one the check travels on (the client's background
  // connection or a direct one opened beside it) depends on timing.
  std::thread server([&] { http.answer_each("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"); });
  ClientOptions options;
  options.endpoint = "unix:" + path;
  options.deadline = 5s;
  options.fail_open = false;
  Client client(options);
  const CheckReply reply = client.check("k");
  http.stop_answering(path);
  server.join();
  for (int fd : http.conns_) ::close(fd);
  EXPECT_EQ(reply.source, ReplySource::kFailClosed);
  EXPECT_NE(reply.error.find("a frame of 1213486160 bytes"), std::string::npos) << reply.error;
  EXPECT_NE(reply.error.find("this endpoint is an HTTP server"), std::string::npos) << reply.error;
}

TEST(ClientWithoutDaemon, ADaemonThatNeverAnswersCostsOnlyTheDeadline) {
  TempDir dir;
  const std::string path = dir.file("silent.sock");
  SilentListener silent(path);
  ClientOptions options;
  options.endpoint = "unix:" + path;
  options.deadline = 2ms;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(kPatient));  // connected, so the deadline is what ends the call

  const auto start = Clock::now();
  const CheckReply reply = client.check("k");
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(reply.source, ReplySource::kFailOpen);
  EXPECT_TRUE(reply.allowed);
  EXPECT_NE(reply.error, "");

  // The async form is completed by the deadline too.
  std::promise<CheckReply> done;
  client.check_async("k", 1, [&done](CheckReply r) { done.set_value(std::move(r)); });
  auto future = done.get_future();
  ASSERT_EQ(future.wait_for(kPatient), std::future_status::ready);
  EXPECT_EQ(future.get().source, ReplySource::kFailOpen);
}

// Fail closed, tested where it matters: a daemon that is connected but silent (the deadline
// ends the call) denies, for one check, a batch and an all-or-nothing batch, and says why.
TEST(ClientWithoutDaemon, FailClosedDeniesWhenTheDeadlinePasses) {
  TempDir dir;
  const std::string path = dir.file("silent.sock");
  SilentListener silent(path);
  ClientOptions options;
  options.endpoint = "unix:" + path;
  options.deadline = 2ms;
  options.fail_open = false;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(kPatient));
  const CheckReply reply = client.check("k");
  EXPECT_FALSE(reply.allowed);
  EXPECT_EQ(reply.source, ReplySource::kFailClosed);
  EXPECT_NE(reply.error.find("deadline"), std::string::npos) << reply.error;
  const CheckItem items[] = {{"a", 1}, {"b", 1}};
  for (const auto& replies : {client.check_batch(items), client.check_all(items)}) {
    ASSERT_EQ(replies.size(), 2u);
    for (const CheckReply& r : replies) {
      EXPECT_FALSE(r.allowed);
      EXPECT_EQ(r.source, ReplySource::kFailClosed);
    }
  }
}

TEST(ClientWithoutDaemon, DestroyingTheClientCompletesOutstandingAsyncCalls) {
  TempDir dir;
  const std::string path = dir.file("silent.sock");
  SilentListener silent(path);
  ClientOptions options;
  options.endpoint = "unix:" + path;
  options.deadline = 1h;  // only the destructor can end these calls
  std::promise<CheckReply> done;
  auto future = done.get_future();
  {
    Client client(options);
    ASSERT_TRUE(client.wait_connected(kPatient));
    client.check_async("k", 1, [&done](CheckReply r) { done.set_value(std::move(r)); });
  }
  ASSERT_EQ(future.wait_for(0s), std::future_status::ready);
  const CheckReply reply = future.get();
  EXPECT_EQ(reply.source, ReplySource::kFailOpen);
  EXPECT_NE(reply.error.find("shutting down"), std::string::npos) << reply.error;
}

TEST(ClientOptionsTest, AnInvalidEndpointThrows) {
  ClientOptions options;
  options.endpoint = "http://localhost";
  EXPECT_THROW(Client client(options), std::invalid_argument);
}

TEST_F(ClientTest, ReconnectsAfterTheDaemonRestarts) {
  ClientOptions options = options_for(path_);
  // The io thread's reconnection, alone: a caller-thread connection could see the close (and
  // fail the check below) before the io thread does, and the connects count would race.
  options.direct_connections = 0;
  Client client(options);
  ASSERT_TRUE(client.check("k").from_daemon());

  server_.stop();  // closes the connection and removes the socket file
  // The client learns of the close from the socket: at the latest, a check then fails.
  bool failed = false;
  for (int i = 0; i < 1000 && !failed; ++i) failed = !client.check("k", 1, kPatient).from_daemon();
  ASSERT_TRUE(failed);

  ASSERT_EQ(server_.start_unix(path_), "");
  ASSERT_TRUE(client.wait_connected(kPatient));  // the background reconnect, with backoff
  const CheckReply reply = client.check("k");
  EXPECT_TRUE(reply.from_daemon()) << reply.error;
  EXPECT_GE(client.counters().connects, 2u);
  EXPECT_GE(client.counters().disconnects, 1u);
}

// --- the caller-thread path (ClientOptions::direct_connections) -------------------------------

TEST_F(ClientTest, SyncChecksAreAnsweredOnTheCallersOwnConnection) {
  Client client(options_for(path_));
  ASSERT_TRUE(client.wait_connected(kPatient));
  const CheckReply reply = client.check("k", 2);
  ASSERT_TRUE(reply.from_daemon()) << reply.error;
  EXPECT_EQ(reply.remaining, 3);
  const CheckItem items[] = {{"a", 1}, {"b", 2}};
  const auto replies = client.check_batch(items);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[1].remaining, 3);
  EXPECT_EQ(client.counters().direct_calls, 2u);
  // One connection for the io thread, one for this caller, kept for its second call.
  EXPECT_EQ(server_.counters().connections_accepted, 2u);

  // Async calls stay on the io thread.
  std::promise<CheckReply> done;
  client.check_async("k", 1, [&done](CheckReply r) { done.set_value(std::move(r)); });
  auto future = done.get_future();
  ASSERT_EQ(future.wait_for(kPatient), std::future_status::ready);
  EXPECT_TRUE(future.get().from_daemon());
  EXPECT_EQ(client.counters().direct_calls, 2u);
}

TEST_F(ClientTest, WithoutDirectConnectionsEveryCallGoesThroughTheIoThread) {
  ClientOptions options = options_for(path_);
  options.direct_connections = 0;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(kPatient));
  EXPECT_TRUE(client.check("k").from_daemon());
  EXPECT_EQ(client.counters().direct_calls, 0u);
  EXPECT_EQ(server_.counters().connections_accepted, 1u);
}

TEST_F(ClientTest, ALateReplyOnACallersConnectionGoesWithTheConnection) {
  std::promise<void> release = hold_first_check();
  Client client(options_for(path_));
  ASSERT_TRUE(client.wait_connected(kPatient));
  // The timed-out connection was closed, its late answer with it: the next call, on a fresh
  // connection, gets its own answer (remaining 200), never the first call's (100).
  const CheckReply next = give_up_then_check_again(client, release);
  ASSERT_TRUE(next.from_daemon()) << next.error;
  EXPECT_EQ(next.remaining, 200);
  EXPECT_EQ(client.counters().direct_calls, 1u);
}

TEST_F(ClientTest, ManyCallersShareAPoolOfBoundedSize) {
  ClientOptions options = options_for(path_);
  options.direct_connections = 2;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(kPatient));
  constexpr int kThreads = 8;
  constexpr int kChecksPerThread = 200;
  std::atomic<int> right{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kChecksPerThread; ++i) {
        const int64_t cost = t % 5 + 1;  // a reply given to the wrong caller would show
        const CheckReply r = client.check("k" + std::to_string(t), cost);
        if (r.from_daemon() && r.remaining == 5 - cost) ++right;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(right.load(), kThreads * kChecksPerThread);
  EXPECT_GT(client.counters().direct_calls, 0u);
  EXPECT_LE(server_.counters().connections_accepted, 3u);  // the io thread's and at most 2 more
}

TEST_F(ClientTest, ACallerConnectionClosedByARestartIsReplaced) {
  Client client(options_for(path_));
  ASSERT_TRUE(client.wait_connected(kPatient));
  ASSERT_TRUE(client.check("k").from_daemon());
  ASSERT_EQ(client.counters().direct_calls, 1u);

  server_.stop();  // closes every connection, the pooled one included
  ASSERT_EQ(server_.start_unix(path_), "");
  // The io thread reconnects with backoff; until it has, a check may fail open (never hang).
  CheckReply reply;
  reply.source = ReplySource::kFailOpen;
  for (int i = 0; i < 1000 && !reply.from_daemon(); ++i) {
    ASSERT_TRUE(client.wait_connected(kPatient));
    reply = client.check("k", 1, kPatient);
  }
  ASSERT_TRUE(reply.from_daemon()) << reply.error;
  EXPECT_EQ(client.counters().direct_calls, 2u);
}

// The daemon closes idle connections (ApiServerOptions::idle_timeout). The io thread's
// connection is replaced at once, not after the reconnect backoff (an hour here), so calls made
// meanwhile queue instead of failing open.
TEST_F(ClientTest, AnIdleConnectionTheDaemonClosesIsReplacedAtOnce) {
  ApiServerOptions server_options;
  server_options.idle_timeout = 1200ms;  // the client replaces at once a connection that lived 1 s
  ASSERT_EQ(server_.start_unix(path_, server_options), "");
  ClientOptions options = options_for(path_);
  options.direct_connections = 0;
  options.reconnect_initial = std::chrono::hours(1);
  options.reconnect_max = std::chrono::hours(1);
  Client client(options);
  ASSERT_TRUE(client.wait_connected(kPatient));
  ASSERT_TRUE(client.check("k").from_daemon());
  ASSERT_TRUE(wait_until([&] { return server_.counters().connections_idle_closed >= 1; }));
  ASSERT_TRUE(wait_until([&] { return client.counters().connects >= 2; }));
  EXPECT_GE(client.counters().disconnects, 1u);
  const CheckReply reply = client.check("k");
  EXPECT_TRUE(reply.from_daemon()) << reply.error;
  EXPECT_EQ(client.counters().fallback_replies, 0u);
}

// Over TCP, a request written to a connection the daemon has closed is only found out when no
// answer comes; so a caller's pooled connection that sat idle is checked first, and replaced.
TEST(ClientOverTcp, ACallersPooledConnectionClosedByTheDaemonWhileIdleIsReplaced) {
  FakeHandler handler;
  ServerHarness server(handler);
  ApiServerOptions server_options;
  server_options.listen = {*parse_endpoint("tcp:127.0.0.1:0")};
  server_options.idle_timeout = 1200ms;
  ASSERT_EQ(server.start(server_options), "");
  ClientOptions options;
  options.endpoint = "tcp:127.0.0.1:" + std::to_string(server.bound().at(0).port);
  options.deadline = kPatient;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(kPatient));
  ASSERT_TRUE(client.check("k").from_daemon());
  ASSERT_EQ(client.counters().direct_calls, 1u);
  // Both the io thread's connection and the caller's are closed by the daemon.
  ASSERT_TRUE(wait_until([&] { return server.counters().connections_idle_closed >= 2; }));
  // The caller's path is taken only while the io thread is connected: wait for its reconnection
  // (under a loaded ASan run it can lag, and the call then went through the io thread).
  ASSERT_TRUE(wait_until([&] { return client.counters().connects >= 2; }));
  ASSERT_TRUE(client.wait_connected(kPatient));
  const CheckReply reply = client.check("k");
  EXPECT_TRUE(reply.from_daemon()) << reply.error;
  EXPECT_EQ(client.counters().direct_calls, 2u);
  EXPECT_EQ(client.counters().fallback_replies, 0u);
}

TEST(ClientWithoutDaemon, ASilentDaemonCostsACallerConnectionOnlyTheDeadline) {
  TempDir dir;
  const std::string path = dir.file("silent.sock");
  SilentListener silent(path);
  ClientOptions options;
  options.endpoint = "unix:" + path;
  options.deadline = 2ms;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(kPatient));
  for (int i = 0; i < 20; ++i) {  // more than the pool and the listen backlog
    const auto start = Clock::now();
    const CheckReply reply = client.check("k");
    EXPECT_LT(Clock::now() - start, 1s);
    EXPECT_EQ(reply.source, ReplySource::kFailOpen);
  }
  EXPECT_EQ(client.counters().direct_calls, 0u);
  EXPECT_EQ(client.counters().fallback_replies, 20u);
}

}  // namespace
}  // namespace tollgate::api::testing
