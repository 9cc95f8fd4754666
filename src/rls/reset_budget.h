#ifndef TOLLGATE_SRC_RLS_RESET_BUDGET_H_
#define TOLLGATE_SRC_RLS_RESET_BUDGET_H_

// One HTTP/2 connection's budget against rapid reset and its kin (CVE-2023-44487, and streams the
// server resets because the client provoked it): docs/rls-h2-plan.md section 4, rules R2 and R4.
// Pure: the caller passes the time.
//
// R2, premature closes (Envoy 1.27.1's rule, counted in both directions): a stream closed, by the
// client's RST_STREAM or by a stream error we raised, before our response headers went out and
// within `premature_within` of opening, is premature. Of `window` closed streams, `max_premature`
// premature ones end the connection (GOAWAY ENHANCE_YOUR_CALM); each full window starts afresh,
// so a long-lived connection is judged on its recent streams only.
// R4, bounded work: at most `max_in_flight` streams opened whose work has not ended, reset or
// not (grpc-go's fix): a stream closed while its call is still being decided stays counted until
// the decision is done. Beyond it a new stream is refused (RST_STREAM REFUSED_STREAM) and the
// connection lives.

#include <cstdint>

namespace tollgate::rls {

struct ResetBudgetOptions {
  uint32_t window = 500;
  uint32_t max_premature = 250;
  int64_t premature_within_ns = 1'000'000'000;
  uint32_t max_in_flight = 100;
};

struct ResetBudgetStats {
  uint64_t opened = 0;
  uint64_t refused = 0;    // over max_in_flight
  uint64_t premature = 0;  // premature closes
  uint64_t closed = 0;
};

class ResetBudget {
 public:
  explicit ResetBudget(ResetBudgetOptions options = {}) : options_(options) {}

  // A new stream: false when it is to be refused (nothing else is counted for it then).
  bool open();
  // A stream that open() accepted has closed, `opened_ns` and `now_ns` on the caller's clock,
  // `answered` when our response headers had gone out. True from then on when the connection has
  // spent its budget and is to be ended.
  bool close(int64_t opened_ns, int64_t now_ns, bool answered);
  // The stream's work has ended (its call decided, or never started). Every open() that returned
  // true is followed by one close() and one done(), in either order.
  void done();

  bool spent() const { return spent_; }
  uint32_t in_flight() const { return in_flight_; }
  const ResetBudgetStats& stats() const { return stats_; }

 private:
  ResetBudgetOptions options_;
  ResetBudgetStats stats_;
  uint32_t in_flight_ = 0;
  uint32_t window_closed_ = 0;
  uint32_t window_premature_ = 0;
  bool spent_ = false;
};

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_RESET_BUDGET_H_
