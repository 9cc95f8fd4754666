#include "fault_injection.h"

#include <boost/asio/steady_timer.hpp>
#include <chrono>

namespace tollgate {

FaultInjectingTransport::FaultInjectingTransport(boost::asio::io_context& io, Transport& inner, Random& random)
    : io_(io), inner_(inner), random_(random) {}

FaultInjectingTransport::~FaultInjectingTransport() { *alive_ = false; }

void FaultInjectingTransport::set_faults(const FaultSettings& faults) {
  faults_ = faults;
  drop_to_ = {faults.drop_to.begin(), faults.drop_to.end()};
  drop_from_ = {faults.drop_from.begin(), faults.drop_from.end()};
}

bool FaultInjectingTransport::chance(double p) {
  if (p <= 0) return false;
  if (p >= 1) return true;
  return double(random_.next_u64() >> 11) * 0x1.0p-53 < p;
}

void FaultInjectingTransport::send(const std::string& address, const GossipMessagePtr& message) {
  if (faults_.empty()) return inner_.send(address, message);
  // drop_to names node ids; the sender only knows addresses, so both are accepted.
  if (drop_to_.count(address)) {
    ++stats_.dropped_to;
    return;
  }
  if (chance(faults_.loss)) {
    ++stats_.lost;
    return;
  }
  const int copies = chance(faults_.duplicate) ? 2 : 1;
  if (copies == 2) ++stats_.duplicated;
  for (int i = 0; i < copies; ++i) {
    int64_t delay_ms = faults_.delay_ms;
    if (faults_.jitter_ms > 0) delay_ms += int64_t(random_.below(uint64_t(faults_.jitter_ms) + 1));
    if (delay_ms <= 0) {
      send_now(address, message);
      continue;
    }
    ++stats_.delayed;
    auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::milliseconds(delay_ms));
    timer->async_wait([this, timer, address, message, alive = alive_](const boost::system::error_code& ec) {
      if (!ec && *alive) send_now(address, message);
    });
  }
}

void FaultInjectingTransport::send_now(const std::string& address, const GossipMessagePtr& message) {
  inner_.send(address, message);
}

void FaultInjectingTransport::set_receiver(Receiver receiver) {
  inner_.set_receiver([this, receiver = std::move(receiver)](GossipMessage&& m) {
    if (!drop_from_.empty() && (drop_from_.count(m.sender) || drop_from_.count(m.sender_address))) {
      ++stats_.dropped_from;
      return;
    }
    receiver(std::move(m));
  });
}

void FaultInjectingTransport::stop() {
  *alive_ = false;
  inner_.stop();
}

}  // namespace tollgate
