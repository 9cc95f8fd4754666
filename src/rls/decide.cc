#include "rls/decide.h"

#include <openssl/evp.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "tollgate/decision.h"

namespace tollgate::rls {
namespace {

__extension__ typedef __int128 Wide;

// "#" and the first 16 bytes of SHA-256(values), in hex: the values part of an over-long key.
std::string values_digest(std::string_view values) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(values.data(), values.size(), md, &len, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL SHA-256 failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "#";
  for (unsigned int i = 0; i < 16 && i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

// Nanoseconds until a bucket left with `d.remaining` whole tokens holds `tokens` (0 if it does;
// precise to within a token's refill time: the fraction of a token is not known here). The
// limit must be set and refill.
int64_t nanos_to_hold(const Decision& d, int64_t tokens) {
  const Wide deficit = Wide(tokens) - d.remaining;
  if (deficit <= 0) return 0;
  const Wide ns = (deficit * d.limit.rate.period_ns + d.limit.rate.tokens - 1) / d.limit.rate.tokens;
  return ns > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max() : int64_t(ns);
}

bool refills(const Decision& d) { return d.has_limit() && d.limit.rate.tokens > 0; }

// When `cost` could pass, or kRetryNever.
int64_t retry_after_ns(const Decision& d, int64_t cost) {
  return refills(d) && cost <= d.limit.burst ? nanos_to_hold(d, cost) : kRetryNever;
}

uint32_t clamp_remaining(int64_t remaining) {
  return uint32_t(std::clamp<int64_t>(remaining, 0, std::numeric_limits<uint32_t>::max()));
}

// A quota_mode descriptor's balance, looked at (cost 0) before anything is charged: true if it
// has room for its hits (a cost-0 one: if it is not in debt); else `r` says it is over.
bool quota_has_room(RequestHandler& handler, const DescriptorPlan& p, DescriptorResult& r) {
  if (!p.match.limit->limited()) {  // requests_per_unit 0: over for any cost
    if (p.hits == 0) return true;
    r.code = Code::kOverLimit;
    r.retry_after_ns = kRetryNever;
    return false;
  }
  const CheckItem look{p.match.key, 0};
  Decision d;
  handler.check({&look, 1}, {&d, 1});
  if (!d.limited) return true;  // the node's rules no longer know this limit: no limit
  r.until_full_ns = until_full_ns(d);
  if (p.hits == 0 ? d.remaining >= 0 : d.remaining >= p.hits) return true;
  r.code = Code::kOverLimit;
  r.retry_after_ns = retry_after_ns(d, p.hits);
  return false;
}

}  // namespace

int64_t until_full_ns(const Decision& d) { return refills(d) ? nanos_to_hold(d, d.limit.burst) : -1; }

std::string plan_request(std::shared_ptr<const RlsConfig> config, std::string_view domain, uint32_t request_hits,
                         const std::vector<DescriptorInput>& descriptors, size_t max_key_bytes, Plan& plan) {
  plan.descriptors.clear();
  plan.overrides_ignored = 0;
  plan.domain_not_found = false;
  plan.config = std::move(config);
  if (domain.empty()) return "domain must not be empty";
  if (descriptors.empty()) return "the request has no descriptors";
  if (descriptors.size() > kMaxDescriptors) {
    return "the request has " + std::to_string(descriptors.size()) + " descriptors; at most " +
           std::to_string(kMaxDescriptors) + " are accepted";
  }
  plan.domain_not_found = plan.config && !plan.config->has_domain(domain);
  const int64_t default_hits = request_hits == 0 ? 1 : int64_t(request_hits);
  plan.descriptors.reserve(descriptors.size());
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const DescriptorInput& in = descriptors[i];
    if (in.entries.size() > kMaxEntries) {
      return "descriptor " + std::to_string(i) + " has " + std::to_string(in.entries.size()) + " entries; at most " +
             std::to_string(kMaxEntries) + " are accepted";
    }
    for (size_t j = 0; j < in.entries.size(); ++j) {
      if (in.entries[j].key.empty()) {
        return "descriptor " + std::to_string(i) + " entry " + std::to_string(j) + " has an empty key";
      }
    }
    if (in.has_hits && in.hits > uint64_t(kMaxTokens)) {
      return "descriptor " + std::to_string(i) + " hits_addend " + std::to_string(in.hits) + " exceeds " +
             std::to_string(kMaxTokens);
    }
    DescriptorPlan& p = plan.descriptors.emplace_back();
    p.hits = in.has_hits ? int64_t(in.hits) : default_hits;
    p.refund = in.is_negative_hits;
    if (plan.config) {
      p.match = in.limit ? plan.config->match_override(domain, in.entries, *in.limit)
                         : plan.config->match(domain, in.entries);
      plan.overrides_ignored += p.match.override_ignored;
    }
  }
  std::vector<RlsMatch> matches;
  matches.reserve(plan.descriptors.size());
  for (DescriptorPlan& p : plan.descriptors) matches.push_back(std::move(p.match));
  RlsConfig::apply_replaces(matches);
  for (size_t i = 0; i < matches.size(); ++i) {
    RlsMatch& m = matches[i];
    auto fit = [&](RlsMatch& one) {
      if (one.key.size() > max_key_bytes) {
        one.key = one.key.substr(0, one.path_bytes) + values_digest(std::string_view(one.key).substr(one.path_bytes));
      }
    };
    fit(m);
    for (RlsMatch& e : m.more) fit(e);
    if (m.concurrency_key.size() > max_key_bytes) {  // the same path as the rate key: the same shortening
      m.concurrency_key = m.concurrency_key.substr(0, m.path_bytes) +
                          values_digest(std::string_view(m.concurrency_key).substr(m.path_bytes));
    }
    plan.descriptors[i].match = std::move(m);
  }
  return {};
}

namespace {

// decide() over one limit per entry: a request's descriptors, each of several limits spread into
// entries of their own.
// `blocked`: the request is over already (a concurrency limit denied it): nothing is charged, the
// rate limits are only looked at.
Code decide_each(RequestHandler& handler, const std::vector<DescriptorPlan>& descriptors,
                 std::vector<DescriptorResult>& out, bool blocked) {
  const size_t n = descriptors.size();
  out.assign(n, DescriptorResult{});
  // The descriptors that decide: non-shadow, limited, costing something.
  std::vector<CheckItem> items;
  std::vector<size_t> where;
  items.reserve(n);
  where.reserve(n);
  // (set as well when a requests_per_unit-0 limit denies the request)
  size_t quotas = 0, quotas_with_room = 0;
  std::vector<size_t> charge_anyway;  // quota descriptors over, charge_when_over: paid all the same
  for (size_t i = 0; i < n; ++i) {
    const DescriptorPlan& p = descriptors[i];
    const RlsLimit* limit = p.match.limit;
    if (!limit) continue;  // no limit: OK, remaining 0
    if (limit->unlimited) {
      out[i].remaining = std::numeric_limits<uint32_t>::max();
      continue;
    }
    out[i].limit = limit;
    if (p.refund) continue;             // given back below, after the checks
    if (p.match.shadow_mode) continue;  // looked at below; never denies
    if (p.match.quota_mode) {
      out[i].quota = true;
      // Over alone does not deny: charged with the others if it has room, else answered over
      // and left out; the request is over only if every quota descriptor is.
      ++quotas;
      if (quota_has_room(handler, p, out[i])) {
        ++quotas_with_room;
        if (limit->limited()) {  // (requests_per_unit 0 has room only for a cost of 0, and no bucket)
          items.push_back({p.match.key, p.hits});
          where.push_back(i);
        }
      } else if (limit->limited() && limit->bucket.charge_when_over && p.hits > 0) {
        charge_anyway.push_back(i);
      }
      continue;
    }
    if (p.hits == 0) {
      // Costs nothing: over only while its bucket is in debt (the reference server's
      // count + 0 > limit), and then the request is denied like any other.
      if (!limit->limited()) continue;
      const CheckItem look{p.match.key, 0};
      Decision d;
      handler.check({&look, 1}, {&d, 1});
      if (!d.limited) continue;
      out[i].until_full_ns = until_full_ns(d);
      if (d.remaining < 0) {
        blocked = true;
        out[i].code = Code::kOverLimit;
        out[i].retry_after_ns = retry_after_ns(d, 0);
      }
      continue;
    }
    if (!limit->limited()) {
      blocked = true;
      out[i].code = Code::kOverLimit;
      out[i].retry_after_ns = kRetryNever;
      continue;
    }
    items.push_back({p.match.key, p.hits});
    where.push_back(i);
  }

  if (quotas > 0 && quotas_with_room == 0) blocked = true;  // every quota descriptor is over
  std::vector<Decision> decisions(items.size());
  bool allowed = !blocked;
  if (!items.empty() && !blocked) {
    allowed = handler.check_all(items, decisions);
    // A quota descriptor that had room when looked at may lack it here (its key twice in one
    // request, or another thread's check in between): it is answered over and left out, and the
    // rest tried again, so that it denies the request only as every quota being over would.
    while (!allowed) {
      std::vector<size_t> drop;
      bool other_denied = false;
      for (size_t k = 0; k < items.size(); ++k) {
        const Decision& d = decisions[k];
        if (d.allowed || d.reason == DenyReason::kOtherCheckDenied) continue;
        if (descriptors[where[k]].match.quota_mode) {
          drop.push_back(k);
        } else {
          other_denied = true;
        }
      }
      // (A charge_when_over limit was paid by the attempt: another would pay it twice.)
      const bool paid = std::any_of(where.begin(), where.end(),
                                    [&](size_t i) { return descriptors[i].match.limit->bucket.charge_when_over; });
      if (other_denied || drop.empty() || paid) break;
      for (auto k = drop.rbegin(); k != drop.rend(); ++k) {
        DescriptorResult& r = out[where[*k]];
        r.code = Code::kOverLimit;
        r.until_full_ns = until_full_ns(decisions[*k]);
        r.retry_after_ns = decisions[*k].retry_after_ns;
        items.erase(items.begin() + long(*k));
        where.erase(where.begin() + long(*k));
        --quotas_with_room;
      }
      decisions.assign(items.size(), Decision{});
      if (quotas_with_room == 0) {
        blocked = true;
        break;
      }
      allowed = handler.check_all(items, decisions);
    }
  }
  if (!items.empty() && blocked) {
    // Denied already, so nothing may be charged but charge_when_over limits (paid whatever the
    // answer): the others are only looked at (cost 0), and judged by their balance in whole
    // tokens, which is exact for a whole-token cost.
    std::vector<CheckItem> look = items;
    for (size_t k = 0; k < look.size(); ++k) {
      if (!descriptors[where[k]].match.limit->bucket.charge_when_over) look[k].cost = 0;
    }
    handler.check(look, decisions);
  }
  for (size_t k = 0; k < items.size(); ++k) {
    const Decision& d = decisions[k];
    DescriptorResult& r = out[where[k]];
    if (!d.limited) {  // the node's rules no longer know this limit (a reload in between)
      r = DescriptorResult{};
      continue;
    }
    r.until_full_ns = until_full_ns(d);
    const bool charged = descriptors[where[k]].match.limit->bucket.charge_when_over;
    const bool has_room =
        blocked && !charged ? d.remaining >= items[k].cost : d.allowed || d.reason == DenyReason::kOtherCheckDenied;
    if (has_room) {
      r.remaining = clamp_remaining(d.remaining);
    } else {
      r.code = Code::kOverLimit;
      r.retry_after_ns = blocked ? retry_after_ns(d, items[k].cost) : d.retry_after_ns;
    }
  }

  // Shadow descriptors: charged only if the request goes ahead, never denying. And the balance
  // of those that cost nothing, looked at above, once the request's charges are in.
  for (size_t i = 0; i < n; ++i) {
    const DescriptorPlan& p = descriptors[i];
    const RlsLimit* limit = p.match.limit;
    if (!limit || limit->unlimited || p.refund || (!p.match.shadow_mode && p.hits != 0)) continue;
    DescriptorResult& r = out[i];
    const bool shadow = p.match.shadow_mode;
    if (!limit->limited()) {
      r.shadow_over = shadow && p.hits > 0;
      continue;
    }
    if (!shadow && r.code == Code::kOverLimit) continue;         // in debt: decided above
    const bool pay = allowed || limit->bucket.charge_when_over;  // charge_when_over: paid whatever the answer
    const CheckItem item{p.match.key, shadow && pay ? p.hits : 0};
    Decision d;
    handler.check({&item, 1}, {&d, 1});
    if (!d.limited) {
      r = DescriptorResult{};
      continue;
    }
    r.until_full_ns = until_full_ns(d);
    if (item.cost > 0) {
      r.shadow_over = !d.allowed || d.shadow_denied;
    } else if (shadow) {
      r.shadow_over = p.hits > 0 ? d.remaining < p.hits : d.remaining < 0;
    }
    r.remaining = r.shadow_over ? 0 : clamp_remaining(d.remaining);
  }
  for (size_t i : charge_anyway) {
    const CheckItem item{descriptors[i].match.key, descriptors[i].hits};
    Decision d;
    handler.check({&item, 1}, {&d, 1});
  }
  // Refunds: whatever the request's outcome, each gives its hits back and answers OK.
  for (size_t i = 0; i < n; ++i) {
    const DescriptorPlan& p = descriptors[i];
    const RlsLimit* limit = p.match.limit;
    if (!p.refund || !limit || !limit->limited()) continue;  // no bucket: nothing to give back
    const CheckItem item{p.match.key, p.hits};
    Decision d;
    handler.refund({&item, 1}, {&d, 1});
    DescriptorResult& r = out[i];
    if (!d.limited) {  // the node's rules no longer know this limit (a reload in between)
      r = DescriptorResult{};
      continue;
    }
    r.remaining = clamp_remaining(d.remaining);
    r.until_full_ns = until_full_ns(d);
  }
  return allowed ? Code::kOk : Code::kOverLimit;
}

// The rate limits of a request (its concurrency limits are decide_leases'), `blocked` as in
// decide_each.
Code decide_rates(RequestHandler& handler, const std::vector<DescriptorPlan>& descriptors,
                  std::vector<DescriptorResult>& out, bool blocked) {
  const bool several = std::any_of(descriptors.begin(), descriptors.end(),
                                   [](const DescriptorPlan& p) { return !p.match.more.empty(); });
  if (!several) return decide_each(handler, descriptors, out, blocked);
  // A descriptor of several limits (rate_limits): each limit an entry of its own, decided all
  // together (all or nothing), then answered as one: the first of its limits that is over, or
  // else the one with the fewest tokens left.
  std::vector<DescriptorPlan> each;
  std::vector<size_t> owner;
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const DescriptorPlan& p = descriptors[i];
    each.push_back(p);
    each.back().match.more.clear();
    owner.push_back(i);
    for (const RlsMatch& m : p.match.more) {
      DescriptorPlan& q = each.emplace_back();
      q.match = m;
      q.hits = p.hits;
      q.refund = p.refund;
      owner.push_back(i);
    }
  }
  std::vector<DescriptorResult> results;
  const Code overall = decide_each(handler, each, results, blocked);
  out.assign(descriptors.size(), DescriptorResult{});
  std::vector<bool> taken(descriptors.size(), false);
  for (size_t k = 0; k < results.size(); ++k) {
    const DescriptorResult& r = results[k];
    DescriptorResult& o = out[owner[k]];
    const bool shadow_over = o.shadow_over || r.shadow_over;
    const bool better = !taken[owner[k]] || (r.code == Code::kOverLimit && o.code != Code::kOverLimit) ||
                        (r.code == o.code && r.code != Code::kOverLimit && r.limit && r.remaining < o.remaining);
    if (better) o = r;
    o.shadow_over = shadow_over;
    taken[owner[k]] = true;
  }
  return overall;
}

// A request with concurrency descriptors (tollgate's `concurrency:`; decide.h). Their leases are
// taken first, by key (Envoy names no lease when the stream ends); a lease over its limit makes
// the request over, and its rate limits are then only looked at; rates over give back the leases
// taken. Every call that ends holding nothing for a descriptor owes Envoy's stream-done release
// of it (Envoy sends one for denied streams too), so that release frees nobody's lease.
Code decide_leases(RequestHandler& handler, const Plan& plan, std::vector<DescriptorResult>& out) {
  const size_t n = plan.descriptors.size();
  struct Step {
    bool acquire = false;  // a concurrency descriptor asking for slots
    bool held = false;     // ... and granted
    bool over = false;     // ... and refused (a shadow one: shadow_over)
    LeaseGrant grant;
  };
  std::vector<Step> steps(n);
  bool blocked = false;
  for (size_t i = 0; i < n; ++i) {
    const DescriptorPlan& p = plan.descriptors[i];
    const RlsConcurrency* c = p.match.concurrency;
    if (!c || p.refund) continue;
    Step& st = steps[i];
    if (p.hits == 0) {  // looks: takes nothing, owes nothing, never denies; says what is left
      st.grant.in_flight = handler.in_flight(p.match.concurrency_key);
      continue;
    }
    st.acquire = true;
    st.grant = handler.acquire_anonymous(p.match.concurrency_key, p.hits, c->ttl_ns);
    if (st.grant.outcome == LeaseOutcome::kGranted) {
      st.held = true;
    } else if (st.grant.outcome != LeaseOutcome::kUnlimited) {  // (unlimited: a reload dropped the limit)
      st.over = true;
      if (!p.match.shadow_mode) blocked = true;
    }
  }
  // The rates, without the releases' (is_negative_hits on a concurrency descriptor releases; it
  // gives no tokens back): a copy only when a request holds such a release.
  const auto releases = [](const DescriptorPlan& p) { return p.match.concurrency && p.refund; };
  std::vector<DescriptorPlan> rates;
  if (std::any_of(plan.descriptors.begin(), plan.descriptors.end(), releases)) {
    rates = plan.descriptors;
    for (DescriptorPlan& p : rates) {
      if (releases(p)) {
        p.match.limit = nullptr;
        p.match.more.clear();
      }
    }
  }
  const Code code = decide_rates(handler, rates.empty() ? plan.descriptors : rates, out, blocked);
  const bool over = code == Code::kOverLimit;
  for (size_t i = 0; i < n; ++i) {
    Step& st = steps[i];
    const DescriptorPlan& p = plan.descriptors[i];
    if (p.match.concurrency && !p.refund && p.hits == 0 && !out[i].limit) {
      out[i].concurrency_limit = p.match.concurrency->limit;
      out[i].remaining = clamp_remaining(p.match.concurrency->limit - st.grant.in_flight);
      continue;
    }
    if (!st.acquire) continue;
    if (st.held && over) {
      handler.release(st.grant.id);
      st.held = false;
    }
    if (!st.held && st.grant.outcome != LeaseOutcome::kUnlimited) {
      handler.owe_release(p.match.concurrency_key, p.hits);
    }
    DescriptorResult& r = out[i];
    r.concurrency_limit = p.match.concurrency->limit;
    if (st.over && !p.match.shadow_mode) {
      r.code = Code::kOverLimit;
      r.concurrency_over = true;
      r.retry_after_ns = kRetryNever;  // (when a lease frees is not known)
    } else if (st.over) {
      r.shadow_over = true;
    }
    if (!r.limit) {  // concurrency alone: what is left is slots
      const bool given_back = st.grant.outcome == LeaseOutcome::kGranted && !st.held;  // (a rate denied)
      const int64_t in_flight = st.grant.in_flight - (given_back ? p.hits : 0);
      r.remaining = clamp_remaining(st.grant.limit - in_flight);
    }
  }
  // Releases: Envoy's stream-done call (is_negative_hits), whatever the request's outcome.
  for (size_t i = 0; i < n; ++i) {
    const DescriptorPlan& p = plan.descriptors[i];
    if (!p.match.concurrency || !p.refund || p.hits == 0) continue;
    handler.release_anonymous(p.match.concurrency_key, p.hits);
    out[i] = DescriptorResult{};
    out[i].concurrency_limit = p.match.concurrency->limit;
  }
  return code;
}

}  // namespace

Code decide(RequestHandler& handler, const Plan& plan, std::vector<DescriptorResult>& out) {
  const bool leases = std::any_of(plan.descriptors.begin(), plan.descriptors.end(),
                                  [](const DescriptorPlan& p) { return p.match.concurrency != nullptr; });
  return leases ? decide_leases(handler, plan, out) : decide_rates(handler, plan.descriptors, out, false);
}

}  // namespace tollgate::rls
