#include "core/lease_table.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "tollgate/rules.h"
#include "util/heap_bytes.h"
#include "util/keyed_hash.h"

namespace tollgate {
namespace {

constexpr size_t kShards = 16;
// A fixed key for tests and benches (LeaseTableOptions::hash_key unset).
constexpr std::array<uint64_t, 2> kPublicKey{0x6c65617365733a31ull, 0x7461626c65206b65ull};

// Compares two ids in time independent of where they differ: an id is a secret (whoever knows
// it can release the lease), and a lookup must not tell a caller how much of a guess was right.
bool same_id(const LeaseId& a, const LeaseId& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.bytes.size(); ++i) diff |= uint8_t(a.bytes[i] ^ b.bytes[i]);
  return diff == 0;
}

struct IdHash {
  size_t operator()(const LeaseId& id) const {
    uint64_t h = 0;
    std::memcpy(&h, id.bytes.data() + 8, sizeof h);  // random bytes: spread as they are
    return size_t(h);
  }
};
// The expiry heap's order: the soonest on top.
struct Later {
  bool operator()(const std::pair<MonoNanos, LeaseId>& a, const std::pair<MonoNanos, LeaseId>& b) const {
    return a.first > b.first;
  }
};
struct IdEqual {
  bool operator()(const LeaseId& a, const LeaseId& b) const { return same_id(a, b); }
};

}  // namespace

const char* lease_outcome_name(LeaseOutcome o) {
  switch (o) {
    case LeaseOutcome::kGranted:
      return "granted";
    case LeaseOutcome::kUnlimited:
      return "unlimited";
    case LeaseOutcome::kOverLimit:
      return "over the concurrency limit";
    case LeaseOutcome::kNever:
      return "count exceeds the concurrency limit";
    case LeaseOutcome::kTooManyLeases:
      return "too many leases held";
    case LeaseOutcome::kInvalid:
      return "invalid lease request";
  }
  return "unknown";
}

std::string LeaseId::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

std::optional<LeaseId> LeaseId::parse(std::string_view hex) {
  LeaseId id;
  if (hex.size() != id.bytes.size() * 2) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < id.bytes.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    id.bytes[i] = uint8_t(hi << 4 | lo);
  }
  if (id.bytes[0] >= kShards) return std::nullopt;
  return id;
}

struct LeaseTable::Counters {
  std::atomic<uint64_t> acquired{0}, denied{0}, refused{0}, released{0}, expired{0}, renewed{0}, unknown{0};
  std::atomic<uint64_t> anonymous_acquired{0}, anonymous_released{0}, owed_settled{0}, anonymous_unmatched{0},
      owed_dropped{0};
};

struct LeaseTable::Shard {
  struct KeyState {
    int64_t own = 0;
    int64_t remote = 0;
    bool changed = false;  // own changed since take_changes
    // rule_leases: the key's concurrency rule under rules version `matched` (0: not yet).
    uint32_t matched = 0;
    uint32_t rule = RuleSet::kUnlimited;
  };
  struct Lease {
    std::string key;
    int64_t count = 0;
    MonoNanos expires_ns = 0;
  };
  struct KeyHash {
    using is_transparent = void;
    const KeyedHash* hash;
    size_t operator()(std::string_view s) const { return size_t((*hash)(s)); }
  };

  using Keys = std::unordered_map<std::string, KeyState, KeyHash, std::equal_to<>>;
  // A key's leases by key (acquire_anonymous), oldest first, and the release it owes.
  struct Queue {
    // Oldest first from `head` (a vector: a key owing a release only allocates nothing); some
    // may be gone already (expired, released by id): skipped when reached.
    std::vector<LeaseId> ids;
    size_t head = 0;
    int64_t owed = 0;
    MonoNanos owed_until = 0;
    bool empty() const { return head == ids.size(); }
    const LeaseId& front() const { return ids[head]; }
    void pop_front() {
      if (++head == ids.size()) {
        ids.clear();
        head = 0;
      } else if (head >= 64 && 2 * head >= ids.size()) {
        ids.erase(ids.begin(), ids.begin() + long(head));
        head = 0;
      }
    }
  };
  using Queues = std::unordered_map<std::string, Queue, KeyHash, std::equal_to<>>;

  explicit Shard(const KeyedHash* hash) : keys(16, KeyHash{hash}), queues(16, KeyHash{hash}) {}

  // Drops the front ids whose lease is gone, and the owed count once it has expired.
  void tidy(Queue& q, MonoNanos now) {
    while (!q.empty() && !leases.contains(q.front())) q.pop_front();
    if (q.owed > 0 && now >= q.owed_until) q.owed = 0;
  }

  // Drops a key's state once nothing holds it.
  void maybe_erase(Keys::iterator it) {
    if (it->second.own == 0 && it->second.remote == 0 && !it->second.changed) keys.erase(it);
  }
  // Moves a key's own count, and lists the key for take_changes once.
  void add_own(Keys::iterator it, int64_t delta) {
    it->second.own += delta;
    if (!it->second.changed) {
      it->second.changed = true;
      changed.push_back(it->first);
    }
  }
  // Frees a lease's slots (the lease keeps its key in `keys` until then).
  void take(const Lease& lease) { add_own(keys.find(lease.key), -lease.count); }

  alignas(64) mutable std::mutex mu;
  Keys keys;
  std::unordered_map<LeaseId, Lease, IdHash, IdEqual> leases;
  Queues queues;
  MonoNanos next_sweep_ns = 0;
  std::vector<std::string> changed;  // keys whose own count changed, once each
  // (expiry, id), a min-heap; renewals push anew and leave the old entry stale (skipped).
  std::vector<std::pair<MonoNanos, LeaseId>> expiry;
};

size_t LeaseTable::bound_bytes(const LeaseTableOptions& o, size_t remote_keys) {
  const size_t leases = o.max_leases;
  const size_t key = heap_string_bytes(o.max_key_bytes) - sizeof(std::string);  // the key's block, if any
  // An unordered_map entry: its node (next pointer, value) in a block, and a bucket pointer
  // array (at most one per entry at the default load factor; growing, the old array and one of
  // twice its size are both held: three per entry).
  auto entry = [](size_t value) { return heap_block_bytes(sizeof(void*) + value) + 3 * sizeof(void*); };
  using KeyEntry = std::pair<const std::string, Shard::KeyState>;
  using LeaseEntry = std::pair<const LeaseId, Shard::Lease>;
  using QueueEntry = std::pair<const std::string, Shard::Queue>;
  size_t b = 0;
  b += leases * (entry(sizeof(LeaseEntry)) + key);                // the leases, each with its key
  b += leases * 2 * 2 * sizeof(std::pair<MonoNanos, LeaseId>);    // expiry: compacted at 2x, vector growth 2x
  b += (leases + remote_keys) * (entry(sizeof(KeyEntry)) + key);  // a key state per key
  b += leases * 2 * (sizeof(std::string) + key);                  // changed: each own key once, growth 2x
  b += leases * (entry(sizeof(QueueEntry)) + key + 2 * 2 * sizeof(LeaseId));  // queues by key, and owed ones
  return b + kShards * sizeof(Shard);
}

LeaseTable::LeaseTable(LeaseTableOptions options, IdSource ids)
    : options_(std::move(options)),
      ids_(std::move(ids)),
      hash_(std::make_unique<KeyedHash>(options_.hash_key.value_or(kPublicKey))),
      counters_(std::make_unique<Counters>()) {
  for (size_t i = 0; i < kShards; ++i) shards_.push_back(std::make_unique<Shard>(hash_.get()));
}

LeaseTable::~LeaseTable() = default;

void LeaseTable::set_rules(std::shared_ptr<const RuleSet> rules) {
  {
    std::lock_guard lock(rules_mu_);
    rules_.swap(rules);
  }
  rules_version_.fetch_add(1, std::memory_order_release);  // seen with a new version: these rules
}

void LeaseTable::set_share(uint32_t reachable, uint32_t known) {
  const uint64_t packed = known == 0 || reachable >= known ? 0 : uint64_t(reachable) << 32 | known;
  share_.store(packed, std::memory_order_relaxed);
}

std::shared_ptr<const RuleSet> LeaseTable::current_rules() const {
  std::lock_guard lock(rules_mu_);
  return rules_;
}

LeaseTable::Shard& LeaseTable::shard_of(std::string_view key, uint8_t* index) const {
  // The top bits: the shard's map buckets take the low ones.
  const uint8_t i = uint8_t((*hash_)(key) >> 60) % kShards;
  if (index) *index = i;
  return *shards_[i];
}

int64_t LeaseTable::ttl_for(int64_t requested_ns, int64_t rule_ns) const {
  return std::clamp<int64_t>(requested_ns > 0 ? requested_ns : rule_ns, 1, options_.max_ttl_ns);
}

LeaseGrant LeaseTable::acquire(std::string_view key, int64_t count, int64_t ttl_ns, MonoNanos now) {
  return grant(key, count, ttl_ns, now, false);
}

LeaseGrant LeaseTable::grant(std::string_view key, int64_t count, int64_t ttl_ns, MonoNanos now, bool by_key) {
  LeaseGrant g;
  if (count < 1 || count > kMaxTokens || key.empty() || key.size() > options_.max_key_bytes || ttl_ns < 0) {
    counters_->refused.fetch_add(1, std::memory_order_relaxed);
    return g;  // kInvalid
  }
  const std::shared_ptr<const RuleSet> rules = current_rules();
  g.rule = rules ? rules->concurrency_match(key) : RuleSet::kUnlimited;
  if (g.rule == RuleSet::kUnlimited) {
    g.outcome = LeaseOutcome::kUnlimited;
    return g;
  }
  const ConcurrencyRule& rule = rules->concurrency_rules()[g.rule];
  g.limit = rule.limit;
  if (count > rule.limit) {
    g.outcome = LeaseOutcome::kNever;
    g.in_flight = in_flight(key);
    counters_->denied.fetch_add(1, std::memory_order_relaxed);
    return g;
  }
  // The limit this node grants up to: the whole one, or its side's share (set_share).
  int64_t limit = rule.limit;
  if (const uint64_t share = share_.load(std::memory_order_relaxed); share != 0) {
    limit = int64_t(__extension__(unsigned __int128)(rule.limit) * (share >> 32) / (share & 0xffffffffu));
  }
  uint8_t index = 0;
  Shard& s = shard_of(key, &index);
  std::lock_guard lock(s.mu);
  auto it = s.keys.find(key);
  const int64_t seen = it == s.keys.end() ? 0 : it->second.own + it->second.remote;
  if (seen + count > limit) {
    g.outcome = LeaseOutcome::kOverLimit;
    g.in_flight = seen;
    counters_->denied.fetch_add(1, std::memory_order_relaxed);
    return g;
  }
  // max_leases: reserved before the lease exists, so threads never hold more than it together.
  if (held_.fetch_add(1, std::memory_order_relaxed) >= options_.max_leases) {
    held_.fetch_sub(1, std::memory_order_relaxed);
    g.outcome = LeaseOutcome::kTooManyLeases;
    g.in_flight = seen;
    counters_->refused.fetch_add(1, std::memory_order_relaxed);
    return g;
  }
  g.id.bytes[0] = index;
  do {
    ids_(g.id.bytes.data() + 1, g.id.bytes.size() - 1);
  } while (s.leases.contains(g.id));
  const int64_t ttl = ttl_for(ttl_ns, rule.ttl_ns);
  g.expires_ns = now + ttl;
  g.ttl_ns = ttl;
  if (it == s.keys.end()) it = s.keys.emplace(std::string(key), Shard::KeyState{}).first;
  s.add_own(it, count);
  s.leases.emplace(g.id, Shard::Lease{it->first, count, g.expires_ns});
  s.expiry.emplace_back(g.expires_ns, g.id);
  std::push_heap(s.expiry.begin(), s.expiry.end(), Later{});
  g.in_flight = seen + count;
  g.outcome = LeaseOutcome::kGranted;
  counters_->acquired.fetch_add(1, std::memory_order_relaxed);
  if (by_key) {  // queued under the same lock: a release by key never misses a lease granted
    auto q = s.queues.find(key);
    if (q == s.queues.end()) {
      queued_keys_.fetch_add(1, std::memory_order_relaxed);
      q = s.queues.emplace(std::string(key), Shard::Queue{}).first;
    }
    s.tidy(q->second, now);
    q->second.ids.push_back(g.id);
    counters_->anonymous_acquired.fetch_add(1, std::memory_order_relaxed);
  }
  return g;
}

bool LeaseTable::release(const LeaseId& id) {
  if (id.bytes[0] >= kShards) {
    counters_->unknown.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  Shard& s = *shards_[id.bytes[0]];
  std::lock_guard lock(s.mu);
  auto it = s.leases.find(id);
  if (it == s.leases.end()) {
    counters_->unknown.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  s.take(it->second);
  s.leases.erase(it);
  held_.fetch_sub(1, std::memory_order_relaxed);
  counters_->released.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::optional<MonoNanos> LeaseTable::renew(const LeaseId& id, int64_t ttl_ns, MonoNanos now) {
  if (id.bytes[0] >= kShards || ttl_ns < 0) {
    counters_->unknown.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  const std::shared_ptr<const RuleSet> rules = current_rules();
  Shard& s = *shards_[id.bytes[0]];
  std::lock_guard lock(s.mu);
  auto it = s.leases.find(id);
  if (it == s.leases.end() || it->second.expires_ns <= now) {
    counters_->unknown.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  // The rule's TTL as in force now; a key no rule governs any more gets the default one.
  const uint32_t rule = rules ? rules->concurrency_match(it->second.key) : RuleSet::kUnlimited;
  const int64_t rule_ttl =
      rule != RuleSet::kUnlimited ? rules->concurrency_rules()[rule].ttl_ns : ConcurrencyRule{}.ttl_ns;
  it->second.expires_ns = now + ttl_for(ttl_ns, rule_ttl);
  s.expiry.emplace_back(it->second.expires_ns, id);
  std::push_heap(s.expiry.begin(), s.expiry.end(), Later{});
  // Renewals leave stale entries behind: compact once they outnumber the leases.
  if (s.expiry.size() > 2 * s.leases.size() + 64) {
    std::erase_if(s.expiry, [&](const auto& e) {
      auto l = s.leases.find(e.second);
      return l == s.leases.end() || l->second.expires_ns != e.first;
    });
    std::make_heap(s.expiry.begin(), s.expiry.end(), Later{});
  }
  counters_->renewed.fetch_add(1, std::memory_order_relaxed);
  return it->second.expires_ns;
}

int64_t LeaseTable::in_flight(std::string_view key) const {
  Shard& s = shard_of(key, nullptr);
  std::lock_guard lock(s.mu);
  auto it = s.keys.find(key);
  return it == s.keys.end() ? 0 : it->second.own + it->second.remote;
}

LeaseGrant LeaseTable::acquire_anonymous(std::string_view key, int64_t count, int64_t ttl_ns, MonoNanos now) {
  return grant(key, count, ttl_ns, now, true);
}

void LeaseTable::owe_release(std::string_view key, int64_t count, MonoNanos now) {
  if (count < 1 || key.empty() || key.size() > options_.max_key_bytes) return;
  Shard& s = shard_of(key, nullptr);
  std::lock_guard lock(s.mu);
  auto it = s.queues.find(key);
  if (it == s.queues.end()) {
    // Bounded like the leases: a flood of denials over distinct keys records at most as many.
    if (queued_keys_.load(std::memory_order_relaxed) >= options_.max_leases) {
      counters_->owed_dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queued_keys_.fetch_add(1, std::memory_order_relaxed);
    it = s.queues.emplace(std::string(key), Shard::Queue{}).first;
  }
  Shard::Queue& q = it->second;
  s.tidy(q, now);
  q.owed = std::min(q.owed + count, kMaxTokens);
  q.owed_until = now + kOwedReleaseNs;
}

AnonymousRelease LeaseTable::release_anonymous(std::string_view key, int64_t count, MonoNanos now) {
  AnonymousRelease r;
  Shard& s = shard_of(key, nullptr);
  std::lock_guard lock(s.mu);
  auto it = s.queues.find(key);
  if (it != s.queues.end() && count > 0) {
    Shard::Queue& q = it->second;
    s.tidy(q, now);
    r.owed = std::min(q.owed, count);
    q.owed -= r.owed;
    int64_t left = count - r.owed;
    while (left > 0 && !q.empty()) {
      auto lease = s.leases.find(q.front());
      q.pop_front();
      if (lease == s.leases.end()) continue;  // expired, or released by id
      left -= lease->second.count;
      r.released += lease->second.count;
      s.take(lease->second);
      s.leases.erase(lease);
      held_.fetch_sub(1, std::memory_order_relaxed);
      counters_->released.fetch_add(1, std::memory_order_relaxed);
      counters_->anonymous_released.fetch_add(1, std::memory_order_relaxed);
    }
    s.tidy(q, now);
    if (q.empty() && q.owed == 0) {
      s.queues.erase(it);
      queued_keys_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (r.owed > 0) counters_->owed_settled.fetch_add(1, std::memory_order_relaxed);
  if (!r.matched()) counters_->anonymous_unmatched.fetch_add(1, std::memory_order_relaxed);
  return r;
}

size_t LeaseTable::expire(MonoNanos now, size_t max) {
  size_t freed = 0;
  for (auto& sp : shards_) {
    Shard& s = *sp;
    std::lock_guard lock(s.mu);
    while (!s.expiry.empty() && s.expiry.front().first <= now && freed < max) {
      std::pop_heap(s.expiry.begin(), s.expiry.end(), Later{});
      const auto [at, id] = s.expiry.back();
      s.expiry.pop_back();
      auto it = s.leases.find(id);
      if (it == s.leases.end() || it->second.expires_ns != at) continue;  // released or renewed
      s.take(it->second);
      s.leases.erase(it);
      held_.fetch_sub(1, std::memory_order_relaxed);
      ++freed;
    }
    // Queues of leases by key whose leases expired and whose owed releases lapsed: swept every
    // kOwedReleaseNs, so keys Envoy never releases do not pile up.
    if (!s.queues.empty() && now >= s.next_sweep_ns) {
      s.next_sweep_ns = now + kOwedReleaseNs;
      for (auto q = s.queues.begin(); q != s.queues.end();) {
        s.tidy(q->second, now);
        if (q->second.empty() && q->second.owed == 0) {
          q = s.queues.erase(q);
          queued_keys_.fetch_sub(1, std::memory_order_relaxed);
        } else {
          ++q;
        }
      }
    }
  }
  counters_->expired.fetch_add(freed, std::memory_order_relaxed);
  return freed;
}

void LeaseTable::take_changes(std::vector<InflightEntry>* out) {
  for (auto& sp : shards_) {
    Shard& s = *sp;
    std::lock_guard lock(s.mu);
    for (const std::string& key : s.changed) {
      auto it = s.keys.find(key);
      if (it == s.keys.end()) continue;
      out->push_back({it->first, it->second.own});
      it->second.changed = false;
      s.maybe_erase(it);
    }
    s.changed.clear();
  }
}

std::vector<InflightEntry> LeaseTable::own_counts() const {
  std::vector<InflightEntry> out;
  for (const auto& sp : shards_) {
    std::lock_guard lock(sp->mu);
    for (const auto& [key, state] : sp->keys) {
      if (state.own != 0) out.push_back({key, state.own});
    }
  }
  std::sort(out.begin(), out.end(), [](const InflightEntry& a, const InflightEntry& b) { return a.key < b.key; });
  return out;
}

void LeaseTable::add_remote(std::string_view key, int64_t delta) {
  if (delta == 0) return;
  Shard& s = shard_of(key, nullptr);
  std::lock_guard lock(s.mu);
  auto it = s.keys.find(key);
  if (it == s.keys.end()) it = s.keys.emplace(std::string(key), Shard::KeyState{}).first;
  it->second.remote += delta;
  s.maybe_erase(it);
}

bool LeaseTable::active() const {
  const std::shared_ptr<const RuleSet> rules = current_rules();
  return (rules && !rules->concurrency_rules().empty()) || held_.load(std::memory_order_relaxed) > 0;
}

LeaseStats LeaseTable::stats() const {
  LeaseStats st;
  st.acquired = counters_->acquired.load(std::memory_order_relaxed);
  st.denied = counters_->denied.load(std::memory_order_relaxed);
  st.refused = counters_->refused.load(std::memory_order_relaxed);
  st.released = counters_->released.load(std::memory_order_relaxed);
  st.expired = counters_->expired.load(std::memory_order_relaxed);
  st.renewed = counters_->renewed.load(std::memory_order_relaxed);
  st.unknown = counters_->unknown.load(std::memory_order_relaxed);
  st.anonymous_acquired = counters_->anonymous_acquired.load(std::memory_order_relaxed);
  st.anonymous_released = counters_->anonymous_released.load(std::memory_order_relaxed);
  st.owed_settled = counters_->owed_settled.load(std::memory_order_relaxed);
  st.anonymous_unmatched = counters_->anonymous_unmatched.load(std::memory_order_relaxed);
  st.owed_dropped = counters_->owed_dropped.load(std::memory_order_relaxed);
  st.queued_keys = queued_keys_.load(std::memory_order_relaxed);
  st.held = held_.load(std::memory_order_relaxed);
  for (const auto& sp : shards_) {
    std::lock_guard lock(sp->mu);
    st.keys += sp->keys.size();
  }
  return st;
}

std::vector<std::pair<std::string, RuleLeases>> LeaseTable::rule_leases() const {
  // The version first: rules stored after it are matched at the next walk.
  const uint32_t version = rules_version_.load(std::memory_order_acquire);
  const std::shared_ptr<const RuleSet> rules = current_rules();
  if (!rules || rules->concurrency_rules().empty()) return {};
  const std::vector<ConcurrencyRule>& in_force = rules->concurrency_rules();
  std::vector<RuleLeases> sums(in_force.size());
  for (const auto& sp : shards_) {
    Shard& s = *sp;
    std::lock_guard lock(s.mu);
    for (auto& [key, state] : s.keys) {
      if (state.matched != version) {
        state.rule = rules->concurrency_match(key);
        state.matched = version;
      }
      if (state.rule >= sums.size()) continue;
      sums[state.rule].in_flight += state.own + state.remote;
      sums[state.rule].held += state.own;
    }
  }
  std::vector<std::pair<std::string, RuleLeases>> out;
  out.reserve(in_force.size());
  for (size_t i = 0; i < in_force.size(); ++i) out.emplace_back(in_force[i].match, sums[i]);
  return out;
}

}  // namespace tollgate
