// ApiServer over real sockets in a temporary directory, driven by raw frames.
#include "api/api_server.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <unistd.h>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "test_support.h"

namespace tollgate::api::testing {
namespace {

using Status = RawConnection::ReadStatus;

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_path_ = dir_.file("api.sock");
    ASSERT_EQ(server_.start_unix(socket_path_), "");
  }

  std::unique_ptr<RawConnection> connect() {
    auto c = RawConnection::connect_unix(socket_path_);
    EXPECT_NE(c, nullptr);
    return c;
  }

  // Sends a one-check request and expects its answer.
  void expect_served(RawConnection& c, uint64_t id) {
    ASSERT_TRUE(c.send_request(check_request(id, {{"k", 1}})));
    pb::Response r;
    ASSERT_EQ(c.read_response(&r), Status::kFrame);
    EXPECT_EQ(r.id(), id);
    EXPECT_TRUE(r.has_check());
  }

  TempDir dir_;
  std::string socket_path_;
  FakeHandler handler_;
  ServerHarness server_{handler_};
};

TEST_F(ApiServerTest, AnswersASingleCheck) {
  auto c = connect();
  ASSERT_TRUE(c->send_request(check_request(42, {{"api:login:alice", 2}})));
  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.version(), kApiVersion);
  EXPECT_EQ(r.id(), 42u);
  ASSERT_TRUE(r.has_check());
  ASSERT_EQ(r.check().results_size(), 1);
  const pb::Result& result = r.check().results(0);
  EXPECT_TRUE(result.allowed());
  EXPECT_EQ(result.remaining(), 3);
  EXPECT_EQ(result.retry_after_ns(), 0);
  EXPECT_EQ(result.reason_code(), pb::DENY_REASON_NONE);
  EXPECT_TRUE(result.limited());
  ASSERT_TRUE(result.has_limit());
  EXPECT_EQ(result.limit().rate_tokens(), 10);
  EXPECT_EQ(result.limit().rate_period_ns(), 1'000'000'000);
  EXPECT_EQ(result.limit().burst(), 5);
  EXPECT_EQ(result.limit().max_debt(), 5);
  EXPECT_EQ(handler_.seen(), (std::vector<std::pair<std::string, int64_t>>{{"api:login:alice", 2}}));
}

TEST_F(ApiServerTest, AnswersAPipelinedBurstInOrder) {
  auto c = connect();
  std::string burst;
  for (uint64_t id = 1; id <= 100; ++id) {
    ASSERT_TRUE(append_frame(check_request(id, {{"key" + std::to_string(id), 1}}), UINT32_MAX, burst));
  }
  ASSERT_TRUE(c->send_bytes(burst));  // all 100 before reading any answer
  for (uint64_t id = 1; id <= 100; ++id) {
    pb::Response r;
    ASSERT_EQ(c->read_response(&r), Status::kFrame) << id;
    EXPECT_EQ(r.id(), id);
    EXPECT_TRUE(r.has_check());
  }
  const auto seen = handler_.seen();
  ASSERT_EQ(seen.size(), 100u);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i].first, "key" + std::to_string(i + 1));
  EXPECT_EQ(server_.counters().requests, 100u);
}

TEST_F(ApiServerTest, AnswersABatchOfChecksInOrder) {
  auto c = connect();
  ASSERT_TRUE(c->send_request(check_request(7, {{"a", 1}, {"unlimited", 1}, {"b", 9}, {"c", 0}})));
  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  ASSERT_EQ(r.check().results_size(), 4);
  EXPECT_TRUE(r.check().results(0).allowed());
  EXPECT_EQ(r.check().results(0).remaining(), 4);
  EXPECT_TRUE(r.check().results(1).allowed());
  EXPECT_FALSE(r.check().results(1).limited());
  EXPECT_FALSE(r.check().results(1).has_limit());
  EXPECT_FALSE(r.check().results(2).allowed());
  EXPECT_EQ(r.check().results(2).reason_code(), pb::DENY_REASON_COST_EXCEEDS_BURST);
  EXPECT_EQ(r.check().results(2).reason(), "cost exceeds burst");
  EXPECT_EQ(r.check().results(2).retry_after_ns(), kRetryNever);
  EXPECT_EQ(r.check().results(3).remaining(), 5);
  EXPECT_EQ(server_.counters().checks, 4u);
}

// CheckBatch.all_or_nothing goes to the handler's check_all, in one call (never in slices), and
// is refused past 64 checks.
TEST_F(ApiServerTest, AnAllOrNothingBatchIsDecidedTogether) {
  auto c = connect();
  pb::Request request = check_request(7, {{"k", 1}, {"k", 9}});
  request.mutable_check()->set_all_or_nothing(true);
  ASSERT_TRUE(c->send_request(request));
  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  ASSERT_EQ(r.check().results_size(), 2);
  EXPECT_FALSE(r.check().results(0).allowed());
  EXPECT_EQ(r.check().results(0).reason_code(), pb::DENY_REASON_OTHER_CHECK_DENIED);
  EXPECT_EQ(r.check().results(0).reason(), "another check of the request was denied");
  EXPECT_EQ(r.check().results(1).reason_code(), pb::DENY_REASON_COST_EXCEEDS_BURST);

  std::vector<std::pair<std::string, int64_t>> many(65, {"k", 1});
  pb::Request big = check_request(8, many);
  big.mutable_check()->set_all_or_nothing(true);
  ASSERT_TRUE(c->send_request(big));
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.error().code(), pb::Error::BATCH_TOO_LARGE);
  EXPECT_EQ(r.id(), 8u);
  expect_served(*c, 9);  // the connection stays open
}

// A key whose first byte is 0x1E names an Envoy rate limit service bucket: the client API
// denies it without asking the node (issue 34, finding 10), alone and in an all-or-nothing batch
// (where nothing is charged).
TEST_F(ApiServerTest, EnvoyBucketKeysAreDeniedWithoutReachingTheNode) {
  auto c = connect();
  const std::string rls_key =
      "\x1e"
      "web\x1fpath\x1d/a";
  ASSERT_TRUE(c->send_request(check_request(7, {{"a", 1}, {rls_key, 1}, {"b", 1}})));
  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  ASSERT_EQ(r.check().results_size(), 3);
  EXPECT_TRUE(r.check().results(0).allowed());
  EXPECT_FALSE(r.check().results(1).allowed());
  EXPECT_EQ(r.check().results(1).reason_code(), pb::DENY_REASON_RESERVED_KEY);
  EXPECT_EQ(r.check().results(1).retry_after_ns(), kRetryNever);
  EXPECT_TRUE(r.check().results(2).allowed());
  pb::Request all = check_request(8, {{"a", 1}, {rls_key, 1}});
  all.mutable_check()->set_all_or_nothing(true);
  ASSERT_TRUE(c->send_request(all));
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  ASSERT_EQ(r.check().results_size(), 2);
  EXPECT_EQ(r.check().results(0).reason_code(), pb::DENY_REASON_OTHER_CHECK_DENIED);
  EXPECT_EQ(r.check().results(1).reason_code(), pb::DENY_REASON_RESERVED_KEY);
  // The node saw the two ordinary keys of the first batch and nothing else.
  EXPECT_EQ(handler_.seen(), (std::vector<std::pair<std::string, int64_t>>{{"a", 1}, {"b", 1}}));
}

TEST_F(ApiServerTest, RequestLevelErrorsAreAnsweredAndTheConnectionStaysOpen) {
  ApiServerOptions options;
  options.max_checks_per_batch = 3;
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto c = connect();

  // Too many checks.
  ASSERT_TRUE(c->send_request(check_request(1, {{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}})));
  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 1u);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::Error::BATCH_TOO_LARGE);
  EXPECT_NE(r.error().message().find("4 checks exceeds the limit of 3"), std::string::npos) << r.error().message();

  // Wrong version.
  pb::Request wrong_version = check_request(2, {{"a", 1}});
  wrong_version.set_version(99);
  ASSERT_TRUE(c->send_request(wrong_version));
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 2u);
  EXPECT_EQ(r.error().code(), pb::Error::UNSUPPORTED_VERSION);
  EXPECT_NE(r.error().message().find("version 99"), std::string::npos);

  // No body, and an empty batch.
  pb::Request empty;
  empty.set_version(kApiVersion);
  empty.set_id(3);
  ASSERT_TRUE(c->send_request(empty));
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.error().code(), pb::Error::EMPTY_REQUEST);
  ASSERT_TRUE(c->send_request(check_request(4, {})));
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 4u);
  EXPECT_EQ(r.error().code(), pb::Error::EMPTY_REQUEST);

  // A handler that throws.
  ASSERT_TRUE(c->send_request(check_request(5, {{"boom", 1}})));
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 5u);
  EXPECT_EQ(r.error().code(), pb::Error::INTERNAL);
  EXPECT_NE(r.error().message().find("handler exploded"), std::string::npos);

  expect_served(*c, 6);  // still open and serving
  const ApiServerCounters counters = server_.counters();
  EXPECT_EQ(counters.errors_batch_too_large, 1u);
  EXPECT_EQ(counters.errors_unsupported_version, 1u);
  EXPECT_EQ(counters.errors_empty_request, 2u);
  EXPECT_EQ(counters.errors_internal, 1u);
  EXPECT_EQ(counters.requests, 6u);
}

TEST_F(ApiServerTest, MalformedBytesGetAnErrorAndACloseWhileOtherConnectionsCarryOn) {
  auto bystander = connect();
  expect_served(*bystander, 1);

  auto bad = connect();
  // A frame whose payload is not a protobuf message: 0xFF is a tag with wire type 7 (invalid).
  const std::string garbage = std::string("\x00\x00\x00\x04", 4) + "\xff\xff\xff\xff";
  ASSERT_TRUE(bad->send_bytes(garbage));
  pb::Response r;
  ASSERT_EQ(bad->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 0u);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::Error::MALFORMED);
  EXPECT_TRUE(bad->reads_eof());

  expect_served(*bystander, 2);
  auto fresh = connect();
  expect_served(*fresh, 3);
  EXPECT_EQ(server_.counters().errors_malformed, 1u);
}

TEST_F(ApiServerTest, AHugeLengthPrefixIsRejectedAndClosedWithoutReadingIt) {
  auto c = connect();
  // 2 GiB announced, nothing after it: the server must answer from the header alone (if it waited
  // for, or allocated, the payload, this read would time out instead).
  ASSERT_TRUE(c->send_bytes(std::string("\x80\x00\x00\x00", 4)));
  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), pb::Error::FRAME_TOO_LARGE);
  EXPECT_NE(r.error().message().find("2147483648 bytes exceeds the limit of 65536"), std::string::npos)
      << r.error().message();
  EXPECT_TRUE(c->reads_eof());
  EXPECT_EQ(server_.counters().errors_frame_too_large, 1u);

  auto other = connect();
  expect_served(*other, 1);
}

TEST_F(ApiServerTest, MaxFrameBytesIsConfigurable) {
  ApiServerOptions options;
  options.max_frame_bytes = 64;
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto c = connect();
  expect_served(*c, 1);
  ASSERT_TRUE(c->send_request(check_request(2, {{std::string(100, 'k'), 1}})));
  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.error().code(), pb::Error::FRAME_TOO_LARGE);
  EXPECT_TRUE(c->reads_eof());
}

TEST_F(ApiServerTest, AnswersWhatWasSentBeforeTheClientHalfCloses) {
  auto c = connect();
  std::string two;
  ASSERT_TRUE(append_frame(check_request(1, {{"a", 1}}), UINT32_MAX, two));
  ASSERT_TRUE(append_frame(check_request(2, {{"b", 1}}), UINT32_MAX, two));
  ASSERT_TRUE(c->send_bytes(two));
  c->shutdown_write();
  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 1u);
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 2u);
  EXPECT_TRUE(c->reads_eof());
}

TEST_F(ApiServerTest, ConnectionsBeyondTheLimitAreClosedAtOnce) {
  ApiServerOptions options;
  options.max_connections = 2;
  options.evict_idle_after = std::chrono::hours(1);  // neither is idle long enough to give way
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto first = connect();
  auto second = connect();
  expect_served(*first, 1);  // both accepted and registered before the third arrives
  expect_served(*second, 1);

  auto third = connect();  // the kernel accepts the connect; the server closes it
  ASSERT_NE(third, nullptr);
  EXPECT_TRUE(third->reads_eof());
  EXPECT_EQ(server_.counters().connections_rejected, 1u);
  EXPECT_EQ(server_.counters().connections_open, 2u);

  // Once one leaves, a newcomer is served. The server notices the close asynchronously, so a
  // newcomer may still be turned away a few times; each attempt waits on real socket events.
  first.reset();
  bool served = false;
  for (int attempt = 0; attempt < 1000 && !served; ++attempt) {
    auto c = connect();
    ASSERT_NE(c, nullptr);
    if (!c->send_request(check_request(9, {{"k", 1}}))) continue;
    pb::Response r;
    served = c->read_response(&r) == Status::kFrame && r.id() == 9u;
  }
  EXPECT_TRUE(served);
  expect_served(*second, 2);
}

// Offense reports, collected on the server's thread and read from the test's.
struct Offenses {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> seen;
  OffenseReporter reporter() {
    return [this](std::string_view who, std::string_view what) {
      std::lock_guard lock(mu);
      seen.emplace_back(who, what);
    };
  }
  std::vector<std::pair<std::string, std::string>> copy() {
    std::lock_guard lock(mu);
    return seen;
  }
};

TEST_F(ApiServerTest, HalfAFrameThenSilenceIsClosedAfterTheFrameTimeoutAndOthersAreServed) {
  Offenses offenses;
  ApiServerOptions options;
  options.frame_timeout = std::chrono::milliseconds(300);
  options.on_offense = offenses.reporter();
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto idle = connect();  // an idle client with nothing pending is never timed out
  auto slow = connect();
  expect_served(*slow, 1);
  std::string frame;
  ASSERT_TRUE(append_frame(check_request(2, {{"k", 1}}), UINT32_MAX, frame));
  ASSERT_TRUE(slow->send_bytes(std::string_view(frame).substr(0, frame.size() / 2)));
  auto other = connect();
  expect_served(*other, 3);        // answered while the slow client holds half a frame
  EXPECT_TRUE(slow->reads_eof());  // blocks until the server closes it (or the 20 s socket timeout)
  EXPECT_EQ(server_.counters().connections_timed_out, 1u);
  expect_served(*idle, 4);  // idle longer than the timeout, and still served
  const auto seen = offenses.copy();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].first, "pid " + std::to_string(::getpid()) + " (uid " + std::to_string(::getuid()) + ")");
  EXPECT_NE(seen[0].second.find("part of a request frame"), std::string::npos) << seen[0].second;
}

// 10,000 connections at once against a limit of 256: the excess is closed at once and counted,
// clients already connected are answered throughout, and every refusal is reported (the daemon's
// OffenseLimiter turns these into one log line per client per interval).
TEST_F(ApiServerTest, TenThousandConnectionsAreCappedWhileConnectedClientsAreServed) {
  Offenses offenses;
  ApiServerOptions options;
  options.max_connections = 256;
  options.evict_idle_after = std::chrono::hours(1);  // refused, not made room for
  options.on_offense = offenses.reporter();
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto steady = connect();
  expect_served(*steady, 1);
  std::vector<std::unique_ptr<RawConnection>> flood;
  uint64_t id = 2;
  for (int i = 0; i < 10'000; ++i) {
    auto c = RawConnection::connect_unix(socket_path_);
    if (c) flood.push_back(std::move(c));  // the listen backlog may refuse some outright
    if (i % 1000 == 999) expect_served(*steady, id++);
  }
  EXPECT_GE(flood.size(), 9'000u);
  // The first 255 of the flood fill the limit (with `steady`); every later one is closed, which
  // reading each to EOF proves (accept takes them in connect order).
  size_t closed = 0;
  for (size_t i = 255; i < flood.size(); ++i) closed += flood[i]->reads_eof();
  EXPECT_EQ(server_.counters().connections_open, 256u);
  EXPECT_EQ(closed, flood.size() - 255) << "every connection beyond the first 255 of the flood is refused";
  EXPECT_EQ(server_.counters().connections_rejected, flood.size() - 255);
  expect_served(*steady, id++);
  const auto seen = offenses.copy();
  ASSERT_FALSE(seen.empty());
  EXPECT_NE(seen.back().second.find("limit"), std::string::npos);
}

// --- a client cannot lock others out --------------------------------------------------------

// Frames already read are answered only while the connection's unwritten answers stay under the
// cap: a client that pipelines 20,000 requests in one go makes the server hold at most the cap
// plus one answer, not every answer at once, and still gets each answer, in order.
TEST_F(ApiServerTest, PipelinedFramesAreAnsweredOnlyWhileTheOutputIsUnderTheCap) {
  ApiServerOptions options;
  options.max_pending_output_bytes = 1024;
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto c = connect();
  constexpr uint64_t kRequests = 20'000;
  std::string burst;
  for (uint64_t id = 1; id <= kRequests; ++id)
    ASSERT_TRUE(append_frame(check_request(id, {{"k", 1}}), UINT32_MAX, burst));
  // Sent from another thread: the server stops reading while the answers back up, so one
  // thread that first sends everything and then reads would wait on itself.
  std::thread sender([&] { EXPECT_TRUE(c->send_bytes(burst)); });
  uint64_t in_order = 0;
  for (uint64_t id = 1; id <= kRequests; ++id) {
    pb::Response r;
    if (c->read_response(&r) != Status::kFrame) break;
    in_order += r.id() == id;
  }
  sender.join();
  EXPECT_EQ(in_order, kRequests);
  // A one-check answer is about 20 bytes; 16 KB read at once holds ~650 requests, whose answers
  // (~13 KB) the server would all have queued before checking the cap.
  EXPECT_LE(server_.counters().pending_output_high_water, 1024u + 64u);
}

// Many clients that pipeline and do not read yet: each may hold up to its cap, but all together
// no more than the server's budget (plus one answer); the others wait, then each gets every
// answer, in order, once they read. Before the budget, 1,024 such connections held 1 GiB.
TEST_F(ApiServerTest, ConnectionsThatDoNotReadShareOneOutputBudget) {
  ApiServerOptions options;
  options.max_pending_output_bytes = 64 * 1024;
  options.max_output_bytes = 128 * 1024;
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  constexpr size_t kClients = 6;
  constexpr uint64_t kRequests = 20'000;  // ~500 KB of answers each
  std::string burst;
  for (uint64_t id = 1; id <= kRequests; ++id)
    ASSERT_TRUE(append_frame(check_request(id, {{"k", 1}}), UINT32_MAX, burst));
  std::vector<std::unique_ptr<RawConnection>> clients;
  for (size_t i = 0; i < kClients; ++i) clients.push_back(connect());
  std::vector<std::thread> senders;
  for (auto& c : clients) senders.emplace_back([&burst, c = c.get()] { EXPECT_TRUE(c->send_bytes(burst)); });
  // Two connections fill the budget; the other four wait for it.
  ASSERT_TRUE(wait_until([&] { return server_.counters().output_budget_waits >= kClients - 2; }));
  std::vector<std::thread> readers;
  std::vector<uint64_t> in_order(kClients, 0);
  for (size_t i = 0; i < kClients; ++i) {
    readers.emplace_back([&, i] {
      for (uint64_t id = 1; id <= kRequests; ++id) {
        pb::Response r;
        if (clients[i]->read_response(&r) != Status::kFrame) break;
        in_order[i] += r.id() == id;
      }
    });
  }
  for (auto& t : senders) t.join();
  for (auto& t : readers) t.join();
  for (size_t i = 0; i < kClients; ++i) EXPECT_EQ(in_order[i], kRequests) << "client " << i;
  EXPECT_LE(server_.counters().output_high_water, 128u * 1024u + 64u);
  EXPECT_GE(server_.counters().output_high_water, 128u * 1024u);  // the budget was reached
  // The last writes' handlers may run just after the client has read their bytes.
  EXPECT_TRUE(wait_until([&] { return server_.counters().output_bytes == 0; }));
}

// A client that sends requests and never reads its answers: once the server's write has waited
// a frame timeout for it, the connection is closed (its send then fails), and others are served.
TEST_F(ApiServerTest, AClientThatNeverReadsItsAnswersIsClosedAfterTheFrameTimeout) {
  Offenses offenses;
  ApiServerOptions options;
  options.max_pending_output_bytes = 64 * 1024;
  options.frame_timeout = std::chrono::milliseconds(300);
  options.on_offense = offenses.reporter();
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto deaf = connect();
  std::string burst;
  for (uint64_t id = 1; id <= 200'000; ++id)
    ASSERT_TRUE(append_frame(check_request(id, {{"k", 1}}), UINT32_MAX, burst));
  // ~5 MB of requests: far more than the socket buffers and the cap take, so the send blocks
  // until the server gives up on the connection.
  EXPECT_FALSE(deaf->send_bytes(burst));
  EXPECT_EQ(server_.counters().connections_write_stalled, 1u);
  EXPECT_LE(server_.counters().pending_output_high_water, 64u * 1024u + 64u);
  auto other = connect();
  expect_served(*other, 1);
  const auto seen = offenses.copy();
  ASSERT_FALSE(seen.empty());
  EXPECT_NE(seen.back().second.find("did not read its answers"), std::string::npos) << seen.back().second;
}

// At the connection limit, a newcomer takes the place of the least recently active idle
// connection (here evictable at once): an idle hoard cannot lock anyone out.
TEST_F(ApiServerTest, AtTheLimitANewcomerTakesThePlaceOfTheLeastRecentlyActiveIdleConnection) {
  ApiServerOptions options;
  options.max_connections = 2;
  options.evict_idle_after = std::chrono::milliseconds(0);
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto first = connect();
  auto second = connect();
  expect_served(*first, 1);
  expect_served(*second, 2);  // `first` is now the least recently active
  auto third = connect();
  expect_served(*third, 3);
  EXPECT_TRUE(first->reads_eof());
  expect_served(*second, 4);
  EXPECT_EQ(server_.counters().connections_evicted, 1u);
  EXPECT_EQ(server_.counters().connections_rejected, 0u);
  EXPECT_EQ(server_.counters().connections_open, 2u);
}

// One client (one uid here) may hold at most max_connections_per_client; beyond it, with no
// connection of its own idle for evict_idle_after, the newcomer is refused, and the
// connections it already has are untouched.
TEST_F(ApiServerTest, OneClientBeyondItsShareIsRefusedWhenNoneOfItsConnectionsIsIdleLongEnough) {
  ApiServerOptions options;
  options.max_connections_per_client = 2;
  options.evict_idle_after = std::chrono::hours(1);
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto first = connect();
  auto second = connect();
  expect_served(*first, 1);
  expect_served(*second, 2);
  auto third = connect();
  EXPECT_TRUE(third->reads_eof());
  EXPECT_EQ(server_.counters().connections_rejected, 1u);
  expect_served(*first, 3);
  expect_served(*second, 4);
}

// Clients told apart by address over TCP: a client holding the most connections makes room for
// another client out of its own idle ones, never out of the other's; once the two hold as many,
// a newcomer displaces only its own client's.
TEST(ApiServerFairness, AHoardingClientLosesItsOwnIdleConnectionsNotAnothers) {
  FakeHandler handler;
  ServerHarness server(handler);
  ApiServerOptions options;
  options.listen = {*parse_endpoint("tcp:127.0.0.1:0")};
  options.max_connections = 4;
  options.max_connections_per_client = 3;
  options.evict_idle_after = std::chrono::milliseconds(0);
  ASSERT_EQ(server.start(options), "");
  const uint16_t port = server.bound().at(0).port;
  auto served = [](RawConnection& c, uint64_t id) {
    if (!c.send_request(check_request(id, {{"k", 1}}))) return false;
    pb::Response r;
    return c.read_response(&r) == Status::kFrame && r.id() == id;
  };
  std::vector<std::unique_ptr<RawConnection>> hog;
  for (uint64_t i = 0; i < 3; ++i) {
    hog.push_back(RawConnection::connect_tcp(port, "127.0.0.2"));
    ASSERT_NE(hog.back(), nullptr);
    ASSERT_TRUE(served(*hog.back(), i));  // in order: hog[0] is the least recently active
  }
  auto a = RawConnection::connect_tcp(port, "127.0.0.3");
  ASSERT_TRUE(served(*a, 10));
  auto b = RawConnection::connect_tcp(port, "127.0.0.3");  // the limit: the hog gives way
  ASSERT_TRUE(served(*b, 11));
  EXPECT_TRUE(hog[0]->reads_eof());
  hog.push_back(RawConnection::connect_tcp(port, "127.0.0.2"));  // 2 against 2: its own gives way
  ASSERT_TRUE(served(*hog.back(), 12));
  EXPECT_TRUE(hog[1]->reads_eof());
  EXPECT_TRUE(served(*a, 13));
  EXPECT_TRUE(served(*b, 14));
  EXPECT_TRUE(served(*hog[2], 15));
  EXPECT_EQ(server.counters().connections_evicted, 2u);
  EXPECT_EQ(server.counters().connections_open, 4u);
}

TEST_F(ApiServerTest, AConnectionWithNothingPendingIsClosedAfterTheIdleTimeout) {
  ApiServerOptions options;
  options.idle_timeout = std::chrono::milliseconds(200);
  ASSERT_EQ(server_.start_unix(socket_path_, options), "");
  auto c = connect();
  expect_served(*c, 1);
  EXPECT_TRUE(c->reads_eof());  // blocks until the server closes it (or the 20 s socket timeout)
  EXPECT_EQ(server_.counters().connections_idle_closed, 1u);
  auto again = connect();
  expect_served(*again, 2);
}

// The graceful stop (SIGTERM): every request the server has read is answered before its
// connection closes, even the ~1 MB of answers backed up behind a client that is not reading;
// the socket file goes at once, so nothing new connects.
TEST_F(ApiServerTest, DrainAnswersEverythingAlreadyReadThenCloses) {
  auto c = connect();
  std::string burst;
  for (uint64_t id = 1; id <= 40'000; ++id) ASSERT_TRUE(append_frame(check_request(id, {{"k", 1}}), UINT32_MAX, burst));
  std::thread sender([&] { c->send_bytes(burst); });  // blocks once the server stops reading; fails once it closes
  // More answers than the socket buffers hold: the rest wait in the server's output queue.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server_.counters().requests < 8'000 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  ASSERT_GE(server_.counters().requests, 8'000u);
  const uint64_t read = server_.drain();
  struct stat st {};
  EXPECT_NE(::stat(socket_path_.c_str(), &st), 0) << "the socket file is removed at once";
  EXPECT_EQ(RawConnection::connect_unix(socket_path_), nullptr);
  uint64_t answered = 0;
  pb::Response r;
  while (c->read_response(&r) == Status::kFrame) {
    ASSERT_EQ(r.id(), answered + 1);
    ++answered;
  }
  EXPECT_EQ(answered, read);
  sender.join();
}

// A 1,000-check request is answered in slices, yielding to other connections in between: a
// client's single check sent while the big batch is being answered is decided before the big
// batch's last check (no head-of-line blocking), and both answers are complete and in order.
TEST_F(ApiServerTest, ALargeBatchDoesNotHoldUpAnotherClientsCheck) {
  auto big = connect();
  auto small = connect();
  expect_served(*big, 1);  // both accepted and reading
  expect_served(*small, 2);
  // The server thread stops inside the big batch's first check until the small request has
  // been sent, so the small request is waiting in its socket when the slicing goes on.
  std::mutex mu;
  std::condition_variable cv;
  bool blocked = false, released = false;
  handler_.set_on_check([&](std::string_view key, int64_t) {
    if (key == "big-0") {
      std::unique_lock lock(mu);
      blocked = true;
      cv.notify_all();
      cv.wait(lock, [&] { return released; });
    }
    return Decision{true, 0, 0, DenyReason::kNone, false, {}};
  });
  std::vector<std::pair<std::string, int64_t>> checks;
  for (int i = 0; i < 1000; ++i) checks.emplace_back("big-" + std::to_string(i), 1);
  ASSERT_TRUE(big->send_request(check_request(10, checks)));
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return blocked; });
  }
  ASSERT_TRUE(small->send_request(check_request(11, {{"small", 1}})));
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  pb::Response r;
  ASSERT_EQ(small->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 11u);
  ASSERT_EQ(big->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 10u);
  EXPECT_EQ(r.check().results_size(), 1000);
  const auto seen = handler_.seen();
  size_t small_at = seen.size(), last_big_at = 0;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i].first == "small") small_at = i;
    if (seen[i].first == "big-999") last_big_at = i;
  }
  EXPECT_LT(small_at, last_big_at) << "the small check waited for the whole batch";
  expect_served(*big, 12);  // the big client's next request is served as usual
  // The small answer went out while the batch was in slices: the io thread then gave its CPU
  // away once, so the woken client need not wait behind the rest of the batch.
  EXPECT_GE(server_.counters().busy_yields, 1u);
}

TEST_F(ApiServerTest, MembersStatsAndFaults) {
  auto c = connect();
  pb::Request request;
  request.set_version(kApiVersion);
  request.set_id(1);
  request.mutable_members();
  ASSERT_TRUE(c->send_request(request));
  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  ASSERT_EQ(r.members().members_size(), 2);
  EXPECT_EQ(r.members().members(0).id(), "node-a");
  EXPECT_TRUE(r.members().members(0).self());
  EXPECT_EQ(r.members().members(1).state(), "suspect");
  EXPECT_EQ(r.members().members(1).last_heard_ms(), 1500);
  EXPECT_EQ(r.members().members(1).incarnation(), 1u);

  request.set_id(2);
  request.mutable_stats();
  ASSERT_TRUE(c->send_request(request));
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  ASSERT_EQ(r.stats().counters_size(), 2);
  EXPECT_EQ(r.stats().counters(0).name(), "checks");
  EXPECT_EQ(r.stats().counters(1).name(), "keys");
  EXPECT_EQ(r.stats().counters(1).value(), 2);

  request.set_id(3);
  pb::FaultsRequest& faults = *request.mutable_faults();
  faults.add_drop_to("node-b");
  faults.add_drop_from("node-c");
  faults.set_loss(0.25);
  faults.set_delay_ms(30);
  faults.set_duplicate(0.5);
  ASSERT_TRUE(c->send_request(request));
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  ASSERT_TRUE(r.has_faults());
  EXPECT_EQ(r.faults().error(), "");
  const auto spec = handler_.faults();
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->drop_to, std::vector<std::string>{"node-b"});
  EXPECT_EQ(spec->drop_from, std::vector<std::string>{"node-c"});
  EXPECT_DOUBLE_EQ(spec->loss, 0.25);
  EXPECT_EQ(spec->delay_ms, 30);
  EXPECT_DOUBLE_EQ(spec->duplicate, 0.5);

  request.set_id(4);
  request.mutable_faults()->set_loss(0.95);
  ASSERT_TRUE(c->send_request(request));
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.faults().error(), "loss above 0.9 would stop the cluster");
}

// Issue 41: a top of several rules is merged a rule a slice (Dispatch::top_slice) and answered
// busiest first, in its place among the connection's pipelined requests; k above 100 is an
// error in the answer, the connection open.
TEST_F(ApiServerTest, TopIsMergedARuleASliceAndAnsweredInItsPlace) {
  auto c = connect();
  std::string frames;
  pb::Request top;
  top.set_version(kApiVersion);
  top.set_id(1);
  top.mutable_top()->set_k(1);
  ASSERT_TRUE(append_frame(top, kMaxResponseFrameBytes, frames));
  ASSERT_TRUE(append_frame(check_request(2, {{"after", 1}}), kMaxResponseFrameBytes, frames));
  top.set_id(3);
  top.mutable_top()->set_rule("ip:*");
  top.mutable_top()->set_k(0);
  ASSERT_TRUE(append_frame(top, kMaxResponseFrameBytes, frames));
  top.set_id(4);
  top.mutable_top()->set_k(101);
  ASSERT_TRUE(append_frame(top, kMaxResponseFrameBytes, frames));
  ASSERT_TRUE(c->send_bytes(frames));

  pb::Response r;
  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 1u);
  ASSERT_TRUE(r.has_top()) << r.DebugString();
  ASSERT_EQ(r.top().rules_size(), 2);
  const pb::RuleTop& user = r.top().rules(0);  // the busiest, though the node held ip:* first
  EXPECT_EQ(user.rule(), "user:*");
  EXPECT_EQ(user.members_reporting(), 2u);
  EXPECT_EQ(user.denied().total(), 95u);
  EXPECT_EQ(user.denied().error_bound(), 2u);
  EXPECT_EQ(user.denied().unreported_bound(), 7u);
  ASSERT_EQ(user.denied().keys_size(), 1);
  EXPECT_EQ(user.denied().keys(0).key(), "user:hot");
  EXPECT_EQ(user.denied().keys(0).lower(), 79u);
  EXPECT_EQ(user.denied().keys(0).upper(), 80u);
  EXPECT_EQ(r.top().rules(1).rule(), "ip:*");
  EXPECT_EQ(r.top().rules(1).tokens().keys(0).upper(), 7u);

  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 2u);
  EXPECT_EQ(r.check().results_size(), 1);

  ASSERT_EQ(c->read_response(&r), Status::kFrame);  // one rule: answered without slicing
  EXPECT_EQ(r.id(), 3u);
  ASSERT_EQ(r.top().rules_size(), 1);
  EXPECT_EQ(r.top().rules(0).rule(), "ip:*");

  ASSERT_EQ(c->read_response(&r), Status::kFrame);
  EXPECT_EQ(r.id(), 4u);
  EXPECT_EQ(r.top().rules_size(), 0);
  EXPECT_EQ(r.top().error(), "k must be from 1 to 100 (0 means 10)");
  expect_served(*c, 5);
}

TEST_F(ApiServerTest, CountersAreExposedAsNamedStats) {
  auto c = connect();
  expect_served(*c, 1);
  const StatsList stats = server_.stats();
  std::vector<std::string> names;
  for (const auto& [name, value] : stats) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"api.connections_accepted",
                                             "api.connections_rejected",
                                             "api.connections_evicted",
                                             "api.connections_timed_out",
                                             "api.connections_write_stalled",
                                             "api.connections_idle_closed",
                                             "api.connections_open",
                                             "api.accept_errors",
                                             "api.requests",
                                             "api.checks",
                                             "api.errors.frame_too_large",
                                             "api.errors.malformed",
                                             "api.errors.unsupported_version",
                                             "api.errors.batch_too_large",
                                             "api.errors.empty_request",
                                             "api.errors.internal",
                                             "api.busy_yields",
                                             "api.pending_output_high_water_bytes",
                                             "api.output_bytes",
                                             "api.output_high_water_bytes",
                                             "api.output_budget_waits"}));
  auto stat = [&](const std::string& name) {
    for (const auto& [n, value] : stats) {
      if (n == name) return value;
    }
    ADD_FAILURE() << name;
    return int64_t{-1};
  };
  EXPECT_EQ(stat("api.connections_accepted"), 1);
  EXPECT_EQ(stat("api.connections_open"), 1);
  EXPECT_EQ(stat("api.requests"), 1);
  EXPECT_EQ(stat("api.checks"), 1);
  EXPECT_EQ(stat("api.busy_yields"), 0);                      // nothing else was queued when it answered
  EXPECT_GT(stat("api.pending_output_high_water_bytes"), 0);  // the one answer
  // Each declared beside the server (util/stat_def.h), in the order reported.
  const std::vector<StatDef> defs = ApiServer::stat_defs();
  ASSERT_EQ(defs.size(), names.size());
  for (size_t i = 0; i < defs.size(); ++i) {
    EXPECT_EQ(defs[i].name, names[i]);
    EXPECT_FALSE(defs[i].help.empty()) << names[i];
  }
}

// --- the Unix socket file ---------------------------------------------------------------------

// tollgated --threads: the started server hands each connection to one of the servers sharing
// its listener, each on its own thread. A client's connections fill its share on each server
// before any is refused, and every server (the one that is never started included) closes its
// own idle connections.
TEST(ApiServerShared, ConnectionsSpreadOverTheServersAndEachClosesItsOwnIdleOnes) {
  TempDir dir;
  FakeHandler handler;
  ServerHarness accepting(handler);  // its io thread; the server is made below
  boost::asio::io_context worker_io;
  auto guard = boost::asio::make_work_guard(worker_io);
  std::thread worker_thread([&] { worker_io.run(); });
  ApiServerOptions o;
  o.listen = {Endpoint{Endpoint::Kind::kUnix, dir.file("api.sock"), "", 0}};
  o.max_connections_per_client = 2;               // per server: this test's uid may hold 4 in all
  o.evict_idle_after = std::chrono::seconds(30);  // nobody is idle long enough to make room
  o.idle_timeout = std::chrono::milliseconds(1500);
  std::unique_ptr<ApiServer> worker;
  run_on(worker_io, [&] {
    worker = std::make_unique<ApiServer>(worker_io, handler, o);
    worker->serve_handed();
  });
  std::unique_ptr<ApiServer> first;
  ASSERT_EQ(accepting.on_io([&] {
    first = std::make_unique<ApiServer>(accepting.io(), handler, o);
    first->share_connections_with({worker.get()});
    return first->start();
  }),
            "");
  std::vector<std::unique_ptr<RawConnection>> held;
  for (uint64_t id = 1; id <= 4; ++id) {
    held.push_back(RawConnection::connect_unix(dir.file("api.sock")));
    ASSERT_NE(held.back(), nullptr);
    ASSERT_TRUE(held.back()->send_request(check_request(id, {{"k", 1}})));
    pb::Response r;
    ASSERT_EQ(held.back()->read_response(&r), RawConnection::ReadStatus::kFrame);
  }
  EXPECT_EQ(first->counters().connections_open, 2u);
  EXPECT_EQ(worker->counters().connections_open, 2u);
  // A fifth from the same client: its share is full on both, none idle long enough.
  auto fifth = RawConnection::connect_unix(dir.file("api.sock"));
  ASSERT_NE(fifth, nullptr);
  EXPECT_TRUE(fifth->reads_eof());
  EXPECT_EQ(first->counters().connections_rejected + worker->counters().connections_rejected, 1u);
  // Idle: each server closes its own two.
  for (auto& c : held) EXPECT_TRUE(c->reads_eof());
  EXPECT_EQ(worker->counters().connections_idle_closed, 2u);
  EXPECT_EQ(first->counters().connections_idle_closed, 2u);
  accepting.on_io([&] { first.reset(); });
  run_on(worker_io, [&] { worker.reset(); });
  guard.reset();
  worker_thread.join();
}

TEST(ApiServerSocketFile, IsCreatedWithMode0660AndRemovedOnStop) {
  TempDir dir;
  FakeHandler handler;
  ServerHarness server(handler);
  const std::string path = dir.file("d.sock");
  ASSERT_EQ(server.start_unix(path), "");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ASSERT_EQ(server.bound().size(), 1u);
  EXPECT_EQ(server.bound()[0].path, path);
  server.stop();
  EXPECT_NE(::stat(path.c_str(), &st), 0);
}

TEST(ApiServerSocketFile, AStaleSocketIsReplacedButALiveOneIsRefused) {
  TempDir dir;
  FakeHandler handler;
  const std::string path = dir.file("d.sock");
  {
    // A socket file nobody accepts on any more: what a crashed daemon leaves behind.
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
  }
  ServerHarness live(handler);
  ASSERT_EQ(live.start_unix(path), "");
  auto c = RawConnection::connect_unix(path);
  ASSERT_NE(c, nullptr);

  ServerHarness second(handler);
  const std::string error = second.start_unix(path);
  EXPECT_EQ(error, "unix:" + path + ": another process is listening on this socket");
  // The refused server did not take the file away from the live one.
  ASSERT_TRUE(c->send_request(check_request(1, {{"k", 1}})));
  pb::Response r;
  EXPECT_EQ(c->read_response(&r), RawConnection::ReadStatus::kFrame);
  auto c2 = RawConnection::connect_unix(path);
  ASSERT_NE(c2, nullptr);
  ASSERT_TRUE(c2->send_request(check_request(2, {{"k", 1}})));
  EXPECT_EQ(c2->read_response(&r), RawConnection::ReadStatus::kFrame);
}

TEST(ApiServerSocketFile, APathThatIsNotASocketIsNeverTouched) {
  TempDir dir;
  FakeHandler handler;
  ServerHarness server(handler);
  const std::string path = dir.file("precious.txt");
  std::ofstream(path) << "data";
  const std::string error = server.start_unix(path);
  EXPECT_NE(error.find("exists and is not a socket"), std::string::npos) << error;
  std::ifstream in(path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "data");
}

TEST(ApiServerTcp, ServesOnAnEphemeralLoopbackPort) {
  FakeHandler handler;
  ServerHarness server(handler);
  ApiServerOptions options;
  options.listen = {*parse_endpoint("tcp:127.0.0.1:0")};
  ASSERT_EQ(server.start(options), "");
  const auto bound = server.bound();
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_NE(bound[0].port, 0);

  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(bound[0].port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::string frame;
  ASSERT_TRUE(append_frame(check_request(5, {{"k", 1}}), UINT32_MAX, frame));
  ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  char header[4];
  ASSERT_EQ(::recv(fd, header, 4, MSG_WAITALL), 4);
  std::string payload(load_be32(reinterpret_cast<unsigned char*>(header)), '\0');
  ASSERT_EQ(::recv(fd, payload.data(), payload.size(), MSG_WAITALL), static_cast<ssize_t>(payload.size()));
  ::close(fd);
  pb::Response r;
  ASSERT_TRUE(r.ParseFromString(payload));
  EXPECT_EQ(r.id(), 5u);
  EXPECT_TRUE(r.check().results(0).allowed());
}

TEST(ApiServerStart, ReportsTheEndpointThatFailed) {
  FakeHandler handler;
  ServerHarness server(handler);
  ApiServerOptions options;
  options.listen = {*parse_endpoint("unix:/nonexistent-dir/x.sock")};
  const std::string error = server.start(options);
  EXPECT_EQ(error.rfind("unix:/nonexistent-dir/x.sock: cannot bind", 0), 0u) << error;
  EXPECT_EQ(server.start({}), "no endpoint to listen on");
}

}  // namespace
}  // namespace tollgate::api::testing
