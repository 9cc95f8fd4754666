#include "virtual_sim.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <queue>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "arrivals.h"
#include "recorder.h"
#include "tollgate/node.h"
#include "tollgate/random.h"

namespace tollgate::sim {

namespace {

// Approximate wire size of a message (protobuf-like: a few bytes of framing per field), so the
// cost figures compare modes without paying for real encoding of millions of messages.
uint64_t estimated_bytes(const GossipMessage& m) {
  uint64_t b = 48 + m.sender.size() + m.sender_address.size();  // envelope, version, MAC, header
  for (const BatchPtr& batch : m.batches) {
    b += 8 + batch->origin.size() + 12;
    for (const ConsumptionEntry& e : batch->entries) b += 4 + e.key.size() + 4;
  }
  for (const MemberRecord& r : m.members) b += 8 + r.id.size() + r.address.size() + 12;
  if (m.digest) {
    for (const OriginDigest& o : m.digest->origins) b += 8 + o.origin.size() + 2 * 48;
  }
  return b;
}

double uniform01(Random& r) { return double(r.next_u64() >> 11) * 0x1.0p-53; }

class Simulation {
 public:
  Simulation(const Scenario& s, std::shared_ptr<const RuleSet> rules)
      : s_(s), rules_(std::move(rules)), recorder_(s, rules_), net_rng_(s.seed * 3 + 1), arrivals_(s.load, s.seed),
        node_rng_(s.seed * 3 + 3) {
    loss_ = s_.network.loss;
    for (size_t i = 0; i < s_.nodes; ++i) add_node();
    for (size_t i = 0; i < nodes_.size(); ++i) start_node(i, 1);
    push(arrivals_.peek_time(), Kind::kCheck, 0);
    for (size_t e = 0; e < s_.timeline.size(); ++e) {
      push(s_.timeline[e].at_ns, Kind::kEventStart, uint32_t(e));
      if (s_.timeline[e].until_ns) push(*s_.timeline[e].until_ns, Kind::kEventEnd, uint32_t(e));
    }
  }

  SimResult run() {
    while (!queue_.empty()) {
      Item it = queue_.top();
      if (it.t >= s_.duration_ns) break;
      queue_.pop();
      now_ = it.t;
      switch (it.kind) {
        case Kind::kTick: tick(it.node, it.epoch); break;
        case Kind::kDeliver: deliver(it.node, it.epoch, it.message); break;
        case Kind::kCheck: check(); break;
        case Kind::kEventStart: event_start(s_.timeline[it.node]); break;
        case Kind::kEventEnd: event_end(s_.timeline[it.node]); break;
      }
    }
    now_ = s_.duration_ns;
    recorder_.alive(now_, live_);
    recorder_.unconverged(tracks_.size());
    return recorder_.finish();
  }

 private:
  enum class Kind : uint8_t { kTick, kDeliver, kCheck, kEventStart, kEventEnd };
  struct Item {
    int64_t t;
    uint64_t order;  // ties resolved by insertion order: deterministic
    Kind kind;
    uint32_t node;
    uint64_t epoch;
    GossipMessagePtr message;
    bool operator>(const Item& o) const { return t != o.t ? t > o.t : order > o.order; }
  };
  struct SimNode;
  class SimOutbox final : public Outbox {
   public:
    SimOutbox(Simulation& sim, size_t index) : sim_(sim), index_(index) {}
    void send(const std::string& address, const GossipMessagePtr& m) override { sim_.send(index_, address, m); }

   private:
    Simulation& sim_;
    size_t index_;
  };
  struct SimNode {
    std::string id, address;
    std::unique_ptr<SimOutbox> outbox;
    std::unique_ptr<Node> node;
    bool up = false;
    uint64_t epoch = 0;        // bumps at every crash/restart: stale events are ignored
    uint64_t incarnation = 0;
  };
  // A batch on its way to every node: for convergence.
  struct Track {
    int64_t sealed_ns;
    size_t remaining;  // live nodes that have not applied it yet
    BatchPtr batch;    // held, so no other batch can take its address while it is tracked
  };

  void push(int64_t t, Kind k, uint32_t node, uint64_t epoch = 0, GossipMessagePtr m = nullptr) {
    queue_.push(Item{t, order_++, k, node, epoch, std::move(m)});
  }

  void add_node() {
    const size_t i = nodes_.size();
    SimNode n;
    n.id = "node-" + std::to_string(i);
    n.address = "sim:" + std::to_string(i);
    n.outbox = std::make_unique<SimOutbox>(*this, i);
    nodes_.push_back(std::move(n));
    up_.push_back(false);
    side_.push_back(0);
  }

  std::vector<PeerSpec> peers() const {
    std::vector<PeerSpec> p;
    for (const SimNode& n : nodes_) p.push_back({n.id, n.address});
    return p;
  }

  void start_node(size_t i, uint64_t incarnation) {
    recorder_.alive(now_, live_);
    SimNode& n = nodes_[i];
    NodeOptions o;
    o.id = n.id;
    o.address = n.address;
    o.incarnation = incarnation;
    o.mode = s_.mode;
    o.partition_policy = s_.policy;
    o.interval_ns = s_.interval_ns;
    o.fanout = s_.fanout;
    o.membership.kind = s_.membership;
    if (s_.membership == MembershipKind::kHeartbeat) o.seeds = {nodes_[0].address};
    o.on_applied = [this](const Batch& b) { applied(b); };
    n.node = std::make_unique<Node>(o, rules_, *n.outbox, node_rng_);
    if (s_.membership == MembershipKind::kStatic) n.node->set_peers(peers(), now_);
    n.up = true;
    up_[i] = true;
    ++live_;
    n.incarnation = incarnation;
    ++n.epoch;
    push(now_ + int64_t(node_rng_.below(uint64_t(s_.interval_ns))), Kind::kTick, uint32_t(i), n.epoch);
  }

  void tick(uint32_t i, uint64_t epoch) {
    SimNode& n = nodes_[i];
    if (!n.up || n.epoch != epoch) return;
    n.node->tick(now_);
    push(now_ + s_.interval_ns, Kind::kTick, i, epoch);
  }

  void send(size_t from, const std::string& address, const GossipMessagePtr& m) {
    recorder_.sent(now_, 1, estimated_bytes(*m));
    // A batch its origin sends for the first time: start timing its spread.
    for (const BatchPtr& b : m->batches) {
      // Seqs grow within a life: a batch newer than the last one tracked is sent for the first time.
      auto& last = last_tracked_[from];
      if (b->origin != nodes_[from].id || std::pair(b->incarnation, b->seq) <= last) continue;
      last = {b->incarnation, b->seq};
      tracks_.emplace(b.get(), Track{now_, live_ - 1, b});
      if (live_ == 1) finish(b.get());
    }
    if (now_ >= next_track_sweep_ns_) {  // batches that never reach everyone (a crash, a partition)
      next_track_sweep_ns_ = now_ + kNanosPerSecond;
      std::erase_if(tracks_, [&](const auto& kv) {
        const bool stale = kv.second.sealed_ns < now_ - 30 * kNanosPerSecond;
        if (stale) recorder_.unconverged();
        return stale;
      });
    }
    // Addresses are "sim:N": read N rather than hashing the string (millions of sends per run).
    size_t to = 0;
    const auto [end, ec] = std::from_chars(address.data() + 4, address.data() + address.size(), to);
    if (address.compare(0, 4, "sim:") != 0 || ec != std::errc() || end != address.data() + address.size() ||
        to >= nodes_.size()) {
      return;
    }
    if (side_[from] != side_[to]) return;
    if (uniform01(net_rng_) < loss_) return;
    const int copies = uniform01(net_rng_) < s_.network.duplicate ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      const int64_t span = s_.network.latency_max_ns - s_.network.latency_min_ns;
      const int64_t latency = s_.network.latency_min_ns + (span > 0 ? int64_t(net_rng_.below(uint64_t(span) + 1)) : 0);
      push(now_ + latency, Kind::kDeliver, uint32_t(to), nodes_[to].epoch, m);
    }
  }

  void deliver(uint32_t to, uint64_t epoch, const GossipMessagePtr& m) {
    SimNode& n = nodes_[to];
    if (!n.up || n.epoch != epoch) return;  // crashed (or restarted) since it was sent
    n.node->receive(*m, now_);  // counts convergence through on_applied
  }

  // A node applied `b` (NodeOptions::on_applied): one fewer to reach, if it is being timed.
  void applied(const Batch& b) {
    auto t = tracks_.find(&b);
    if (t != tracks_.end() && --t->second.remaining == 0) finish(&b);
  }

  void finish(const Batch* b) {
    auto t = tracks_.find(b);
    recorder_.converged(t->second.sealed_ns, now_ - t->second.sealed_ns);
    tracks_.erase(t);
  }

  // The next arrival of the load (sim/arrivals.h, shared with the local back end): on a live
  // node chosen by the spread's weights (a crashed host's service is down too), for a key.
  void check() {
    const Arrival a = arrivals_.next(up_);
    push(arrivals_.peek_time(), Kind::kCheck, 0);
    if (a.dropped) return;
    const std::string& name = arrivals_.keys()[a.key];
    const bool allowed = nodes_[a.node].node->check(name, s_.load.cost, now_).allowed;
    recorder_.check(now_, name, s_.load.cost, side_[a.node], allowed);
  }

  void event_start(const Event& e) {
    switch (e.kind) {
      case Event::Kind::kPartition:
        for (size_t g = 0; g < e.groups.size(); ++g) {
          for (size_t i : e.groups[g]) {
            if (i < side_.size()) side_[i] = g;
          }
        }
        break;
      case Event::Kind::kLoss: loss_ = e.loss; break;
      case Event::Kind::kCrash:
        if (e.node < nodes_.size() && nodes_[e.node].up) {
          recorder_.alive(now_, live_);
          nodes_[e.node].up = false;
          up_[e.node] = false;
          --live_;
          ++nodes_[e.node].epoch;
        }
        break;
      case Event::Kind::kJoin:
        for (size_t c = 0; c < e.count; ++c) {
          add_node();
          start_node(nodes_.size() - 1, 1);
        }
        if (s_.membership == MembershipKind::kStatic) {  // the operator adds them to the peers file
          for (SimNode& n : nodes_) {
            if (n.up) n.node->set_peers(peers(), now_);
          }
        }
        break;
    }
  }

  void event_end(const Event& e) {
    switch (e.kind) {
      case Event::Kind::kPartition: std::fill(side_.begin(), side_.end(), 0); break;
      case Event::Kind::kLoss: loss_ = s_.network.loss; break;
      case Event::Kind::kCrash:
        if (e.node < nodes_.size() && !nodes_[e.node].up) start_node(e.node, nodes_[e.node].incarnation + 1);
        break;
      case Event::Kind::kJoin: break;
    }
  }

  const Scenario& s_;
  std::shared_ptr<const RuleSet> rules_;
  Recorder recorder_;
  SplitMix64 net_rng_;
  ArrivalStream arrivals_;
  SplitMix64 node_rng_;
  std::vector<SimNode> nodes_;
  std::vector<size_t> side_;  // partition side of each node (0 when none)
  double loss_ = 0;
  std::vector<bool> up_;  // nodes_[i].up, as the arrival stream takes it
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue_;
  uint64_t order_ = 0;
  int64_t now_ = 0;
  size_t live_ = 0;  // nodes up
  std::unordered_map<const Batch*, Track> tracks_;
  std::unordered_map<size_t, std::pair<uint64_t, uint64_t>> last_tracked_;  // node -> (incarnation, seq)
  int64_t next_track_sweep_ns_ = 0;
};

}  // namespace

SimResult run_virtual(const Scenario& scenario, std::shared_ptr<const RuleSet> rules) {
  return Simulation(scenario, std::move(rules)).run();
}

}  // namespace tollgate::sim
