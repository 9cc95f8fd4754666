// Carries gossip between daemons: the Node's Outbox on the sending side, decoded and
// authenticated GossipMessages on the receiving side. Implementations run on the daemon's one
// io_context thread; send() never blocks (a full queue drops and counts).
#ifndef TOLLGATE_SRC_TRANSPORT_TRANSPORT_H_
#define TOLLGATE_SRC_TRANSPORT_TRANSPORT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "codec/cluster_key.h"
#include "core/gossip_message.h"
#include "core/outbox.h"
#include "guard/offense_limiter.h"
#include "guard/source_limiter.h"

namespace tollgate {

// Counters every transport keeps, reported by `tollgate stats`.
struct TransportStats {
  uint64_t messages_sent = 0;  // datagrams or frames handed to the kernel
  uint64_t bytes_sent = 0;
  uint64_t messages_received = 0;  // decoded and authenticated
  uint64_t bytes_received = 0;
  uint64_t send_errors = 0;   // the kernel refused, or no route
  uint64_t send_dropped = 0;  // a queue was full, or the peer was not connected
  uint64_t unresolved = 0;    // sends to an address that could not be resolved
  // Received and dropped, by decode_error_name() ("bad_mac", "unknown_version", ...); a reason
  // appears once it has happened.
  uint64_t encode_dropped = 0;  // batches, rows or digest origins the encoder left out (codec.h)
  std::vector<std::pair<std::string, uint64_t>> dropped;
};

class Transport : public Outbox {
 public:
  // Replaces the cluster keys (a rotation step, on SIGHUP): takes effect for the next message.
  virtual void set_cluster_keys(ClusterKeys keys) = 0;
  using Receiver = std::function<void(GossipMessage&&)>;
  // Delivers every message that decodes and authenticates. Set before the first message.
  virtual void set_receiver(Receiver receiver) = 0;
  virtual void stop() = 0;
  virtual TransportStats stats() const = 0;

  // Told about every datagram or frame dropped as undecodable or unauthenticated, naming the
  // sender's address ("10.0.0.7:7946"); the daemon rate-limits these into its log. Optional.
  void set_offense_reporter(OffenseReporter reporter) { offense_ = std::move(reporter); }

  // The budget per source address (SourceLimiter), checked before decoding. Replaces the
  // default (SourceLimiterOptions{}).
  void set_source_limits(SourceLimiterOptions options) { sources_ = SourceLimiter(options); }

  // A message whose sender's clock (GossipMessage::sent_at_s) is further than this from ours,
  // either way, is dropped as "stale": a replay, or clocks that disagree (docs/design.md,
  // "Replay"). 0 turns the check off.
  void set_max_message_age(std::chrono::seconds age) {
    max_message_age_s_ = uint64_t(std::max<int64_t>(age.count(), 0));
  }

  // Queued messages older than this are not worth sending (half the age at which they are stale).
  std::chrono::steady_clock::duration stale_after() const {
    return max_message_age_s_ == 0 ? std::chrono::steady_clock::duration::max() / 2
                                   : std::chrono::seconds(max_message_age_s_) / 2;
  }

  // The wall clock, in seconds since the Unix epoch: what messages are stamped with.
  static uint64_t wall_now_s() {
    return uint64_t(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  }

 protected:
  void report_offense(std::string_view from, std::string_view what) const {
    if (offense_) offense_(from, what);
  }
  // True if `m` is fresh (set_max_message_age); otherwise counts it as "stale" in `dropped` and
  // reports the sender.
  template <typename DropCounts>
  bool fresh(const GossipMessage& m, std::string_view from, DropCounts& dropped) {
    if (max_message_age_s_ == 0) return true;
    const uint64_t now = wall_now_s();
    const uint64_t apart = now > m.sent_at_s ? now - m.sent_at_s : m.sent_at_s - now;
    if (apart <= max_message_age_s_) return true;
    ++dropped["stale"];
    report_offense(from, "gossip message stamped " + std::to_string(apart) +
                             " s away from this node's clock (a replay, or clocks apart: --max-message-age); dropped");
    return false;
  }

  // True if `bytes` from `source` (SourceLimiter: a member's address, or another sender's IP)
  // are within its budget; otherwise counts the drop as "rate_limited" in `dropped` and reports
  // the sender.
  template <typename DropCounts>
  bool admit_source(std::string_view source, SourceKind kind, size_t bytes, DropCounts& dropped) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    if (sources_.admit(source, kind, bytes, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count())) {
      return true;
    }
    ++dropped["rate_limited"];
    report_offense(source, "gossip over the per-peer byte budget (--gossip-peer-rate); dropped unread");
    return false;
  }

 private:
  OffenseReporter offense_;
  SourceLimiter sources_;
  uint64_t max_message_age_s_ = 30;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_TRANSPORT_TRANSPORT_H_
