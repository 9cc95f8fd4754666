// tollgated's config file (--config): any text as the YAML file, read the way tollgated reads
// it, through parse_daemon_options() (src/daemon/daemon_options.cc) with only `--config FILE`
// on the command line. The file lives in a memfd, named by /proc/self/fd/N.
//
// Contract: parse_daemon_options() returns (run, or an exit code after a message) and never
// throws: tollgated's main() calls it outside any try block, so an exception would abort the
// daemon instead of naming the bad line. When it says "run", the options are the validated
// ones: a rules file, a node id of 1..256 bytes, a bind address that splits, a peers file or
// valid seeds for the membership, ranges and durations within their bounds; NodeHost::node_options()
// accepts them; and parsing the same file again gives the same options.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "daemon/daemon_options.h"
#include "fuzz_util.h"
#include "host/node_host.h"
#include "util/host_port.h"

namespace {

// The parser prints its errors and --help to std::cout/std::cerr; at thousands of runs a second
// that is noise. FUZZ_CHECK writes with fprintf, which this does not silence.
void silence_iostreams() {
  static const bool done = [] {
    std::cout.rdbuf(nullptr);
    std::cerr.rdbuf(nullptr);
    return true;
  }();
  (void)done;
}

std::optional<int> parse(const std::string& path, tollgate::DaemonOptions* options) {
  std::vector<std::string> args = {"tollgated", "--config", path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  try {
    return tollgate::parse_daemon_options(static_cast<int>(args.size()), argv.data(), options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parse_daemon_options threw: %s\n", e.what());
    FUZZ_CHECK(false, "parse_daemon_options never throws");
  } catch (...) {
    FUZZ_CHECK(false, "parse_daemon_options never throws");
  }
  return std::nullopt;
}

// Every setting, as its row of the settings table prints it.
bool same(const tollgate::DaemonOptions& a, const tollgate::DaemonOptions& b) {
  for (const tollgate::DaemonSetting& row : tollgate::daemon_settings()) {
    if (row.format(a) != row.format(b)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  silence_iostreams();
  const int fd = ::memfd_create("tollgate-fuzz-config", 0);
  FUZZ_CHECK(fd >= 0, "memfd_create failed");
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(fd, data + written, size - written);
    FUZZ_CHECK(n > 0, "writing the memfd failed");
    written += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  tollgate::DaemonOptions options;
  const std::optional<int> exit_code = parse(path, &options);
  if (!exit_code) {
    using tollgate::kNanosPerMilli;
    using tollgate::kNanosPerSecond;
    FUZZ_CHECK(!options.rules_file.empty() || !options.rls_config.empty(), "runs without a rules file or RLS config");
    // The rate limit service needs its config; the config is used by gRPC or by HTTP's POST /json.
    FUZZ_CHECK(options.rls_listen.empty() || !options.rls_config.empty(), "an RLS listener without a config");
    FUZZ_CHECK(options.rls_config.empty() || !options.rls_listen.empty() || !options.http_listen.empty(),
               "an RLS config no front end uses");
    FUZZ_CHECK(!options.node_id.empty() && options.node_id.size() <= 256, "runs with an invalid node id");
    FUZZ_CHECK(options.bind.size() <= 256 && tollgate::split_host_port(options.bind, nullptr, nullptr, nullptr),
               "runs with an invalid bind address");
    FUZZ_CHECK(!options.listen.empty(), "runs without a client endpoint");
    if (options.node.membership == tollgate::MembershipKind::kStatic) {
      FUZZ_CHECK(!options.peers_file.empty(), "static membership without a peers file");
    } else {
      FUZZ_CHECK(!options.seeds.empty(), "heartbeat membership without seeds");
    }
    for (const std::string& seed : options.seeds) {
      FUZZ_CHECK(tollgate::split_host_port(seed, nullptr, nullptr, nullptr), "runs with an invalid seed");
    }
    FUZZ_CHECK(options.node.interval_ns >= kNanosPerMilli, "an interval below 1ms");
    FUZZ_CHECK(options.node.fail_after_ns / 2 >= options.node.interval_ns,
               "fail-after below two intervals");  // no 2 * x: it may overflow
    FUZZ_CHECK(options.node.forget_after_ns >= 15 * kNanosPerSecond, "forget-after below 15s");
    FUZZ_CHECK(options.node.fanout >= 1 && options.node.fanout <= 64, "fanout out of range");
    FUZZ_CHECK(options.max_datagram >= 1232 && options.max_datagram <= 65000, "max-datagram out of range");
    FUZZ_CHECK(options.node.max_keys >= 1 && options.node.max_keys <= 100'000'000, "max-keys out of range");
    FUZZ_CHECK(options.gossip_peer_bytes_per_second >= 64 * 1024, "gossip-peer-rate out of range");
    (void)tollgate::NodeHost::node_options(tollgate::node_host_options(options), 1);

    tollgate::DaemonOptions again;
    FUZZ_CHECK(!parse(path, &again) && same(options, again), "the same file parses differently");
  }
  ::close(fd);
  return 0;
}
