// One tollgate node as a pure state machine: local admission, consumption dissemination (full
// mesh or gossip), push-pull repair and membership, driven by the caller's clock, randomness and
// outbox. The daemon drives it from real sockets and a steady clock; the simulator drives many
// of them over a virtual network in virtual time. Not thread-safe: one owner.
//
// A round (tick(), every `interval`):
//   1. membership: our heartbeat +1; members move alive -> suspect -> dead (or unreachable);
//   2. seal: this round's admitted consumption becomes batches (each fits one datagram),
//      joining any that check() sealed early (early_seal_keys);
//   3. disseminate:
//        mesh:   our new batches go to every live member;
//        gossip: our new batches and every batch newly applied from others are queued, and each
//                round the queue goes to `fanout` random live members; a batch stays queued until
//                it has gone out retransmit_mult * ceil(log10(N + 1)) times, counting one per peer
//                (memberlist's transmit limit);
//      every message also carries membership rows (heartbeats), so members that have nothing to
//      say still prove they are alive;
//   4. repair: every push_pull_interval, our ledger digest goes to one random live member, which
//      answers with the batches we lack and its own digest, and we answer with what it lacks;
//   5. probes: dead and unreachable members, and seeds we have not joined, get a message every
//      probe_interval, so healed nodes rejoin on their own;
//   6. housekeeping: ledger expiry, idle-key sweep, the proportional rate scale.
#ifndef TOLLGATE_SRC_CORE_NODE_H_
#define TOLLGATE_SRC_CORE_NODE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/gossip_message.h"
#include "core/inflight_view.h"
#include "core/key_table.h"
#include "core/lease_table.h"
#include "core/ledger.h"
#include "core/membership.h"
#include "core/outbox.h"
#include "core/random.h"
#include "core/top_keys.h"
#include "util/string_map.h"

namespace tollgate {

class RuleSet;
struct SyncServed;  // node_sync.h

// kRelay: two hops over groups of about sqrt(N) members (docs/design.md, "Relay"): each node
// sends its batches to the members of its own group and to one member (its contact) of every
// other group; a contact sums what it receives into batches of its own, named by
// relay_origin(its id), for its own group. Every node hears every batch once, and a group's
// traffic crosses to another group once. For large busy clusters; every member must use it.
// kAuto: gossip below NodeOptions::auto_relay_members known members, relay from there (the
// daemon's default: Node::mode() says which is in use).
enum class DisseminationMode : uint8_t { kMesh, kGossip, kRelay, kAuto };
enum class PartitionPolicy : uint8_t {
  kOpen,          // every reachable group enforces the full limit
  kProportional,  // refill scaled by reachable / known members
};
const char* dissemination_mode_name(DisseminationMode m);
const char* partition_policy_name(PartitionPolicy p);

struct NodeOptions {
  NodeId id;
  std::string address;       // our gossip address, host:port (what peers send to)
  uint64_t incarnation = 1;  // must grow across restarts of the same id
  DisseminationMode mode = DisseminationMode::kGossip;
  PartitionPolicy partition_policy = PartitionPolicy::kOpen;
  int64_t interval_ns = 50 * kNanosPerMilli;  // one round
  size_t fanout = 3;                          // gossip: peers per round
  // Gossip: copies of a batch this node sends (one per peer) = retransmit_mult * ceil(log10(N +
  // 1)), N members: 4 for 8 nodes, 8 for 32, 12 for 1,000. As memberlist: if every node that
  // learns a batch passes it to k random others, a given node misses it with probability about
  // e^-k, so k must grow with ln N; 4 is memberlist's multiplier. Push-pull repairs the rest.
  // (Counting rounds instead of copies, and log2, as before: 1.75x the bytes in the steady
  // scenario for the same over-admission; under 20% loss its p99 convergence was 129 ms
  // against 435 ms now, but over-admission was 1.003 either way. docs/results.md.)
  uint32_t retransmit_mult = 4;
  int64_t push_pull_interval_ns = 1 * kNanosPerSecond;
  // How a round's consumption is cut into batches: a batch is the unit of loss and repair and
  // must fit one datagram. The daemon passes the codec's split_for_sealing (exact bytes); by
  // default runs of at most 32 entries. (The retransmit queue holds at most 4,096 batches, the
  // oldest going first: push-pull repairs them.)
  std::function<std::vector<std::vector<ConsumptionEntry>>(std::vector<ConsumptionEntry>)> split_for_sealing;
  // Gossip: batches per message at most, newest first (as memberlist's transmit-limited queue):
  // a batch only spends a retransmit when it is actually sent, so under heavy traffic old news
  // waits (or is repaired by push-pull) instead of every message carrying the whole queue.
  size_t max_batches_per_message = 128;
  // Push-pull answers carry at most this many batches; the next exchange sends the rest. One
  // sender draws at most twice this many per push_pull_interval, however many digests it sends
  // (a legitimate member sends one per interval): a member with the key cannot make this node
  // flood someone, and a digest request is answered once per message (GossipMessage::message_seq),
  // so a replayed one draws nothing.
  size_t max_repair_batches = 512;
  // When this many keys (an upper bound: KeyTable::pending_keys) have consumption not yet
  // sealed, check() seals up to that many at once instead of leaving them all to the round: a
  // flood of new keys (15,000 a round at 300,000/s) otherwise makes each round one long stop of
  // the daemon's thread (1.4 ms, everyone's checks waiting). The check that seals is the long
  // one: 256 keys keep it, and the round's remainder, under about 0.08 ms (1,024: 0.3 ms;
  // bench/node_flood_bench.cc). Sealed batches still go out with the round. 0: only the round
  // seals. With keys.concurrent a check cannot seal (the ledger is the owner's): it calls
  // seal_wanted, once until the owner calls seal_early.
  size_t early_seal_keys = 256;
  std::function<void()> seal_wanted;
  // Relay: the number of groups; 0 chooses from the members known (relay_groups_for): every
  // member must come to the same number, and a message from a member that counts otherwise
  // has its batches and digest dropped (NodeStats::relay_mismatch), never applied twice.
  uint32_t relay_groups = 0;
  // Auto: relay once this many members are known (this node included), gossip again below 3/4
  // of it. In between, a member keeps the mode it is in, and a gossiping one turns to relay as
  // soon as it hears from a relaying member (every member ends up in the same mode). 256: where
  // gossip stops keeping up with busy nodes: at 100 checks/s per node and 128 members, gossip's
  // convergence p99 is 1.6 s and 215 batches in 4 s never reach everyone (3.7 s and 1,015
  // under 20% loss), relaying 59 ms and none (535 ms and none), at a third of the bytes
  // (scripts/auto-sweep; docs/results.md, "Where auto should switch"). Below, at 64, relay
  // under loss admitted 2-4% less than the ideal bucket, not yet explained: gossip stays there.
  size_t auto_relay_members = 128;
  // Balances from a peer on start (issue 35; docs/design.md 6.5). When > 0, a node that has
  // someone to ask (peers, or seeds) asks one peer, in pages, for every bucket it holds that is
  // not full and the ledger positions those include, and takes each balance that is lower than
  // its own. Until then it denies (DenyReason::kSyncing) the checks of keys whose limit takes
  // longer than the ledger's retention to refill from its floor: a fresh burst of such a key
  // could be one the cluster spent long ago, which push-pull repair can no longer tell it. It
  // stops waiting when no peer has answered for this long (and then answers from what it has).
  // 0: off.
  int64_t sync_deadline_ns = 0;
  // Cuts a transfer into pages that each fit one message (the daemon: the codec's
  // split_transfer); by default pages of 32 positions or balances.
  std::function<std::vector<SyncPage>(std::vector<OriginDigest>, std::vector<std::pair<std::string, int64_t>>,
                                      std::vector<ResetMark>)>
      split_for_transfer;
  // The most pages of a transfer sent to one asker in a round, however many it asks for: bounds
  // the bytes a round encodes and sends for it (the daemon: 128 datagrams over UDP, about 180 KB;
  // 12 frames of 16 KiB over TCP, where 128 took 11 ms of the node's thread at 1M keys).
  size_t sync_pages_per_round = 128;
  std::vector<std::string> seeds;  // heartbeat membership: addresses to join through
  MembershipOptions membership;
  KeyTableOptions keys;
  LedgerOptions ledger;
  // Concurrency leases (issue 40; docs/design.md 6.7). Ids come from `lease_ids` (the daemon:
  // the operating system's randomness); unset, from a stream seeded by the node's Random (the
  // simulator and tests: reproducible, guessable). Each node seals its changed counts every
  // round and all of them every lease_refresh_ns, and when a member joins or comes back.
  LeaseTableOptions leases;
  LeaseTable::IdSource lease_ids;
  int64_t lease_refresh_ns = 30 * kNanosPerSecond;
  size_t max_lease_rows = 100'000;  // other members' (member, key) counts held at most (--max-lease-rows)
  // Top-K (issue 41; docs/topk-plan.md): per rule, this node's keys with the most denials and
  // the most tokens admitted over the last one to two windows, counted where consumption is
  // sealed. capacity 0: none kept.
  RuleTopsOptions top;
  // What this node's top-K units may cost gossip, in bytes per second with every copy counted
  // (docs/design.md 7.8): units of every active rule are published every P = copies x members x
  // their bytes / top_gossip_bytes, from 1 s up to the window (copies: the gossip retransmits,
  // else 1), and forgotten 3 P after arriving. 0: none published; each node answers for itself.
  size_t top_gossip_bytes = 0;
  size_t top_publish_keys = 32;  // keys per unit at most (fewer when they would not fit a datagram)
  // Called for every remote batch applied (charged) here, after it is charged. For measuring
  // (the simulator times how long a batch takes to reach every node); the daemon leaves it
  // empty. Must not call back into the node.
  std::function<void(const Batch&)> on_applied;
  // Relay: called when this node seals a batch summing `parts` (batches of other groups'
  // members it relays to its own group). For measuring, like on_applied.
  std::function<void(const BatchPtr& relay, const std::vector<BatchPtr>& parts)> on_relay_sealed;
  // Relay: each batch goes to a contact twice, this round and the next (the first defence of
  // the hop no push-pull crosses; gap-triggered repair is the second). False: once. For
  // comparing the two in the simulator (docs/results.md).
  bool relay_resend = true;
};

// Relay: the number of groups for `members` members (including us): the smallest power of two
// g with 2 g^2 >= members, so groups hold about g members: 1 up to 2 members, 4 up to 32, 16
// up to 512, 32 up to 2,048, 64 up to 8,192.
uint32_t relay_groups_for(size_t members);
// Relay: the group of node `id` among `groups` (a hash of the id; the same on every member).
uint32_t relay_group_of(std::string_view id, uint32_t groups);

struct NodeStats {
  uint64_t checks = 0, allowed = 0, denied = 0;
  uint64_t rounds = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t dropped_unknown_sender = 0;  // static membership: sender not in the peers file
  uint64_t dropped_self = 0;            // a message claiming our own id
  uint64_t batches_sent = 0;            // batch copies put in messages
  uint64_t queue_overflow = 0;          // gossip: batches dropped from a full retransmit queue
  uint64_t queue_expired = 0;           // gossip: queued batches older than retention, unsent
  uint64_t push_pulls = 0;              // digests sent
  uint64_t repairs_sent = 0;            // batches sent in answer to a digest
  uint64_t early_seals = 0;             // times check() sealed before the round (early_seal_keys)
  uint64_t dropped_wrong_source = 0;    // came from an address other than the sender's own
  uint64_t digests_ignored = 0;         // a digest (part) already answered: a replay
  uint64_t repairs_capped = 0;          // batches left out: the sender's repair budget was spent
  uint64_t relayed = 0;                 // relay: other groups' batches summed for our group
  uint64_t relay_mismatch = 0;          // relay: messages whose sender counts other groups (or
                                        // runs another mode): batches and digest dropped
  uint64_t regroupings = 0;             // times the mode in use (auto) or the count of groups
                                        // changed (what we held stops being repaired)
  uint64_t repair_requests = 0;         // relay: repair requests sent for a gap (node_repair.cc)
  uint64_t repair_gave_up = 0;          // relay: gaps given up after 20 requests
  uint64_t row_requests = 0;            // rows asked for before failing a silent member
  uint64_t row_answers = 0;             // rows sent in answer to such a request
  // Balances from a peer on start (NodeOptions::sync_deadline_ns).
  uint64_t sync_denied = 0;        // checks denied while waiting for them (DenyReason::kSyncing)
  uint64_t sync_taken = 0;         // transfers taken (0 or 1)
  uint64_t sync_balances = 0;      // balances a transfer lowered here
  uint64_t sync_gave_up = 0;       // times no peer answered by the deadline (0 or 1)
  uint64_t sync_all_starting = 0;  // times every live member was starting too (0 or 1)
  uint64_t sync_attempts = 0;      // transfers asked for (one per peer tried)
  uint64_t sync_served = 0;        // transfers prepared for others
  uint64_t sync_pages_sent = 0;    // pages sent to others
  uint64_t sync_refused = 0;       // requests not served: waiting for our own, or too many at once
  uint64_t sync_ignored = 0;       // pages of no transfer of ours (another session, a replay)
  // Balances from a member that comes back after a partition longer than the retention window.
  uint64_t heal_attempts = 0;  // transfers asked for
  uint64_t heal_taken = 0;     // taken
  uint64_t heal_balances = 0;  // long-window balances they lowered here
  uint64_t heal_gave_up = 0;   // the member did not answer (or was starting)
  // Resets (Node::reset).
  uint64_t resets = 0;                  // made here
  uint64_t resets_applied = 0;          // of keys, made here or heard of (each epoch once)
  uint64_t reset_skipped = 0;           // entries not counted: admitted before a reset of their key
  uint64_t reset_epochs_forgotten = 0;  // epochs dropped at the bound (kMaxResetEpochs)
  // Top-K (issue 41).
  uint64_t top_units_sealed = 0;         // units this node published
  uint64_t top_units_held = 0;           // other members' units held now
  uint64_t top_units_dropped = 0;        // units not kept: kMaxHeldTopUnits held, or one too large
  uint64_t top_rules_refused = 0;        // updates of rules beyond NodeOptions::top.max_rules
  uint64_t top_denials_unharvested = 0;  // KeyTableStats::denials_unharvested
};

// What a node carries across a restart (issue 35; tollgated's --state-dir): the balances of its
// buckets that are not full, and the ledger positions they include, so that after the restart
// batches already counted in them are not applied again (its own previous life's included).
struct NodeState {
  NodeId node_id;
  uint64_t incarnation = 0;                               // the life that exported it
  std::vector<std::pair<std::string, int64_t>> balances;  // key, balance in microtokens
  Digest positions;
  std::vector<ResetMark> resets;  // the reset epoch of every key known to have been reset
};

class Node : private ResetFilter {
 public:
  Node(NodeOptions options, std::shared_ptr<const RuleSet> rules, Outbox& outbox, Random& random);
  ~Node();

  // The local admission check: no network, answers from this node's bucket (KeyTable::allow:
  // the Decision carries the governing limit). With options().keys.concurrent, check and
  // check_all may be called from any number of threads at once, while one owner thread calls
  // everything else; otherwise everything is the owner's.
  Decision check(std::string_view key, int64_t cost, MonoNanos now_ns);
  // Several checks, all or nothing (KeyTable::allow_all): true if every one passed and all were
  // charged; false if none was charged.
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out, MonoNanos now_ns);
  // Gives `tokens` back to the key's bucket, never above burst, and spreads the refund like any
  // consumption (KeyTable::refund). Callable like check().
  Decision refund(std::string_view key, int64_t tokens, MonoNanos now_ns);
  // Makes `key` full again on every node (tollgate reset KEY; docs/design.md 6.6): a new reset
  // epoch of the key, above any this node knows, fills its bucket here and drops its unsealed
  // consumption, and goes out with the next batch; consumption that any node admitted before it
  // learned of the reset charges no fresh bucket. The owner's. Returns the tokens the bucket
  // holds now, or nullopt when no rule governs the key here (the reset goes out all the same).
  std::optional<int64_t> reset(std::string_view key, MonoNanos now_ns);
  // The key's reset epoch as this node knows it (0: never reset).
  uint64_t reset_epoch(std::string_view key) const;
  // Concurrency leases (LeaseTable): callable from any thread, like check().
  LeaseGrant acquire(std::string_view key, int64_t count, int64_t ttl_ns, MonoNanos now_ns) {
    return leases_.acquire(key, count, ttl_ns, now_ns);
  }
  bool release(const LeaseId& id) { return leases_.release(id); }
  // Leases by key, for Envoy (LeaseTable::acquire_anonymous, owe_release, release_anonymous).
  LeaseGrant acquire_anonymous(std::string_view key, int64_t count, int64_t ttl_ns, MonoNanos now_ns) {
    return leases_.acquire_anonymous(key, count, ttl_ns, now_ns);
  }
  void owe_release(std::string_view key, int64_t count, MonoNanos now_ns) { leases_.owe_release(key, count, now_ns); }
  AnonymousRelease release_anonymous(std::string_view key, int64_t count, MonoNanos now_ns) {
    return leases_.release_anonymous(key, count, now_ns);
  }
  std::optional<MonoNanos> renew(const LeaseId& id, int64_t ttl_ns, MonoNanos now_ns) {
    return leases_.renew(id, ttl_ns, now_ns);
  }
  const LeaseTable& leases() const { return leases_; }
  std::vector<std::pair<std::string, RuleLeases>> rule_leases() const { return leases_.rule_leases(); }
  InflightViewStats inflight_stats() const { return inflight_.stats(); }

  // Concurrent: seals what early_seal_keys allows now, on the owner's thread, after
  // NodeOptions::seal_wanted asked for it.
  void seal_early(MonoNanos now_ns);

  // One round; call every options().interval_ns.
  void tick(MonoNanos now_ns);
  // A message from the network, decoded and authenticated by the caller.
  void receive(const GossipMessage& message, MonoNanos now_ns);
  // Starts loading what receive(message) will look up first (the membership index entries of
  // the sender and of the first rows), for a caller that knows which message comes next: the simulator,
  // whose thousand nodes' tables fit in no cache, runs one event while the next one's loads are
  // on their way. Changes nothing.
  void prefetch(const GossipMessage& message) const;

  // Static membership: the peers file's contents (reloaded).
  void set_peers(const std::vector<PeerSpec>& peers, MonoNanos now_ns);
  // Sends what was admitted since the last round and announces to every live member that we
  // leave (call before exiting).
  void leave(MonoNanos now_ns);
  // New rules: unchanged limits keep their buckets (see KeyTable::replace_rules).
  void replace_rules(std::shared_ptr<const RuleSet> rules, MonoNanos now_ns);

  // This node's state to carry across a restart (the owner's thread; visits every key).
  NodeState export_state(MonoNanos now_ns);
  // The same a slice at a time, so that a large table does not hold checks up: begin_export()
  // takes the ledger positions, then each continue_export() adds the unfull balances of up to
  // `max_entries` keys and returns true once all are in. Positions are taken first: a batch
  // applied during the walk may be counted in some balances but not in the positions, and is
  // then applied again to those after the restart (too much debt, never a fresh burst).
  // (It seals what this node admitted and has not sealed yet first: that consumption is in its
  // balances, so its batch must be in the positions, or whoever takes them counts it twice.)
  NodeState begin_export(MonoNanos now_ns);
  bool continue_export(NodeState& state, uint64_t* cursor, size_t max_entries, MonoNanos now_ns);
  // A previous life's state, `down_ns` after it was exported (wall time; refill is counted from
  // it): each balance of a key a rule still governs comes back, refilled by down_ns under the
  // rule in force now, and the ledger takes its positions. Call before the first check and the
  // first message. Returns the balances restored (keys no rule governs, or beyond max_keys, are
  // not).
  size_t import_state(const NodeState& state, MonoNanos now_ns, int64_t down_ns);

  // True while waiting for balances from a peer (NodeOptions::sync_deadline_ns). Any thread.
  bool syncing() const { return syncing_.flag.load(std::memory_order_relaxed); }

  const NodeOptions& options() const { return options_; }
  // The mode in use: options().mode, or for kAuto the one it chose (kGossip or kRelay).
  DisseminationMode mode() const { return mode_; }
  // Relay: the count of groups in use (0 in other modes).
  uint32_t relay_groups() const { return groups_; }
  NodeStats stats() const;
  // The counters of every rule checked at least once since start-up, by RuleSet::label. A rule
  // keeps its counts across reloads under the same label (KeyTable::rule_counters).
  std::vector<std::pair<std::string, RuleCounters>> rule_counters() const { return table_.rule_counters(); }
  const KeyTable& table() const { return table_; }
  KeyTable& table() { return table_; }
  // This node's own top keys per rule (NodeOptions::top). The owner's.
  const RuleTops& tops() const { return tops_; }
  // Top-K cluster-wide (issue 41): per rule (all of them when `rule` is empty, busiest first),
  // this node's own summaries merged with the latest units of the members live now, the `k`
  // heaviest keys of each metric with their bounds. The owner's; top_parts() is what to take on
  // the owner's thread when the merge (at 1,000 members, tens of thousands of keys) should run
  // on another.
  std::vector<RuleTop> top(std::string_view rule, size_t k, MonoNanos now_ns) const {
    return merge_top_parts(top_parts(rule, now_ns), k);
  }
  std::vector<TopParts> top_parts(std::string_view rule, MonoNanos now_ns) const;
  // Other members' units held at most, and the largest held (top_units_dropped counts those
  // refused beyond either; ours stay under 600 bytes): with top_memory_bound(), what top-K can
  // hold whatever peers send.
  static constexpr size_t kMaxHeldTopUnits = 8192;
  static constexpr size_t kMaxHeldTopUnitBytes = 1200;
  static size_t top_memory_bound(const NodeOptions& options);
  // What leases can hold: this node's (LeaseTable) and the other members' counts (InflightView).
  static size_t lease_memory_bound(const NodeOptions& options);
  const Ledger& ledger() const { return ledger_; }
  const Membership& membership() const { return membership_; }

 private:
  static KeyTableOptions table_options(const NodeOptions& o, Random& random);
  void after_check(MonoNanos now);  // early sealing (early_seal_keys)
  struct Queued {
    BatchPtr batch;
    uint32_t transmits_left;
    MonoNanos queued_at;
  };
  // A message from us carrying `batches` and membership rows; mutable until it is sent.
  // `rows`: membership rows at most (ours included); 0: member_rows; kNoRows: none.
  static constexpr size_t kNoRows = SIZE_MAX;
  std::shared_ptr<GossipMessage> message(std::vector<BatchPtr> batches, size_t rows = 0);
  // Our ledger's digest (relay: of our group's origins only).
  Digest digest() const;
  // Puts our digest in `m` and asks the receiver to answer with what we lack and its own.
  void ask_for_digest_reply(GossipMessage& m) const;
  // The round's steps, in order (see the top of this file).
  void advance_membership(MonoNanos now_ns);
  // Asks for the rows of members about to be failed on silence (Membership::tick's `confirm`):
  // the member itself, and two members that may have heard from it.
  void confirm_members(const std::vector<NodeId>& ids);
  void answer_row_request(const GossipMessage& m);
  std::vector<BatchPtr> seal_round(MonoNanos now_ns);
  // Leases: expires what is due, seals changed counts (or a refresh of all) onto sealed_.
  void seal_leases(MonoNanos now_ns);
  // Which members' counts count, after membership may have changed.
  void recount_leases();
  void lease_counts(const Batch& batch, MonoNanos now_ns) override;
  void disseminate(const std::vector<const MemberInfo*>& live, std::vector<BatchPtr> fresh, MonoNanos now_ns);
  void push_pull(const std::vector<const MemberInfo*>& live, MonoNanos now_ns);
  void probe(MonoNanos now_ns);
  void housekeeping(MonoNanos now_ns);
  // k distinct indices of 0..n-1 (all of them if k >= n), uniformly at random.
  std::vector<size_t> pick_distinct(size_t n, size_t k);
  // Seals up to `max_keys` keys' unsealed consumption into batches, onto sealed_.
  void seal(MonoNanos now_ns, size_t max_keys);
  // Counts what seal() took (pending_, activity_) into tops_, then leaves in pending_ only the
  // keys with tokens to seal.
  void count_tops(MonoNanos now_ns);
  void label_rules();  // top_labels_ for the rules in force
  // Seals this node's units when due (NodeOptions::top_gossip_bytes).
  void publish_tops(MonoNanos now_ns);
  void top_unit(const Batch& batch, MonoNanos now_ns) override;
  // Forgets units past their time and those of members forgotten.
  void expire_tops(MonoNanos now_ns);
  // Keeps a just-sealed batch on sealed_ (for the round, or leave()) and, in gossip, queues it.
  void keep_sealed(BatchPtr b, MonoNanos now_ns);
  void send(const std::string& address, const GossipMessagePtr& m);
  void enqueue(const BatchPtr& b, MonoNanos now_ns);
  // Copies of a newly queued batch to send, from the live members counted at the last
  // tick (not recounted per batch: enqueue runs for every batch sealed or applied).
  uint32_t retransmits() const;

  // What this node answered to one sender's digests: the last message (parts of a message share
  // its message_seq and differ in where their digest starts), and the repair batches sent in
  // the current push-pull interval.
  struct DigestsAnswered {
    uint64_t incarnation = 0;
    uint64_t message_seq = 0;
    std::vector<NodeId> parts;  // digest_from of each part of that message answered
    MonoNanos window_start = 0;
    size_t repairs_in_window = 0;
    // The last message whose row request was answered (a replayed request draws nothing).
    std::pair<uint64_t, uint64_t> row_asked{0, 0};  // (incarnation, message_seq)
  };
  // True if the digest in `m` is new (not a part already answered); records it.
  bool first_time_asked(const GossipMessage& m, DigestsAnswered& answered);
  // True if `m` came from where its sender lives (GossipMessage::received_from; unknown passes).
  bool from_senders_address(const GossipMessage& m) const;

  NodeOptions options_;
  Outbox& outbox_;
  Random& random_;
  KeyTable table_;
  Ledger ledger_;
  Membership membership_;
  LeaseTable leases_;
  InflightView inflight_;
  uint64_t lease_live_version_ = UINT64_MAX;  // membership's live_version at the last recount
  uint64_t lease_members_seen_ = 0;           // joined + recovered + restarted at the last recount
  bool lease_refresh_wanted_ = false;
  MonoNanos next_lease_refresh_ns_ = 0;
  MonoNanos next_inflight_expire_ns_ = 0;
  std::deque<Queued> queue_;  // gossip retransmit queue
  MonoNanos next_push_pull_ns_ = 0;
  MonoNanos next_seed_probe_ns_ = 0;
  bool first_round_ = true;
  size_t live_members_ = 0;
  NodeStats stats_;
  // Concurrent: seal_wanted called, seal_early not yet. Read by every check while a flood of keys
  // waits to be sealed, so on a cache line of its own (the owner writes stats_ and the rest).
  struct alignas(64) SealWanted {
    std::atomic<bool> flag{false};
  } seal_wanted_;
  std::vector<ConsumptionEntry> pending_;  // reused across rounds
  std::vector<KeyActivity> activity_;      // pending_'s denials and rules, when tops_ counts
  RuleTops tops_;
  std::vector<std::string> top_labels_;  // RuleSet::label of each rule index in force
  struct HeldTop {
    uint64_t incarnation = 0, seq = 0;  // of the batch that carried it
    std::shared_ptr<const TopUnit> unit;
    MonoNanos expires = 0;
  };
  // Other members' latest units, by origin, then by rule and metric (the rule's label followed
  // by one byte, the metric).
  std::unordered_map<NodeId, std::unordered_map<std::string, HeldTop>> peer_tops_;
  MonoNanos next_top_publish_ns_ = 0;
  MonoNanos next_top_expiry_ns_ = 0;
  uint64_t message_seq_ = 0;  // of the last message built
  // By sender; an entry goes when membership forgets the sender, so this is bounded by it.
  std::unordered_map<NodeId, DigestsAnswered> digests_answered_;
  std::vector<BatchPtr> sealed_;  // sealed since the last round, not sent yet

  // Relay (DisseminationMode::kRelay).
  struct RelayPlan;  // who our group is and whom we send to in each other group
  void disseminate_relay(std::vector<BatchPtr> fresh, MonoNanos now);
  void plan_relay();
  // Seals what we relay (relay_parts_) into batches of relay_origin(id), onto `out`.
  void seal_relay(MonoNanos now, std::vector<BatchPtr>& out);
  // True if a message from `m`'s sender may be relayed and repaired with ours (same mode and
  // group count).
  bool relay_compatible(const GossipMessage& m) const;
  bool in_our_group(const NodeId& origin) const;
  // Relay repair (node_repair.cc): gaps in what a mate, or a sender whose contact we are, sent
  // us are asked for again; as a sender, the seqs each contact was sent.
  struct Repair;
  std::unique_ptr<Repair> repair_;
  void forget_repairs();                     // at a regrouping
  void forget_repairs_of(const NodeId& id);  // membership forgot the member
  // Notes that a message's sender sent us `relay`-ed batches (a stint) or our group's batches
  // with a gap here; after applying them.
  void note_gaps(const GossipMessage& m, bool relay, MonoNanos now);
  void ask_for_repairs(MonoNanos now);  // each round
  // Records that `fresh` goes to `contact`, our contact in `group`; returns the current stint's
  // (first, last) seq to tell it ((0, 0): none).
  std::pair<uint64_t, uint64_t> record_stint(uint32_t group, const MemberInfo& contact,
                                             const std::vector<BatchPtr>& fresh, MonoNanos now);
  // True if our batch `b` went to that life of `contact` (so it may have it again).
  bool sent_to(const NodeId& contact, uint64_t contact_incarnation, const Batch& b) const;
  bool lacks_told(const NodeId& sender, uint64_t incarnation, uint64_t since, uint64_t through) const;
  // A seq missing below the highest seen of the mate's own or relay batches, or (told_own,
  // told_relay: what the mate said its last seqs were in its life `told_incarnation`; 0: none
  // said) one up to the last.
  bool lacks_from_mate(const NodeId& mate, uint64_t told_incarnation = 0, uint64_t told_own = 0,
                       uint64_t told_relay = 0) const;
  const MemberInfo* random_mate();  // of our group (relay plan); nullptr if none
  // mode_, groups_ and our_group_, from the members known, and `offered`, the count of groups a
  // message's sender uses (0: it does not relay).
  void update_groups(uint32_t offered = 0);
  uint32_t groups_ = 0;
  uint32_t our_group_ = 0;
  std::unique_ptr<RelayPlan> plan_;
  DisseminationMode mode_;                                      // in use: never kAuto
  std::vector<BatchPtr> relay_parts_;                           // other groups' batches applied, not relayed yet
  std::vector<MemberRecord> relay_rows_;                        // their senders' own rows, for our group
  std::vector<BatchPtr> previous_fresh_;                        // our batches of the last round, sent once to...
  std::vector<std::pair<NodeId, uint64_t>> previous_contacts_;  // ...these contacts (id, life; by group)
  uint64_t relay_round_ = 0;

  // Resets (docs/design.md 6.6): the epoch of every key reset, at most kMaxResetEpochs (the
  // smallest go first beyond it), and those made here not sealed yet.
  static constexpr size_t kMaxResetEpochs = 65536;
  StringMap<uint64_t> epochs_;  // looked up by view: once a key was reset, every merged entry asks
  std::vector<ResetMark> resets_to_seal_;
  // Takes a reset: false if this node knew it (or a later one) already.
  bool apply_reset(const ResetMark& mark, MonoNanos now);
  // ResetFilter, for the ledger's merges.
  void reset(const ResetMark& mark, MonoNanos now_ns) override { apply_reset(mark, now_ns); }
  bool counts(const ConsumptionEntry& entry, MonoNanos now_ns) override;
  // Tags each entry with its key's epoch (consumption sealed now was admitted after it).
  void tag_epochs(std::vector<ConsumptionEntry>& entries) const;
  // Resets cut into runs that each fit one batch (split_for_sealing's measure).
  std::vector<std::vector<ResetMark>> split_resets(std::vector<ResetMark> resets) const;

  // Balances from a peer on start (node_sync.cc).
  struct Sync;
  std::unique_ptr<Sync> sync_;
  struct alignas(64) Syncing {  // read by every check, as seal_wanted_
    std::atomic<bool> flag{false};
    std::atomic<uint64_t> denied{0};
  } syncing_;
  // Denies a check of a long-window key while syncing (see NodeOptions::sync_deadline_ns).
  std::optional<Decision> deny_while_syncing(std::string_view key);
  void sync_round(MonoNanos now);  // asks (or gives up), and prepares the transfers we serve
  bool start_transfer(MonoNanos now, int64_t retry_ns);
  void serve_sync(const GossipMessage& m, MonoNanos now);
  void take_sync_page(const GossipMessage& m, MonoNanos now);
  void finish_sync(MonoNanos now);
  // Serving: the next slice of a transfer's export; once all are in, its pages.
  void prepare_sync(SyncServed& t, MonoNanos now);
  void stop_syncing();
  // A member came back after a partition longer than the ledger's retention: ask it for a transfer.
  void heal_from(const GossipMessage& m, MonoNanos now);
  // True for a limit whose bucket takes longer than the ledger's retention to refill from its floor.
  bool long_window(const Limit& limit) const;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_CORE_NODE_H_
