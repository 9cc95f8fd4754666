// A Transport decorator that loses, delays, duplicates and blocks gossip on command (the admin
// API's `faults`). Compiled into every daemon, inert until a non-empty FaultSettings is set. Runs on
// the io_context thread, like the transport it wraps.
#ifndef TOLLGATE_SRC_TRANSPORT_FAULT_INJECTION_H_
#define TOLLGATE_SRC_TRANSPORT_FAULT_INJECTION_H_

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <unordered_set>

#include "core/random.h"
#include "tollgate/types.h"
#include "transport.h"

namespace tollgate {

struct FaultStats {
  uint64_t dropped_to = 0, dropped_from = 0, lost = 0, delayed = 0, duplicated = 0;
};

class FaultInjectingTransport final : public Transport {
 public:
  FaultInjectingTransport(boost::asio::io_context& io, Transport& inner, Random& random);
  ~FaultInjectingTransport() override;

  void set_faults(const FaultSettings& faults);
  const FaultSettings& faults() const { return faults_; }
  const FaultStats& fault_stats() const { return stats_; }

  void send(const std::string& address, const GossipMessagePtr& message) override;
  void set_receiver(Receiver receiver) override;
  void set_cluster_keys(ClusterKeys keys) override { inner_.set_cluster_keys(std::move(keys)); }
  void stop() override;
  TransportStats stats() const override { return inner_.stats(); }

 private:
  void send_now(const std::string& address, const GossipMessagePtr& message);
  bool chance(double p);

  boost::asio::io_context& io_;
  Transport& inner_;
  Random& random_;
  FaultSettings faults_;
  std::unordered_set<std::string> drop_to_, drop_from_;
  FaultStats stats_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // delayed sends check it
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_TRANSPORT_FAULT_INJECTION_H_
