// The HTTP front end's endpoints (src/http/routes.h): any method, target and body, as a client
// of --http-listen sends them once Beast has framed the request.
//
// Input: the method, '\n', the target, '\n', then the body (missing parts are empty).
//
// Contract: every request is answered exactly once, with a status the docs list; a 2xx or 4xx is
// JSON (or text for the health endpoints and metrics); an error has a body {"error": ...};
// a check is answered 200 only when the table allowed it, a lease only when granted, with its id;
// nothing reaches the node for a request answered 4xx; the key table stays within its cap, the
// leases held within the rule's limit.
#include <google/protobuf/util/json_util.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/key_table.h"
#include "fuzz_util.h"
#include "http/routes.h"
#include "support/table_handler.h"
#include "tollgate/http/v1/http.pb.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/rules_file.h"

namespace {

using namespace tollgate;

std::shared_ptr<const RlsConfig> config() {
  static const auto c = parse_rls_config(
      {{"rls.yaml",
        "domain: web\ndescriptors:\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 2}\n"
        "    descriptors:\n      - key: user\n        rate_limit: {unit: minute, requests_per_unit: 1}\n"}});
  return c;
}

const char* const kRules =
    "rules:\n  - {match: \"k*\", rate: 5/s, burst: 5}\n  - {match: \"db\", concurrency: 2, lease_ttl: 1s}\n"
    "  - {match: \"*\", rate: 1/s, burst: 1}\n";

std::shared_ptr<const RuleSet> rules() {
  return std::make_shared<const RuleSet>(parse_rules(kRules, "rules.yaml")->rules(), std::nullopt, config());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Fresh for every input, so that an input saved as a crash replays alone as it failed (issue
  // 37, item 11); what a sequence of requests does to buckets is the api_frames target's.
  tollgate::testing::TableHandler handler(rules(), KeyTableOptions{.max_keys = 64});
  handler.members_list = {MemberInfo{"me", "127.0.0.1:1", MemberState::kAlive, 1, 1, 0, true}};
  handler.faults_answer = "no";
  static const auto lease_rules = parse_rules(kRules, "rules.yaml");  // with the concurrency rule
  handler.leases->set_rules(lease_rules);
  http::Routes routes(
      [&handler](http::NodeJob job, const http::Reply&) {
    job(handler)();
    return true;
      },
      [] {
    http::RoutesOptions o;
    o.max_batch = 8;
    return o;
  }());
  routes.set_rls_config(config());

  const std::string_view text = fuzz::as_text(data, size);
  const size_t first = std::min(text.find('\n'), text.size());
  const size_t second = first < text.size() ? std::min(text.find('\n', first + 1), text.size()) : text.size();
  http::HttpRequest request{std::string(text.substr(0, first)),
                            first < text.size() ? std::string(text.substr(first + 1, second - first - 1)) : "",
                            second < text.size() ? std::string(text.substr(second + 1)) : "", ""};

  const int calls_before = handler.calls;
  int answers = 0;
  std::optional<http::HttpResponse> response;
  routes.handle(request, [&](http::HttpResponse r) {
    ++answers;
    response = std::move(r);
  });
  FUZZ_CHECK(answers == 1, "every request is answered exactly once");
  const unsigned s = response->status;
  FUZZ_CHECK(s == 200 || s == 400 || s == 403 || s == 404 || s == 405 || s == 413 || s == 429 || s == 503,
             "a status the docs list");
  if (s >= 400 && s != 429 && s != 403) {
    tollgate::http::v1::ErrorBody error;
    FUZZ_CHECK(google::protobuf::util::JsonStringToMessage(response->body, &error).ok() && !error.error().empty(),
               "an error has a JSON body with a reason");
  }
  // (A lease not held is 404 only once the node has looked for it.)
  const bool lease_not_found = s == 404 && request.target.starts_with("/v1/leases/");
  if (s >= 400 && s < 500 && s != 429 && s != 403 && !lease_not_found)
    FUZZ_CHECK(handler.calls == calls_before, "a refused request never reaches the node");
  if (request.method == "GET" && request.target.starts_with("/v1/check") && s == 200) {
    tollgate::http::v1::CheckResult result;
    FUZZ_CHECK(google::protobuf::util::JsonStringToMessage(response->body, &result).ok(),
               "a check's answer is its JSON");
    FUZZ_CHECK(result.allowed(), "200 only for an allowed check");
  }
  if (request.method == "POST" && request.target == "/v1/leases" && (s == 200 || s == 429)) {
    tollgate::http::v1::LeaseResult result;
    FUZZ_CHECK(google::protobuf::util::JsonStringToMessage(response->body, &result).ok(),
               "a lease's answer is its JSON");
    FUZZ_CHECK(result.granted() == (s == 200), "200 only for a granted lease");
    FUZZ_CHECK(result.id().empty() == (s == 429 || !result.limited()), "an id exactly when a lease is held");
  }
  FUZZ_CHECK(handler.keys() <= 64, "the key table stays within its cap");
  FUZZ_CHECK(handler.leases->stats().held <= 2, "no more leases held than the rule's limit");
  return 0;
}
