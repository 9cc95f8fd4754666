#include "daemon/daemon_options.h"
#include "daemon/memory_bound.h"
#include "host/node_host.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tollgate {
namespace {

namespace fs = std::filesystem;

struct Parsed {
  std::optional<int> exit_code;
  DaemonOptions options;
  std::string stderr_text;
};

Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "tollgated");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Parsed p;
  ::testing::internal::CaptureStderr();
  p.exit_code = parse_daemon_options(int(argv.size()), argv.data(), &p.options);
  p.stderr_text = ::testing::internal::GetCapturedStderr();
  return p;
}

class DaemonOptionsTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  const testing::TempDir temp_{"opts"};
  const fs::path& dir_ = temp_.path();
};

TEST_F(DaemonOptionsTest, FlagsAloneWithDefaults) {
  const Parsed p =
      parse({"--rules", "r.yaml", "--peers-file", "peers.txt", "--bind", "127.0.0.1:7000", "--insecure-gossip"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.stderr_text;
  EXPECT_EQ(p.options.node_id, "127.0.0.1:7000");  // defaults to the bind address
  EXPECT_EQ(p.options.node.mode, DisseminationMode::kAuto);
  EXPECT_EQ(p.options.transport, TransportKind::kUdp);
  EXPECT_EQ(p.options.node.interval_ns, 50 * kNanosPerMilli);
  EXPECT_EQ(p.options.node.fanout, 3u);
  EXPECT_EQ(p.options.api_max_connections, 1024u);
  EXPECT_EQ(p.options.api_idle_timeout_ns, 300 * kNanosPerSecond);
  // One client API thread per core but one (left to the local clients), at least 1, at most 4.
  EXPECT_EQ(p.options.threads, std::clamp<size_t>(std::thread::hardware_concurrency(), 2, 5) - 1);
  EXPECT_EQ(parse({"--rules", "r", "--peers-file", "p", "--insecure-gossip", "--threads", "3"}).options.threads, 3u);
}

TEST_F(DaemonOptionsTest, ConfigFileSuppliesWhatFlagsDoNotAndFlagsWin) {
  const std::string config = write("t.yaml",
                                   "node-id: a\n"
                                   "mode: mesh\n"
                                   "transport: tcp\n"
                                   "membership: heartbeat\n"
                                   "seeds: [127.0.0.1:7001, 127.0.0.1:7002]\n"
                                   "rules: r.yaml\n"
                                   "interval: 100ms\n"
                                   "fail-after: 3s\n"
                                   "member-rows: 128\n");
  const Parsed p = parse({"--config", config, "--mode", "gossip", "--interval", "20ms", "--insecure-gossip"});
  ASSERT_FALSE(p.exit_code.has_value()) << p.stderr_text;
  EXPECT_EQ(p.options.node_id, "a");
  EXPECT_EQ(p.options.node.mode, DisseminationMode::kGossip);  // the flag
  EXPECT_EQ(p.options.transport, TransportKind::kTcp);         // the file
  EXPECT_EQ(p.options.node.membership, MembershipKind::kHeartbeat);
  EXPECT_EQ(p.options.seeds, (std::vector<std::string>{"127.0.0.1:7001", "127.0.0.1:7002"}));
  EXPECT_EQ(p.options.node.interval_ns, 20 * kNanosPerMilli);
  EXPECT_EQ(p.options.node.fail_after_ns, 3 * kNanosPerSecond);
  EXPECT_EQ(p.options.node.member_rows, 128u);
  EXPECT_EQ(NodeHost::node_options(node_host_options(p.options), 1).membership.member_rows, 128u);
}

TEST_F(DaemonOptionsTest, ConfigErrorsNameFileLineAndSetting) {
  const std::string config = write("bad.yaml", "rules: r.yaml\nintervall: 50ms\n");
  const Parsed p = parse({"--config", config, "--peers-file", "p"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.stderr_text.find(config + ":2:1: unknown setting \"intervall\""), std::string::npos) << p.stderr_text;

  const std::string nested = write("nested.yaml", "rules: r.yaml\nmode:\n  kind: mesh\n");
  const Parsed q = parse({"--config", nested, "--peers-file", "p"});
  EXPECT_EQ(q.exit_code, 2);
  EXPECT_NE(q.stderr_text.find(nested + ":3:"), std::string::npos) << q.stderr_text;

  // A value the setting refuses is named by the file's line and column too, unless a flag gave it.
  const std::string wrong = write("wrong.yaml", "rules: r.yaml\ninsecure-gossip: true\n\nfanout: 0\n");
  const Parsed r = parse({"--config", wrong, "--peers-file", "p"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find(wrong + ":4:1: \"fanout\" must be a whole number from 1 to 64, got \"0\""),
            std::string::npos)
      << r.stderr_text;
  const Parsed overridden = parse({"--config", wrong, "--peers-file", "p", "--fanout=65"});
  EXPECT_EQ(overridden.exit_code, 2);
  EXPECT_NE(overridden.stderr_text.find("--fanout must be a whole number from 1 to 64, got \"65\""), std::string::npos)
      << overridden.stderr_text;
  EXPECT_TRUE(parse({"--config", wrong, "--peers-file", "p", "--fanout", "5"}).options.node.fanout == 5);

  // A key given twice is refused at its second place (CLI11 would quietly take the first).
  const std::string twice = write("twice.yaml", "rules: r.yaml\nfanout: 0\ninsecure-gossip: true\nfanout: 5\n");
  const Parsed d = parse({"--config", twice, "--peers-file", "p"});
  EXPECT_EQ(d.exit_code, 2);
  EXPECT_NE(d.stderr_text.find(twice + ":4:1: setting \"fanout\" appears twice"), std::string::npos) << d.stderr_text;
}

// An optional path given empty is "none": the command line can turn off what the config file
// (the shipped one keeps state in /var/lib/tollgate) turns on. Only the rules file cannot be
// empty. The cluster key may come from anything that is not a directory (a FIFO, /dev/fd/N).
TEST_F(DaemonOptionsTest, AnEmptyOptionalPathTurnsItOffAndTheKeyMayBeAnyNonDirectory) {
  const std::string config =
      write("state.yaml", "rules: r.yaml\nstate-dir: /var/lib/tollgate\ninsecure-gossip: true\n");
  const Parsed on = parse({"--config", config, "--peers-file", "p"});
  ASSERT_FALSE(on.exit_code.has_value()) << on.stderr_text;
  EXPECT_EQ(on.options.state_dir, "/var/lib/tollgate");
  const Parsed off = parse({"--config", config, "--peers-file", "p", "--state-dir", ""});
  ASSERT_FALSE(off.exit_code.has_value()) << off.stderr_text;
  EXPECT_EQ(off.options.state_dir, "");

  const std::vector<std::string> base = {"--rules", "r.yaml", "--peers-file", "p"};
  std::vector<std::string> device = base;
  device.insert(device.end(), {"--cluster-key-file", "/dev/null"});
  EXPECT_FALSE(parse(device).exit_code.has_value());
  std::vector<std::string> directory = base;
  directory.insert(directory.end(), {"--cluster-key-file", dir_.string()});
  const Parsed refused = parse(directory);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.stderr_text.find("--cluster-key-file names no file"), std::string::npos) << refused.stderr_text;
}

// Every setting of the table (daemon_settings.cc) is a flag and a config file key, and reads back
// what it prints: a value other than the default, given either way, is the value the row prints.
// A row added without a value here fails this test.
TEST_F(DaemonOptionsTest, EverySettingIsAFlagAndAKeyThatReadsBackWhatItPrints) {
  const std::string key = write("cluster.key", std::string(64, 'b') + "\n");
  const std::map<std::string, std::string> values = {
      {"node-id", "n1"},
      {"bind", "127.0.0.2:7100"},
      {"transport", "tcp"},
      {"peers-file", "peers.txt"},
      {"seeds", "127.0.0.1:7001,127.0.0.1:7002"},
      {"mode", "relay"},
      {"membership", "heartbeat"},
      {"partition-policy", "proportional"},
      {"interval", "20ms"},
      {"fanout", "5"},
      {"relay-groups", "16"},
      {"member-rows", "100"},
      {"fail-after", "3s"},
      {"forget-after", "2m"},
      {"probe-interval", "2s"},
      {"push-pull-interval", "500ms"},
      {"max-keys", "4096"},
      {"retransmit-mult", "6"},
      {"sync-deadline", "3s"},
      {"near-limit", "90"},
      {"top-k", "64"},
      {"top-window", "30s"},
      {"top-gossip-bytes", "0"},
      {"top-rules", "8"},
      {"max-leases", "500"},
      {"max-lease-rows", "7000"},
      {"cluster-key-file", key},
      {"insecure-gossip", "false"},
      {"max-datagram", "9000"},
      {"gossip-peer-rate", "1048576"},
      {"max-message-age", "20s"},
      {"incarnation", "12345"},
      {"enable-fault-injection", "true"},
      {"listen", "unix:/tmp/a.sock,tcp:127.0.0.1:7700"},
      {"api-max-connections", "64"},
      {"api-max-connections-per-client", "8"},
      {"api-idle-timeout", "1m"},
      {"threads", "2"},
      {"rules", "r.yaml"},
      {"rules-url", ""},
      {"rules-poll", "30s"},
      {"rules-cache", ""},
      {"rules-ca", ""},
      {"state-dir", "/var/lib/t"},
      {"state-interval", "5s"},
      {"rls-listen", "127.0.0.1:8081"},
      {"rls-config", "rls.yaml"},
      {"rls-response-headers", "true"},
      {"rls-merge-domains", "true"},
      {"rls-shadow-mode", "true"},
      {"rls-config-optional", "true"},
      {"rls-quota-mode", "true"},
      {"rls-limit-headers", "true"},
      {"rls-value-metrics", "7"},
      {"rls-limit-header-names", "X-Limit,X-Left,X-Reset"},
      // The xDS source contradicts rls-config: XdsSettingsReadBackWhatTheyPrint has them.
      {"rls-xds", ""},
      {"rls-xds-node-id", ""},
      {"rls-xds-node-metadata", ""},
      {"rls-xds-header", ""},
      {"rls-xds-tls-ca", ""},
      {"rls-xds-tls-cert", ""},
      {"rls-xds-tls-key", ""},
      {"rls-xds-tls-server-name", ""},
      {"rls-xds-insecure", ""},
      {"rls-response-metadata", "true"},
      {"rls-server", "grpc"},
      {"rls-max-pending", "100"},
      {"rls-max-connections", "100"},
      {"rls-max-connections-per-client", "10"},
      {"rls-tls-cert", "c.pem"},
      {"rls-tls-key", "k.pem"},
      {"rls-tls-client-ca", "ca.pem"},
      {"rls-insecure", "false"},
      {"http-listen", "127.0.0.1:8080"},
      {"http-max-connections", "32"},
      {"http-max-connections-per-client", "4"},
      {"http-timeout", "3s"},
      {"http-token-file", "token"},
      {"http-insecure", "false"},
      {"metrics-listen", "127.0.0.1:9090"},
      {"memory-limit", "2G"},
      {"log-level", "debug"},
  };
  std::vector<std::string> args;
  std::string config;
  std::set<std::string> checked;
  const DaemonOptions defaults;
  for (const DaemonSetting& row : daemon_settings()) {
    const auto it = values.find(row.flag);
    ASSERT_NE(it, values.end()) << row.flag << ": give it a value in this test";
    if (it->second.empty()) continue;  // contradicts another setting given here (the rules service)
    checked.insert(row.flag);
    if (row.shape == SettingShape::kSwitch) {
      if (it->second == "true") args.push_back("--" + row.flag);
    } else {
      args.insert(args.end(), {"--" + row.flag, it->second});
      if (row.flag != "incarnation" && row.flag != "insecure-gossip") {
        EXPECT_NE(row.format(defaults), it->second) << row.flag << ": the test must change it";
      }
    }
    config += row.flag + ": " + (row.shape == SettingShape::kList ? "[" + it->second + "]" : it->second) + "\n";
  }
  const Parsed by_flags = parse(args);
  ASSERT_FALSE(by_flags.exit_code.has_value()) << by_flags.stderr_text;
  const Parsed by_file = parse({"--config", write("every.yaml", config)});
  ASSERT_FALSE(by_file.exit_code.has_value()) << by_file.stderr_text;
  for (const DaemonSetting& row : daemon_settings()) {
    if (!checked.contains(row.flag)) continue;
    EXPECT_EQ(row.format(by_flags.options), values.at(row.flag)) << "--" << row.flag;
    EXPECT_EQ(row.format(by_file.options), values.at(row.flag)) << row.flag << ":";
  }
  EXPECT_EQ(by_file.options.transport, TransportKind::kTcp);
  EXPECT_EQ(by_file.options.listen, (std::vector<std::string>{"unix:/tmp/a.sock", "tcp:127.0.0.1:7700"}));
  EXPECT_EQ(by_file.options.max_message_age_ns, 20 * kNanosPerSecond);
  EXPECT_TRUE(by_file.options.rls_response_headers);
}

// The --rls-xds settings, which the test above cannot give beside --rls-config, by flag and by
// file.
TEST_F(DaemonOptionsTest, XdsSettingsReadBackWhatTheyPrint) {
  const std::map<std::string, std::string> values = {
      {"rls-xds", "xds.example:18001"},
      {"rls-xds-node-id", "envoy-ratelimit"},
      {"rls-xds-node-metadata", "zone=a,team=b"},
      {"rls-xds-header", "authorization:Bearer x"},
      {"rls-xds-tls-ca", "ca.crt"},
      {"rls-xds-tls-cert", "tls.crt"},
      {"rls-xds-tls-key", "tls.key"},
      {"rls-xds-tls-server-name", "envoy-gateway"},
  };
  std::vector<std::string> args = {"--peers-file", "p", "--insecure-gossip", "--rls-listen", "127.0.0.1:8081"};
  std::string config = "peers-file: p\ninsecure-gossip: true\nrls-listen: 127.0.0.1:8081\n";
  for (const auto& [flag, value] : values) {
    args.insert(args.end(), {"--" + flag, value});
    const bool list = flag == "rls-xds-node-metadata" || flag == "rls-xds-header";
    config += flag + ": " + (list ? "[" + value + "]" : "\"" + value + "\"") + "\n";
  }
  const Parsed by_flags = parse(args);
  ASSERT_FALSE(by_flags.exit_code.has_value()) << by_flags.stderr_text;
  const Parsed by_file = parse({"--config", write("xds.yaml", config)});
  ASSERT_FALSE(by_file.exit_code.has_value()) << by_file.stderr_text;
  size_t seen = 0;
  for (const DaemonSetting& row : daemon_settings()) {
    if (!row.flag.starts_with("rls-xds") || row.flag == "rls-xds-insecure") continue;
    ++seen;
    EXPECT_EQ(row.format(by_flags.options), values.at(row.flag)) << "--" << row.flag;
    EXPECT_EQ(row.format(by_file.options), values.at(row.flag)) << row.flag << ":";
  }
  EXPECT_EQ(seen, values.size());
  EXPECT_EQ(by_file.options.rls_xds_headers, std::vector<std::string>{"authorization:Bearer x"});
}

// operations.md section 2 promises exit 2 for any bad flag (CLI11's own codes run from 100 to
// 120), and a mistyped flag gets the one it was probably meant to be (issue 37, item 13).
TEST_F(DaemonOptionsTest, AnUnknownFlagExitsTwoAndSuggestsTheNearestOne) {
  Parsed p = parse({"--rules", "r", "--peers-file", "p", "--htp-listen", "127.0.0.1:8080"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.stderr_text.find("unknown flag --htp-listen; did you mean --http-listen?"), std::string::npos)
      << p.stderr_text;
  p = parse({"--rules", "r", "--peers-file", "p", "--frobnicate"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_EQ(p.stderr_text.find("did you mean"), std::string::npos) << p.stderr_text;  // nothing near
  p = parse({"--rules", "r", "--peers-file", "p", "--fanout", "x"});                  // a bad value: 2 as well
  EXPECT_EQ(p.exit_code, 2);
}

// The HTTP credential flags (issue 34, finding 10) make sense with --http-listen only, and not
// together.
TEST_F(DaemonOptionsTest, HttpCredentialFlagsNeedTheListenerAndDoNotContradictEachOther) {
  const std::vector<std::string> base = {"--rules", "r", "--peers-file", "p", "--insecure-gossip"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return parse(args);
  };
  Parsed p = with({"--http-token-file", "t"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.stderr_text.find("--http-token-file is for --http-listen"), std::string::npos) << p.stderr_text;
  p = with({"--http-insecure"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.stderr_text.find("--http-insecure is for --http-listen"), std::string::npos) << p.stderr_text;
  p = with({"--http-listen", "0.0.0.0:8080", "--http-insecure", "--http-token-file", "t"});
  EXPECT_EQ(p.exit_code, 2);
  EXPECT_NE(p.stderr_text.find("contradict"), std::string::npos) << p.stderr_text;
  p = with({"--http-listen", "0.0.0.0:8080", "--http-token-file", "t", "--metrics-listen", "0.0.0.0:9100"});
  EXPECT_EQ(p.exit_code, std::nullopt) << p.stderr_text;
  EXPECT_EQ(p.options.http_token_file, "t");
  EXPECT_EQ(p.options.metrics_listen, "0.0.0.0:9100");
}

// The rate limit service's TLS flags (issue 34, finding 5) go with --rls-listen, and together.
TEST_F(DaemonOptionsTest, RlsTlsFlagsNeedTheListenerAndEachOther) {
  const std::vector<std::string> base = {"--rules", "r", "--peers-file", "p", "--insecure-gossip", "--rls-config", "c"};
  auto error = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    const Parsed p = parse(args);
    EXPECT_EQ(p.exit_code, 2) << p.stderr_text;
    return p.stderr_text;
  };
  EXPECT_NE(error({"--http-listen", "127.0.0.1:1", "--rls-tls-cert", "c.pem", "--rls-tls-key", "k.pem"})
                .find("--rls-tls-* is for --rls-listen"),
            std::string::npos);
  EXPECT_NE(error({"--rls-listen", "127.0.0.1:1", "--rls-tls-cert", "c.pem"}).find("go together"), std::string::npos);
  EXPECT_NE(error({"--rls-listen", "127.0.0.1:1", "--rls-server", "quic"}).find("rls-server"), std::string::npos);
  std::vector<std::string> native = base;
  native.insert(native.end(), {"--rls-listen", "127.0.0.1:1", "--rls-server", "native"});
  const Parsed p = parse(native);
  ASSERT_FALSE(p.exit_code.has_value()) << p.stderr_text;
  EXPECT_TRUE(p.options.rls_native);
  EXPECT_NE(error({"--rls-listen", "127.0.0.1:1", "--rls-tls-client-ca", "ca.pem"}).find("needs the server's own"),
            std::string::npos);
  EXPECT_NE(error({"--rls-listen", "0.0.0.0:1", "--rls-insecure", "--rls-tls-cert", "c", "--rls-tls-key", "k",
                   "--rls-tls-client-ca", "ca"})
                .find("contradict"),
            std::string::npos);
}

TEST_F(DaemonOptionsTest, BadValuesAreRejectedWithTheReason) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--rules", "r", "--peers-file", "p", "--interval", "50"}, "missing unit"},
      {{"--rules", "r", "--peers-file", "p", "--mode", "star"}, "--mode"},
      {{"--rules", "r", "--peers-file", "p", "--bind", "nowhere"}, "expected host:port"},
      {{"--rules", "r"}, "--membership static needs --peers-file"},
      {{"--rules", "r", "--membership", "heartbeat"}, "needs --seeds"},
      {{"--peers-file", "p"}, "--rules FILE or --rules-url URL is required (or --rls-config PATH"},
      {{"--rules", "r", "--rules-url", "http://h/r", "--rules-cache", "c", "--peers-file", "p"}, "contradict"},
      {{"--rules-url", "http://h/r", "--peers-file", "p"}, "--rules-url needs --rules-cache FILE"},
      {{"--rules-url", "ftp://h/r", "--rules-cache", "c", "--peers-file", "p"}, "must start with http:// or https://"},
      {{"--rules-url", "http://h/r", "--rules-cache", "c", "--rules-ca", "ca.pem", "--peers-file", "p"},
       "--rules-ca is for an https:// --rules-url"},
      {{"--rules-url", "http://h/r", "--rules-cache", "c", "--peers-file", "p", "--rules-poll", "10ms"},
       "--rules-poll must be from 100ms to 1h"},
      {{"--rules", "r", "--rules-cache", "c", "--peers-file", "p"}, "--rules-cache is for --rules-url"},
      {{"--rules", "r", "--peers-file", "p", "--rls-listen", "127.0.0.1:8081"}, "--rls-listen needs --rls-config PATH"},
      {{"--rules", "r", "--peers-file", "p", "--rls-config-optional"},
       "--rls-config-optional is for --rls-config PATH"},
      {{"--rules", "r", "--peers-file", "p", "--rls-limit-header-names", "A,B"},
       "--rls-limit-header-names takes three names, LIMIT,REMAINING,RESET; got 2"},
      {{"--rules", "r", "--peers-file", "p", "--rls-limit-header-names", "A,B C,D"}, "not an HTTP header name"},
      {{"--peers-file", "p", "--rls-config", "c"}, "--rls-config is used by the rate limit service: give --rls-listen"},
      {{"--peers-file", "p", "--rls-config", "c", "--rls-listen", "h:1", "--rls-max-pending", "0"},
       "--rls-max-pending"},
      {{"--rules", "", "--peers-file", "p"}, "--rules must name a file"},
      {{"--rules", "r", "--peers-file", "p", "--fail-after", "60ms"}, "must be at least two --interval rounds"},
      {{"--rules", "r", "--peers-file", "p", "--forget-after", "5s"}, "at least 15s"},
      {{"--rules", "r", "--peers-file", "p", "--member-rows", "1"}, "--member-rows"},
      {{"--rules", "r", "--peers-file", "p", "--bogus"}, "bogus"},
      // Durations are bounded, so 2 x --fail-after and 2 x --interval cannot overflow.
      {{"--rules", "r", "--peers-file", "p", "--fail-after", "9223372036s"}, "at most 168h"},
      {{"--rules", "r", "--peers-file", "p", "--interval", "9223372036s"}, "at most 168h"},
      {{"--rules", "r", "--peers-file", "p", "--api-idle-timeout", "30"}, "--api-idle-timeout"},
      {{"--rules", "r", "--peers-file", "p", "--api-idle-timeout", "200h"}, "--api-idle-timeout must be at most 168h"},
      {{"--rules", "r", "--peers-file", "p", "--api-max-connections", "0"}, "--api-max-connections"},
      {{"--rules", "r", "--peers-file", "p", "--threads", "65"}, "--threads"},
      {{"--rules", "r", "--peers-file", "p", "--threads", "-1"}, "--threads"},
      {{"--rules", "r", "--peers-file", "p", "--max-message-age", "31s"}, "at most half of --forget-after (1m)"},
      {{"--rules", "r", "--peers-file", "p", "--max-message-age", "500ms"}, "must be at least 1s"},
      {{"--rules", "r", "--peers-file", "p", "--memory-limit", "lots"}, "--memory-limit \"lots\" is not a size"},
      {{"--rules", "r", "--peers-file", "p", "--memory-limit", "512T"}, "--memory-limit"},
  };
  for (const Case& c : cases) {
    const Parsed p = parse(c.args);
    EXPECT_TRUE(p.exit_code.has_value() && *p.exit_code != 0) << c.expected;
    EXPECT_NE(p.stderr_text.find(c.expected), std::string::npos)
        << "expected \"" << c.expected << "\" in: " << p.stderr_text;
  }
}

// Gossip is authenticated unless the operator says, in so many words, that it need not be.
TEST_F(DaemonOptionsTest, AClusterKeyIsRequiredUnlessInsecureGossipIsAskedFor) {
  const std::vector<std::string> base = {"--rules", "r.yaml", "--peers-file", "peers.txt"};
  const Parsed none = parse(base);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.stderr_text.find("gossip must be authenticated"), std::string::npos) << none.stderr_text;
  EXPECT_NE(none.stderr_text.find("tollgate keygen"), std::string::npos) << none.stderr_text;

  std::vector<std::string> insecure = base;
  insecure.push_back("--insecure-gossip");
  const Parsed ok = parse(insecure);
  EXPECT_FALSE(ok.exit_code.has_value()) << ok.stderr_text;
  EXPECT_TRUE(ok.options.insecure_gossip);

  const std::string key = write("cluster.key", std::string(64, 'a') + "\n");
  std::vector<std::string> keyed = base;
  keyed.insert(keyed.end(), {"--cluster-key-file", key});
  const Parsed with_key = parse(keyed);
  EXPECT_FALSE(with_key.exit_code.has_value()) << with_key.stderr_text;
  EXPECT_EQ(with_key.options.cluster_key_file, key);

  keyed.push_back("--insecure-gossip");  // contradictory: refused
  EXPECT_TRUE(parse(keyed).exit_code.has_value());
}

TEST_F(DaemonOptionsTest, HelpExitsZeroWithoutRunning) {
  ::testing::internal::CaptureStdout();
  const Parsed p = parse({"--help"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_NE(out.find("--partition-policy"), std::string::npos);
}

// Every node setting (config/node_settings.h) is a flag and a config key of tollgated, reads back
// what it prints, and reaches NodeOptions.
TEST_F(DaemonOptionsTest, EveryNodeSettingIsAFlagThatReadsBackWhatItPrints) {
  NodeSettings changed;
  changed.mode = DisseminationMode::kRelay;
  changed.relay_groups = 16;
  changed.membership = MembershipKind::kHeartbeat;
  changed.partition_policy = PartitionPolicy::kProportional;
  changed.interval_ns = 20 * kNanosPerMilli;
  changed.fanout = 5;
  changed.member_rows = 100;
  changed.fail_after_ns = 3 * kNanosPerSecond;
  changed.forget_after_ns = 90 * kNanosPerSecond;
  changed.probe_interval_ns = 2 * kNanosPerSecond;
  changed.push_pull_interval_ns = 500 * kNanosPerMilli;
  changed.max_keys = 4096;
  changed.retransmit_mult = 6;
  changed.sync_deadline_ns = 3 * kNanosPerSecond;
  changed.near_limit = 90;
  changed.top_k = 64;
  changed.top_window_ns = 30 * kNanosPerSecond;
  changed.top_gossip_bytes = 0;
  changed.top_rules = 8;
  changed.max_leases = 500;
  changed.max_lease_rows = 7000;
  std::vector<std::string> args = {"--rules", "r.yaml", "--seeds", "127.0.0.1:7000", "--insecure-gossip"};
  std::string config = "rules: r.yaml\nseeds: 127.0.0.1:7000\ninsecure-gossip: true\n";
  for (const NodeSettingField& f : node_setting_fields()) {
    ASSERT_NE(f.format(changed), f.format(NodeSettings{})) << f.flag << ": the test must change every setting";
    args.insert(args.end(), {"--" + std::string(f.flag), f.format(changed)});
    config += std::string(f.flag) + ": " + f.format(changed) + "\n";
  }
  const Parsed by_flags = parse(args);
  ASSERT_FALSE(by_flags.exit_code.has_value()) << by_flags.stderr_text;
  EXPECT_TRUE(by_flags.options.node == changed);
  const Parsed by_file = parse({"--config", write("all.yaml", config)});
  ASSERT_FALSE(by_file.exit_code.has_value()) << by_file.stderr_text;
  EXPECT_TRUE(by_file.options.node == changed);

  const NodeOptions n = NodeHost::node_options(node_host_options(by_flags.options), 1);
  EXPECT_EQ(n.mode, DisseminationMode::kRelay);
  EXPECT_EQ(n.relay_groups, 16u);
  EXPECT_EQ(n.membership.dead_after_ns, 6 * kNanosPerSecond);  // twice fail_after
  EXPECT_EQ(n.membership.forget_after_ns, 90 * kNanosPerSecond);
  EXPECT_EQ(n.push_pull_interval_ns, 500 * kNanosPerMilli);
  EXPECT_EQ(n.keys.max_keys, 4096u);
  EXPECT_EQ(n.retransmit_mult, 6u);
  EXPECT_EQ(n.top.capacity, 64u);
  EXPECT_EQ(n.top.window_ns, 30 * kNanosPerSecond);
  EXPECT_EQ(n.top.max_rules, 8u);
  EXPECT_EQ(n.top_gossip_bytes, 0u);
}

// --- the memory bound (issue 34, finding 8) ----------------------------------------------------

TEST(MemorySize, BytesOrBinaryUnits) {
  std::string why;
  EXPECT_EQ(parse_memory_size("512M", &why), uint64_t{512} << 20);
  EXPECT_EQ(parse_memory_size("2G", &why), uint64_t{2} << 30);
  EXPECT_EQ(parse_memory_size("64KiB", &why), uint64_t{64} << 10);
  EXPECT_EQ(parse_memory_size("1048576", &why), uint64_t{1} << 20);
  for (const char* bad : {"", "M", "-1", "1.5G", "12 M", "1000000000000000000"}) {
    EXPECT_FALSE(parse_memory_size(bad, &why)) << bad;
    EXPECT_NE(why.find("is not a size"), std::string::npos) << why;
  }
}

// The limit is the tightest memory.max on the way from this process's cgroup (v2) to the root.
TEST_F(DaemonOptionsTest, TheCgroupLimitIsTheTightestOnTheWayUp) {
  const std::string proc = write("cgroup", "0::/system.slice/tollgated.service\n");
  fs::create_directories(dir_ / "sys/system.slice/tollgated.service");
  write("sys/system.slice/tollgated.service/memory.max", "max\n");
  EXPECT_EQ(cgroup_memory_max(proc, (dir_ / "sys").string()), std::nullopt);  // no limit anywhere
  write("sys/system.slice/memory.max", "1073741824\n");
  EXPECT_EQ(cgroup_memory_max(proc, (dir_ / "sys").string()), uint64_t{1} << 30);  // the slice's
  write("sys/system.slice/tollgated.service/memory.max", "536870912\n");
  EXPECT_EQ(cgroup_memory_max(proc, (dir_ / "sys").string()), uint64_t{512} << 20);  // the service's, lower
  // cgroup v1 only (no "0::" line), or no file: unknown, so no limit is assumed.
  EXPECT_EQ(cgroup_memory_max(write("v1", "4:memory:/x\n"), (dir_ / "sys").string()), std::nullopt);
  EXPECT_EQ(cgroup_memory_max((dir_ / "absent").string(), (dir_ / "sys").string()), std::nullopt);
}

// Every door counts: the bound grows with each cap an operator raises.
TEST_F(DaemonOptionsTest, TheMemoryBoundGrowsWithEachCap) {
  auto bound = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--rules", "r", "--peers-file", "p", "--insecure-gossip"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Parsed p = parse(args);
    EXPECT_FALSE(p.exit_code.has_value()) << p.stderr_text;
    return total_bytes(memory_bound(p.options));
  };
  const uint64_t base = bound({});
  EXPECT_GT(bound({"--max-keys", "2000000"}), base + (uint64_t{400} << 20));  // ~870 B a key at most
  EXPECT_LT(bound({"--max-keys", "100000"}), base);
  EXPECT_GT(bound({"--api-max-connections", "4096"}), base + (uint64_t{300} << 20));  // ~130 KiB a connection
  EXPECT_GT(bound({"--http-listen", "127.0.0.1:8080"}), base);
  EXPECT_GT(bound({"--transport", "tcp"}), base);
}

// The package's unit and its configuration agree: the daemon they start fits its MemoryMax, so
// it starts (tollgated refuses settings whose bound exceeds the cgroup's limit).
TEST_F(DaemonOptionsTest, TheShippedConfigurationFitsTheUnitsMemoryMax) {
  // The key file it names is on the installed host only (flags win over the file).
  const Parsed p = parse({"--config", std::string(TOLLGATE_SOURCE_DIR) + "/config/tollgate.yaml", "--cluster-key-file",
                          write("cluster.key", std::string(64, 'a') + "\n")});
  ASSERT_FALSE(p.exit_code.has_value()) << p.stderr_text;
  std::ifstream unit(std::string(TOLLGATE_SOURCE_DIR) + "/config/tollgated.service");
  std::optional<uint64_t> memory_max;
  std::string line, why;
  while (std::getline(unit, line)) {
    if (line.rfind("MemoryMax=", 0) == 0) memory_max = parse_memory_size(line.substr(10), &why);
  }
  ASSERT_TRUE(memory_max.has_value()) << "no MemoryMax= in the unit " << why;
  const std::vector<MemoryPart> parts = memory_bound(p.options);
  EXPECT_LE(total_bytes(parts), *memory_max) << describe(parts);
  // And not far below it: the unit's limit is the bound, with room for the allocator's slack.
  EXPECT_GE(total_bytes(parts), *memory_max * 3 / 4) << describe(parts);
}

}  // namespace
}  // namespace tollgate
