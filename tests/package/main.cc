// Links the installed libraries and uses them: exits 0 only if a rule parsed from YAML governs
// the keys it matches, the client library fails open without a daemon, and an embedded cluster
// member (alone here) enforces its rules from two threads. Only the installed contract
// (include/tollgate) is used: the node, key table and ledger are internals.
#include <atomic>
#include <cstdio>
#include <thread>

#include "tollgate/client.h"
#include "tollgate/member.h"
#include "tollgate/rules_file.h"

int main() {
  const auto rules = tollgate::parse_rules("rules:\n  - {match: \"k\", rate: 1/s, burst: 2}\n", "inline");
  const uint32_t rule = rules->match("k");
  const bool governed = rule != tollgate::RuleSet::kUnlimited && rules->limit(rule).burst == 2;
  const bool other_free = rules->match("other") == tollgate::RuleSet::kUnlimited;
  std::printf("consumer: rule for k %s, other key %s\n", governed ? "found" : "missing",
              other_free ? "unlimited" : "limited");
  // The client library links too; with no daemon it fails open, at once.
  tollgate::ClientOptions options;
  options.endpoint = "unix:/nonexistent/tollgated.sock";
  tollgate::Client client(options);
  const tollgate::CheckReply reply = client.check("k");
  std::printf("consumer: client without a daemon: %s (%s)\n", reply.allowed ? "allowed" : "denied",
              tollgate::reply_source_name(reply.source));
  // A member embedded in this process: heartbeat membership, its seed not there (alone), gossip
  // unauthenticated on loopback for the test's sake. 10 tokens, asked for 1 at a time by two
  // threads 20 times each: exactly 10 pass.
  tollgate::MemberOptions m;
  m.node_id = "consumer";
  m.bind = "127.0.0.1:0";
  m.insecure_gossip = true;
  m.rules_yaml = "rules:\n  - {match: \"k*\", rate: 1/h, burst: 10}\n";
  m.seeds = {"127.0.0.1:9"};
  // Alone by design: no peer's balances to wait for at start (docs/design.md 6.5).
  m.settings = {{"membership", "heartbeat"}, {"sync-deadline", "0s"}};
  std::atomic<int> passed{0};
  {
    tollgate::Member member(m);
    std::thread t1([&] {
      for (int i = 0; i < 20; ++i) passed += member.check("k-embedded").allowed ? 1 : 0;
    });
    for (int i = 0; i < 20; ++i) passed += member.check("k-embedded").allowed ? 1 : 0;
    t1.join();
    std::printf("consumer: embedded member on port %u: %d of 40 checks passed\n", unsigned(member.gossip_port()),
                passed.load());
  }
  return governed && other_free && reply.allowed && !reply.from_daemon() && passed.load() == 10 ? 0 : 1;
}
