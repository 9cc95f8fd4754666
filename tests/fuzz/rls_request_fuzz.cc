// Envoy's rate limit service as gRPC hands it over: any bytes as a RateLimitRequest message,
// resolved against an RLS config (rls::plan_from_message, on a gRPC thread in the daemon) and
// decided on a real key table (rls::decide) into a RateLimitResponse (rls::fill_response).
//
// Contract: bytes that do not parse, or a request plan_from_message calls invalid, reach no
// bucket; a valid one gets one status per descriptor, at most kMaxDescriptors, and the overall
// code is OVER_LIMIT exactly when some status is; the key table stays within its cap; a request
// over holds no lease of a concurrency descriptor, one allowed never more than its limit.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/key_table.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "fuzz_util.h"
#include "rls/decide.h"
#include "rls/messages.h"
#include "support/table_handler.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/rules.h"

namespace {

using namespace tollgate;
namespace rpb = envoy::service::ratelimit::v3;

std::shared_ptr<const RlsConfig> config() {
  static const auto c = parse_rls_config(
      {{"rls.yaml",
        "domain: web\ndescriptors:\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 2}\n"
        "    descriptors:\n      - key: user\n        rate_limit: {unit: minute, requests_per_unit: 1}\n"
        "  - key: tenant\n    value: \"t*\"\n    rate_limit: {unit: hour, requests_per_unit: 5}\n    shadow_mode: "
        "true\n"
        "  - key: open\n    rate_limit: {unlimited: true}\n"
        "  - key: quota\n    quota_mode: true\n    metadata: {name: a, nested: {x: 1, l: [true, ~]}}\n"
        "    rate_limit: {unit: second, requests_per_unit: 1}\n"
        "  - key: quota2\n    quota_mode: true\n    metadata: {name: b, nested: {y: 2}}\n"
        "    rate_limit: {unit: minute, requests_per_unit: 3}\n"
        "  - key: several\n    rate_limits:\n      - {unit: second, requests_per_unit: 2, name: s}\n"
        "      - {unit: hour, requests_per_unit: 5, name: h, replaces: [{name: none}]}\n"
        "  - key: stream\n    concurrency: 2\n    lease_ttl: 1m\n"
        "  - key: both\n    concurrency: 1\n    rate_limit: {unit: second, requests_per_unit: 3}\n"}});
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Fresh for every input, so that an input saved as a crash replays alone as it failed (issue
  // 37, item 11). A request of many descriptors still drains and evicts within itself.
  tollgate::testing::TableHandler handler(std::make_shared<const RuleSet>(std::vector<Rule>{}, std::nullopt, config()),
                                          KeyTableOptions{.max_keys = 64});
  rpb::RateLimitRequest request;
  if (!request.ParseFromArray(data, int(size))) return 0;
  const int calls_before = handler.calls;
  rls::Plan plan;
  if (const std::string why = rls::plan_from_message(request, config(), 256, plan); !why.empty()) {
    FUZZ_CHECK(handler.calls == calls_before, "an invalid request reached the node");
    return 0;
  }
  FUZZ_CHECK(!plan.descriptors.empty() && plan.descriptors.size() <= rls::kMaxDescriptors,
             "a plan of no or too many descriptors");
  std::vector<rls::DescriptorResult> results;
  const rls::Code overall = rls::decide(handler, plan, results);
  FUZZ_CHECK(results.size() == plan.descriptors.size(), "not one result per descriptor");
  rpb::RateLimitResponse response;
  rls::fill_response(overall, results, true, response);
  rls::add_request_metadata(request, plan, results, response);
  FUZZ_CHECK(response.statuses_size() == int(results.size()), "not one status per descriptor");
  // Over overall when a descriptor that is not a quota is over, or every quota one is (and then
  // some status says over); a quota descriptor alone over leaves the call OK.
  bool any_over = false, regular_over = false;
  size_t quotas = 0, quotas_over = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const bool over = response.statuses(int(i)).code() == rpb::RateLimitResponse::OVER_LIMIT;
    any_over = any_over || over;
    const auto& m = plan.descriptors[i].match;
    // (A concurrency limit held denies like any other, quota mode or not.)
    const bool quota = m.quota_mode && !m.shadow_mode && !plan.descriptors[i].refund && m.limit &&
                       !m.limit->unlimited && !results[i].concurrency_over;
    quotas += quota;
    quotas_over += quota && over;
    regular_over = regular_over || (over && !quota);
  }
  const bool overall_over = response.overall_code() == rpb::RateLimitResponse::OVER_LIMIT;
  FUZZ_CHECK(!overall_over || any_over, "over overall with no status over");
  FUZZ_CHECK(overall_over == (regular_over || (quotas > 0 && quotas_over == quotas)),
             "the overall code disagrees with the statuses");
  FUZZ_CHECK(handler.keys() <= 64, "the key table outgrew its cap");
  // Concurrency (issue 40): a request over keeps no lease, one allowed holds at most the limit.
  for (const rls::DescriptorPlan& p : plan.descriptors) {
    if (!p.match.concurrency) continue;
    const int64_t held = handler.leases->in_flight(p.match.concurrency_key);
    FUZZ_CHECK(!overall_over || held == 0, "a request over kept a lease");
    FUZZ_CHECK(held <= p.match.concurrency->limit, "more slots held than the concurrency limit");
  }
  return 0;
}
