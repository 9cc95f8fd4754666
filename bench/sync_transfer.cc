// Balances from a peer on start (issue 35, docs/design.md 6.5), at size: one node holding N
// buckets that are not full serves them to a node that starts, over the codec's signed UDP
// datagrams (1,400 bytes; --tcp: 16 KiB frames) in virtual time, 50 ms rounds. Prints what the
// transfer costs:
//   - rounds and virtual seconds until the starting node has every balance (and whether each is
//     exact: the sum of the balances it took against the server's);
//   - datagrams and bytes on the wire, both ways;
//   - the server's thread: the longest round (tick plus the requests it answered) while it
//     serves, against its longest round without a transfer: what a check waits behind, at most;
//   - the starting node's thread: the longest step (the page that completes the transfer takes
//     every balance in one go).
//   build/bench/tollgate-sync-bench [--keys 1000000] [--tcp]
// CPU times on a shared VM: report them as the ratio to the same run's round without a transfer.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "core/node.h"
#include "core/random.h"
#include "tollgate/rules.h"

namespace tollgate {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kRoundNs = 50 * kNanosPerMilli;
// A datagram (UDP, the default) or, with --tcp, a frame of 16 KiB: the page and message size
// tollgated uses for each transport (node_host.cc).
size_t g_message_bytes = 1400;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Messages go through the codec, as on the wire: encoded into signed datagrams, counted, decoded.
class Wire final : public Outbox {
 public:
  explicit Wire(ClusterKeys keys) : keys_(std::move(keys)) {}
  void send(const std::string& to, const GossipMessagePtr& m) override {
    for (std::string& d : encode_datagrams(*m, keys_, g_message_bytes, nullptr, 1)) {
      ++datagrams;
      bytes += d.size();
      queue_.push_back({to, std::move(d)});
    }
  }
  template <typename Deliver>
  void deliver(Deliver to_node) {
    while (!queue_.empty()) {
      auto [to, bytes_in] = std::move(queue_.front());
      queue_.pop_front();
      DecodeResult r = decode(bytes_in, keys_);
      if (r.message) to_node(to, *r.message);
    }
  }
  uint64_t datagrams = 0, bytes = 0;

 private:
  ClusterKeys keys_;
  std::deque<std::pair<std::string, std::string>> queue_;
};

NodeOptions options(const std::string& id, size_t max_keys) {
  NodeOptions o;
  o.id = id;
  o.address = id;
  o.incarnation = id == "joiner" ? 2 : 1;
  o.mode = DisseminationMode::kMesh;
  o.keys.max_keys = max_keys;
  o.sync_deadline_ns = id == "joiner" ? 5 * kNanosPerSecond : 0;  // the server has been up for long
  const size_t max_batch = max_batch_bytes_for(1400);             // batches fit a datagram whatever the transport
  o.split_for_sealing = [id, max_batch](std::vector<ConsumptionEntry> e) {
    return split_for_sealing(std::move(e), id, max_batch);
  };
  o.sync_pages_per_round = std::max<size_t>(1, (size_t{128} * 1400) / g_message_bytes);  // as tollgated
  o.split_for_transfer =
      [](std::vector<OriginDigest> p, std::vector<std::pair<std::string, int64_t>> b, std::vector<ResetMark> r) {
    return split_transfer(std::move(p), std::move(b), std::move(r), g_message_bytes);
  };
  return o;
}

int run(size_t keys) {
  std::vector<Rule> rules{{"k*", Limit{Rate{100, 86400 * kNanosPerSecond}, 100, 100}, 1}};
  auto rule_set = std::make_shared<RuleSet>(std::move(rules), std::nullopt);
  Wire wire(ClusterKeys({std::string(32, 'K')}));
  SplitMix64 random(7);
  const std::vector<PeerSpec> peers{{"server", "server"}, {"joiner", "joiner"}};
  Node server(options("server", keys + 1024), rule_set, wire, random);
  server.set_peers(peers, 0);
  MonoNanos now = 0;
  // N keys, each spent by a few tokens: N buckets that are not full.
  for (size_t i = 0; i < keys; ++i) server.check("k" + std::to_string(i), 1 + int64_t(i % 7), now);
  std::unique_ptr<Node> joiner;
  auto deliver = [&] {
    wire.deliver([&](const std::string& to, const GossipMessage& m) {
      if (to == "server") server.receive(m, now);
      if (to == "joiner" && joiner) joiner->receive(m, now);
    });
  };
  // Rounds without a transfer first, past the 10 s its batches are retained for repair (so the
  // joiner can learn the balances only from the transfer): the server's usual round, for the ratio.
  double quiet_max_ms = 0;
  const int quiet_rounds = int(12 * kNanosPerSecond / kRoundNs);
  for (int r = 0; r < quiet_rounds; ++r) {
    now += kRoundNs;
    const auto t = Clock::now();
    server.tick(now);
    // (The first rounds seal the N keys' consumption: the usual round is the later ones'.)
    if (r >= quiet_rounds / 2) quiet_max_ms = std::max(quiet_max_ms, ms_since(t));
    deliver();
  }
  const uint64_t quiet_bytes = wire.bytes, quiet_datagrams = wire.datagrams;

  joiner = std::make_unique<Node>(options("joiner", keys + 1024), rule_set, wire, random);
  joiner->set_peers(peers, now);
  double serve_max_ms = 0, join_max_ms = 0, serve_total_ms = 0;
  int rounds = 0;
  const auto started = Clock::now();
  while (joiner->syncing() && rounds < 100'000) {
    now += kRoundNs;
    ++rounds;
    auto t = Clock::now();
    joiner->tick(now);
    join_max_ms = std::max(join_max_ms, ms_since(t));
    // The server's round and the requests it answers in it: what its checks wait behind.
    t = Clock::now();
    server.tick(now);
    double joiner_ms = 0;  // (the joiner's part of the delivery is not the server's)
    wire.deliver([&](const std::string& to, const GossipMessage& m) {
      if (to == "server") {
        server.receive(m, now);
      } else {
        const auto j = Clock::now();
        joiner->receive(m, now);
        const double took = ms_since(j);
        joiner_ms += took;
        join_max_ms = std::max(join_max_ms, took);
      }
    });
    const double served = ms_since(t) - joiner_ms;
    serve_max_ms = std::max(serve_max_ms, served);
    serve_total_ms += served;
  }
  const double wall_s = ms_since(started) / 1000;
  const NodeStats s = joiner->stats();
  // Exact: the joiner holds, key by key, what the server holds, but for the refill of the time a
  // page took (the joiner counts refill from when a page arrived, never from before: it errs
  // toward debt by at most the refill of the transfer's duration).
  const int64_t slack = 100 * kMicrotokensPerToken * (rounds + 1) * kRoundNs / (86400 * kNanosPerSecond) + 1;
  (void)quiet_bytes;
  size_t same = 0;
  for (size_t i = 0; i < keys; ++i) {
    const std::string key = "k" + std::to_string(i);
    const auto a = server.table().balance_microtokens(key, now), b = joiner->table().balance_microtokens(key, now);
    const bool ok = a && b && *b <= *a && *a - *b <= slack;
    same += ok ? 1 : 0;
    if (!ok && std::getenv("SYNC_BENCH_DEBUG") && i % 5000 == 0) {
      std::printf("key %s: server %lld joiner %lld\n", key.c_str(), a ? (long long)*a : -1LL, b ? (long long)*b : -1LL);
    }
  }
  std::printf("keys not full at the server      %zu\n", keys);
  std::printf(
      "transfer taken                   %s (%llu balances lowered; %zu of %zu keys equal at both, within "
      "%lld microtokens of refill)\n",
      s.sync_taken ? "yes" : "NO", (unsigned long long)s.sync_balances, same, keys, (long long)slack);
  std::printf("rounds / virtual seconds         %d / %.1f s (wall %.1f s)\n", rounds, rounds * 0.05, wall_s);
  std::printf("pages served                     %llu\n", (unsigned long long)server.stats().sync_pages_sent);
  std::printf("datagrams / bytes, both ways     %llu / %.1f MB (%.1f bytes a key)\n",
              (unsigned long long)(wire.datagrams - quiet_datagrams), double(wire.bytes - quiet_bytes) / 1e6,
              double(wire.bytes - quiet_bytes) / double(keys));
  std::printf("server round, longest, serving   %.2f ms (without a transfer %.2f ms: %.1fx); mean %.2f ms\n",
              serve_max_ms, quiet_max_ms, quiet_max_ms > 0 ? serve_max_ms / quiet_max_ms : 0,
              serve_total_ms / std::max(rounds, 1));
  std::printf("joiner's longest step            %.1f ms (the last page takes every balance)\n", join_max_ms);
  return s.sync_taken && same == keys ? 0 : 1;
}

}  // namespace
}  // namespace tollgate

int main(int argc, char** argv) {
  size_t keys = 1'000'000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--keys") == 0 && i + 1 < argc) {
      keys = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--tcp") == 0) {
      tollgate::g_message_bytes = size_t{16} << 10;
    } else {
      std::fprintf(stderr, "usage: %s [--keys N] [--tcp]\n", argv[0]);
      return 2;
    }
  }
  return tollgate::run(keys);
}
