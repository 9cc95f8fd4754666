// The rate limit service's messages (rls.proto) to and from the decision (decide.h): shared by
// the gRPC server and the HTTP front end's POST /json, so both read a request and answer it the
// same way.
#ifndef TOLLGATE_SRC_RLS_MESSAGES_H_
#define TOLLGATE_SRC_RLS_MESSAGES_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "rls/decide.h"

namespace tollgate::rls {

// Reads `request` and resolves it against `config` (plan_request). Returns "" or why the request
// is invalid (INVALID_ARGUMENT): plan_request's reasons, and what tollgate does not support
// (limit overrides, is_negative_hits).
std::string plan_from_message(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                              std::shared_ptr<const RlsConfig> config, size_t max_key_bytes, Plan& plan);

// Whole seconds, rounded up (0 for 0 or less): the unit of Retry-After and the RateLimit fields.
int64_t ceil_seconds(int64_t ns);

// Fills `response` with the decision: overall_code, one status per descriptor and, when
// `headers`, the IETF draft's RateLimit-Policy, RateLimit and (when over) Retry-After fields.
void fill_response(Code overall, const std::vector<DescriptorResult>& results, bool headers,
                   envoy::service::ratelimit::v3::RateLimitResponse& response);

// The reference server's response headers (LIMIT_RESPONSE_HEADERS_ENABLED), under the names
// given (its LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER): plain numbers for
// one descriptor, the one with a limit and the fewest tokens left, or the last one over that is
// not a quota: its requests_per_unit, its limit_remaining, and the whole seconds until its bucket
// is full again (the reference: until its window resets). None when no descriptor has a limit.
void add_limit_headers(const std::vector<DescriptorResult>& results, const std::string& limit_name,
                       const std::string& remaining_name, const std::string& reset_name,
                       envoy::service::ratelimit::v3::RateLimitResponse& response);

// The reference server's RESPONSE_DYNAMIC_METADATA, added to the response's dynamic metadata:
// "domain"; "descriptors", one {"entries": ["key=value", ...]} per request descriptor (with its
// "hitsAddend" when it set one); the request's "hitsAddend" when not 0; and "metadata", the
// configured `metadata` of every descriptor that did not answer OVER_LIMIT, merged (nested
// mappings merged key by key; on a clash the earlier descriptor's value stays).
void add_request_metadata(const envoy::service::ratelimit::v3::RateLimitRequest& request, const Plan& plan,
                          const std::vector<DescriptorResult>& results,
                          envoy::service::ratelimit::v3::RateLimitResponse& response);

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_MESSAGES_H_
