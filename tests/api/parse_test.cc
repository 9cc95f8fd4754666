// Pure helpers: endpoint parsing, the JSON escaper, and the CLI's output. (Duration parsing is
// tollgate::parse_duration_ns, tested in tests/duration_test.cc; the CLI tests check its use.)
#include <gtest/gtest.h>

#include <algorithm>

#include <string>

#include "api/endpoint.h"
#include "cli/output.h"
#include "json/json.h"

namespace tollgate::api {
namespace {

TEST(ParseEndpoint, AcceptsUnixAndTcp) {
  auto unix_ep = parse_endpoint("unix:/run/tollgate/tollgated.sock");
  ASSERT_TRUE(unix_ep);
  EXPECT_EQ(unix_ep->kind, Endpoint::Kind::kUnix);
  EXPECT_EQ(unix_ep->path, "/run/tollgate/tollgated.sock");
  EXPECT_EQ(unix_ep->to_string(), "unix:/run/tollgate/tollgated.sock");
  EXPECT_TRUE(unix_ep->is_loopback());

  auto tcp = parse_endpoint("tcp:127.0.0.1:7070");
  ASSERT_TRUE(tcp);
  EXPECT_EQ(tcp->kind, Endpoint::Kind::kTcp);
  EXPECT_EQ(tcp->host, "127.0.0.1");
  EXPECT_EQ(tcp->port, 7070);
  EXPECT_EQ(tcp->to_string(), "tcp:127.0.0.1:7070");
  EXPECT_TRUE(tcp->is_loopback());

  auto v6 = parse_endpoint("tcp:[::1]:0");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_EQ(v6->to_string(), "tcp:[::1]:0");
  EXPECT_TRUE(v6->is_loopback());

  auto localhost = parse_endpoint("tcp:localhost:65535");
  ASSERT_TRUE(localhost);
  EXPECT_EQ(localhost->host, "127.0.0.1");
  EXPECT_EQ(localhost->port, 65535);

  auto wide = parse_endpoint("tcp:0.0.0.0:7070");
  ASSERT_TRUE(wide);
  EXPECT_FALSE(wide->is_loopback());
  EXPECT_FALSE(parse_endpoint("tcp:10.1.2.3:1")->is_loopback());
  EXPECT_TRUE(parse_endpoint("tcp:127.9.9.9:1")->is_loopback());
}

TEST(ParseEndpoint, ErrorsSayWhatIsWrong) {
  struct Case {
    const char* text;
    const char* expected_fragment;
  };
  const Case cases[] = {
      {"", "expected unix:PATH or tcp:HOST:PORT"},
      {"/tmp/x.sock", "expected unix:PATH or tcp:HOST:PORT"},
      {"udp:127.0.0.1:1", "expected unix:PATH or tcp:HOST:PORT"},
      {"unix:", "socket path is empty"},
      {"tcp:127.0.0.1", "expected host:port"},
      {"tcp::7070", "missing host"},
      {"tcp:127.0.0.1:", "port must be a number from 0 to 65535"},
      {"tcp:127.0.0.1:65536", "port must be a number from 0 to 65535"},
      {"tcp:127.0.0.1:-1", "port must be a number from 0 to 65535"},
      {"tcp:127.0.0.1:80x", "port must be a number from 0 to 65535"},
      {"tcp:example.com:80", "must be an IP address or localhost"},
      {"tcp:::1:80", "write IPv6 addresses in brackets"},
      {"tcp:[::1:80", "missing ']'"},
      {"tcp:[::1]80", "expected :PORT after ']'"},
      {"tcp:[127.0.0.1]:80", "is not an IPv6 address"},
  };
  for (const Case& c : cases) {
    std::string error;
    EXPECT_FALSE(parse_endpoint(c.text, &error)) << c.text;
    EXPECT_NE(error.find(c.expected_fragment), std::string::npos) << c.text << " -> " << error;
    EXPECT_NE(error.find(std::string("\"") + c.text + "\""), std::string::npos) << "quotes the input: " << error;
  }
  std::string error;
  EXPECT_FALSE(parse_endpoint("unix:/" + std::string(107, 'x'), &error));
  EXPECT_NE(error.find("at most 107"), std::string::npos) << error;
  EXPECT_TRUE(parse_endpoint("unix:/" + std::string(106, 'x')));
}

}  // namespace
}  // namespace tollgate::api

namespace tollgate::cli {
namespace {

using json::format_members_json;
using json::format_stats_json;
using json::json_string;

TEST(CliOutput, DurationsAreShortForPeople) {
  EXPECT_EQ(format_duration_human(0), "0ns");
  EXPECT_EQ(format_duration_human(999), "999ns");
  EXPECT_EQ(format_duration_human(750'000), "750us");
  EXPECT_EQ(format_duration_human(1'500'000), "1.5ms");
  EXPECT_EQ(format_duration_human(2'000'000'000), "2s");
  EXPECT_EQ(format_duration_human(12'345'678'901), "12.345s");
  EXPECT_EQ(format_duration_human(1'001'000), "1.001ms");
  EXPECT_EQ(format_duration_human(INT64_MAX), "never");
  EXPECT_EQ(format_duration_human(-1'500'000), "-1.5ms");
}

TEST(Json, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_string(""), "\"\"");
  EXPECT_EQ(json_string("plain"), "\"plain\"");
  EXPECT_EQ(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_string("\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
  EXPECT_EQ(json_string(std::string("\x00\x01\x1f", 3)), "\"\\u0000\\u0001\\u001f\"");
  EXPECT_EQ(json_string("\x7f/"), "\"\x7f/\"");  // DEL and '/' need no escaping
}

TEST(Json, PassesValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(json_string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  EXPECT_EQ(json_string("\xff"), "\"\\ufffd\"");
  EXPECT_EQ(json_string("a\x80z"), "\"a\\ufffdz\"");                               // stray continuation byte
  EXPECT_EQ(json_string("\xc3"), "\"\\ufffd\"");                                   // truncated sequence
  EXPECT_EQ(json_string("\xc0\xaf"), "\"\\ufffd\\ufffd\"");                        // overlong '/'
  EXPECT_EQ(json_string("\xe0\x80\xaf"), "\"\\ufffd\\ufffd\\ufffd\"");             // overlong
  EXPECT_EQ(json_string("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");             // UTF-16 surrogate
  EXPECT_EQ(json_string("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // above U+10FFFF
}

TEST(CliOutput, MembersJsonHasExactlyTheDocumentedFields) {
  std::vector<MemberInfo> members = {{"node-a", "127.0.0.1:7001", MemberState::kAlive, 3, 9, 0, true},
                                     {"no\"de", "127.0.0.1:7002", MemberState::kDead, 1, 7, 2'500'000'000, false}};
  EXPECT_EQ(format_members_json(members),
            "{\"members\": [{\"id\": \"node-a\", \"address\": \"127.0.0.1:7001\", \"state\": \"alive\", "
            "\"incarnation\": 3, \"last_heard_ms\": 0, \"self\": true}, {\"id\": \"no\\\"de\", \"address\": "
            "\"127.0.0.1:7002\", "
            "\"state\": \"dead\", \"incarnation\": 1, \"last_heard_ms\": 2500, \"self\": false}]}\n");
  EXPECT_EQ(format_members_json({}), "{\"members\": []}\n");
}

// Node ids and addresses come from the network: a terminal escape in one is shown, not obeyed.
TEST(CliOutput, MembersTableEscapesControlCharactersFromTheNetwork) {
  std::vector<MemberInfo> members = {
      {"evil\x1b[2J\x1b]0;owned\x07", "127.0.0.1:7\n01", MemberState::kAlive, 1, 1, 0, false}};
  const std::string text = format_members_text(members);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  EXPECT_NE(text.find("\"evil\\u001b[2J\\u001b]0;owned\\u0007\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"127.0.0.1:7\\n01\""), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;  // header and one row
  // DEL and the C1 controls (U+009B is CSI to some terminals) pass JSON's escaping: escaped too.
  const std::string c1 =
      format_members_text({{"a\x7f"
                            "b\xc2\x9b"
                            "2J",
                            "h:1", MemberState::kAlive, 1, 1, 0, false}});
  EXPECT_EQ(c1.find('\x7f'), std::string::npos) << c1;
  EXPECT_EQ(c1.find("\xc2\x9b"), std::string::npos) << c1;
  EXPECT_NE(c1.find("\"a\\u007fb\\u009b2J\""), std::string::npos) << c1;
}

TEST(CliOutput, MembersTableMarksTheNodeItself) {
  std::vector<MemberInfo> members = {{"node-a", "127.0.0.1:7001", MemberState::kAlive, 3, 9, 0, true},
                                     {"node-b", "127.0.0.1:7002", MemberState::kSuspect, 1, 7, 1'500'000'000, false}};
  EXPECT_EQ(format_members_text(members),
            "ID             ADDRESS         STATE    INCARNATION  LAST-HEARD\n"
            "node-a (self)  127.0.0.1:7001  alive    3            -\n"
            "node-b         127.0.0.1:7002  suspect  1            1.5s ago\n");
}

TEST(CliOutput, CheckTextAndJson) {
  CheckReply allowed;
  allowed.allowed = true;
  allowed.remaining = 4;
  allowed.limited = true;
  allowed.limit = Limit{Rate{30, 60'000'000'000}, 5, 5};
  EXPECT_EQ(format_check_text("api:login:alice", 1, allowed),
            "allowed \"api:login:alice\" cost 1: 4 tokens left; limit 30/min, burst 5, max debt 5\n");
  EXPECT_EQ(format_check_json("api:login:alice", 1, allowed),
            "{\"key\": \"api:login:alice\", \"cost\": 1, \"allowed\": true, \"remaining\": 4, \"retry_after_ns\": 0, "
            "\"reason\": \"allowed\", \"limited\": true, \"limit\": {\"rate\": \"30/min\", \"rate_tokens\": 30, "
            "\"rate_period_ns\": 60000000000, \"burst\": 5, \"max_debt\": 5}}\n");

  CheckReply denied = allowed;
  denied.allowed = false;
  denied.remaining = -1;
  denied.reason = DenyReason::kInsufficientTokens;
  denied.retry_after_ns = 1'500'000'000;
  EXPECT_EQ(format_check_text("k", 2, denied),
            "denied \"k\" cost 2: insufficient tokens, retry after 1.5s; -1 token left; limit 30/min, burst 5, "
            "max debt 5\n");
  denied.retry_after_ns = kRetryNever;
  denied.reason = DenyReason::kCostExceedsBurst;
  EXPECT_NE(format_check_text("k", 9, denied).find("cost exceeds burst, waiting cannot help"), std::string::npos);
  EXPECT_NE(format_check_json("k", 9, denied).find("\"retry_after_ns\": null"), std::string::npos);

  CheckReply unlimited;
  unlimited.allowed = true;
  unlimited.limited = false;
  EXPECT_EQ(format_check_text("free\n", 1, unlimited),
            "allowed \"free\\n\" cost 1: not limited (no rule governs the key)\n");
  EXPECT_NE(format_check_json("free", 1, unlimited).find("\"limited\": false, \"limit\": null}"), std::string::npos);
}

TEST(CliOutput, Stats) {
  StatsList stats = {{"api.requests", 12}, {"keys", -1}};
  EXPECT_EQ(format_stats_text(stats), "api.requests  12\nkeys          -1\n");
  EXPECT_EQ(format_stats_json(stats), "{\"stats\": {\"api.requests\": 12, \"keys\": -1}}\n");
}

}  // namespace
}  // namespace tollgate::cli
