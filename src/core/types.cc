// The client API's value types (include/tollgate/types.h, include/tollgate/decision.h).
#include "tollgate/types.h"

namespace tollgate {

const char* deny_reason_name(DenyReason reason) {
  switch (reason) {
    case DenyReason::kNone:
      return "allowed";
    case DenyReason::kInsufficientTokens:
      return "insufficient tokens";
    case DenyReason::kCostExceedsBurst:
      return "cost exceeds burst";
    case DenyReason::kInvalidCost:
      return "invalid cost (negative)";
    case DenyReason::kKeyTooLong:
      return "key too long";
    case DenyReason::kReservedKey:
      return "key reserved for Envoy's rate limit service (first byte 0x1E)";
    case DenyReason::kOtherCheckDenied:
      return "another check of the request was denied";
    case DenyReason::kSyncing:
      return "starting: still learning this key's balance from peers";
  }
  return "unknown";
}

Decision reserved_key_denial() {
  Decision d;
  d.reason = DenyReason::kReservedKey;
  d.retry_after_ns = kRetryNever;
  d.limited = false;
  return d;
}

const char* member_state_name(MemberState s) {
  switch (s) {
    case MemberState::kAlive:
      return "alive";
    case MemberState::kSuspect:
      return "suspect";
    case MemberState::kDead:
      return "dead";
    case MemberState::kUnreachable:
      return "unreachable";
    case MemberState::kLeft:
      return "left";
  }
  return "unknown";
}

bool parse_member_state(std::string_view name, MemberState* out) {
  for (MemberState s : {MemberState::kAlive, MemberState::kSuspect, MemberState::kDead, MemberState::kUnreachable,
                        MemberState::kLeft}) {
    if (name == member_state_name(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

std::string FaultSettings::validate() const {
  if (!(loss >= 0 && loss <= 1)) return "loss must be between 0 and 1";
  if (!(duplicate >= 0 && duplicate <= 1)) return "duplicate must be between 0 and 1";
  if (delay_ms < 0 || delay_ms > 60'000) return "delay must be between 0 and 60000 ms";
  if (jitter_ms < 0 || jitter_ms > 60'000) return "jitter must be between 0 and 60000 ms";
  return {};
}

}  // namespace tollgate
