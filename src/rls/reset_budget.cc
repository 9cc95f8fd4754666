#include "rls/reset_budget.h"

namespace tollgate::rls {

bool ResetBudget::open() {
  if (in_flight_ >= options_.max_in_flight) {
    ++stats_.refused;
    return false;
  }
  ++in_flight_;
  ++stats_.opened;
  return true;
}

bool ResetBudget::close(int64_t opened_ns, int64_t now_ns, bool answered) {
  ++stats_.closed;
  if (!answered && now_ns - opened_ns < options_.premature_within_ns) {
    ++stats_.premature;
    ++window_premature_;
  }
  if (window_premature_ >= options_.max_premature) spent_ = true;
  if (++window_closed_ >= options_.window) window_closed_ = window_premature_ = 0;
  return spent_;
}

void ResetBudget::done() {
  if (in_flight_ > 0) --in_flight_;
}

}  // namespace tollgate::rls
