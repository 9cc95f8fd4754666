// Balances from a peer on start (issue 35; docs/design.md 6.5). A node that starts asks one
// peer for a transfer: every bucket the peer holds that is not full, and the ledger positions
// those balances include, in pages of one message each. It takes the positions into its ledger
// and each balance that is lower than its own, less what it holds that the peer's balance does
// not include, so nothing is charged twice and nothing the peer counted is forgotten.
#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/node.h"
#include "core/node_sync.h"

namespace tollgate {
namespace {

constexpr size_t kMaxServed = 2;                         // transfers prepared or held for others at once
constexpr size_t kExportSliceKeys = 4096;                // keys visited per round for each (about 0.7 ms)
constexpr int64_t kServedIdleNs = 30 * kNanosPerSecond;  // a held transfer nobody asks for goes
constexpr size_t kDefaultPageItems = 32;

std::vector<SyncPage> split_by_count(std::vector<OriginDigest> positions,
                                     std::vector<std::pair<std::string, int64_t>> balances,
                                     std::vector<ResetMark> resets) {
  std::vector<SyncPage> pages(1);
  auto room = [&] {
    const SyncPage& p = pages.back();
    if (p.positions.size() + p.balances.size() + p.resets.size() == kDefaultPageItems) pages.emplace_back();
  };
  for (OriginDigest& o : positions) {
    room();
    pages.back().positions.push_back(std::move(o));
  }
  for (auto& b : balances) {
    room();
    pages.back().balances.push_back(std::move(b));
  }
  for (ResetMark& r : resets) {
    room();
    pages.back().resets.push_back(std::move(r));
  }
  return pages;  // (numbered by prepare_sync, once every slice's pages are in)
}

}  // namespace

bool Node::long_window(const Limit& limit) const {
  // A key whose bucket refills from its floor (-max_debt) to full within the ledger's retention:
  // push-pull repair gives a node every batch of that long, so it learns all the consumption that
  // can still matter. A longer one may have been spent before anything a peer can still send.
  if (limit.shadow || limit.rate.tokens <= 0) return false;
  __extension__ typedef __int128 Wide;
  const Wide refill = Wide(limit.burst + limit.max_debt) * limit.rate.period_ns;
  return refill > Wide(options_.ledger.retention_ns) * limit.rate.tokens;
}

std::optional<Decision> Node::deny_while_syncing(std::string_view key) {
  const std::optional<Limit> limit = table_.limit_for(key);
  if (!limit || !long_window(*limit)) return std::nullopt;
  syncing_.denied.fetch_add(1, std::memory_order_relaxed);
  Decision d;
  d.reason = DenyReason::kSyncing;
  d.limit = *limit;
  d.retry_after_ns = options_.sync_deadline_ns;
  return d;
}

void Node::heal_from(const GossipMessage& m, MonoNanos now) {
  Sync& s = *sync_;
  // One heal transfer at a time, and one per kServedIdleNs: a partition that heals brings many
  // members back at once, and one of them has what the other side spent.
  if (s.asking || (s.last_heal != 0 && now - s.last_heal < kServedIdleNs)) return;
  s.forget_transfer();
  s.asking = true;
  s.heal = true;
  s.last_heal = now;
  s.session = s.random.next_u64() | 1;
  s.target = m.sender_address;
  s.session_progress = s.last_progress = now;
  ++stats_.heal_attempts;
}

void Node::stop_syncing() {
  sync_->asking = false;
  sync_->heal = false;
  sync_->forget_transfer();
  sync_->starting.clear();
  syncing_.flag.store(false, std::memory_order_relaxed);
}

void Node::prepare_sync(SyncServed& t, MonoNanos now) {
  const bool done = continue_export(t.state, &t.cursor, kExportSliceKeys, now);
  // What this slice added is cut into pages now, so that no step cuts the whole table at once (a
  // hundred thousand balances took about 13 ms to cut in one go). The positions and the epochs
  // go with the first slice.
  const bool first = t.building.empty();
  if (first || !t.state.balances.empty()) {
    std::vector<OriginDigest> positions;
    std::vector<ResetMark> resets;
    if (first) {
      positions = std::move(t.state.positions.origins);
      resets = std::move(t.state.resets);
    }
    std::vector<SyncPage> pages =
        options_.split_for_transfer
            ? options_.split_for_transfer(std::move(positions), std::move(t.state.balances), std::move(resets))
            : split_by_count(std::move(positions), std::move(t.state.balances), std::move(resets));
    t.state.balances.clear();
    for (SyncPage& p : pages) t.building.push_back(std::move(p));
  }
  if (!done) return;
  t.state = {};
  t.pages.reserve(t.building.size());
  for (size_t i = 0; i < t.building.size(); ++i) {
    SyncPage& p = t.building[i];
    p.session = t.session;
    p.page = static_cast<uint32_t>(i);
    p.pages = static_cast<uint32_t>(t.building.size());
    t.pages.push_back(std::make_shared<const SyncPage>(std::move(p)));
  }
  t.building = {};
  t.ready = true;
}

// Starting: gives up at the deadline, and picks a member to ask (a new session) when none is
// being asked or the one asked has not answered for retry_ns. False when it stopped waiting.
bool Node::start_transfer(MonoNanos now, int64_t retry_ns) {
  Sync& s = *sync_;
  if (!s.started) {
    s.started = true;
    s.last_progress = now;
  }
  if (now - s.last_progress >= options_.sync_deadline_ns) {
    ++stats_.sync_gave_up;
    stop_syncing();
    return false;
  }
  // A peer that has not answered for a few rounds is replaced by another, with a new session
  // (pages of the old one that still arrive are ignored).
  if (s.session != 0 && now - s.session_progress < retry_ns) return true;
  // Whom to ask: a live member (relay: of our group, whose positions name the same relay
  // origins as ours), else any member or seed we know of.
  // One pass over the live members (each `starting` lookup hashes an id, and every node of a
  // cluster starting at once does this each retry): those not starting, and of them our group's.
  const std::vector<const MemberInfo*>& live = membership_.live();
  std::vector<const std::string*> to, anyone;
  for (const MemberInfo* v : live) {
    if (s.starting.contains(v->id)) continue;
    anyone.push_back(&v->address);
    if (mode_ != DisseminationMode::kRelay || in_our_group(v->id)) to.push_back(&v->address);
  }
  if (!live.empty() && anyone.empty()) {
    ++stats_.sync_all_starting;  // the whole cluster is starting: nobody has more than we do
    stop_syncing();
    return false;
  }
  if (to.empty()) to = std::move(anyone);
  if (to.empty()) {
    membership_.for_each_member([&](const MemberInfo& v) {
      if (v.state != MemberState::kLeft && !s.starting.contains(v.id)) to.push_back(&v.address);
    });
    for (const std::string& seed : options_.seeds) {
      if (seed != options_.address) to.push_back(&seed);
    }
  }
  if (to.empty()) {
    stop_syncing();  // alone: nobody's consumption to learn
    return false;
  }
  s.forget_transfer();
  s.session = s.random.next_u64() | 1;
  s.target = *to[s.random.below(to.size())];
  s.session_progress = now;
  ++stats_.sync_attempts;
  return true;
}

void Node::sync_round(MonoNanos now) {
  Sync& s = *sync_;
  // Serving: each transfer being prepared gets a slice of the table per round, so serving never
  // holds our checks up for longer than one slice; one nobody asks for any more is let go.
  for (auto& [id, t] : s.served) {
    t.sent_this_round = 0;
    if (!t.active) continue;
    if (now - t.last_asked >= kServedIdleNs) {
      t.active = t.ready = false;
      t.state = {};
      t.pages.clear();
      t.building.clear();
      continue;
    }
    if (!t.ready) prepare_sync(t, now);
  }

  if (!s.asking) return;
  const int64_t retry_ns = std::max<int64_t>(5 * options_.interval_ns, 250 * kNanosPerMilli);
  if (s.heal) {
    // The member that came back, and no other: it holds what its side spent. One that stops
    // answering (or is starting itself) is let be: push-pull repairs what it still can.
    if (s.session == 0 || now - s.session_progress >= 4 * retry_ns) {
      ++stats_.heal_gave_up;
      stop_syncing();
      return;
    }
  } else if (!start_transfer(now, retry_ns)) {
    return;
  }
  SyncRequest r{.session = s.session, .pages = {}};
  for (uint32_t p = 0; p < s.pages && r.pages.size() < kMaxSyncPagesPerRequest; ++p) {
    if (!s.received[p]) r.pages.push_back(p);
  }
  const std::shared_ptr<GossipMessage> m = message({}, kNoRows);
  m->sync_request = std::move(r);
  send(s.target, m);
}

void Node::serve_sync(const GossipMessage& m, MonoNanos now) {
  Sync& s = *sync_;
  // While waiting for our own, what we hold may be a bucket full only because we just started:
  // the asker would take it as the cluster's word. We say so, and it asks another.
  if (syncing()) {
    ++stats_.sync_refused;
    auto starting = std::make_shared<SyncPage>();
    starting->session = m.sync_request->session;
    starting->starting = true;
    const std::shared_ptr<GossipMessage> out = message({}, kNoRows);
    out->sync_page = std::move(starting);
    send(m.sender_address, out);
    return;
  }
  Sync::Served& t = s.served[m.sender];
  if (m.sender_incarnation < t.incarnation || (m.sender_incarnation == t.incarnation && m.message_seq <= t.last_seq)) {
    ++stats_.sync_ignored;  // a replay, or an old message overtaken by a newer one
    return;
  }
  t.incarnation = m.sender_incarnation;
  t.last_seq = m.message_seq;
  const SyncRequest& r = *m.sync_request;
  if (!t.active || t.session != r.session) {
    const size_t active =
        size_t(std::count_if(s.served.begin(), s.served.end(), [](const auto& e) { return e.second.active; }));
    if (!t.active && active >= kMaxServed) {
      ++stats_.sync_refused;
      return;
    }
    t.session = r.session;
    t.active = true;
    t.ready = false;
    t.pages.clear();
    t.cursor = 0;
    // The positions now, and the balances of the first slice of the table at the same instant
    // (all of a table of up to kExportSliceKeys keys: the transfer is then exact); a larger
    // table's next slices go one per round (sync_round). A batch applied between two slices is
    // in the balances of the later ones but not in the positions: the asker then counts it
    // twice for those keys (too much debt, never a fresh burst; docs/design.md 6.5).
    t.state = begin_export(now);
    t.state.balances = {};  // (begin_export reserves room for the whole table: a slice at a time here)
    t.state.balances.reserve(kExportSliceKeys);
    t.building.clear();
    prepare_sync(t, now);
    ++stats_.sync_served;
  }
  t.last_asked = now;
  auto reply = [&](SyncPagePtr page) {
    const std::shared_ptr<GossipMessage> out = message({}, kNoRows);
    out->sync_page = std::move(page);
    send(m.sender_address, out);
  };
  if (!t.ready) {
    auto preparing = std::make_shared<SyncPage>();
    preparing->session = t.session;
    reply(std::move(preparing));
    return;
  }
  const std::vector<uint32_t> first{0};
  for (uint32_t p : r.pages.empty() ? first : r.pages) {
    // A request names at most kMaxSyncPagesPerRequest pages (the codec refuses more), and a
    // round answers at most sync_pages_per_round to one asker, however many requests it sends.
    if (p >= t.pages.size() || t.sent_this_round >= options_.sync_pages_per_round) continue;
    ++t.sent_this_round;
    ++stats_.sync_pages_sent;
    reply(t.pages[p]);
  }
}

void Node::take_sync_page(const GossipMessage& m, MonoNanos now) {
  Sync& s = *sync_;
  const SyncPage& p = *m.sync_page;
  if (!s.asking || s.session == 0 || p.session != s.session || (!s.peer.empty() && m.sender != s.peer)) {
    ++stats_.sync_ignored;
    return;
  }
  if (p.starting) {  // it waits for its own: another is asked next round
    s.starting.insert(m.sender);
    s.session = 0;
    return;
  }
  s.peer = m.sender;
  s.session_progress = s.last_progress = now;
  if (p.pages == 0) return;  // still being prepared
  // What we would keep is bounded by what our table and ledger can hold: a transfer that says
  // it is larger (a peer with larger limits, or a broken one) is not taken; the next peer is.
  const size_t most = options_.keys.max_keys + options_.ledger.max_origins + 1;
  if (s.pages == 0) {
    if (p.pages > most) {
      ++stats_.sync_ignored;
      s.session = 0;
      return;
    }
    s.pages = p.pages;
    s.received.assign(p.pages, false);
  }
  if (p.pages != s.pages || p.page >= s.pages) {  // not one transfer: start again
    ++stats_.sync_ignored;
    s.session = 0;
    return;
  }
  if (s.received[p.page]) return;
  s.received[p.page] = true;
  ++s.received_count;
  if (s.positions.size() + p.positions.size() > options_.ledger.max_origins * 2 ||
      s.balances.size() + p.balances.size() > most || s.resets.size() + p.resets.size() > kMaxResetEpochs) {
    ++stats_.sync_ignored;
    s.session = 0;
    return;
  }
  s.positions.insert(s.positions.end(), p.positions.begin(), p.positions.end());
  s.resets.insert(s.resets.end(), p.resets.begin(), p.resets.end());
  for (const auto& [key, balance] : p.balances) s.balances.push_back({key, balance, now});
  if (s.received_count == s.pages) finish_sync(now);
}

void Node::finish_sync(MonoNanos now) {
  Sync& s = *sync_;
  // Our own consumption not sealed yet goes into batches first (they go out with the round), so
  // that all we hold is in the ledger's retained batches, which expire() has kept meanwhile.
  seal(now, SIZE_MAX);
  // Resets the peer knows of and we do not: taken first (its balances are after them).
  for (const ResetMark& r : s.resets) apply_reset(r, now);
  Digest theirs{std::move(s.positions)};
  // What we hold that the peer's balances do not include: our retained batches (our own, and
  // those we applied since we started) that its positions do not name, but for consumption
  // admitted before a reset we know.
  std::unordered_map<std::string, int64_t> extra;
  for (const BatchPtr& b : ledger_.missing_for(theirs)) {
    for (const ConsumptionEntry& e : b->entries) {
      if (e.epoch >= reset_epoch(e.key)) extra[e.key] += e.tokens;
    }
  }
  size_t lowered = 0;
  for (const Sync::Taken& t : s.balances) {
    if (s.heal) {
      // After a partition, both sides hold consumption the other lacks, older than any repair:
      // for a long-window key the side that spent more wins (at most the smaller side's spending
      // is lost, never a fresh burst); a short-window key is left to push-pull, exact for it.
      const std::optional<Limit> limit = table_.limit_for(t.key);
      if (!limit || !long_window(*limit)) continue;
    }
    const auto it = extra.find(t.key);
    lowered += table_.lower(t.key, t.balance, t.at, it == extra.end() ? 0 : it->second, now) ? 1 : 0;
  }
  if (s.heal) {
    // Not its positions: our side's consumption of the partition is in none of its balances, and
    // what push-pull brings of its last retention window counts again on top (too much debt for
    // those keys, never a fresh burst; docs/design.md 6.5).
    stats_.heal_balances += lowered;
    ++stats_.heal_taken;
  } else {
    // From now on a batch the peer's balances include is a duplicate here.
    ledger_.restore(theirs);
    stats_.sync_balances += lowered;
    ++stats_.sync_taken;
  }
  stop_syncing();
}

}  // namespace tollgate
