// The rate limit service's HTTP/2 session, sans I/O (src/rls/h2_session.h), driven by an nghttp2
// client session as its peer: bytes pass between the two in memory, time is a number.
#include "rls/h2_session.h"

#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <atomic>
#include <string>
#include <vector>

#include "support/h2_client.h"

namespace tollgate::rls {
namespace {

using tollgate::testing::H2Client;

constexpr int64_t kMs = 1'000'000;
constexpr std::string_view kShould = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

// Bytes back and forth until neither side has more. False once the server wants the connection
// ended (what it had to send has been delivered).
bool pump(H2Client& c, H2Session& s, int64_t now) {
  bool open = true;
  for (int i = 0; i < 100; ++i) {
    const std::string to_server = c.output();
    if (!to_server.empty()) open = s.receive(to_server, now) && open;
    std::string to_client;
    s.take_output(to_client);
    if (!to_client.empty()) c.input(to_client);
    EXPECT_FALSE(c.failed) << "the server sent what an nghttp2 client refuses";
    if (to_server.empty() && to_client.empty()) return open;
  }
  ADD_FAILURE() << "the two sides never went quiet";
  return open;
}

TEST(H2Session, EnvoysCallComesOutWholeAndItsAnswerGoesBackWithTrailers) {
  H2Session server;
  H2Client client;
  const std::string request =
      "\x0a\x05"
      "bench";  // any bytes: the session does not parse them
  const int32_t id = client.call(kShould, wire::frame_message(request), false, {{"grpc-timeout", "20m"}});
  ASSERT_TRUE(pump(client, server, 5 * kMs));
  std::vector<H2Call> calls = server.take_calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].stream, id);
  EXPECT_EQ(calls[0].method, wire::Method::kShouldRateLimit);
  EXPECT_EQ(calls[0].request, request);
  EXPECT_EQ(calls[0].timeout, std::chrono::nanoseconds(20 * kMs));
  EXPECT_EQ(calls[0].opened_ns, 5 * kMs);
  EXPECT_FALSE(client.responses[id].closed);  // nothing said before the answer

  server.answer(id, "\x08\x01", 6 * kMs);
  ASSERT_TRUE(pump(client, server, 6 * kMs));
  const H2Client::Response& r = client.responses[id];
  EXPECT_EQ(r.headers.at(":status"), "200");
  EXPECT_EQ(r.headers.at("content-type"), "application/grpc");
  EXPECT_EQ(r.data, wire::frame_message("\x08\x01"));
  EXPECT_EQ(r.trailers.at("grpc-status"), "0");
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.close_code, uint32_t(NGHTTP2_NO_ERROR));
  EXPECT_EQ(server.budget().in_flight(), 0u);
  EXPECT_EQ(server.stats().calls, 1u);
}

// Health Watch: a server-streaming answer, its messages as they come, its trailers at the end;
// in flight until then, and let go when the peer cancels it.
TEST(H2Session, AStreamingAnswerSendsEachMessageThenItsTrailersAndACancelFreesIt) {
  constexpr std::string_view kWatch = "/grpc.health.v1.Health/Watch";
  H2Session server;
  H2Client client;
  const int32_t ended = client.call(kWatch, wire::frame_message(""));
  const int32_t cancelled = client.call(kWatch, wire::frame_message(""));
  ASSERT_TRUE(pump(client, server, 0));
  const std::vector<H2Call> calls = server.take_calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].method, wire::Method::kHealthWatch);
  ASSERT_TRUE(server.open_stream(ended, "\x08\x01", 0));
  ASSERT_TRUE(server.open_stream(cancelled, "\x08\x01", 0));
  ASSERT_TRUE(pump(client, server, 0));
  EXPECT_EQ(client.responses[ended].data, wire::frame_message("\x08\x01"));
  EXPECT_FALSE(client.responses[ended].closed);
  EXPECT_TRUE(server.streaming(ended));
  EXPECT_EQ(server.budget().in_flight(), 2u);

  client.reset(cancelled);
  ASSERT_TRUE(pump(client, server, kMs));
  EXPECT_FALSE(server.streaming(cancelled));
  EXPECT_EQ(server.budget().in_flight(), 1u);
  server.push(cancelled, "\x08\x02");  // gone: nothing sent, nothing kept

  server.push(ended, "\x08\x02");
  ASSERT_TRUE(pump(client, server, kMs));
  EXPECT_EQ(client.responses[ended].data, wire::frame_message("\x08\x01") + wire::frame_message("\x08\x02"));
  server.end(ended, wire::Code::kUnavailable, "shutting down");
  ASSERT_TRUE(pump(client, server, kMs));
  const H2Client::Response& r = client.responses[ended];
  EXPECT_EQ(r.trailers.at("grpc-status"), "14");
  EXPECT_EQ(r.trailers.at("grpc-message"), "shutting down");
  EXPECT_TRUE(r.closed);
  EXPECT_FALSE(server.streaming(ended));
  EXPECT_EQ(server.budget().in_flight(), 0u);
  EXPECT_EQ(server.budget().stats().premature, 0u) << "a Watch cancelled after its first message is no rapid reset";
}

// Request bytes held until their message is whole are capped per connection and across
// connections: the stream that would pass a cap is refused, and what it held is given back.
TEST(H2Session, RequestBytesHeldAreCappedPerConnectionAndInAll) {
  std::atomic<int64_t> shared{0};
  H2SessionOptions o;
  o.max_buffered_bytes = 1000;
  o.shared_buffered = &shared;
  o.max_shared_buffered = 1500;
  const std::string part = wire::frame_message(std::string(600, 'x')).substr(0, 400);  // a message begun
  {
    H2Session server(o), other(o);
    H2Client client, other_client;
    const int32_t first = client.call_unfinished(kShould, part);
    const int32_t second = client.call_unfinished(kShould, part);
    const int32_t third = client.call_unfinished(kShould, part);  // 1,200 on one connection: over
    ASSERT_TRUE(pump(client, server, 0));
    EXPECT_EQ(server.buffered_bytes(), 800u);
    EXPECT_EQ(client.responses[third].headers.at("grpc-status"), "8");
    EXPECT_FALSE(client.responses[first].closed);
    EXPECT_FALSE(client.responses[second].closed);
    const int32_t elsewhere = other_client.call_unfinished(kShould, part);
    const int32_t over_all = other_client.call_unfinished(kShould, part);  // 1,600 in all: over
    ASSERT_TRUE(pump(other_client, other, 0));
    EXPECT_FALSE(other_client.responses[elsewhere].closed);
    EXPECT_EQ(other_client.responses[over_all].headers.at("grpc-status"), "8");
    EXPECT_EQ(shared.load(), 1200);
    EXPECT_EQ(server.stats().over_buffer + other.stats().over_buffer, 2u);
    client.reset(first);  // a reset stream gives its bytes back
    ASSERT_TRUE(pump(client, server, 0));
    EXPECT_EQ(server.buffered_bytes(), 400u);
    EXPECT_EQ(shared.load(), 800);
  }
  EXPECT_EQ(shared.load(), 0) << "a connection gone gives back what it held";
}

TEST(H2Session, WhatCannotBeServedIsAnsweredTrailersOnlyAndNeverBecomesACall) {
  H2Session server;
  H2Client client;
  const int32_t unknown = client.call("/envoy.service.ratelimit.v3.RateLimitService/Other", wire::frame_message("x"));
  std::string big = wire::frame_message(std::string(64 * 1024 + 1, 'x'));
  const int32_t over = client.call(kShould, big);
  const int32_t two = client.call(kShould, wire::frame_message("a") + wire::frame_message("b"));
  const int32_t empty = client.call(kShould, "");
  ASSERT_TRUE(pump(client, server, 0));
  EXPECT_TRUE(server.take_calls().empty());
  const std::pair<int32_t, const char*> expected[] = {{unknown, "12"}, {over, "8"}, {two, "12"}, {empty, "12"}};
  for (const auto& [id, status] : expected) {
    const H2Client::Response& r = client.responses[id];
    EXPECT_EQ(r.headers.at(":status"), "200") << id;
    EXPECT_EQ(r.headers.at("grpc-status"), status) << id;
    EXPECT_FALSE(r.headers.at("grpc-message").empty()) << id;
    EXPECT_TRUE(r.data.empty()) << id;
    EXPECT_TRUE(r.closed) << id;
  }
  EXPECT_EQ(server.stats().refused, 4u);
  EXPECT_EQ(server.budget().in_flight(), 0u);
}

TEST(H2Session, HeadersOverTheListCapAreRefusedResourceExhaustedAndTheConnectionLives) {
  H2Session server;  // 16 KiB, as HTTP/2 counts a header list
  H2Client client;
  const int32_t big =
      client.call(kShould, wire::frame_message("q"), false, {{"x-padding", std::string(20 * 1024, 'p')}});
  ASSERT_TRUE(pump(client, server, 0));
  EXPECT_TRUE(server.take_calls().empty());
  EXPECT_EQ(client.responses[big].headers.at("grpc-status"), "8");
  EXPECT_TRUE(client.responses[big].closed);
  const int32_t next = client.call(kShould, wire::frame_message("q"));
  ASSERT_TRUE(pump(client, server, 0));
  const std::vector<H2Call> calls = server.take_calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].stream, next);
}

TEST(H2Session, RapidResetEndsTheConnectionWithEnhanceYourCalmAndNoWorkIsDone) {
  H2Session server;
  H2Client client;
  bool open = true;
  int streams = 0;
  for (int burst = 0; burst < 4 && open; ++burst) {
    // HEADERS out first (a stream the client resets before sending it never leaves it), then
    // RST_STREAM for each: what the attacking process of scripts/rls-rapid-reset sends.
    std::vector<int32_t> ids;
    for (int i = 0; i < 100; ++i, ++streams) ids.push_back(client.call(kShould, "", /*hold=*/true));
    open = pump(client, server, burst * kMs);
    for (int32_t id : ids) client.reset(id);
    open = pump(client, server, burst * kMs) && open;
  }
  EXPECT_FALSE(open);
  EXPECT_EQ(streams, 300);  // 250 premature of 500 spend it, in the third burst
  EXPECT_TRUE(client.goaway);
  EXPECT_EQ(client.goaway_code, uint32_t(NGHTTP2_ENHANCE_YOUR_CALM));
  EXPECT_TRUE(server.budget().spent());
  EXPECT_GE(server.budget().stats().premature, 250u);
  EXPECT_EQ(server.stats().calls, 0u);  // R1: none of them was ever a call
  EXPECT_TRUE(server.take_calls().empty());
}

TEST(H2Session, CallsResetWhileBeingDecidedStillCountUntilAnswered) {
  H2SessionOptions o;
  o.budget.max_in_flight = 3;
  H2Session server(o);
  H2Client client;
  std::vector<int32_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(client.call(kShould, wire::frame_message("q")));
  ASSERT_TRUE(pump(client, server, 0));
  ASSERT_EQ(server.take_calls().size(), 3u);
  for (int32_t id : ids) client.reset(id);  // Envoy's 20 ms passed: it gave up on all three
  ASSERT_TRUE(pump(client, server, 20 * kMs));
  EXPECT_EQ(server.budget().in_flight(), 3u);  // their decisions are still running

  const int32_t refused = client.call(kShould, wire::frame_message("q"));
  ASSERT_TRUE(pump(client, server, 21 * kMs));
  EXPECT_TRUE(client.responses[refused].closed);
  EXPECT_EQ(client.responses[refused].close_code, uint32_t(NGHTTP2_REFUSED_STREAM));
  EXPECT_TRUE(server.take_calls().empty());

  server.answer(ids[0], "late", 22 * kMs);  // dropped: its stream is gone
  EXPECT_EQ(server.stats().answered_late, 1u);
  EXPECT_EQ(server.budget().in_flight(), 2u);
  const int32_t next = client.call(kShould, wire::frame_message("q"));
  ASSERT_TRUE(pump(client, server, 23 * kMs));
  std::vector<H2Call> calls = server.take_calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].stream, next);
}

TEST(H2Session, ACallResetBeforeItIsTakenIsNeverHandedOut) {
  H2Session server;
  H2Client client;
  const int32_t id = client.call(kShould, wire::frame_message("q"));
  std::string bytes = client.output();
  client.reset(id);
  bytes += client.output();  // the whole request and its reset in one read
  ASSERT_TRUE(server.receive(bytes, 0));
  EXPECT_TRUE(server.take_calls().empty());
  EXPECT_EQ(server.stats().calls, 0u);
  EXPECT_EQ(server.budget().in_flight(), 0u);
}

TEST(H2Session, AFailedCallCarriesItsStatusAndMessage) {
  H2Session server;
  H2Client client;
  const int32_t id = client.call(kShould, wire::frame_message("q"));
  ASSERT_TRUE(pump(client, server, 0));
  ASSERT_EQ(server.take_calls().size(), 1u);
  server.fail(id, wire::Code::kUnavailable, "tollgated is shutting down: 100%", 0);
  ASSERT_TRUE(pump(client, server, 0));
  const H2Client::Response& r = client.responses[id];
  EXPECT_EQ(r.headers.at("grpc-status"), "14");
  EXPECT_EQ(r.headers.at("grpc-message"), "tollgated is shutting down: 100%25");
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(server.stats().refused, 0u);
  EXPECT_EQ(server.budget().in_flight(), 0u);
}

}  // namespace
}  // namespace tollgate::rls
