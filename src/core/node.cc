#include "core/node.h"

#include "core/node_repair.h"
#include "core/node_sync.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>

#include "tollgate/rules.h"

namespace tollgate {

namespace {
// Sealing without split_for_sealing (the simulator): runs of at most this many entries.
constexpr size_t kMaxBatchEntries = 32;
// Gossip: batches held for retransmission at most; the oldest go first (push-pull repairs them).
constexpr size_t kMaxQueuedBatches = 4096;
// Idle keys examined per round by the table's sweep.
constexpr size_t kSweepPerRound = 256;
// Relay: rows of other groups' senders held for our group at most between two rows rounds.
constexpr size_t kMaxRelayRows = 4096;
}  // namespace

const char* dissemination_mode_name(DisseminationMode m) {
  switch (m) {
    case DisseminationMode::kMesh:
      return "mesh";
    case DisseminationMode::kGossip:
      return "gossip";
    case DisseminationMode::kRelay:
      return "relay";
    case DisseminationMode::kAuto:
      return "auto";
  }
  return "?";
}

uint32_t relay_groups_for(size_t members) {
  uint32_t g = 1;
  while (2 * uint64_t(g) * g < members && g < (1u << 20)) g *= 2;
  return g;
}

uint32_t relay_group_of(std::string_view id, uint32_t groups) {
  if (groups <= 1) return 0;
  // libstdc++'s hash of a string (murmur2 with a fixed seed) is the same in every process;
  // SplitMix64's finalizer spreads it over all 64 bits before the modulus.
  return uint32_t(SplitMix64(std::hash<std::string_view>{}(origin_node(id))).next_u64() % groups);
}

// Relay: who our group is, and whom we send to in each other group, for one live() and group
// count. A contact is chosen by rendezvous hashing (the highest score of our id with its id), so
// each member of a group is the contact of about as many senders as the others, and a member's
// failure or arrival moves only the senders whose contact it was or becomes.
struct Node::RelayPlan {
  uint64_t live_version = ~uint64_t{0};
  uint32_t groups = 0;
  uint32_t group = 0;
  std::vector<const MemberInfo*> mates;     // our group's members, but dead or departed ones
  std::vector<const MemberInfo*> contacts;  // by group: our contact (null: none, or ours)
};

const char* partition_policy_name(PartitionPolicy p) { return p == PartitionPolicy::kOpen ? "open" : "proportional"; }

// The key table's options as the node runs it: a table whose checks only ask for early sealing
// (concurrent) keeps evicted keys' consumption for twice the early sealing threshold at least,
// so that a flood is sealed long before any would be dropped (KeyTableStats::pending_dropped).
// Keys are hashed with the options' secret or, without one, a secret drawn from `random` (the
// simulator's seed reproduces it; a host passes the operating system's randomness in).
KeyTableOptions Node::table_options(const NodeOptions& o, Random& random) {
  KeyTableOptions keys = o.keys;
  if (!keys.hash_key) keys.hash_key = std::array<uint64_t, 2>{random.next_u64(), random.next_u64()};
  if (keys.concurrent) keys.min_pending_evicted = std::max(keys.min_pending_evicted, 2 * o.early_seal_keys);
  return keys;
}

namespace {

// (Neither draws from the node's Random: its stream, and so every simulation, stays as it was.)
uint64_t node_seed(const NodeOptions& o) {
  return std::hash<std::string>{}(o.id) ^ (o.incarnation * 0x9E3779B97F4A7C15ull);
}

// The lease table's secret: the options', else the key table's (the daemon sets it from the
// operating system), else one from the node's id (tests and the simulator).
LeaseTableOptions lease_options(const NodeOptions& o) {
  LeaseTableOptions l = o.leases;
  if (!l.hash_key && o.keys.hash_key)
    l.hash_key = std::array<uint64_t, 2>{(*o.keys.hash_key)[1], (*o.keys.hash_key)[0]};
  if (!l.hash_key) l.hash_key = std::array<uint64_t, 2>{node_seed(o), ~node_seed(o)};
  return l;
}

// Without a source of the host's, ids from a stream seeded by the node's id: reproducible (the
// simulator, tests), and guessable by whoever knows the seed, so never the daemon's.
LeaseTable::IdSource lease_ids(const NodeOptions& o) {
  if (o.lease_ids) return o.lease_ids;
  struct Stream {
    explicit Stream(uint64_t seed) : random(seed) {}
    std::mutex mu;
    SplitMix64 random;
  };
  auto stream = std::make_shared<Stream>(node_seed(o) * 0xBF58476D1CE4E5B9ull);
  return [stream](uint8_t* out, size_t n) {
    std::lock_guard lock(stream->mu);
    for (size_t i = 0; i < n; i += 8) {
      const uint64_t r = stream->random.next_u64();
      std::memcpy(out + i, &r, std::min<size_t>(8, n - i));
    }
  };
}

// A batch of counts stays well inside a datagram: its entries' keys and numbers, and a refresh's
// range, within this many bytes (keys are at most 256).
constexpr size_t kCountsBatchBytes = 600;
constexpr size_t kLeaseExpiriesPerRound = 4096;

}  // namespace

Node::Node(NodeOptions options, std::shared_ptr<const RuleSet> rules, Outbox& outbox, Random& random)
    : options_(std::move(options)),
      outbox_(outbox),
      random_(random),
      table_(rules, table_options(options_, random)),
      ledger_(options_.id, options_.incarnation, options_.ledger),
      membership_(options_.id, options_.address, options_.incarnation, options_.membership),
      leases_(lease_options(options_), lease_ids(options_)),
      inflight_(options_.id, options_.max_lease_rows, 2 * options_.ledger.retention_ns),
      plan_(std::make_unique<RelayPlan>()),
      mode_(options_.mode == DisseminationMode::kAuto ? DisseminationMode::kGossip : options_.mode) {
  tops_ = RuleTops(options_.top);
  label_rules();
  repair_ = std::make_unique<Repair>();
  leases_.set_rules(std::move(rules));
  update_groups();
  stats_.regroupings = 0;  // (the first count is not a change)
  sync_ = std::make_unique<Sync>();
  sync_->random = SplitMix64(node_seed(options_));
  // Heartbeat membership without a seed other than us: the first member, with no one to ask.
  // (Static membership knows once the peers are set: set_peers.)
  const bool alone = membership_.kind() == MembershipKind::kHeartbeat &&
                     std::all_of(options_.seeds.begin(), options_.seeds.end(),
                                 [&](const std::string& seed) { return seed == options_.address; });
  if (options_.sync_deadline_ns > 0 && !alone) {
    sync_->asking = true;
    syncing_.flag.store(true, std::memory_order_relaxed);
  }
}

void Node::update_groups(uint32_t offered) {
  // (Runs for every message received: cheap unless something changes.)
  const size_t known = membership_.known();
  DisseminationMode mode = mode_;
  uint32_t groups = mode_ == DisseminationMode::kRelay ? groups_ : 0;
  // The counts of groups a relaying member accepts for `known` members: the least (the smallest
  // power of two g with 2g^2 >= known), and twice that while known is above 3/4 of where the
  // least would have been twice as many (so a cluster that shrinks keeps its count until it has
  // lost a quarter of that size: no flapping at the boundary).
  const uint32_t least = relay_groups_for(known);
  const uint32_t most = uint64_t(known) * 4 > 3 * 2 * uint64_t(least) * least ? 2 * least : least;
  const bool offered_fits = offered >= least && offered <= most;
  if (options_.mode == DisseminationMode::kAuto) {
    // Relay from auto_relay_members known members, gossip below 3/4 of that; in between, the
    // mode we are in, or relay as soon as a relaying member we could agree with is heard from.
    const uint64_t from = options_.auto_relay_members;
    if (known >= from) {
      mode = DisseminationMode::kRelay;
    } else if (uint64_t(known) * 4 < 3 * from) {
      mode = DisseminationMode::kGossip;
    } else if (offered_fits) {
      mode = DisseminationMode::kRelay;
    }
  }
  if (mode == DisseminationMode::kRelay) {
    if (options_.relay_groups > 0) {
      groups = options_.relay_groups;
    } else {
      // The count we have while it is acceptable; otherwise the nearest acceptable one; and a
      // greater acceptable count as soon as a member using it is heard from. Every member ends
      // at the greatest count any of them uses, so members that came to the band from different
      // sides (a restart while the others shrink) agree within a round or two.
      groups = std::clamp(groups, least, most);
      if (offered_fits && offered > groups) groups = offered;
    }
  } else {
    groups = 0;
  }
  if (mode == mode_ && groups == groups_) return;
  if (mode_ == DisseminationMode::kRelay || mode == DisseminationMode::kRelay) {
    // What we hold was routed under the old groups (or mode): where groups merge, one node holds
    // an origin's batch that another holds summed in a relay batch, and gossip would repair
    // every origin's batches to anyone. Relaying or repairing any of it under the new routing
    // could charge it twice, so none of it goes out again (a loss, the safe side; docs/design.md
    // 7.7). Gossip's queue goes too: its batches would reach relaying members and be dropped.
    relay_parts_.clear();
    previous_fresh_.clear();
    queue_.clear();
    forget_repairs();
    ledger_.start_epoch();
    ++stats_.regroupings;
  }
  mode_ = mode;
  groups_ = groups;
  our_group_ = relay_group_of(options_.id, groups_);
}

Node::~Node() = default;

Decision Node::check(std::string_view key, int64_t cost, MonoNanos now) {
  if (syncing()) [[unlikely]] {
    if (std::optional<Decision> denied = deny_while_syncing(key)) return *denied;
  }
  const Decision d = table_.allow(key, cost, now);
  after_check(now);
  return d;
}

bool Node::check_all(std::span<const CheckItem> items, std::span<Decision> out, MonoNanos now) {
  if (syncing()) [[unlikely]] {
    // All or nothing: one check denied while syncing denies the others, uncharged.
    bool any = false;
    for (size_t i = 0; i < items.size(); ++i) {
      std::optional<Decision> denied = deny_while_syncing(items[i].key);
      if (denied) {
        out[i] = *denied;
        any = true;
      } else {
        out[i] = Decision{};
        out[i].reason = DenyReason::kOtherCheckDenied;
      }
    }
    if (any) return false;
  }
  const bool all = table_.allow_all(items, out, now);
  after_check(now);
  return all;
}

Decision Node::refund(std::string_view key, int64_t tokens, MonoNanos now) {
  const Decision d = table_.refund(key, tokens, now);
  after_check(now);
  return d;
}

void Node::after_check(MonoNanos now) {
  if (options_.early_seal_keys == 0 || table_.pending_keys() < options_.early_seal_keys) return;
  if (!options_.keys.concurrent) {
    seal(now, options_.early_seal_keys);  // see NodeOptions::early_seal_keys
    ++stats_.early_seals;
  } else if (options_.seal_wanted && !seal_wanted_.flag.load(std::memory_order_relaxed) &&
             !seal_wanted_.flag.exchange(true)) {
    options_.seal_wanted();  // once until the owner seals (seal_early)
  }
}

void Node::seal_early(MonoNanos now) {
  seal_wanted_.flag.store(false);
  if (options_.early_seal_keys == 0) return;
  // What was pending when asked, early_seal_keys at a time, and no more: checks that keep
  // dirtying keys meanwhile ask again, and must not keep the owner from its rounds.
  const size_t steps = table_.pending_keys() / options_.early_seal_keys;
  for (size_t i = 0; i < steps; ++i) {
    seal(now, options_.early_seal_keys);
    ++stats_.early_seals;
  }
}

NodeStats Node::stats() const {
  NodeStats s = stats_;
  const CheckCounts c = table_.check_counts();
  s.checks = c.checks;
  s.allowed = c.allowed;
  s.denied = c.denied;
  s.sync_denied = syncing_.denied.load(std::memory_order_relaxed);
  s.top_rules_refused = tops_.rules_refused();
  s.top_denials_unharvested = table_.denials_unharvested();
  s.checks += s.sync_denied;
  s.denied += s.sync_denied;
  return s;
}

void Node::seal(MonoNanos now, size_t max_keys) {
  if (!resets_to_seal_.empty()) {
    // Resets made here go first, in batches of their own, so that a node applies them before any
    // consumption sealed after them.
    for (std::vector<ResetMark>& run : split_resets(std::move(resets_to_seal_))) {
      if (BatchPtr b = ledger_.seal({}, now, std::move(run))) keep_sealed(std::move(b), now);
    }
    resets_to_seal_.clear();
  }
  pending_.clear();
  activity_.clear();
  table_.take_pending(pending_, max_keys, tops_.enabled() ? &activity_ : nullptr);
  if (tops_.enabled()) count_tops(now);
  if (pending_.empty()) return;
  tag_epochs(pending_);
  if (options_.split_for_sealing) {
    for (auto& run : options_.split_for_sealing(std::move(pending_))) {
      if (BatchPtr b = ledger_.seal(std::move(run), now)) keep_sealed(std::move(b), now);
    }
    return;
  }
  for (size_t i = 0; i < pending_.size(); i += kMaxBatchEntries) {
    const size_t end = std::min(pending_.size(), i + kMaxBatchEntries);
    std::vector<ConsumptionEntry> run(std::make_move_iterator(pending_.begin() + long(i)),
                                      std::make_move_iterator(pending_.begin() + long(end)));
    if (BatchPtr b = ledger_.seal(std::move(run), now)) keep_sealed(std::move(b), now);
  }
}

void Node::count_tops(MonoNanos now) {
  tops_.advance(now);
  const RuleSet& rules = table_.rules();
  for (size_t i = 0; i < pending_.size(); ++i) {
    const ConsumptionEntry& e = pending_[i];
    uint32_t rule = activity_[i].rule;
    if (rule == RuleSet::kUnlimited) rule = rules.match(e.key);  // it left the table meanwhile
    if (rule >= top_labels_.size()) continue;                    // no longer limited
    tops_.add(top_labels_[rule], TopMetric::kDenied, e.key, activity_[i].denied);
    if (e.tokens > 0) tops_.add(top_labels_[rule], TopMetric::kTokens, e.key, uint64_t(e.tokens));
  }
  std::erase_if(pending_, [](const ConsumptionEntry& e) { return e.tokens == 0; });  // denials only
}

namespace {

// A unit's bytes on the wire, about: its header and each key with its two numbers.
size_t top_unit_bytes(const TopUnit& u) {
  size_t b = u.rule.size() + 32;
  for (const TopEntry& e : u.entries) b += e.key.size() + 24;
  return b;
}

// A unit stays well inside a datagram, as a batch of lease counts does (kCountsBatchBytes).
constexpr size_t kTopUnitBytes = 600;
constexpr size_t kMaxKeyBytesOfRule = 256;  // a rule's label, as the codec takes it

}  // namespace

void Node::publish_tops(MonoNanos now) {
  if (!tops_.enabled() || options_.top_gossip_bytes == 0 || now < next_top_publish_ns_) return;
  std::vector<TopUnit> units;
  size_t bytes = 0;
  for (const std::string& rule : tops_.rules()) {
    if (rule.size() > kMaxKeyBytesOfRule) continue;  // (a label the codec would refuse)
    for (const TopMetric metric : {TopMetric::kDenied, TopMetric::kTokens}) {
      std::optional<PublishedTop> p = tops_.published(rule, metric, options_.top_publish_keys);
      if (!p) continue;
      TopUnit u{rule, uint32_t(metric), p->total, p->threshold, 0, std::move(p->entries)};
      // Fewer keys when they would not fit: a key left out weighs at most the last one kept
      // (counts do not increase), so the threshold rises to it and the bound still holds.
      while (u.entries.size() > 1 && top_unit_bytes(u) > kTopUnitBytes) {
        u.threshold = std::max(u.threshold, u.entries.back().count);
        u.entries.pop_back();
      }
      if (top_unit_bytes(u) > kTopUnitBytes) {  // one key too long for a datagram: none, all bounded by the total
        u.entries.clear();
        u.threshold = std::max(u.threshold, p->total);
      }
      bytes += top_unit_bytes(u);
      units.push_back(std::move(u));
    }
  }
  // The next publication when what this one costs, every copy counted, has spent the budget.
  const uint64_t copies = mode_ == DisseminationMode::kGossip ? retransmits() : 1;
  const double seconds =
      double(copies) * double(std::max<size_t>(live_members_, 1)) * double(bytes) / double(options_.top_gossip_bytes);
  const MonoNanos period = std::clamp<MonoNanos>(MonoNanos(seconds * double(kNanosPerSecond)), kNanosPerSecond,
                                                 std::max<MonoNanos>(options_.top.window_ns, kNanosPerSecond));
  next_top_publish_ns_ = now + period;
  const uint32_t ttl_ms = uint32_t(std::min<MonoNanos>(3 * period / 1'000'000, UINT32_MAX));
  for (TopUnit& u : units) {
    u.ttl_ms = ttl_ms;
    if (BatchPtr b = ledger_.seal_top(std::move(u), now)) {
      keep_sealed(std::move(b), now);
      ++stats_.top_units_sealed;
    }
  }
}

size_t Node::top_memory_bound(const NodeOptions& o) {
  if (o.top.capacity == 0) return 0;
  // A held unit: its map node and slot string, and the unit: per key (1 + 24 bytes or more on
  // the wire) a TopEntry and a heap block of its key.
  constexpr size_t kKeys = kMaxHeldTopUnitBytes / 25;
  const size_t unit = 256 + sizeof(HeldTop) + sizeof(TopUnit) + 2 * kMaxKeyBytesOfRule +
                      kKeys * (sizeof(TopEntry) + 32) + kMaxHeldTopUnitBytes;
  return RuleTops::bound_bytes(o.top, o.keys.max_key_bytes) + kMaxHeldTopUnits * unit;
}

size_t Node::lease_memory_bound(const NodeOptions& o) {
  return LeaseTable::bound_bytes(o.leases, o.max_lease_rows) +
         InflightView::bound_bytes(o.max_lease_rows, o.leases.max_key_bytes, o.ledger.max_origins);
}

void Node::top_unit(const Batch& batch, MonoNanos now) {
  if (batch.origin == options_.id || !tops_.enabled()) return;
  const TopUnit& u = *batch.top;
  if (top_unit_bytes(u) > kMaxHeldTopUnitBytes) {  // (over TCP a frame could carry 100 KB of one)
    ++stats_.top_units_dropped;
    return;
  }
  std::string slot = u.rule;
  slot.push_back(char(u.metric));
  auto& held = peer_tops_[batch.origin];
  auto it = held.find(slot);
  if (it == held.end()) {
    if (stats_.top_units_held >= kMaxHeldTopUnits) {
      ++stats_.top_units_dropped;
      if (held.empty()) peer_tops_.erase(batch.origin);
      return;
    }
    it = held.emplace(std::move(slot), HeldTop{}).first;
    ++stats_.top_units_held;
  } else if (std::tie(batch.incarnation, batch.seq) <= std::tie(it->second.incarnation, it->second.seq)) {
    return;  // older than the one held (a repair, or another path, brought it late)
  }
  it->second = HeldTop{batch.incarnation, batch.seq, batch.top, now + MonoNanos(u.ttl_ms) * 1'000'000};
}

void Node::expire_tops(MonoNanos now) {
  if (now < next_top_expiry_ns_) return;
  next_top_expiry_ns_ = now + kNanosPerSecond;
  for (auto origin = peer_tops_.begin(); origin != peer_tops_.end();) {
    const bool known = membership_.find(origin->first) != nullptr;
    auto& held = origin->second;
    for (auto it = held.begin(); it != held.end();) {
      if (!known || it->second.expires <= now) {
        it = held.erase(it);
        --stats_.top_units_held;
      } else {
        ++it;
      }
    }
    origin = held.empty() ? peer_tops_.erase(origin) : std::next(origin);
  }
}

std::vector<TopParts> Node::top_parts(std::string_view rule, MonoNanos now) const {
  std::map<std::string, TopParts, std::less<>> by_rule;
  auto wanted = [&](std::string_view r) { return rule.empty() || r == rule; };
  for (const std::string& r : tops_.rules()) {
    if (!wanted(r)) continue;
    TopParts& p = by_rule[r];
    ++p.members;
    for (size_t m = 0; m < kTopMetrics; ++m) {
      // All it holds: our own summary is here in full, and a wider one only narrows the bounds.
      if (auto own = tops_.published(r, TopMetric(m), options_.top.capacity)) p.own[m].push_back(std::move(*own));
    }
  }
  for (const auto& [origin, held] : peer_tops_) {
    const MemberInfo* member = membership_.find(origin);
    if (member == nullptr || (member->state != MemberState::kAlive && member->state != MemberState::kSuspect)) continue;
    std::set<std::string_view> counted;  // rules this member reports (once each)
    for (const auto& [slot, h] : held) {
      if (h.expires <= now || !wanted(h.unit->rule)) continue;
      TopParts& p = by_rule[h.unit->rule];
      if (counted.insert(h.unit->rule).second) ++p.members;
      p.units.push_back(h.unit);
    }
  }
  std::vector<TopParts> out;
  out.reserve(by_rule.size());
  for (auto& [r, p] : by_rule) {
    p.rule = r;
    p.rls = table_.rules().rls();
    out.push_back(std::move(p));
  }
  return out;
}

void Node::label_rules() {
  const RuleSet& rules = table_.rules();
  top_labels_.clear();
  if (!tops_.enabled()) return;
  top_labels_.reserve(rules.size());
  for (uint32_t i = 0; i < rules.size(); ++i) top_labels_.push_back(rules.label(i));
}

void Node::keep_sealed(BatchPtr b, MonoNanos now) {
  // Gossip queues a batch as soon as it is sealed, not in the round: under a key flood the
  // retransmit queue pushes out (and frees) as many old batches as are sealed, and doing that
  // for a whole round's 350 batches at once made every round a 0.3 ms stop of the daemon's
  // thread. The round sends the queue's newest batches either way.
  if (mode_ == DisseminationMode::kGossip) enqueue(b, now);
  sealed_.push_back(std::move(b));
}

uint32_t Node::retransmits() const {
  // ceil(log10(n + 1)) for the n members including us, as memberlist scales its transmit limit.
  uint32_t digits = 1;
  for (uint64_t n = live_members_ + 1; n >= 10; n /= 10) ++digits;
  return std::max<uint32_t>(1, options_.retransmit_mult * digits);
}

void Node::enqueue(const BatchPtr& b, MonoNanos now) {
  if (queue_.size() >= kMaxQueuedBatches) {
    queue_.pop_front();
    ++stats_.queue_overflow;
  }
  queue_.push_back({b, retransmits(), now});
}

std::shared_ptr<GossipMessage> Node::message(std::vector<BatchPtr> batches, size_t rows) {
  auto m = std::make_shared<GossipMessage>();
  m->sender = options_.id;
  m->sender_incarnation = options_.incarnation;
  m->sender_address = options_.address;
  if (message_seq_ < kMaxMessageSeq) ++message_seq_;
  m->message_seq = message_seq_;
  m->batches = std::move(batches);
  if (rows == 0) {
    m->members = membership_.rows_for_message();
  } else if (rows != kNoRows) {
    m->members = membership_.rows_for_message(rows);
  }
  if (mode_ == DisseminationMode::kRelay) m->relay_groups = groups_;
  return m;
}

Digest Node::digest() const {
  if (mode_ != DisseminationMode::kRelay) return ledger_.digest();
  return ledger_.digest([this](const NodeId& origin) { return in_our_group(origin); });
}

void Node::ask_for_digest_reply(GossipMessage& m) const {
  m.digest = digest();
  m.digest_reply_wanted = true;
}

void Node::send(const std::string& address, const GossipMessagePtr& m) {
  ++stats_.messages_sent;
  stats_.batches_sent += m->batches.size();
  outbox_.send(address, m);
}

void Node::tick(MonoNanos now) {
  ++stats_.rounds;
  advance_membership(now);
  std::vector<BatchPtr> fresh = seal_round(now);
  const std::vector<const MemberInfo*>& live = membership_.live();
  live_members_ = live.size();  // sizes the retransmit budget until the next round
  disseminate(live, std::move(fresh), now);
  push_pull(live, now);
  if (mode_ == DisseminationMode::kRelay) ask_for_repairs(now);
  probe(now);
  sync_round(now);
  first_round_ = false;
  housekeeping(now);
}

void Node::advance_membership(MonoNanos now) {
  std::vector<NodeId> forgotten, confirm;
  membership_.tick(now, &forgotten, &confirm);
  update_groups();
  if (!confirm.empty()) confirm_members(confirm);
  // Membership forgets only after forget_after, which is configured above the ledger's retention
  // plus dissemination time, so forgetting the windows cannot let an old batch in twice.
  for (const NodeId& id : forgotten) {
    ledger_.forget_origin(id);
    inflight_.forget(id, leases_);
    digests_answered_.erase(id);
    sync_->served.erase(id);
    forget_repairs_of(id);
  }
}

void Node::confirm_members(const std::vector<NodeId>& ids) {
  // At most this many members a round (a partition makes many silent at once; they fail then).
  constexpr size_t kMaxConfirmsPerRound = 16;
  // Relaying, two members of our group may have heard from it: rows of other groups reach us
  // through them, each on one path. (In the other modes rows spread by gossip from everyone to
  // everyone: the others' view is as old as ours, and the member itself is the one to ask.
  // Asking two more there cost scale-1000, gossip at 1,000 nodes, 8 times the messages.)
  const bool relay = mode_ == DisseminationMode::kRelay;
  if (relay) plan_relay();
  for (size_t i = 0; i < ids.size() && i < kMaxConfirmsPerRound; ++i) {
    const MemberInfo* v = membership_.find(ids[i]);
    if (!v) continue;
    const std::shared_ptr<GossipMessage> m = message({}, kNoRows);
    m->row_wanted = ids[i];
    ++stats_.row_requests;
    send(v->address, m);
    if (!relay) continue;
    for (size_t k : pick_distinct(plan_->mates.size(), 2)) {
      if (plan_->mates[k]->id != ids[i]) send(plan_->mates[k]->address, m);
    }
  }
}

void Node::answer_row_request(const GossipMessage& m) {
  // Once per message of the sender's life, as digests are: a replayed request draws nothing.
  std::pair<uint64_t, uint64_t>& last = digests_answered_[m.sender].row_asked;
  if (std::pair(m.sender_incarnation, m.message_seq) <= last) return;
  last = {m.sender_incarnation, m.message_seq};
  MemberRecord row;
  if (m.row_wanted == options_.id) {
    row = membership_.self_row();
  } else if (const MemberInfo* v = membership_.find(m.row_wanted); v && v->state == MemberState::kAlive) {
    row = MemberRecord{v->id, v->address, v->incarnation, v->heartbeat, false};
  } else {
    return;  // failed here too, or unknown: nothing that would keep it alive there
  }
  const std::shared_ptr<GossipMessage> reply = message({}, kNoRows);
  reply->members.push_back(std::move(row));
  ++stats_.row_answers;
  const MemberInfo* sender = membership_.find(m.sender);
  send(sender ? sender->address : m.sender_address, reply);
}

std::vector<BatchPtr> Node::seal_round(MonoNanos now) {
  // This round's consumption, in datagram-sized batches, with any sealed early by check(), and
  // the lease counts that changed.
  seal_leases(now);
  seal(now, SIZE_MAX);
  publish_tops(now);
  std::vector<BatchPtr> fresh = std::move(sealed_);
  sealed_.clear();
  return fresh;
}

void Node::disseminate(const std::vector<const MemberInfo*>& live, std::vector<BatchPtr> fresh, MonoNanos now) {
  if (mode_ == DisseminationMode::kRelay) {
    disseminate_relay(std::move(fresh), now);
    return;
  }
  if (live.empty()) return;
  if (mode_ == DisseminationMode::kMesh) {
    // Everyone hears from us every round: our news, or just our heartbeat.
    const GossipMessagePtr m = message(std::move(fresh));
    for (const MemberInfo* v : live) send(v->address, m);
    return;
  }
  // Gossip: `fresh` was queued when sealed (keep_sealed). The queue's newest batches go to
  // `fanout` random live members. Batches queued longer than the ledger's retention go unsent:
  // a node that was stopped a while (a paused VM) must not hand out old batches under a fresh
  // stamp, which a receiver that has since forgotten their origin would charge again. (Push-pull
  // repairs only within retention too.)
  while (!queue_.empty() && now - queue_.front().queued_at > options_.ledger.retention_ns) {
    queue_.pop_front();
    ++stats_.queue_expired;
  }
  const std::vector<size_t> targets = pick_distinct(live.size(), options_.fanout);
  std::vector<BatchPtr> batches;
  const size_t take = std::min(queue_.size(), options_.max_batches_per_message);
  batches.reserve(take);
  // The budget counts copies sent (one per peer), as memberlist's transmit limit does.
  for (auto it = queue_.rbegin(); batches.size() < take; ++it) {
    batches.push_back(it->batch);
    it->transmits_left -= std::min<uint32_t>(it->transmits_left, uint32_t(targets.size()));
  }
  // Only the newest `take` entries were sent, so only they can have run out.
  const auto sent = queue_.end() - long(take);
  queue_.erase(std::remove_if(sent, queue_.end(), [](const Queued& q) { return q.transmits_left == 0; }), queue_.end());
  const GossipMessagePtr m = message(std::move(batches));
  for (size_t i : targets) send(live[i]->address, m);
}

const MemberInfo* Node::random_mate() {
  const std::vector<const MemberInfo*>& mates = plan_->mates;
  return mates.empty() ? nullptr : mates[random_.below(mates.size())];
}

bool Node::in_our_group(const NodeId& origin) const { return relay_group_of(origin, groups_) == our_group_; }

bool Node::relay_compatible(const GossipMessage& m) const {
  return m.relay_groups == (mode_ == DisseminationMode::kRelay ? groups_ : 0);
}

void Node::plan_relay() {
  RelayPlan& p = *plan_;
  if (p.live_version == membership_.live_version() && p.groups == groups_) return;
  p.live_version = membership_.live_version();
  p.groups = groups_;
  p.group = our_group_;
  p.mates.clear();
  p.contacts.assign(groups_, nullptr);
  // Per other group, the best-scored live member; failing that (none heard from yet, as at
  // start-up under static membership), the best-scored member known in any state but departed:
  // a batch sent nowhere in a group would be lost to it for good, as no repair crosses groups.
  std::vector<const MemberInfo*> best(groups_, nullptr), fallback(groups_, nullptr);
  std::vector<uint64_t> best_score(groups_, 0), fallback_score(groups_, 0);
  const uint64_t us = std::hash<std::string_view>{}(options_.id);
  auto consider = [&](const MemberInfo& v, std::vector<const MemberInfo*>& pick, std::vector<uint64_t>& scores) {
    const uint32_t g = relay_group_of(v.id, groups_);
    if (g == p.group) return false;
    const uint64_t score = SplitMix64(us ^ SplitMix64(std::hash<std::string_view>{}(v.id)).next_u64()).next_u64();
    if (!pick[g] || score > scores[g]) {
      pick[g] = &v;
      scores[g] = score;
    }
    return true;
  };
  for (const MemberInfo* v : membership_.live()) consider(*v, best, best_score);
  // Our group: every member alive, suspect, or listed but not heard from yet (static): a group
  // is small, and a member that has not heard from us would not send to us either.
  const bool fallbacks = std::count(best.begin(), best.end(), nullptr) > 1;  // (our group has none)
  membership_.for_each_member([&](const MemberInfo& v) {
    if (v.state == MemberState::kLeft || v.state == MemberState::kDead) return;
    if (relay_group_of(v.id, groups_) == p.group) {
      p.mates.push_back(&v);
    } else if (fallbacks) {
      consider(v, fallback, fallback_score);
    }
  });
  for (uint32_t g = 0; g < groups_; ++g) {
    if (g == p.group) continue;
    p.contacts[g] = best[g] ? best[g] : fallback[g];
  }
}

void Node::seal_relay(MonoNanos now, std::vector<BatchPtr>& out) {
  if (relay_parts_.empty()) return;
  std::vector<ConsumptionEntry> entries;
  std::vector<ResetMark> resets;
  // Counts and top-K units are state under their origin's version (docs/design.md 6.7, 7.8):
  // passed on whole, never summed, so each receiver decides for itself whether their member
  // still counts. They are no part of the batch that sums the rest (on_relay_sealed).
  std::erase_if(relay_parts_, [&](const BatchPtr& b) {
    if (!b->counts && !b->top) return false;
    out.push_back(b);
    return true;
  });
  if (relay_parts_.empty()) return;
  for (const BatchPtr& b : relay_parts_) {
    entries.insert(entries.end(), b->entries.begin(), b->entries.end());
    resets.insert(resets.end(), b->resets.begin(), b->resets.end());
  }
  if (!epochs_.empty()) {
    // What we did not count (admitted before a reset we know) we do not pass on; the rest goes
    // under the epoch we know, so our group counts it as we did.
    std::erase_if(entries, [&](const ConsumptionEntry& e) { return e.epoch < reset_epoch(e.key); });
    tag_epochs(entries);
  }
  stats_.relayed += relay_parts_.size();
  for (std::vector<ResetMark>& run : split_resets(std::move(resets))) {
    if (BatchPtr b = ledger_.seal_relay({}, now, std::move(run))) out.push_back(std::move(b));
  }
  if (options_.split_for_sealing) {
    for (auto& run : options_.split_for_sealing(std::move(entries))) {
      if (BatchPtr b = ledger_.seal_relay(std::move(run), now)) out.push_back(std::move(b));
    }
  } else if (BatchPtr b = ledger_.seal_relay(std::move(entries), now)) {
    // Whole (the simulator): so on_relay_sealed names exactly the parts each batch sums.
    if (options_.on_relay_sealed) options_.on_relay_sealed(b, relay_parts_);
    out.push_back(std::move(b));
  }
  relay_parts_.clear();
}

void Node::disseminate_relay(std::vector<BatchPtr> fresh, MonoNanos now) {
  plan_relay();
  const RelayPlan& p = *plan_;
  // Rows are most of what a large cluster says besides consumption. Every `rows_every` rounds
  // (5 times per fail_after: every 400 ms by default) we send even with nothing else to say:
  // our row to our contacts, and to our group ours, one more (rotating, as in other modes) and
  // the rows of the other groups' members that sent us theirs since. So every member's row
  // reaches every other member, in two hops, about 5 times per fail_after. Other rounds' messages
  // carry batches only.
  const int64_t rows_every =
      std::max<int64_t>(1, options_.membership.fail_after_ns / (5 * std::max<int64_t>(1, options_.interval_ns)));
  const bool rows_round = relay_round_++ % uint64_t(rows_every) == 0;
  std::vector<BatchPtr> relayed;
  seal_relay(now, relayed);
  if (!p.mates.empty() && (!fresh.empty() || !relayed.empty() || rows_round)) {
    std::vector<BatchPtr> batches = fresh;
    batches.insert(batches.end(), relayed.begin(), relayed.end());
    const std::shared_ptr<GossipMessage> m = message(std::move(batches), rows_round ? 2 : kNoRows);
    if (rows_round && ledger_.last_seq() <= kMaxStintSeq && ledger_.last_relay_seq() <= kMaxStintSeq) {
      // Our last seqs: a mate that lacks the last batch we sent (nothing after it showed the
      // gap) asks for it now, within a rows round, rather than at the next push-pull.
      m->relay_since = ledger_.last_seq();
      m->relay_through = ledger_.last_relay_seq();
    }
    if (rows_round) {
      // The newest row of each sender (a sender may have sent several times since).
      std::sort(relay_rows_.begin(), relay_rows_.end(), [](const MemberRecord& a, const MemberRecord& b) {
        return a.id != b.id ? a.id < b.id
                            : std::pair(a.incarnation, a.heartbeat) > std::pair(b.incarnation, b.heartbeat);
      });
      for (size_t i = 0; i < relay_rows_.size(); ++i) {
        if (i == 0 || relay_rows_[i].id != m->members.back().id) m->members.push_back(relay_rows_[i]);
      }
      relay_rows_.clear();
    }
    for (const MemberInfo* v : p.mates) send(v->address, m);
  }
  if (rows_round && p.mates.empty()) relay_rows_.clear();
  // The hop to a contact: each batch goes to the same contact twice, this round and the next
  // (it applies it once; relay_resend), and each message tells the contact the range of our
  // seqs it was sent since it became our contact, so it asks us for any it lacks (node_repair.cc).
  // Never to another contact, which could relay it a second time. Contacts told the same range
  // share a message (one per group only after contacts changed).
  std::vector<std::pair<std::tuple<bool, uint64_t, uint64_t>, std::shared_ptr<GossipMessage>>> built;
  for (uint32_t g = 0; g < p.contacts.size(); ++g) {
    const MemberInfo* contact = p.contacts[g];
    if (!contact) continue;
    // The same life of the same member: a restarted one would apply the batches again.
    const bool again = options_.relay_resend && g < previous_contacts_.size() &&
                       previous_contacts_[g].first == contact->id &&
                       previous_contacts_[g].second == contact->incarnation && !previous_fresh_.empty();
    auto [since, through] = record_stint(g, *contact, fresh, now);
    if (through > kMaxStintSeq) since = through = 0;
    if (fresh.empty() && !again && !rows_round) continue;
    const std::tuple<bool, uint64_t, uint64_t> shape{again, since, through};
    auto it = std::find_if(built.begin(), built.end(), [&](const auto& b) { return b.first == shape; });
    if (it == built.end()) {
      std::vector<BatchPtr> batches = fresh;
      if (again) batches.insert(batches.end(), previous_fresh_.begin(), previous_fresh_.end());
      std::shared_ptr<GossipMessage> m = message(std::move(batches), rows_round ? 1 : kNoRows);  // they pass our row on
      m->relay = true;
      m->relay_since = since;
      m->relay_through = through;
      built.emplace_back(shape, std::move(m));
      it = built.end() - 1;
    }
    send(contact->address, it->second);
  }
  previous_contacts_.assign(p.contacts.size(), {});
  for (uint32_t g = 0; g < p.contacts.size(); ++g) {
    if (p.contacts[g]) previous_contacts_[g] = {p.contacts[g]->id, p.contacts[g]->incarnation};
  }
  previous_fresh_ = std::move(fresh);
}

std::vector<size_t> Node::pick_distinct(size_t n, size_t k) {
  // k distinct indices of 0..n-1, chosen uniformly: a partial Fisher-Yates shuffle that stores
  // only the k swaps it makes (O(k), not O(n), per round).
  k = std::min(k, n);
  std::vector<std::pair<size_t, size_t>> moved;  // position -> index now there, if swapped
  auto at = [&](size_t pos) {
    for (const auto& [p, v] : moved) {
      if (p == pos) return v;
    }
    return pos;
  };
  auto put = [&](size_t pos, size_t v) {
    for (auto& [p, old] : moved) {
      if (p == pos) {
        old = v;
        return;
      }
    }
    moved.emplace_back(pos, v);
  };
  std::vector<size_t> picked(k);
  for (size_t i = 0; i < k; ++i) {
    const size_t j = i + random_.below(n - i);
    picked[i] = at(j);
    put(j, at(i));
  }
  return picked;
}

void Node::push_pull(const std::vector<const MemberInfo*>& all_live, MonoNanos now) {
  // Repair with one random live member (at once after start, to learn recent debt); in relay
  // mode, of our group, the only members that apply the same origins.
  const std::vector<const MemberInfo*>& live = mode_ == DisseminationMode::kRelay ? plan_->mates : all_live;
  if (live.empty() || now < next_push_pull_ns_) return;
  const std::shared_ptr<GossipMessage> m = message({});
  ask_for_digest_reply(*m);
  ++stats_.push_pulls;
  send(live[random_.below(live.size())]->address, m);
  next_push_pull_ns_ = now + options_.push_pull_interval_ns;
}

void Node::probe(MonoNanos now) {
  // Failed members, and seeds we are not yet connected through.
  std::vector<MemberRecord> probed_rows;
  const std::vector<std::string> probes = membership_.due_probes(now, &probed_rows);
  const bool seeds_due = membership_.kind() == MembershipKind::kHeartbeat && now >= next_seed_probe_ns_;
  if (probes.empty() && !seeds_due) return;
  // (Built even when only seeds are due: building takes the next membership rows, and the
  // simulator's figures replay byte for byte only if the rotation advances as it always has.)
  const std::shared_ptr<GossipMessage> m = message({});
  // Just started (perhaps restarted after a crash): our digest asks whoever answers first for
  // the recent consumption we lack, so what we admit reflects the cluster's debt within a round
  // trip, not after the first regular push-pull.
  if (first_round_) ask_for_digest_reply(*m);
  for (size_t i = 0; i < probes.size(); ++i) {
    // With the probed member's own row: failed members' rows no longer circulate, and without
    // it one that restarted with a lower incarnation (the wall clock stepped back) would never
    // learn of the life to outbid, and so never rejoin.
    auto to_it = std::make_shared<GossipMessage>(*m);
    to_it->members.push_back(probed_rows[i]);
    send(probes[i], to_it);
  }
  if (!seeds_due) return;
  for (const std::string& seed : options_.seeds) {
    if (seed == options_.address || membership_.knows_address(seed)) continue;
    // A digest with the first contact lets a restarted node learn recent consumption.
    const std::shared_ptr<GossipMessage> join = message({});
    if (first_round_) ask_for_digest_reply(*join);
    send(seed, join);
  }
  next_seed_probe_ns_ = now + options_.membership.probe_interval_ns;
}

void Node::housekeeping(MonoNanos now) {
  expire_tops(now);
  // While waiting for balances from a peer, what we applied meanwhile is kept: finish_sync
  // subtracts what the peer's balances lack of it (bounded all the same by max_retained_bytes).
  if (!syncing()) ledger_.expire(now);
  table_.sweep_idle(now, kSweepPerRound);
  if (options_.partition_policy == PartitionPolicy::kProportional) {
    const auto [reachable, known] = membership_.reachable_fraction();
    table_.set_rate_scale(reachable, known, now);
    leases_.set_share(reachable, known);
  }
}

void Node::prefetch(const GossipMessage& m) const {
  // (Prefetching the ledger's entries for the batches was tried too: no faster, measured.)
  membership_.prefetch(m.sender, m.members);
}

void Node::receive(const GossipMessage& m, MonoNanos now) {
  if (m.sender == options_.id) {
    ++stats_.dropped_self;
    return;
  }
  if (!membership_.accepts_sender(m.sender)) {
    ++stats_.dropped_unknown_sender;
    return;
  }
  if (!from_senders_address(m)) {
    ++stats_.dropped_wrong_source;
    return;
  }
  ++stats_.messages_received;
  // Relay under heartbeat membership: a node learns members only from the rows of messages sent
  // to it, and only its group and its contacts send to it. A newcomer that joined through a
  // seed (or a member back from a restart or a departure, which knows only its seeds) would hear
  // from few, count too few members, and so too few groups, and the others would ignore its
  // batches. So a member that was not alive here gets our rows (member_rows of them) as soon as
  // it is: each node it sends to teaches it more, and it knows everyone within a few rounds.
  const MemberInfo* before = membership_.find(m.sender);
  const bool was_alive = before && (before->state == MemberState::kAlive || before->state == MemberState::kSuspect);
  const uint64_t life_before = before ? before->incarnation : 0;
  // A member failed for longer than the ledger's retention: what it and its side admitted since
  // is beyond any repair (a partition healing, not a restart: the same life).
  const bool back_from_long_failure =
      before && (before->state == MemberState::kDead || before->state == MemberState::kUnreachable) &&
      now - before->last_heard_ns > options_.ledger.retention_ns;
  membership_.merge(m.members, now);
  // The group count follows the members known at once, not at the next round: a message we
  // send before it (a flood of checks can hold the round up) would be ignored by members that
  // count already.
  // A relaying member's count of groups, if we could agree with it, is ours too (update_groups).
  update_groups(m.relay_groups);
  if (mode_ == DisseminationMode::kRelay && membership_.kind() == MembershipKind::kHeartbeat) {
    const MemberInfo* after = membership_.find(m.sender);
    if (after && after->state == MemberState::kAlive && (!was_alive || after->incarnation != life_before)) {
      send(m.sender_address, message({}));
    }
  }
  if (const uint64_t life = membership_.self_row().incarnation; life != options_.incarnation) {
    options_.incarnation = life;  // outbidding a remembered newer life of ours (Membership::merge)
    ledger_.start_incarnation(life);
  }
  if (m.leaving) membership_.mark_left(m.sender, m.sender_incarnation, now);
  if (!m.row_wanted.empty()) answer_row_request(m);
  if (m.sync_request) serve_sync(m, now);
  if (m.sync_page) take_sync_page(m, now);
  if (back_from_long_failure && options_.sync_deadline_ns > 0) {
    const MemberInfo* after = membership_.find(m.sender);
    if (after && after->state == MemberState::kAlive && after->incarnation == life_before) heal_from(m, now);
  }
  // Relay: a member of another group asks us to pass its own batches on to our group. Its row
  // goes on too, even if it counts groups otherwise (rows are safe to pass on): our group may
  // hear of it only through us.
  const bool relay = mode_ == DisseminationMode::kRelay && m.relay && !in_our_group(m.sender);
  if (relay && !m.members.empty() && m.members.front().id == m.sender && relay_rows_.size() < kMaxRelayRows) {
    relay_rows_.push_back(m.members.front());
  }
  if (!relay_compatible(m)) {
    // Counting groups otherwise (or another mode), the sender may route a batch to us that we
    // also receive summed in a relay batch: applying nothing from it is the safe side.
    if (!m.batches.empty() || m.digest) ++stats_.relay_mismatch;
    return;
  }

  for (const BatchPtr& b : m.batches) {
    if (relay && b->origin != m.sender) continue;  // only its own: relayed batches stay in their group
    if (ledger_.merge(b, table_, now, this) != MergeResult::kApplied) continue;
    if (options_.on_applied) options_.on_applied(*b);
    if (mode_ == DisseminationMode::kGossip) enqueue(b, now);  // news to us: relay it
    if (relay) relay_parts_.push_back(b);
  }
  if (mode_ == DisseminationMode::kRelay) note_gaps(m, relay, now);

  if (m.digest) {
    DigestsAnswered& answered = digests_answered_[m.sender];
    if (!first_time_asked(m, answered)) {
      ++stats_.digests_ignored;
      return;
    }
    if (now - answered.window_start >= options_.push_pull_interval_ns) {
      answered.window_start = now;
      answered.repairs_in_window = 0;
    }
    const size_t budget = 2 * options_.max_repair_batches;  // per sender and push_pull_interval
    // Relay: only our group's origins, which the asker applies only if it is in our group too;
    // to any member, its own batches (a restarted one relearns its past life's consumption
    // from whoever holds it, even alone in its group: it never gets them summed by a relay);
    // and to a member of another group, ours that we sent it as our contact there (its repair
    // request: node_repair.cc), which it relays to its group.
    const bool relay_mode = mode_ == DisseminationMode::kRelay;
    const bool same_group = relay_mode && in_our_group(m.sender);
    std::vector<BatchPtr> missing = relay_mode ? ledger_.missing_for(
                                                     *m.digest, m.digest_from, m.digest_until,
                                                     [&](const NodeId& o) {
      return (same_group && in_our_group(o)) || origin_node(o) == m.sender || (!same_group && o == options_.id);
                                                     })
        : ledger_.missing_for(*m.digest, m.digest_from, m.digest_until);
    std::vector<BatchPtr> to_relay;
    if (relay_mode && !same_group) {
      std::erase_if(missing, [&](const BatchPtr& b) {
        if (b->origin != options_.id) return false;
        if (sent_to(m.sender, m.sender_incarnation, *b)) to_relay.push_back(b);
        return true;  // never one that another contact of its group was sent
      });
    }
    auto cap = [&](std::vector<BatchPtr>& batches) {
      const size_t room = std::min(options_.max_repair_batches, budget - std::min(budget, answered.repairs_in_window));
      if (batches.size() > room) {
        stats_.repairs_capped += batches.size() - room;
        batches.resize(room);
      }
      answered.repairs_in_window += batches.size();
      stats_.repairs_sent += batches.size();
    };
    cap(missing);
    cap(to_relay);
    const MemberInfo* v = membership_.find(m.sender);
    const std::string& to = v ? v->address : m.sender_address;
    if (!missing.empty() || m.digest_reply_wanted) {
      // Relay: an answer that asks for nothing back carries no rows (repair requests come
      // every round a gap lasts; rows go out every rows round anyway).
      const std::shared_ptr<GossipMessage> reply =
          message(std::move(missing), relay_mode && !m.digest_reply_wanted ? kNoRows : 0);
      if (m.digest_reply_wanted) reply->digest = digest();  // so the asker can answer in turn
      send(to, reply);
    }
    if (!to_relay.empty()) {
      const std::shared_ptr<GossipMessage> reply = message(std::move(to_relay), kNoRows);
      reply->relay = true;  // as when we first sent them: for its group
      send(to, reply);
    }
  }
}

bool Node::first_time_asked(const GossipMessage& m, DigestsAnswered& answered) {
  // Lives only move forward (a restart has a greater incarnation), and within one life every
  // message has a greater message_seq than the one before.
  if (m.sender_incarnation < answered.incarnation) return false;
  if (m.sender_incarnation > answered.incarnation || m.message_seq > answered.message_seq) {
    answered.incarnation = m.sender_incarnation;
    answered.message_seq = m.message_seq;
    answered.parts.assign(1, m.digest_from);
    return true;
  }
  if (m.message_seq < answered.message_seq) return false;
  // Another part of the message last answered: new if its digest starts elsewhere. (A message
  // has at most a few dozen parts: kMaxDigestOriginsPerMessage origins per part.)
  if (std::find(answered.parts.begin(), answered.parts.end(), m.digest_from) != answered.parts.end()) return false;
  answered.parts.push_back(m.digest_from);
  return true;
}

namespace {
// True if `address` ("host:port") names its host by IP ("10.0.0.2:7946", "[::1]:7946"), not by a
// name a resolver would have to turn into one.
bool ip_literal(std::string_view address) {
  if (address.empty()) return false;
  if (address.front() == '[') return true;
  const std::string_view host = address.substr(0, address.rfind(':'));
  return !host.empty() && host.find_first_not_of("0123456789.") == std::string_view::npos;
}
}  // namespace

bool Node::from_senders_address(const GossipMessage& m) const {
  if (m.received_from.empty()) return true;  // the transport cannot tell (TCP) or a simulation
  // The transport marks a message with its sender_address when it came from there (UDP replies
  // come from the bound socket), so a message replayed or forged from another host, or naming a
  // third party as the address to answer, is dropped. Static membership also holds the sender to
  // the address the peers file lists (compared as written when that is an IP; a listed host name
  // is the sender's to resolve).
  if (m.received_from != m.sender_address) return false;
  if (membership_.kind() != MembershipKind::kStatic) return true;
  const MemberInfo* v = membership_.find(m.sender);
  return v == nullptr || v->address == m.sender_address || !ip_literal(v->address);
}

void Node::set_peers(const std::vector<PeerSpec>& peers, MonoNanos now) {
  // A peer removed from the file is not forgotten by the ledger at once: its retained batches may
  // still circulate (see Ledger::forget_origin). Its window stays until the ledger is rebuilt;
  // at most max_origins are tracked.
  membership_.set_peers(peers, now);
  update_groups();
  if (sync_->asking && !sync_->started && membership_.known() <= 1) stop_syncing();  // alone
}

void Node::leave(MonoNanos now) {
  // What was admitted since the last round would never leave this node otherwise: seal it and
  // send it to every live member before saying goodbye. (Relay: what we were relaying goes to
  // our group, as it would have.)
  seal(now, SIZE_MAX);
  auto send_all = [&](const std::vector<BatchPtr>& batches, const std::vector<const MemberInfo*>& to) {
    for (size_t i = 0; i < batches.size(); i += options_.max_batches_per_message) {
      const size_t end = std::min(batches.size(), i + options_.max_batches_per_message);
      const GossipMessagePtr m = message({batches.begin() + long(i), batches.begin() + long(end)});
      for (const MemberInfo* v : to) send(v->address, m);
    }
  };
  if (mode_ == DisseminationMode::kRelay) {
    plan_relay();
    std::vector<BatchPtr> relayed;
    seal_relay(now, relayed);
    send_all(relayed, plan_->mates);
  }
  send_all(sealed_, membership_.live());
  sealed_.clear();
  membership_.leave();
  const std::shared_ptr<GossipMessage> m = message({});
  m->leaving = true;
  for (const MemberInfo* v : membership_.live()) send(v->address, m);
}

void Node::replace_rules(std::shared_ptr<const RuleSet> rules, MonoNanos now) {
  leases_.set_rules(rules);
  table_.replace_rules(std::move(rules), now);
  label_rules();
}

void Node::lease_counts(const Batch& batch, MonoNanos now) {
  recount_leases();  // the origin's state as membership knows it now
  inflight_.apply(batch, membership_, leases_, now);
}

void Node::recount_leases() {
  const MembershipStats& m = membership_.stats();
  const uint64_t seen = m.joined + m.recovered + m.restarted;
  if (membership_.live_version() == lease_live_version_ && seen == lease_members_seen_) return;
  // A member that joined, came back or restarted has not heard our counts: a refresh tells it.
  if (seen != lease_members_seen_) lease_refresh_wanted_ = true;
  lease_live_version_ = membership_.live_version();
  lease_members_seen_ = seen;
  inflight_.recount(membership_, leases_);
}

void Node::seal_leases(MonoNanos now) {
  recount_leases();
  if (now >= next_inflight_expire_ns_) {
    // Rows at 0 live 20 s: a scan a second is plenty, and a round never walks a million rows.
    inflight_.expire(now);
    next_inflight_expire_ns_ = now + kNanosPerSecond;
  }
  leases_.expire(now, kLeaseExpiriesPerRound);
  std::vector<InflightEntry> counts;
  leases_.take_changes(&counts);
  const bool refresh = leases_.active() && (lease_refresh_wanted_ || now >= next_lease_refresh_ns_);
  if (refresh) {
    counts = leases_.own_counts();  // sorted; covers every change above (an unlisted key is 0)
    lease_refresh_wanted_ = false;
    next_lease_refresh_ns_ = now + options_.lease_refresh_ns;
  }
  if (counts.empty() && !refresh) return;
  // Cut into batches that fit a datagram; a refresh's batches each cover a range of keys, from
  // the first key of one to the first of the next, and together everything.
  size_t i = 0;
  do {
    LeaseCounts c;
    c.refresh = refresh;
    if (refresh && i > 0) c.from = counts[i].key;
    size_t bytes = c.from.size();
    while (i < counts.size() && c.entries.size() < kMaxBatchEntries) {
      const size_t next = counts[i].key.size() + 12 + (refresh ? counts[i].key.size() : 0);
      if (!c.entries.empty() && bytes + next > kCountsBatchBytes) break;
      bytes += counts[i].key.size() + 12;
      c.entries.push_back(std::move(counts[i]));
      ++i;
    }
    if (refresh && i < counts.size()) c.until = counts[i].key;  // the next batch's first key
    if (BatchPtr b = ledger_.seal_counts(std::move(c), now)) keep_sealed(std::move(b), now);
  } while (i < counts.size());
}

NodeState Node::export_state(MonoNanos now) {
  NodeState s = begin_export(now);
  uint64_t cursor = 0;
  while (!continue_export(s, &cursor, SIZE_MAX, now)) {
  }
  return s;
}

bool Node::continue_export(NodeState& s, uint64_t* cursor, size_t max_entries, MonoNanos now) {
  return table_.for_each_unfull(now, cursor, max_entries,
                                [&](std::string_view key, int64_t balance) { s.balances.emplace_back(key, balance); });
}

NodeState Node::begin_export(MonoNanos now) {
  seal(now, SIZE_MAX);  // our own unsealed consumption: in the balances, so in the positions too
  NodeState s;
  s.node_id = options_.id;
  s.incarnation = options_.incarnation;
  s.positions = ledger_.digest();
  s.resets.reserve(epochs_.size());
  for (const auto& [key, epoch] : epochs_) s.resets.push_back({key, epoch});
  s.balances.reserve(table_.size());  // at most: a walk in slices then never moves them
  for (OriginDigest& o : ledger_.own_positions().origins) {
    // (The relay id's entry is in the digest already when this life relayed: the larger wins.)
    auto same = std::find_if(s.positions.origins.begin(), s.positions.origins.end(),
                             [&](const OriginDigest& d) { return d.origin == o.origin; });
    if (same == s.positions.origins.end()) {
      s.positions.origins.push_back(std::move(o));
    } else if (o.current.highest() > same->current.highest()) {
      same->current = o.current;
    }
  }
  return s;
}

size_t Node::import_state(const NodeState& state, MonoNanos now, int64_t down_ns) {
  // The epochs first: a reset known before the restart stays known (a tagged entry of it that
  // arrives later would otherwise read as a reset missed, and fill the bucket again).
  for (const ResetMark& r : state.resets) {
    if (r.epoch > reset_epoch(r.key) && epochs_.size() < kMaxResetEpochs) epochs_[r.key] = r.epoch;
  }
  // Refill is counted from the export: a bucket spent a day before comes back full for a limit
  // of N per day. Beyond ten years the gap is capped (it refills any limit the parser accepts).
  constexpr int64_t kTenYears = int64_t(3650) * 86400 * kNanosPerSecond;
  const MonoNanos at = now - std::clamp<int64_t>(down_ns, 0, kTenYears);
  size_t restored = 0;
  for (const auto& [key, balance] : state.balances) restored += table_.restore(key, balance, at) ? 1 : 0;
  ledger_.restore(state.positions);
  return restored;
}

// --- Resets (docs/design.md 6.6) -------------------------------------------------------------

uint64_t Node::reset_epoch(std::string_view key) const {
  if (epochs_.empty()) return 0;
  const auto it = epochs_.find(key);
  return it == epochs_.end() ? 0 : it->second;
}

std::optional<int64_t> Node::reset(std::string_view key, MonoNanos now) {
  // Above every epoch of the key this node knows; two nodes that reset a key at once may pick
  // the same epoch, and then their resets are one.
  const ResetMark mark{std::string(key), reset_epoch(key) + 1};
  apply_reset(mark, now);
  resets_to_seal_.push_back(mark);
  ++stats_.resets;
  const std::optional<int64_t> balance = table_.balance_microtokens(key, now);
  if (balance) return *balance / kMicrotokensPerToken;
  const std::optional<Limit> limit = table_.limit_for(key);
  if (limit) return limit->burst;
  return std::nullopt;
}

bool Node::apply_reset(const ResetMark& mark, MonoNanos now) {
  if (mark.epoch == 0 || mark.epoch <= reset_epoch(mark.key)) return false;
  if (epochs_.size() >= kMaxResetEpochs && epochs_.find(mark.key) == epochs_.end()) {
    // Beyond the bound the smallest epoch goes: a tagged entry of that key arriving later reads as
    // a reset missed, and fills the bucket once more (counted, as a forgotten epoch).
    auto smallest = std::min_element(epochs_.begin(), epochs_.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
    epochs_.erase(smallest);
    ++stats_.reset_epochs_forgotten;
  }
  epochs_[mark.key] = mark.epoch;
  table_.reset(mark.key, now);
  ++stats_.resets_applied;
  return true;
}

bool Node::counts(const ConsumptionEntry& e, MonoNanos now) {
  if (epochs_.empty() && e.epoch == 0) return true;
  const uint64_t known = reset_epoch(e.key);
  if (e.epoch < known) {
    ++stats_.reset_skipped;  // admitted before the reset: it charges no fresh bucket
    return false;
  }
  // Sealed under a reset we have not heard of yet (its batch is late or lost): take it first.
  if (e.epoch > known) apply_reset({e.key, e.epoch}, now);
  return true;
}

std::vector<std::vector<ResetMark>> Node::split_resets(std::vector<ResetMark> resets) const {
  std::vector<std::vector<ResetMark>> runs;
  if (resets.empty()) return runs;
  if (!options_.split_for_sealing) {
    runs.push_back(std::move(resets));
    return runs;
  }
  // Cut as entries of the same keys would be: a reset takes fewer bytes than such an entry.
  std::vector<ConsumptionEntry> as_entries;
  as_entries.reserve(resets.size());
  for (const ResetMark& r : resets) as_entries.push_back({r.key, 1, r.epoch});
  size_t next = 0;
  for (const auto& run : options_.split_for_sealing(std::move(as_entries))) {
    runs.emplace_back(std::make_move_iterator(resets.begin() + long(next)),
                      std::make_move_iterator(resets.begin() + long(next + run.size())));
    next += run.size();
  }
  return runs;
}

void Node::tag_epochs(std::vector<ConsumptionEntry>& entries) const {
  if (epochs_.empty()) return;
  for (ConsumptionEntry& e : entries) {
    const auto it = epochs_.find(e.key);
    e.epoch = it == epochs_.end() ? 0 : it->second;
  }
}

}  // namespace tollgate
