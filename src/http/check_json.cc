#include "http/check_json.h"

#include "json/json.h"
#include "tollgate/http/v1/http.pb.h"
#include "tollgate/limit.h"

namespace tollgate::http {
namespace {

// proto3's JSON for an int64: a decimal string.
void append_int64(std::string& out, const char* name, int64_t value) {
  out += ",\"";
  out += name;
  out += "\":\"";
  out += std::to_string(value);
  out += '"';
}

void append_bool(std::string& out, const char* name, bool value) {
  out += ",\"";
  out += name;
  out += "\":";
  out += value ? "true" : "false";
}

}  // namespace

void append_check_result_json(std::string& out, const CheckItem& item, const Decision& d) {
  out += "{\"key\":";
  json::append_json_string(out, item.key);
  append_int64(out, "cost", item.cost);
  append_bool(out, "allowed", d.allowed);
  append_int64(out, "remaining", d.remaining);
  out += ",\"reason\":";
  json::append_json_string(out, deny_reason_name(d.reason));
  append_bool(out, "limited", d.limited);
  if (d.has_limit()) {
    out += ",\"limit\":{\"rate\":";
    json::append_json_string(out, format_rate(d.limit.rate));
    append_int64(out, "rate_tokens", d.limit.rate.tokens);
    append_int64(out, "rate_period_ns", d.limit.rate.period_ns);
    append_int64(out, "burst", d.limit.burst);
    append_int64(out, "max_debt", d.limit.max_debt);
    out += '}';
  }
  // Last, where protobuf's printer put it (a proto3 optional field, printed after the others):
  // the same bytes as before for every answer.
  if (d.retry_after_ns != kRetryNever) append_int64(out, "retry_after_ns", d.retry_after_ns);
  out += '}';
}

void fill_limit(const Limit& limit, v1::Limit& out) {
  out.set_rate(format_rate(limit.rate));
  out.set_rate_tokens(limit.rate.tokens);
  out.set_rate_period_ns(limit.rate.period_ns);
  out.set_burst(limit.burst);
  out.set_max_debt(limit.max_debt);
}

void fill_check_result(const CheckItem& item, const Decision& d, v1::CheckResult& r) {
  r.set_key(std::string(item.key));
  r.set_cost(item.cost);
  r.set_allowed(d.allowed);
  r.set_remaining(d.remaining);
  if (d.retry_after_ns != kRetryNever) r.set_retry_after_ns(d.retry_after_ns);
  r.set_reason(deny_reason_name(d.reason));
  r.set_limited(d.limited);
  if (d.has_limit()) fill_limit(d.limit, *r.mutable_limit());
}

}  // namespace tollgate::http
