// Two nodes, one cluster-wide limit, virtual time: a burst admitted in parallel on both nodes
// drives their shared bucket into debt once they exchange consumption, and the debt is paid off
// at the refill rate before either admits again. Also shows a duplicated message charged once.
//
// This is the core alone (KeyTable + Ledger + ManualClock); the network is a direct hand-off.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/key_table.h"
#include "core/ledger.h"
#include "tollgate/rules.h"

using namespace tollgate;

namespace {

struct Node {
  Node(std::string id, std::shared_ptr<const RuleSet> rules)
      : name(id), table(std::move(rules)), ledger(std::move(id), 1) {}
  std::string name;
  KeyTable table;
  Ledger ledger;
  int admitted = 0;
};

double tokens(Node& n, const std::string& key, MonoNanos now) {
  return double(n.table.balance_microtokens(key, now).value_or(0)) / kMicrotokensPerToken;
}

// One dissemination round: each node seals what it admitted and the other merges it.
void exchange(Node& a, Node& b, MonoNanos now) {
  for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    std::vector<ConsumptionEntry> pending;
    from->table.take_pending(pending);
    if (BatchPtr batch = from->ledger.seal(std::move(pending), now)) to->ledger.merge(batch, to->table, now);
  }
}

}  // namespace

int main() {
  const std::string key = "api:search:alice";
  Limit limit{Rate{10, kNanosPerSecond}, /*burst=*/20, /*max_debt=*/20};
  auto rules = std::make_shared<RuleSet>(std::vector<Rule>{{"api:search:*", limit, 0}}, std::nullopt);
  ManualClock clock;
  Node a("node-a", rules), b("node-b", rules);

  std::printf("rule api:search:* = %s, burst %lld, max_debt %lld (one bucket for the whole cluster)\n\n",
              format_rate(limit.rate).c_str(), (long long)limit.burst, (long long)limit.max_debt);

  std::printf("t=0ms     a burst of 15 requests reaches each node before they talk to each other\n");
  for (Node* n : {&a, &b}) {
    for (int i = 0; i < 15; ++i) n->admitted += n->table.allow(key, 1, clock.now_ns()).allowed ? 1 : 0;
    std::printf("          %s admitted %d, balance %+.1f\n", n->name.c_str(), n->admitted,
                tokens(*n, key, clock.now_ns()));
  }

  clock.advance_ns(50 * kNanosPerMilli);
  std::printf(
      "t=50ms    gossip round: each node seals its consumption and sends it to the other;\n"
      "          node-a's batch reaches node-b twice\n");
  std::vector<ConsumptionEntry> pending;
  a.table.take_pending(pending);
  BatchPtr from_a = a.ledger.seal(std::move(pending), clock.now_ns());
  pending.clear();
  b.table.take_pending(pending);
  BatchPtr from_b = b.ledger.seal(std::move(pending), clock.now_ns());
  const MergeResult first = b.ledger.merge(from_a, b.table, clock.now_ns());
  const MergeResult second = b.ledger.merge(from_a, b.table, clock.now_ns());
  a.ledger.merge(from_b, a.table, clock.now_ns());
  std::printf("          node-b: first copy %s, second copy %s\n", merge_result_name(first), merge_result_name(second));
  std::printf("          balance now: node-a %+.1f, node-b %+.1f  (20 - 30 admitted + 0.5 refilled)\n\n",
              tokens(a, key, clock.now_ns()), tokens(b, key, clock.now_ns()));

  std::printf(
      "then one request every 250ms, alternating nodes, each followed by a gossip round;\n"
      "both nodes pay the shared debt off at 10/s before admitting again:\n");
  std::printf("%8s  %-6s  %-7s  %12s  %12s  %12s\n", "t", "node", "result", "retry after", "a balance", "b balance");
  for (int step = 1; step <= 12; ++step) {
    clock.advance_ns(250 * kNanosPerMilli);
    Node& n = step % 2 ? a : b;
    const Decision d = n.table.allow(key, 1, clock.now_ns());
    char retry[32] = "-";
    if (!d.allowed) std::snprintf(retry, sizeof retry, "%.0f ms", double(d.retry_after_ns) / kNanosPerMilli);
    exchange(a, b, clock.now_ns());
    std::printf("%6lldms  %-6s  %-7s  %12s  %+12.1f  %+12.1f\n", (long long)(clock.now_ns() / kNanosPerMilli),
                n.name.c_str(), d.allowed ? "allow" : "deny", retry, tokens(a, key, clock.now_ns()),
                tokens(b, key, clock.now_ns()));
  }
  const LedgerStats sb = b.ledger.stats();
  std::printf("\nnode-b ledger: %llu batches applied, %llu duplicate dropped\n", (unsigned long long)sb.applied,
              (unsigned long long)sb.duplicates);
  return 0;
}
