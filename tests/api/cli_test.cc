// The built `tollgate` binary against an in-process server: exit codes and output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "test_support.h"

namespace tollgate::api::testing {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

CliRun run(const std::string& arguments, const std::string& env = "") {
  const std::string command = env + (env.empty() ? "" : " ") + TOLLGATE_CLI_PATH + " " + arguments + " 2>&1";
  CliRun result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) result.out.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("api.sock");
    ASSERT_EQ(server_.start_unix(path_), "");
    endpoint_ = "--endpoint unix:" + path_ + " --timeout 10s";
  }
  TempDir dir_;
  std::string path_;
  std::string endpoint_;
  FakeHandler handler_;
  ServerHarness server_{handler_};
};

TEST_F(CliTest, CheckExitsZeroWhenAllowedAndOneWhenDenied) {
  CliRun allowed = run(endpoint_ + " check api:x --cost 2");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.out;
  EXPECT_EQ(allowed.out, "allowed \"api:x\" cost 2: 3 tokens left; limit 10/s, burst 5, max debt 5\n");

  CliRun denied = run("check api:x --cost 6 " + endpoint_);  // global options after the subcommand too
  EXPECT_EQ(denied.exit_code, 1) << denied.out;
  EXPECT_EQ(denied.out.rfind("denied \"api:x\" cost 6: cost exceeds burst", 0), 0u) << denied.out;

  CliRun json = run(endpoint_ + " check unlimited --json");
  EXPECT_EQ(json.exit_code, 0) << json.out;
  EXPECT_EQ(json.out,
            "{\"key\": \"unlimited\", \"cost\": 1, \"allowed\": true, \"remaining\": 0, \"retry_after_ns\": 0, "
            "\"reason\": \"allowed\", \"limited\": false, \"limit\": null}\n");
}

TEST_F(CliTest, TheEndpointCanComeFromTheEnvironment) {
  CliRun r = run("check k --timeout 10s", "TOLLGATE_ENDPOINT=unix:" + path_);
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

TEST_F(CliTest, MembersAndStats) {
  CliRun members = run(endpoint_ + " members --json");
  EXPECT_EQ(members.exit_code, 0) << members.out;
  EXPECT_EQ(members.out,
            "{\"members\": [{\"id\": \"node-a\", \"address\": \"127.0.0.1:7001\", \"state\": \"alive\", "
            "\"incarnation\": 3, \"last_heard_ms\": 0, \"self\": true}, {\"id\": \"node-b\", \"address\": "
            "\"127.0.0.1:7002\", "
            "\"state\": \"suspect\", \"incarnation\": 1, \"last_heard_ms\": 1500, \"self\": false}]}\n");
  CliRun table = run(endpoint_ + " members");
  EXPECT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find("node-a (self)"), std::string::npos) << table.out;

  CliRun stats = run(endpoint_ + " stats --json");
  EXPECT_EQ(stats.exit_code, 0) << stats.out;
  EXPECT_EQ(stats.out, "{\"stats\": {\"checks\": 0, \"keys\": 2}}\n");
}

// Issue 41: `tollgate top` prints each rule's keys with their bounds, busiest rule first;
// --json is GET /v1/top's document; --watch --times N asks N times.
TEST_F(CliTest, TopPrintsEachRulesKeysWithTheirBounds) {
  CliRun text = run(endpoint_ + " top -k 2");
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_EQ(text.out,
            "rule user:*: 2 members reporting\n"
            "  most denied: 95 checks denied in all, each count within 2; a key not listed: at most 2\n"
            "    RANK  KEY           DENIED\n"
            "    1     user:hot      79..80\n"
            "    2     \"user:\\\"q\\\"\"  5..7\n"
            "  most tokens: 0 tokens admitted in all, no key\n"
            "\n"
            "rule ip:*: 1 member reporting\n"
            "  most denied: 0 checks denied in all, no key\n"
            "  most tokens: 7 tokens admitted in all, every count exact; a key not listed: at most 0\n"
            "    RANK  KEY   TOKENS\n"
            "    1     ip:1  7\n");
  CliRun json = run(endpoint_ + " top --rule ip:* --json");
  EXPECT_EQ(json.exit_code, 0) << json.out;
  EXPECT_EQ(
      json.out,
      "{\"rules\": [{\"rule\": \"ip:*\", \"members_reporting\": 1, \"denied\": {\"total\": 0, "
      "\"error_bound\": 0, \"unreported_bound\": 0, \"keys\": []}, \"tokens\": {\"total\": 7, \"error_bound\": 0, "
      "\"unreported_bound\": 0, \"keys\": [{\"key\": \"ip:1\", \"lower\": 7, \"upper\": 7}]}}]}\n");
  CliRun watch = run(endpoint_ + " top --rule ip:* --json --watch --interval 1ms --times 3");
  EXPECT_EQ(watch.exit_code, 0) << watch.out;
  EXPECT_EQ(watch.out, json.out + json.out + json.out);
  CliRun none = run(endpoint_ + " top --rule nothing:*");
  EXPECT_EQ(none.out, "no rule has counted a check in the last --top-window or two\n");
  EXPECT_EQ(run(endpoint_ + " top -k 101").exit_code, 2);
  EXPECT_EQ(run(endpoint_ + " top --watch --interval 0s").exit_code, 2);
}

TEST_F(CliTest, ResetSaysWhatTheDaemonDidAndExitsTwoOnARefusal) {
  CliRun done = run(endpoint_ + " reset governed");
  EXPECT_EQ(done.exit_code, 0) << done.out;
  EXPECT_EQ(done.out, "reset governed: full again (5 tokens); every node within a round or two\n");
  CliRun json = run(endpoint_ + " reset governed --json");
  EXPECT_EQ(json.out, "{\"key\": \"governed\", \"limited\": true, \"remaining\": 5}\n");
  CliRun free = run(endpoint_ + " reset other");
  EXPECT_EQ(free.exit_code, 0);
  EXPECT_NE(free.out.find("no rule governs it"), std::string::npos) << free.out;
  EXPECT_EQ(run(endpoint_ + " reset refuse").exit_code, 2);
  EXPECT_EQ(run(endpoint_ + " reset").exit_code, 2);  // KEY is required
  EXPECT_EQ(handler_.resets(), (std::vector<std::string>{"governed", "governed", "other", "refuse"}));
}

TEST_F(CliTest, AdminFaults) {
  CliRun set = run(endpoint_ +
                   " admin faults --drop-to b,c --drop-from d --loss 0.5 --delay 1500ms --duplicate 0.1 --jitter 20");
  EXPECT_EQ(set.exit_code, 0) << set.out;
  auto faults = handler_.faults();
  ASSERT_TRUE(faults);
  EXPECT_EQ(faults->drop_to, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(faults->drop_from, (std::vector<std::string>{"d"}));
  EXPECT_DOUBLE_EQ(faults->loss, 0.5);
  EXPECT_EQ(faults->delay_ms, 1500);
  EXPECT_DOUBLE_EQ(faults->duplicate, 0.1);
  EXPECT_EQ(faults->jitter_ms, 20);

  CliRun bare_ms = run(endpoint_ + " admin faults --delay 40");
  EXPECT_EQ(bare_ms.exit_code, 0) << bare_ms.out;
  EXPECT_EQ(handler_.faults()->delay_ms, 40);
  EXPECT_TRUE(handler_.faults()->drop_to.empty());  // settings are replaced, not merged

  CliRun clear = run(endpoint_ + " admin faults --clear");
  EXPECT_EQ(clear.exit_code, 0) << clear.out;
  EXPECT_EQ(handler_.faults()->delay_ms, 0);

  EXPECT_EQ(run(endpoint_ + " admin faults --loss 0.95").exit_code, 2);  // the daemon's refusal
  EXPECT_EQ(run(endpoint_ + " admin faults --loss 1.5").exit_code, 2);   // out of range
  EXPECT_EQ(run(endpoint_ + " admin faults").exit_code, 2);              // nothing to set
  EXPECT_EQ(run(endpoint_ + " admin faults --clear --loss 0.1").exit_code, 2);
}

TEST(CliErrors, AreExitTwo) {
  TempDir dir;
  CliRun unreachable = run("--endpoint unix:" + dir.file("nobody.sock") + " check k");
  EXPECT_EQ(unreachable.exit_code, 2) << unreachable.out;
  EXPECT_NE(unreachable.out.find("nobody.sock"), std::string::npos) << unreachable.out;

  CliRun bad_endpoint = run("--endpoint tcp:example.com:1 check k");
  EXPECT_EQ(bad_endpoint.exit_code, 2);
  EXPECT_NE(bad_endpoint.out.find("must be an IP address"), std::string::npos) << bad_endpoint.out;

  CliRun bad_timeout = run("--timeout 5 check k");
  EXPECT_EQ(bad_timeout.exit_code, 2);
  EXPECT_NE(bad_timeout.out.find("missing unit"), std::string::npos) << bad_timeout.out;

  EXPECT_EQ(run("").exit_code, 2);       // no subcommand
  EXPECT_EQ(run("check").exit_code, 2);  // no key
  EXPECT_EQ(run("frobnicate").exit_code, 2);
  // A mistyped command names the one it was probably meant to be (issue 37, item 13).
  CliRun typo = run("chek k");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.out.find("unknown command \"chek\"; did you mean \"check\"?"), std::string::npos) << typo.out;
  EXPECT_EQ(typo.out.find("A subcommand is required"), std::string::npos) << "only what helps: " << typo.out;
  // A negative cost is a usage error, as HTTP answers 400: not a denial (exit 1).
  CliRun negative = run("--endpoint unix:" + dir.file("nobody.sock") + " check --cost -1 k");
  EXPECT_EQ(negative.exit_code, 2) << negative.out;
  EXPECT_NE(negative.out.find("--cost: Value -1 not in range"), std::string::npos) << negative.out;
  CliRun help = run("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("TOLLGATE_ENDPOINT"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace tollgate::api::testing
