#include "virtual_sim.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <deque>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "arrivals.h"
#include "core/node.h"
#include "core/random.h"
#include "crew.h"
#include "recorder.h"

namespace tollgate::sim {

namespace {

// Approximate wire size of a message (protobuf-like: a few bytes of framing per field), so the
// cost figures compare modes without paying for real encoding of millions of messages.
uint64_t estimated_bytes(const GossipMessage& m) {
  uint64_t b = 48 + m.sender.size() + m.sender_address.size();  // envelope, version, MAC, header
  for (const BatchPtr& batch : m.batches) {
    b += 8 + batch->origin.size() + 12;
    for (const ConsumptionEntry& e : batch->entries) b += 4 + e.key.size() + 4;
    if (batch->counts) {
      b += 4 + batch->counts->from.size() + batch->counts->until.size();
      for (const InflightEntry& e : batch->counts->entries) b += 4 + e.key.size() + 6;
    }
  }
  for (const MemberRecord& r : m.members) b += 8 + r.id.size() + r.address.size() + 12;
  if (m.digest) {
    for (const OriginDigest& o : m.digest->origins) b += 8 + o.origin.size() + 2 * 48;
  }
  if (m.relay_through) b += 2 * 6;  // relay repair: the stint a contact is told
  if (!m.row_wanted.empty()) b += 2 + m.row_wanted.size();
  return b;
}

double uniform01(Random& r) { return double(r.next_u64() >> 11) * 0x1.0p-53; }

// The seed of random stream `stream` of node `index`: independent streams per node, so a node's
// draws do not depend on which other nodes ran before it (or on which thread).
uint64_t node_seed(uint64_t seed, uint64_t stream, uint64_t index) {
  SplitMix64 mix(seed * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + index);
  return mix.next_u64();
}

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

class Simulation {
 public:
  Simulation(const Scenario& s, std::shared_ptr<const RuleSet> rules, const VirtualOptions& options)
      : s_(s),
        rules_(std::move(rules)),
        recorder_(s, rules_),
        arrivals_(s.load, s.seed),
        min_parallel_events_(options.min_parallel_events) {
    loss_ = s_.network.loss;
    // A window must end before anything its events schedule: a message arrives no sooner than
    // latency_min after it is sent, and a node's next tick (scheduled when the window's effects
    // are merged) comes one interval after this one. Within such a window, no node's event can
    // change another node's. (Zero latency makes windows of 1 ns: correct, and slow.)
    lookahead_ = std::max<int64_t>(1, std::min(s_.network.latency_min_ns, s_.node.interval_ns));
    for (size_t i = 0; i < s_.nodes; ++i) add_node();
    for (size_t i = 0; i < nodes_.size(); ++i) start_node(i, 1);
    for (size_t e = 0; e < s_.timeline.size(); ++e) {
      timeline_.push_back({s_.timeline[e].at_ns, &s_.timeline[e], true});
      if (s_.timeline[e].until_ns) timeline_.push_back({*s_.timeline[e].until_ns, &s_.timeline[e], false});
    }
    std::stable_sort(timeline_.begin(), timeline_.end(), [](const Moment& a, const Moment& b) { return a.t < b.t; });
    unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    threads = unsigned(std::min<size_t>(threads, std::max<size_t>(1, s_.nodes)));
    effects_.resize(threads);
    crew_ = std::make_unique<Crew>(threads, [this](unsigned member) { run_member(member); });
  }

  SimResult run() {
    size_t next_moment = 0;
    for (;;) {
      const int64_t local = std::min(heap_.empty() ? kNever : heap_.front().t, arrivals_.peek_time());
      const int64_t moment = next_moment < timeline_.size() ? timeline_[next_moment].t : kNever;
      if (moment <= local) {  // timeline events run before the nodes' events of the same time
        if (moment >= s_.duration_ns) break;
        now_ = moment;
        const Moment& m = timeline_[next_moment++];
        m.start ? event_start(*m.event) : event_end(*m.event);
        continue;
      }
      if (local >= s_.duration_ns) break;
      if (leases_ && local >= next_lease_sample_ns_) {
        lease_sample();
        continue;
      }
      run_window(local,
                 std::min({local + lookahead_, moment, s_.duration_ns, leases_ ? next_lease_sample_ns_ : kNever}));
    }
    now_ = s_.duration_ns;
    recorder_.alive(now_, live_);
    for (const auto& [batch, track] : tracks_) {
      if (track.finished) continue;
      if (track.sealed_ns >= now_ - SimResult::kInFlightWindowNs) {
        recorder_.in_flight_at_end(1);
      } else {
        recorder_.unconverged();
      }
    }
    for (const SimNode& n : nodes_) member_failures_ += n.node ? n.node->membership().stats().failed : 0;
    SimResult result = recorder_.finish();
    result.member_failures = int64_t(member_failures_);
    result.charged_twice = charged_twice_;
    for (const SimNode& n : nodes_) {
      if (!n.node || !n.up) continue;
      ++result.modes_at_end[{dissemination_mode_name(n.node->mode()), n.node->relay_groups()}];
    }
    if (s_.top_check > 0) check_tops(result);
    return result;
  }

  // Top-K (Scenario::top_check): what nodes 0, N/2 and N-1 report of each rule against the
  // recorder's exact counts of every check.
  void check_tops(SimResult& result) {
    const size_t k = s_.top_check;
    std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> exact;  // key, (denied, tokens)
    for (const auto& [key, e] : recorder_.exact()) exact.push_back({key, {e.denied, e.tokens}});
    for (const size_t i : std::set<size_t>{0, nodes_.size() / 2, nodes_.size() - 1}) {
      const SimNode& n = nodes_[i];
      if (!n.node || !n.up) continue;
      for (const RuleTop& top : n.node->top("", k, now_)) {
        for (const bool denied : {true, false}) {
          const MergedTop& m = denied ? top.denied : top.tokens;
          // The rule's keys' exact counts, heaviest first (ties by key, as a summary breaks them).
          std::vector<std::pair<uint64_t, std::string>> truth;
          uint64_t exact_total = 0;
          for (const auto& [key, e] : exact) {
            if (rules_->match(key) == RuleSet::kUnlimited || rules_->label(rules_->match(key)) != top.rule) continue;
            const uint64_t c = denied ? e.first : e.second;
            exact_total += c;
            if (c > 0) truth.emplace_back(c, key);
          }
          std::sort(truth.begin(), truth.end(), [](const auto& a, const auto& b) {
            return a.first != b.first ? a.first > b.first : a.second < b.second;
          });
          std::unordered_map<std::string, uint64_t> count;
          for (const auto& [c, key] : truth) count[key] = c;
          SimResult::TopCheck t;
          t.node = i;
          t.rule = top.rule;
          t.metric = denied ? "denied" : "tokens";
          t.members_reporting = top.members_reporting;
          t.live = live_;
          t.total = m.total;
          t.exact_total = exact_total;
          t.error_bound = m.error_bound;
          t.k = k;
          std::set<std::string> reported;
          for (const MergedKey& key : m.keys) {
            reported.insert(key.key);
            const uint64_t c = count.count(key.key) ? count[key.key] : 0;
            if (c < key.lower || c > key.upper) ++t.outside;
          }
          const uint64_t next = truth.size() > k ? truth[k].first : 0;  // the (K+1)th
          for (size_t r = 0; r < std::min(k, truth.size()); ++r) {
            if (reported.count(truth[r].second)) {
              ++t.found;
            } else if (truth[r].first > next + m.error_bound) {
              ++t.missed;
            }
          }
          result.top_checks.push_back(std::move(t));
        }
      }
    }
  }

 private:
  enum class Kind : uint8_t { kTick, kDeliver, kCheck, kRelease };
  struct Item {
    int64_t t;
    uint64_t order;  // ties resolved by scheduling order: deterministic
    Kind kind;
    uint32_t node;
    uint64_t epoch;            // kTick, kDeliver: the node's life it was meant for
    GossipMessagePtr message;  // kDeliver
    size_t check = 0;          // kCheck: index into checks_
    LeaseId lease{};           // kRelease: the lease its holder releases (epoch: the node's life)
  };
  static bool later(const Item& a, const Item& b) { return a.t != b.t ? a.t > b.t : a.order > b.order; }

  // What one thread's nodes did in a window that concerns others, each tagged with the event
  // that did it (its time and order), in the order that thread did it. Merging the threads'
  // lists by tag gives the order a single thread would have produced.
  struct Tag {
    int64_t t;
    uint64_t order;
    bool operator<(const Tag& o) const { return t != o.t ? t < o.t : order < o.order; }
  };
  struct Effects {
    std::vector<std::pair<Tag, Item>> scheduled;                             // events for later windows
    std::vector<std::pair<Tag, uint64_t>> sent;                              // a message of this many bytes
    std::vector<std::pair<Tag, std::pair<BatchPtr, uint32_t>>> first_sent;   // a batch its origin (node) sends first
    std::vector<std::pair<Tag, std::pair<const Batch*, uint32_t>>> applied;  // a remote batch charged at a node
    // Relay mode: a batch a node sealed summing other groups' batches (parts)
    std::vector<std::pair<Tag, std::pair<BatchPtr, std::vector<BatchPtr>>>> relays;
    // Keeps the capacity, and nothing alive (messages, batches) past the window.
    void clear() {
      scheduled.clear();
      sent.clear();
      first_sent.clear();
      applied.clear();
      relays.clear();
    }
  };

  class SimOutbox final : public Outbox {
   public:
    SimOutbox(Simulation& sim, size_t index) : sim_(sim), index_(index) {}
    void send(const std::string& address, const GossipMessagePtr& m) override { sim_.send(index_, address, m); }

   private:
    Simulation& sim_;
    size_t index_;
  };
  struct SimNode {
    SimNode(Simulation& sim, size_t index, uint64_t seed)
        : id("node-" + std::to_string(index)),
          address("sim:" + std::to_string(index)),
          outbox(sim, index),
          rng(node_seed(seed, 1, index)),
          net_rng(node_seed(seed, 2, index)) {}
    std::string id, address;
    SimOutbox outbox;
    SplitMix64 rng;      // the node's own choices (gossip peers, first tick)
    SplitMix64 net_rng;  // the network's fate for what this node sends (loss, duplicates, latency)
    std::unique_ptr<Node> node;
    bool up = false;
    uint64_t epoch = 0;  // bumps at every crash/restart: stale events are ignored
    uint64_t incarnation = 0;
    std::pair<uint64_t, uint64_t> last_tracked{0, 0};  // (incarnation, seq) of its newest timed batch
    // Scenario::state_interval_ns: its state "on disk" (tollgated --state-dir), and when written.
    std::optional<NodeState> saved;
    int64_t saved_ns = 0;
    // The event being run at this node, while it runs, and where its effects go.
    Tag running{0, 0};
    Effects* effects = nullptr;
  };
  // A batch on its way to every node: for convergence.
  struct Track {
    int64_t sealed_ns;
    size_t remaining;  // live nodes that have not applied it yet
    BatchPtr batch;    // held, so no other batch can take its address while it is tracked
    // The nodes charged with it so far (its origin first), directly or summed in a relay batch:
    // a second charge at one node is counted (charged_twice). Kept kTrackAfterNs after every
    // node alive at its sealing has it, for late copies: a node retaining it (the ledger's 10 s)
    // can still hand it out in repair.
    std::vector<uint64_t> charged;
    bool finished = false;
    // Marks node `i` charged; false if it already was.
    bool charge(size_t i) {
      uint64_t& w = charged[i / 64];
      const uint64_t bit = uint64_t{1} << (i % 64);
      if (w & bit) return false;
      w |= bit;
      return true;
    }
  };
  static constexpr int64_t kTrackAfterNs = 12 * kNanosPerSecond;
  // Relay mode: a relay batch and the batches it sums, while it may still be applied somewhere.
  struct Relayed {
    int64_t sealed_ns;
    BatchPtr relay;               // held, so its address stays its own
    std::vector<BatchPtr> parts;  // held, likewise
  };
  // A point of the timeline: an event starts or ends.
  struct Moment {
    int64_t t;
    const Event* event;
    bool start;
  };
  struct Check {
    size_t node, key;
    bool allowed = false;
    int64_t hold_ns = 0;  // leases: the holder's work, and whether it never releases
    bool never_release = false;
    std::optional<LeaseId> lease;  // leases: the id the node granted (none: refused or unlimited)
  };

  void schedule(Item item) {
    item.order = order_++;
    heap_.push_back(std::move(item));
    std::push_heap(heap_.begin(), heap_.end(), later);
  }

  void add_node() {
    const size_t i = nodes_.size();
    nodes_.emplace_back(*this, i, s_.seed);
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
    if (n.node) member_failures_ += n.node->membership().stats().failed;  // its previous life's
    NodeOptions o;
    o.id = n.id;
    o.address = n.address;
    o.incarnation = incarnation;
    s_.node.apply_to(o);  // as tollgated applies its flags
    // The key table's hash secret from a stream of its own (3), so that the node's stream (1)
    // is what it was before keys were hashed with a secret: a seed prints what it printed.
    SplitMix64 secret(node_seed(s_.seed, 3, i));
    o.keys.hash_key = std::array<uint64_t, 2>{secret.next_u64(), secret.next_u64()};
    if (s_.node.membership == MembershipKind::kHeartbeat) o.seeds = {nodes_[0].address};
    o.on_applied = [this, i](const Batch& b) {
      SimNode& at = nodes_[i];
      at.effects->applied.emplace_back(at.running, std::pair(&b, uint32_t(i)));
    };
    o.on_relay_sealed = [this, i](const BatchPtr& relay, const std::vector<BatchPtr>& parts) {
      SimNode& at = nodes_[i];
      at.effects->relays.emplace_back(at.running, std::pair(relay, parts));
    };
    n.node = std::make_unique<Node>(o, rules_, n.outbox, n.rng);
    if (s_.node.membership == MembershipKind::kStatic) n.node->set_peers(peers(), now_);
    n.up = true;
    up_[i] = true;
    ++live_;
    n.incarnation = incarnation;
    ++n.epoch;
    schedule(
        {now_ + int64_t(n.rng.below(uint64_t(s_.node.interval_ns))), 0, Kind::kTick, uint32_t(i), n.epoch, nullptr});
  }

  // ---- one window: every event before `end` (the first at `start`), node by node

  void run_window(int64_t start, int64_t end) {
    window_.clear();
    while (!heap_.empty() && heap_.front().t < end) {
      std::pop_heap(heap_.begin(), heap_.end(), later);
      window_.push_back(std::move(heap_.back()));
      heap_.pop_back();
    }
    // The load's arrivals in this window: drawn here, in time order, since which nodes are up
    // changes only between windows. Each is decided by its node along with the node's events.
    checks_.clear();
    arriving_.clear();
    while (arrivals_.peek_time() < end) {
      const Arrival a = arrivals_.next(up_);
      if (a.dropped) continue;
      checks_.push_back({a.node, a.key, false, a.hold_ns, a.never_release, std::nullopt});
      arriving_.push_back({a.t_ns, order_++, Kind::kCheck, uint32_t(a.node), 0, nullptr, checks_.size() - 1});
    }
    if (!arriving_.empty()) {
      const size_t mid = window_.size();
      window_.insert(window_.end(), std::make_move_iterator(arriving_.begin()),
                     std::make_move_iterator(arriving_.end()));
      std::inplace_merge(window_.begin(), window_.begin() + long(mid), window_.end(),
                         [](const Item& a, const Item& b) { return later(b, a); });
    }

    // The events grouped by node, each node's in time order: a node is run by one member.
    by_node_.resize(window_.size());
    for (uint32_t i = 0; i < by_node_.size(); ++i) by_node_[i] = i;
    std::stable_sort(by_node_.begin(), by_node_.end(),
                     [&](uint32_t a, uint32_t b) { return window_[a].node < window_[b].node; });
    runs_.clear();
    for (uint32_t i = 0; i < by_node_.size(); ++i) {
      if (i == 0 || window_[by_node_[i]].node != window_[by_node_[i - 1]].node) runs_.push_back({i, i});
      ++runs_.back().second;
    }
    next_run_.store(0, std::memory_order_relaxed);
    window_end_ = end;
    window_.size() < min_parallel_events_ ? run_member(0) : crew_->run();
    merge_effects(start);
    window_.clear();  // its checks are recorded: a merge between windows (a stop) must not again
  }

  // Crew member `m` claims nodes of the window a few at a time and runs their events: a member
  // that finishes early takes more, so a window ends when its work does, however it was spread.
  void run_member(unsigned m) {
    constexpr size_t kRunsPerClaim = 4;
    Effects& fx = effects_[m];
    for (;;) {
      const size_t first = next_run_.fetch_add(kRunsPerClaim, std::memory_order_relaxed);
      if (first >= runs_.size()) return;
      // The claimed runs are contiguous in by_node_: their events, in order, are [from, to).
      const uint32_t from = runs_[first].first;
      const uint32_t to = runs_[std::min(first + kRunsPerClaim, runs_.size()) - 1].second;
      for (uint32_t i = from; i < to; ++i) {
        // The next event's message is prefetched (Node::prefetch): a thousand nodes' tables fit
        // in no cache, and its loads then overlap this event's work. (Within the claim: the
        // event after it may be another member's.)
        if (i + 1 < to) prefetch_event(window_[by_node_[i + 1]]);
        run_event(window_[by_node_[i]], fx);
      }
    }
  }

  void prefetch_event(const Item& it) const {
    const SimNode& n = nodes_[it.node];
    if (it.kind == Kind::kDeliver && n.up && n.epoch == it.epoch) n.node->prefetch(*it.message);
  }

  void run_event(Item& it, Effects& fx) {
    SimNode& n = nodes_[it.node];
    n.running = {it.t, it.order};
    n.effects = &fx;
    switch (it.kind) {
      case Kind::kTick:
        if (!n.up || n.epoch != it.epoch) break;
        n.node->tick(it.t);
        if (s_.state_interval_ns > 0 && it.t - n.saved_ns >= s_.state_interval_ns) save_state(n, it.t);
        fx.scheduled.emplace_back(n.running,
                                  Item{it.t + s_.node.interval_ns, 0, Kind::kTick, it.node, it.epoch, nullptr});
        break;
      case Kind::kDeliver:
        if (!n.up || n.epoch != it.epoch) break;  // crashed (or restarted) since it was sent
        n.node->receive(*it.message, it.t);       // counts convergence through on_applied
        it.message.reset();                       // on this thread, while it is still warm
        break;
      case Kind::kCheck: {  // the arrival stream offers checks to live nodes only
        Check& c = checks_[it.check];
        if (leases_) {
          const LeaseGrant g = n.node->acquire(arrivals_.keys()[c.key], s_.load.cost, 0, it.t);
          c.allowed = g.granted();
          if (g.outcome == LeaseOutcome::kGranted) c.lease = g.id;
        } else {
          c.allowed = n.node->check(arrivals_.keys()[c.key], s_.load.cost, it.t).allowed;
        }
        break;
      }
      case Kind::kRelease:
        if (n.up && n.epoch == it.epoch) n.node->release(it.lease);
        break;
    }
  }

  // Node `from` sends `m` (its Outbox): runs on the thread running that node.
  void send(size_t from, const std::string& address, const GossipMessagePtr& m) {
    SimNode& src = nodes_[from];
    Effects& fx = *src.effects;
    const int64_t now = src.running.t;
    fx.sent.emplace_back(src.running, estimated_bytes(*m));
    // A batch its origin sends for the first time: start timing its spread. Seqs grow within a
    // life: a batch newer than the last one tracked is sent for the first time.
    for (const BatchPtr& b : m->batches) {
      if (b->origin != src.id || std::pair(b->incarnation, b->seq) <= src.last_tracked) continue;
      src.last_tracked = {b->incarnation, b->seq};
      // Not top-K units: soft state, which the next publication supersedes (a relay contact's
      // mates cannot tell one lost on the second hop, docs/design.md 7.8); their accuracy is
      // Scenario::top_check's.
      if (b->top) continue;
      fx.first_sent.emplace_back(src.running, std::pair(b, uint32_t(from)));
    }
    // Addresses are "sim:N": read N rather than hashing the string (millions of sends per run).
    size_t to = 0;
    const auto [end, ec] = std::from_chars(address.data() + 4, address.data() + address.size(), to);
    if (address.compare(0, 4, "sim:") != 0 || ec != std::errc() || end != address.data() + address.size() ||
        to >= nodes_.size()) {
      return;
    }
    if (side_[from] != side_[to]) return;
    if (uniform01(src.net_rng) < loss_) return;
    const int copies = uniform01(src.net_rng) < s_.network.duplicate ? 2 : 1;
    for (int c = 0; c < copies; ++c) {
      const int64_t span = s_.network.latency_max_ns - s_.network.latency_min_ns;
      const int64_t latency =
          s_.network.latency_min_ns + (span > 0 ? int64_t(src.net_rng.below(uint64_t(span) + 1)) : 0);
      fx.scheduled.emplace_back(src.running, Item{now + latency, 0, Kind::kDeliver, uint32_t(to), nodes_[to].epoch, m});
    }
  }

  // The members' effects, merged into the order of their tags: the order of a single thread
  // running the window's events in time order. A tag's effects all come from one member, in
  // order: stable sorting keeps them so.
  template <typename T>
  std::vector<std::pair<Tag, T>>& merged(std::vector<std::pair<Tag, T>> Effects::*list) {
    std::vector<std::pair<Tag, T>>& out = effects_[0].*list;
    for (size_t m = 1; m < effects_.size(); ++m) {
      auto& more = effects_[m].*list;
      out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
      more.clear();
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
  }

  void merge_effects(int64_t start) {
    // Applied before first sent: a batch sealed in this window cannot have arrived anywhere yet.
    // (This order also keeps the raw pointers of `applied` unambiguous: every batch applied in
    // the window was alive alongside every batch tracked at its start, so none shares an
    // address with a tracked one; new tracks come after.)
    auto reached = [&](std::unordered_map<const Batch*, Track>::iterator t, size_t node, int64_t at) {
      if (!t->second.charge(node)) {
        ++charged_twice_;
        return;
      }
      if (!t->second.finished && --t->second.remaining == 0) finish(t, at);
    };
    for (const auto& [tag, applied] : merged(&Effects::applied)) {
      const auto [batch, node] = applied;
      auto t = tracks_.find(batch);
      if (t != tracks_.end()) {
        reached(t, node, tag.t);
        continue;
      }
      // Relay mode: a batch summing other groups' batches reaches them at this node.
      auto r = relays_.find(batch);
      if (r == relays_.end()) continue;
      for (const BatchPtr& part : r->second.parts) {
        if (auto pt = tracks_.find(part.get()); pt != tracks_.end()) reached(pt, node, tag.t);
      }
    }
    for (auto& [tag, relay] : merged(&Effects::relays)) {
      const Batch* key = relay.first.get();
      relays_[key] = Relayed{tag.t, std::move(relay.first), std::move(relay.second)};
    }
    for (auto& [tag, sent] : merged(&Effects::first_sent)) {
      const Batch* key = sent.first.get();
      auto [t, fresh] = tracks_.emplace(key, Track{tag.t, live_ - 1, std::move(sent.first), {}});
      if (!fresh) continue;
      t->second.charged.assign((nodes_.size() + 63) / 64, 0);
      t->second.charge(sent.second);
      if (t->second.remaining == 0) finish(t, tag.t);
    }
    for (const auto& [tag, bytes] : merged(&Effects::sent)) recorder_.sent(tag.t, 1, bytes);
    for (auto& [tag, item] : merged(&Effects::scheduled)) schedule(std::move(item));
    effects_[0].clear();
    // The load's decisions, in arrival order (the oracle needs it).
    for (const Item& it : window_) {
      if (it.kind != Kind::kCheck) continue;
      const Check& c = checks_[it.check];
      if (!leases_) {
        recorder_.check(it.t, arrivals_.keys()[c.key], s_.load.cost, side_[c.node], c.allowed);
        continue;
      }
      recorder_.lease(it.t, arrivals_.keys()[c.key], s_.load.cost, c.node, side_[c.node], c.allowed, c.hold_ns);
      // Its holder releases it when its work is done (no sooner than this window's end: the
      // next window is the earliest an event can be scheduled in), in the same life of its node.
      if (c.lease && !c.never_release) {
        Item release{std::max(it.t + c.hold_ns, window_end_),
                     0,
                     Kind::kRelease,
                     uint32_t(c.node),
                     nodes_[c.node].epoch,
                     nullptr};
        release.lease = *c.lease;
        schedule(std::move(release));
      }
    }
    if (start >= next_track_sweep_ns_) {  // batches that never reach everyone (a crash, a partition)
      next_track_sweep_ns_ = start + kNanosPerSecond;
      // As long as a batch is tracked: a relay batch can be repaired from node to node, each
      // retaining it 10 s from when it applied it.
      std::erase_if(relays_, [&](const auto& kv) { return kv.second.sealed_ns < start - 30 * kNanosPerSecond; });
      std::erase_if(tracks_, [&](const auto& kv) {
        if (kv.second.finished) return kv.second.sealed_ns < start - kTrackAfterNs;
        const bool stale = kv.second.sealed_ns < start - 30 * kNanosPerSecond;
        if (stale) recorder_.unconverged();
        return stale;
      });
    }
  }

  void finish(std::unordered_map<const Batch*, Track>::iterator t, int64_t at) {
    recorder_.converged(t->second.sealed_ns, at - t->second.sealed_ns);
    t->second.finished = true;
  }

  // ---- the timeline, between windows

  void save_state(SimNode& n, int64_t now) {
    n.saved = n.node->export_state(now);
    n.saved_ns = now;
  }

  // A stop (SIGTERM), as tollgated's: the node sends what it admitted and announces that it leaves,
  // then writes its state. Run between windows as if it were one of the node's events.
  void stop_node(size_t i) {
    SimNode& n = nodes_[i];
    Effects& fx = effects_[0];
    n.running = {now_, order_++};
    n.effects = &fx;
    n.node->leave(now_);
    if (s_.state_interval_ns > 0) save_state(n, now_);
    merge_effects(now_);
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
      case Event::Kind::kLoss:
        loss_ = e.loss;
        break;
      case Event::Kind::kCrash:
        if (e.node < nodes_.size() && nodes_[e.node].up) {
          if (e.graceful) stop_node(e.node);
          recorder_.node_down(now_, e.node);  // its holders (the host's service) stop too
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
        if (s_.node.membership == MembershipKind::kStatic) {  // the operator adds them to the peers file
          for (SimNode& n : nodes_) {
            if (n.up) n.node->set_peers(peers(), now_);
          }
        }
        break;
    }
  }

  void event_end(const Event& e) {
    switch (e.kind) {
      case Event::Kind::kPartition:
        std::fill(side_.begin(), side_.end(), 0);
        break;
      case Event::Kind::kLoss:
        loss_ = s_.network.loss;
        break;
      case Event::Kind::kCrash:
        if (e.node < nodes_.size() && !nodes_[e.node].up) {
          SimNode& n = nodes_[e.node];
          start_node(e.node, n.incarnation + 1);
          // What the daemon reads from its state file: the balances with the refill of the time
          // since they were written (a crash loses what came after the last write).
          if (n.saved) n.node->import_state(*n.saved, now_, now_ - n.saved_ns);
        }
        break;
      case Event::Kind::kJoin:
        break;
    }
  }

  // Leases: every 100 ms, what the live nodes count for each key, their mean.
  void lease_sample() {
    const int64_t t = next_lease_sample_ns_;
    next_lease_sample_ns_ += 100 * kNanosPerMilli;
    recorder_.lease_sample(t, [&](std::string_view key) {
      double sum = 0;
      for (const SimNode& n : nodes_) {
        if (n.up) sum += double(n.node->leases().in_flight(key));
      }
      return live_ ? sum / double(live_) : 0.0;
    });
  }

  const Scenario& s_;
  const bool leases_ = s_.load.kind == LoadSpec::Kind::kLeases;
  int64_t next_lease_sample_ns_ = 0;
  int64_t window_end_ = 0;
  std::shared_ptr<const RuleSet> rules_;
  Recorder recorder_;
  ArrivalStream arrivals_;
  std::deque<SimNode> nodes_;  // a deque: nodes hold references to their outbox and rngs
  std::vector<size_t> side_;   // partition side of each node (0 when none)
  double loss_ = 0;
  std::vector<bool> up_;    // nodes_[i].up, as the arrival stream takes it
  std::vector<Item> heap_;  // future events, a min-heap by (t, order)
  uint64_t order_ = 0;
  int64_t now_ = 0;  // time of the timeline event being run
  size_t live_ = 0;  // nodes up
  int64_t lookahead_ = 1;
  size_t min_parallel_events_;
  std::vector<Moment> timeline_;
  std::unordered_map<const Batch*, Track> tracks_;
  std::unordered_map<const Batch*, Relayed> relays_;
  int64_t next_track_sweep_ns_ = 0;
  uint64_t charged_twice_ = 0;    // SimResult::charged_twice
  uint64_t member_failures_ = 0;  // of lives that have ended (see SimResult::member_failures)
  // The window being run.
  std::vector<Item> window_, arriving_;
  std::vector<Check> checks_;
  std::vector<uint32_t> by_node_;                    // indices into window_, grouped by node
  std::vector<std::pair<uint32_t, uint32_t>> runs_;  // one node's events: [first, end) of by_node_
  std::atomic<size_t> next_run_{0};                  // the next run a crew member may claim
  std::vector<Effects> effects_;                     // one per crew member
  std::unique_ptr<Crew> crew_;                       // last: its threads stop before the rest is destroyed
};

}  // namespace

SimResult run_virtual(const Scenario& scenario, std::shared_ptr<const RuleSet> rules, const VirtualOptions& options) {
  return Simulation(scenario, std::move(rules), options).run();
}

}  // namespace tollgate::sim
