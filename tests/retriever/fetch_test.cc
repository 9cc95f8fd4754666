// The rules retriever's URL parsing and one-GET fetch, against a scripted server in the same
// io_context (what a real rules service does is in rules_retriever_test.py, with nginx).
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>
#include <string>

#include "retriever/rules_retriever.h"
#include "support/scripted_http_server.h"

namespace tollgate {
namespace {

using boost::asio::ip::tcp;
using testing::ScriptedServer;

TEST(ParseHttpUrl, SplitsHostPortAndTarget) {
  std::string why;
  auto u = parse_http_url("http://rules.internal:8080/tollgate/rules.yaml?env=prod", &why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->host, "rules.internal");
  EXPECT_EQ(u->port, "8080");
  EXPECT_EQ(u->target, "/tollgate/rules.yaml?env=prod");
  EXPECT_EQ(u->host_header, "rules.internal:8080");
  EXPECT_FALSE(u->tls);

  u = parse_http_url("HTTP://10.0.0.1", &why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(u->target, "/");
  EXPECT_EQ(u->host_header, "10.0.0.1");

  u = parse_http_url("https://rules.internal/r", &why);
  ASSERT_TRUE(u) << why;
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->port, "443");
  EXPECT_EQ(u->host_header, "rules.internal");

  u = parse_http_url("http://[::1]:81/r", &why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->host_header, "[::1]:81");
  EXPECT_EQ(u->target, "/r");
}

TEST(ParseHttpUrl, RefusesWhatItCannotFetchSafely) {
  const std::pair<const char*, const char*> cases[] = {
      {"ftp://rules.internal/r.yaml", "must start with http:// or https://"},
      {"http://user:secret@rules.internal/r.yaml", "credentials"},
      {"http://rules.internal/r.yaml#x", "fragment"},
      {"http:///r.yaml", "no host"},
      {"http://rules.internal:99999/r.yaml", "port"},
      {"http://rules.internal:0/r.yaml", "port"},
      {"rules.yaml", "http://"},
      {"http://a b/", "not a URL"},
  };
  for (const auto& [url, expected] : cases) {
    std::string why;
    EXPECT_FALSE(parse_http_url(url, &why)) << url;
    EXPECT_NE(why.find(expected), std::string::npos) << url << ": " << why;
  }
}

FetchResult fetch(ScriptedServer& server, boost::asio::io_context& io, const std::string& etag,
                  FetchLimits limits = {}) {
  FetchResult out;
  bool done = false;
  fetch_http(io, server.url(), etag, limits, [&](FetchResult r) {
    out = std::move(r);
    done = true;
  });
  io.run();
  EXPECT_TRUE(done);
  return out;
}

TEST(FetchHttp, ReturnsTheBodyAndItsETag) {
  boost::asio::io_context io;
  ScriptedServer server(io, "HTTP/1.1 200 OK\r\nETag: \"v7\"\r\nContent-Length: 6\r\n\r\nrules:");
  const FetchResult r = fetch(server, io, "");
  EXPECT_EQ(r.kind, FetchResult::Kind::kNew) << r.error;
  EXPECT_EQ(r.body, "rules:");
  EXPECT_EQ(r.etag, "\"v7\"");
  EXPECT_NE(server.request().find("GET /rules.yaml HTTP/1.1\r\n"), std::string::npos) << server.request();
  EXPECT_NE(server.request().find("Host: 127.0.0.1:"), std::string::npos) << server.request();
  EXPECT_EQ(server.request().find("If-None-Match"), std::string::npos) << server.request();
}

TEST(FetchHttp, SendsIfNoneMatchAndReads304AsNotModified) {
  boost::asio::io_context io;
  ScriptedServer server(io, "HTTP/1.1 304 Not Modified\r\nETag: \"v7\"\r\n\r\n");
  const FetchResult r = fetch(server, io, "\"v7\"");
  EXPECT_EQ(r.kind, FetchResult::Kind::kNotModified) << r.error;
  EXPECT_NE(server.request().find("If-None-Match: \"v7\"\r\n"), std::string::npos) << server.request();
}

TEST(FetchHttp, ChunkedBodiesAreReadWhole) {
  boost::asio::io_context io;
  ScriptedServer server(io, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nrul\r\n3\r\nes:\r\n0\r\n\r\n");
  const FetchResult r = fetch(server, io, "");
  EXPECT_EQ(r.kind, FetchResult::Kind::kNew) << r.error;
  EXPECT_EQ(r.body, "rules:");
}

TEST(FetchHttp, AnErrorStatusOrARedirectFails) {
  for (const char* answer : {"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
                             "HTTP/1.1 301 Moved Permanently\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n",
                             "HTTP/1.1 304 Not Modified\r\n\r\n"}) {
    boost::asio::io_context io;
    ScriptedServer server(io, answer);
    const FetchResult r = fetch(server, io, "");  // a 304 without If-None-Match is an error too
    EXPECT_EQ(r.kind, FetchResult::Kind::kFailed) << answer;
    EXPECT_EQ(r.error.rfind("HTTP ", 0), 0u) << r.error;
    EXPECT_NE(r.error.find(std::string(answer).substr(9, 3)), std::string::npos) << r.error;
  }
}

TEST(FetchHttp, ABodyOverTheLimitFailsHoweverItIsFramed) {
  const std::string chunk = "32\r\n" + std::string(50, 'x') + "\r\n";
  for (const std::string& answer :
       {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'x'),
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk + chunk + chunk + "0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + std::string(100, 'x')}) {
    boost::asio::io_context io;
    ScriptedServer server(io, answer);
    FetchLimits limits;
    limits.max_body_bytes = 99;
    const FetchResult r = fetch(server, io, "", limits);
    EXPECT_EQ(r.kind, FetchResult::Kind::kFailed) << answer;
    EXPECT_NE(r.error.find("larger than 99 bytes"), std::string::npos) << r.error;
  }
}

TEST(FetchHttp, RulesThatCouldBeCutShortOrEmptyAreRefused) {
  const std::pair<std::string, std::string> cases[] = {
      // Framed by the connection's end: a cut connection would look like a whole, shorter file.
      {"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nrules: []\n", "neither a Content-Length nor chunked"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "holds no rules"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n# soon\n  \n\r\n\n", "holds no rules"},
  };
  for (const auto& [answer, expected] : cases) {
    boost::asio::io_context io;
    ScriptedServer server(io, answer);
    const FetchResult r = fetch(server, io, "");
    EXPECT_EQ(r.kind, FetchResult::Kind::kFailed) << answer;
    EXPECT_NE(r.error.find(expected), std::string::npos) << r.error;
  }
}

TEST(FetchHttp, AChunkSizeLineThatNeverEndsIsCut) {
  boost::asio::io_context io;
  ScriptedServer server(io, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + std::string(200 * 1024, 'x'));
  const FetchResult r = fetch(server, io, "");
  EXPECT_EQ(r.kind, FetchResult::Kind::kFailed);
  EXPECT_NE(r.error.find("over 64 KiB"), std::string::npos) << r.error;
}

TEST(FetchHttp, AServerThatNeverAnswersTimesOut) {
  boost::asio::io_context io;
  ScriptedServer server(io, "");
  FetchLimits limits;
  limits.timeout = std::chrono::milliseconds(100);
  const FetchResult r = fetch(server, io, "", limits);
  EXPECT_EQ(r.kind, FetchResult::Kind::kFailed);
  EXPECT_EQ(r.error, "no answer within 100ms");
}

TEST(FetchHttp, NothingListeningFailsWithTheAddress) {
  boost::asio::io_context io;
  // Bound, so no one else takes the port, but not listening: a connection is refused.
  tcp::socket bound(io);
  bound.open(tcp::v4());
  bound.bind(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  const uint16_t port = bound.local_endpoint().port();
  FetchResult out;
  fetch_http(io, HttpUrl{false, "127.0.0.1", std::to_string(port), "/", "127.0.0.1:" + std::to_string(port)}, "", {},
             [&](FetchResult r) { out = std::move(r); });
  io.run();
  EXPECT_EQ(out.kind, FetchResult::Kind::kFailed);
  EXPECT_NE(out.error.find("cannot connect to 127.0.0.1:" + std::to_string(port)), std::string::npos) << out.error;
}

}  // namespace
}  // namespace tollgate
