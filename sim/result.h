// What a tollgate-sim run measured, whichever back end ran it: figures per phase of the timeline
// and for the whole run, and a 100 ms time series.
#ifndef TOLLGATE_SIM_RESULT_H_
#define TOLLGATE_SIM_RESULT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tollgate::sim {

// Figures for one phase of a run (or the whole run).
struct PhaseStats {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
  uint64_t offered = 0;          // checks made (to live nodes)
  uint64_t admitted = 0;         // allowed by the cluster
  uint64_t oracle_admitted = 0;  // allowed by one ideal bucket per key, same arrivals
  // Throttling that was not needed: per 1 s window, how many fewer checks the cluster admitted
  // than the oracle (0 when it admitted as many or more), summed over the phase. Not counted
  // check by check: under saturating load both admit about the same number, but which of the
  // many waiting checks gets a token is arbitrary, so a per-check match measures only that.
  uint64_t under = 0;
  uint64_t messages = 0;                // gossip messages sent
  uint64_t bytes = 0;                   // their estimated wire size
  double node_seconds = 0;              // sum over live nodes of time alive in the phase
  std::vector<int64_t> convergence_ns;  // per batch: sealed -> charged at every live node

  // Leases (load.kind: leases; offered, admitted and oracle_admitted then count acquires),
  // sampled every 100 ms over the keys a concurrency rule governs, in slot-seconds:
  double lease_held_slot_s = 0;    // slots held by living holders still at work
  double lease_limit_slot_s = 0;   // the keys' limits
  double lease_oracle_slot_s = 0;  // slots the oracle's ideal semaphore holds
  double lease_over_slot_s = 0;    // slots held beyond a key's limit
  // Slots the cluster still counts (the mean over live nodes) beyond those held: a dead
  // holder's or a never-released lease not freed yet, and releases on their way.
  double lease_lost_slot_s = 0;
  int64_t lease_peak_over = 0;  // the most slots of one key held beyond its limit, at any grant
  // The bound on it: the most grants of one key in any window as long as the phase's
  // convergence p99 (what the nodes can grant before they hear of each other's grants).
  int64_t lease_peak_bound = 0;
  // Time-weighted in-flight over the limit (held / limit), 0 without leases.
  double lease_in_flight_ratio() const { return lease_limit_slot_s > 0 ? lease_held_slot_s / lease_limit_slot_s : 0; }

  double over_admission() const { return oracle_admitted ? double(admitted) / double(oracle_admitted) : 0; }
  double under_admission() const { return oracle_admitted ? double(under) / double(oracle_admitted) : 0; }
  // Percentile p in [0, 100] of convergence, in ms; -1 when there are no samples.
  double convergence_ms(double p) const;
  double msgs_per_node_s() const { return node_seconds > 0 ? double(messages) / node_seconds : 0; }
  double bytes_per_node_s() const { return node_seconds > 0 ? double(bytes) / node_seconds : 0; }
};

// One 100 ms step of the time series.
struct SeriesPoint {
  int64_t t_ns = 0;
  uint64_t admitted = 0, oracle_admitted = 0;
  std::vector<uint64_t> admitted_by_side;  // per side of the partition in force (one side if none)
  // Leases, at the step's sample: slots held by living holders at work, and counted by the
  // cluster beyond them (see PhaseStats::lease_lost_slot_s), over every limited key.
  int64_t lease_held = 0;
  double lease_lost = 0;
};

struct SimResult {
  std::vector<PhaseStats> phases;
  PhaseStats total;
  std::vector<SeriesPoint> series;
  // Batches that never reached every node alive when sealed, sealed more than
  // kInFlightWindowNs before the end of the run (lost for good, or repaired too late) ...
  uint64_t unconverged = 0;
  // ... and those sealed within the run's last kInFlightWindowNs, still on their way at the end
  // (a run that ends during loss has many being repaired: not lost).
  uint64_t in_flight_at_end = 0;
  static constexpr int64_t kInFlightWindowNs = 1'000'000'000;
  // Virtual back end: how many times a node marked a peer failed (alive -> suspect, or
  // unreachable under static membership), summed over nodes and their lives. In a run without
  // crashes or partitions every one is a false suspicion. -1 when not measured (local).
  int64_t member_failures = -1;
  // Virtual back end: how many times a node was charged a batch it had been charged before,
  // directly or summed in a relay batch (while the batch was tracked: until 12 s after every
  // node alive at its sealing had it, past the ledger's retention). Must be 0: a batch charged
  // twice is consumption counted twice, under-admission that no repair undoes.
  uint64_t charged_twice = 0;
  double limit_per_sec = 0;  // the first rule's rate (for plots), 0 if none
  // Virtual back end: nodes running at the end, by the mode in use and count of relay groups
  // (what `auto` chose).
  std::map<std::pair<std::string, uint32_t>, size_t> modes_at_end;
  // Top-K (Scenario::top_check): per node checked, rule and metric, what it reported against the
  // cluster's exact counts (every check's decision, counted by the recorder).
  struct TopCheck {
    size_t node = 0;
    std::string rule;
    std::string metric;            // "denied", "tokens"
    size_t members_reporting = 0;  // of `live` at the end
    size_t live = 0;
    uint64_t total = 0, exact_total = 0;
    uint64_t error_bound = 0;
    size_t outside = 0;  // reported keys whose exact count is outside their [lower, upper]
    size_t found = 0;    // of the exact top K, how many were reported in the top K
    size_t missed = 0;   // exact top-K keys not reported though they beat the (K+1)th by more than the bound
    size_t k = 0;
  };
  std::vector<TopCheck> top_checks;
};

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_RESULT_H_
