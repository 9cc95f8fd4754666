// The HTTP front end's endpoints apart from sockets (src/http/routes.h): each request against a
// real KeyTable behind a minimal request path, on a hand-driven clock, with the node's thread
// replaced by running jobs at once (or refusing them).
#include "http/routes.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <prometheus/histogram.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/key_table.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "http/check_json.h"
#include "http/token_file.h"
#include "support/table_handler.h"
#include "support/top_fixture.h"
#include "tollgate/config_error.h"
#include "tollgate/http/v1/http.pb.h"
#include "tollgate/rls_config_file.h"
#include "tollgate/rules_file.h"

namespace tollgate::http {
namespace {

namespace hv1 = tollgate::http::v1;
namespace rpb = envoy::service::ratelimit::v3;

constexpr int64_t kSec = kNanosPerSecond;

const char* const kRules = R"(rules:
  - {match: "k*", rate: 5/s, burst: 5}
  - {match: "big", rate: 1/min, burst: 2}
  - {match: "db", concurrency: 2, lease_ttl: 10s}
)";

const char* const kRls = R"(domain: web
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 2}
)";

// The test table's rules and the RLS config, and stats and rule counters of every kind for
// /metrics and /v1/stats to render.
class TableHandler : public testing::TableHandler {
 public:
  explicit TableHandler(std::shared_ptr<const RlsConfig> rls)
      : testing::TableHandler(
            std::make_shared<const RuleSet>(parse_rules(kRules, "rules.yaml")->rules(), std::nullopt, std::move(rls))) {
    members_list = {MemberInfo{"me", "127.0.0.1:1", MemberState::kAlive, 1, 1, 0, true}};
  }
  size_t checks_seen() const { return items; }
  StatsList stats() override {
    return {{"checks", 3},
            {"checks_allowed", 2},
            {"checks_denied", 1},
            {"keys", 7},
            {"api.requests", 9},
            {"api.threads", 2},
            {"api.thread.0.connections_open", 3},
            {"api.thread.1.connections_open", 4},
            {"api.thread.0.checks", 10},
            {"api.thread.1.checks", 11},
            {"state_write_ns", 1'500'000'000},
            {"never_declared", 4}};
  }
  std::vector<std::pair<std::string, RuleCounters>> rule_counters() override {
    return {{"k*", RuleCounters{5, 4, 1, 1, 2}}, {"rls:web.path_/a \"b\"", RuleCounters{1, 1, 0, 0, 0}}};
  }
};

class RoutesTest : public ::testing::Test {
 protected:
  RoutesTest() : handler_(parse_rls_config({{"rls.yaml", kRls}})) {
    handler_.leases->set_rules(parse_rules(kRules, "rules.yaml"));
    make_routes();
  }

  void make_routes(RoutesOptions o = {}) {
    o.alone_long_enough = [this] { return alone_; };
    if (!o.stat_catalog) {  // what the test handler's stats are (the daemon's: daemon_stat_catalog)
      static constexpr StatDef kDefs[] = {
          {"checks", StatKind::kCounter, "checks"},
          {"checks_allowed", StatKind::kCounter, "allowed"},
          {"checks_denied", StatKind::kCounter, "denied"},
          {"keys", StatKind::kGauge, "Buckets held"},
          {"api.requests", StatKind::kCounter, "requests"},
          {"api.threads", StatKind::kGauge, "threads"},
          {"api.thread.*.connections_open", StatKind::kGauge, "connections by thread"},
          {"api.thread.*.checks", StatKind::kCounter, "checks by thread"},
          {"state_write_ns", StatKind::kGauge, "Time the last state write took", StatUnit::kNanoseconds},
      };
      auto catalog = std::make_shared<StatCatalog>();
      catalog->add(kDefs);
      o.stat_catalog = std::move(catalog);
    }
    routes_ = std::make_unique<Routes>(
        [this](NodeJob job, const Reply&) {
      if (refuse_ || (refuse_after_ >= 0 && jobs_run_ >= refuse_after_)) return false;
      ++jobs_run_;
      job(handler_)();  // the node's part, then the HTTP thread's
      return true;
        },
        o);
    routes_->set_rls_config(parse_rls_config({{"rls.yaml", kRls}}));
  }

  HttpResponse request(const std::string& method, const std::string& target, const std::string& body = "") {
    std::optional<HttpResponse> out;
    routes_->handle({method, target, body, authorization_}, [&](HttpResponse r) { out = std::move(r); });
    EXPECT_TRUE(out.has_value()) << method << " " << target << ": no answer";
    return out.value_or(HttpResponse{});
  }

  static std::string header(const HttpResponse& r, const std::string& name) {
    for (const auto& [n, v] : r.headers) {
      if (n == name) return v;
    }
    return "(absent)";
  }

  template <typename Message>
  static Message parse(const std::string& body) {
    Message m;
    const auto status = google::protobuf::util::JsonStringToMessage(body, &m);
    EXPECT_TRUE(status.ok()) << status.message() << " in " << body;
    return m;
  }

  TableHandler handler_;
  std::unique_ptr<Routes> routes_;
  bool refuse_ = false;
  int refuse_after_ = -1;  // >= 0: refuse every job after this many
  int jobs_run_ = 0;       // jobs the node ran
  bool alone_ = false;
  std::string authorization_;  // the requests' Authorization header
};

TEST_F(RoutesTest, AGetCheckAnswers200ThenDenies429WithTheDraftFieldsAndRetryAfter) {
  for (int i = 0; i < 5; ++i) {
    const HttpResponse r = request("GET", "/v1/check?key=k1");
    ASSERT_EQ(r.status, 200u) << r.body;
    const auto result = parse<hv1::CheckResult>(r.body);
    EXPECT_TRUE(result.allowed());
    EXPECT_EQ(result.remaining(), 4 - i);
    EXPECT_EQ(result.key(), "k1");
    EXPECT_EQ(result.cost(), 1);
    EXPECT_EQ(result.limit().rate(), "5/s");
    EXPECT_EQ(header(r, "RateLimit-Policy"), "\"tollgate\";q=5;w=1");
    EXPECT_EQ(header(r, "RateLimit"), "\"tollgate\";r=" + std::to_string(4 - i) + ";t=1");
    EXPECT_EQ(header(r, "Retry-After"), "(absent)");
  }
  const HttpResponse denied = request("GET", "/v1/check?key=k1");
  EXPECT_EQ(denied.status, 429u);
  const auto result = parse<hv1::CheckResult>(denied.body);
  EXPECT_FALSE(result.allowed());
  EXPECT_EQ(result.reason(), "insufficient tokens");
  EXPECT_EQ(result.retry_after_ns(), kSec / 5);
  EXPECT_EQ(header(denied, "Retry-After"), "1");
  EXPECT_EQ(header(denied, "RateLimit"), "\"tollgate\";r=0;t=1");
  // nginx's auth_request passes only 2xx, 401 and 403 on.
  EXPECT_EQ(request("GET", "/v1/check?key=k1&deny_status=403").status, 403u);
  // Refill on the table's clock: a fifth of a second later one more passes.
  handler_.now += kSec / 5;
  EXPECT_EQ(request("GET", "/v1/check?key=k1").status, 200u);
}

TEST_F(RoutesTest, ACostAboveTheBurstNeverPassesAndSaysSo) {
  const HttpResponse r = request("GET", "/v1/check?key=big&cost=3");
  EXPECT_EQ(r.status, 429u);
  const auto result = parse<hv1::CheckResult>(r.body);
  EXPECT_FALSE(result.has_retry_after_ns()) << r.body;
  EXPECT_EQ(header(r, "Retry-After"), "(absent)");
  EXPECT_EQ(header(r, "RateLimit-Policy"), "\"tollgate\";q=2;w=60");
}

TEST_F(RoutesTest, KeysArePercentDecodedAndAnUnlimitedKeyHasNoFields) {
  const HttpResponse r = request("GET", "/v1/check?key=k%20a+b%2F%C3%A9&cost=2");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(parse<hv1::CheckResult>(r.body).key(), "k a b/\xC3\xA9");
  EXPECT_EQ(parse<hv1::CheckResult>(r.body).cost(), 2);
  const HttpResponse free = request("GET", "/v1/check?key=other");
  EXPECT_EQ(free.status, 200u);
  EXPECT_FALSE(parse<hv1::CheckResult>(free.body).limited());
  EXPECT_EQ(header(free, "RateLimit"), "(absent)");
}

TEST_F(RoutesTest, BadChecksAre400WithAReason) {
  struct Case {
    std::string target, reason;
  };
  const Case cases[] = {
      {"/v1/check", "needs a non-empty key"},
      {"/v1/check?key=", "needs a non-empty key"},
      {"/v1/check?key=k1&cost=-1", "cost must be a whole number from 0"},
      {"/v1/check?key=k1&cost=1.5", "cost must be a whole number"},
      {"/v1/check?key=k1&cost=10000000000000", "cost must be a whole number"},
      {"/v1/check?key=k1&deny_status=500", "deny_status must be 429 or 403"},
      {"/v1/check?key=k1&kee=2", "unknown parameter \\\"kee\\\""},
      {"/v1/check?key=k%001", "encoded NUL"},
      {"/v1/check?key=k%FF", "not UTF-8"},
      {"/v1/check?key=" + std::string(257, 'k'), "the key is 257 bytes; at most 256"},
      // A parameter given twice (issue 34, finding 7): never "the last one wins".
      {"/v1/check?key=a&key=victim", "parameter \\\"key\\\" is given twice"},
      {"/v1/check?key=k1&cost=2&cost=0", "parameter \\\"cost\\\" is given twice"},
      {"/v1/check?key=k1&deny_status=403&deny_status=429", "parameter \\\"deny_status\\\" is given twice"},
      // An Envoy bucket's key (finding 10): only the rate limit service charges it.
      {"/v1/check?key=%1Eweb%1Fpath%1D%2Fa", "name the buckets of Envoy's rate limit service"},
  };
  for (const Case& c : cases) {
    const HttpResponse r = request("GET", c.target);
    EXPECT_EQ(r.status, 400u) << c.target;
    EXPECT_NE(r.body.find(c.reason), std::string::npos) << c.target << " -> " << r.body;
  }
}

TEST_F(RoutesTest, APostedBatchIsDecidedAloneOrAllOrNothing) {
  HttpResponse r = request("POST", "/v1/check", R"({"checks": [{"key": "k2", "cost": 4}, {"key": "k3"}]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  auto batch = parse<hv1::CheckBatchResponse>(r.body);
  ASSERT_EQ(batch.results_size(), 2);
  EXPECT_TRUE(batch.allowed());
  EXPECT_EQ(batch.results(0).remaining(), 1);
  EXPECT_EQ(batch.results(1).cost(), 1);  // absent cost: 1
  EXPECT_EQ(batch.results(1).remaining(), 4);
  // k2 has 1 left: all or nothing charges neither.
  r = request("POST", "/v1/check",
              R"({"checks": [{"key": "k3", "cost": 2}, {"key": "k2", "cost": 2}], "all_or_nothing": true})");
  ASSERT_EQ(r.status, 200u);
  batch = parse<hv1::CheckBatchResponse>(r.body);
  EXPECT_FALSE(batch.allowed());
  EXPECT_EQ(batch.results(0).reason(), "another check of the request was denied");
  EXPECT_EQ(parse<hv1::CheckResult>(request("GET", "/v1/check?key=k3&cost=0").body).remaining(), 4);
  // Decided alone, the first passes.
  r = request("POST", "/v1/check", R"({"checks": [{"key": "k3", "cost": 2}, {"key": "k2", "cost": 2}]})");
  batch = parse<hv1::CheckBatchResponse>(r.body);
  EXPECT_TRUE(batch.results(0).allowed());
  EXPECT_FALSE(batch.results(1).allowed());
}

TEST_F(RoutesTest, BadBatchesAreRefusedBeforeTheNode) {
  RoutesOptions o;
  o.max_batch = 2;
  make_routes(o);
  refuse_ = true;  // none of these may reach the node
  struct Case {
    std::string body;
    unsigned status;
    std::string reason;
  };
  const Case cases[] = {
      {"", 400, "not a valid JSON request"},
      {"[1, 2]", 400, "not a valid JSON request"},
      {R"({"checks": [{"key": "k1", "cots": 2}]})", 400, "not a valid JSON request"},
      {R"({"checks": []})", 400, "is empty"},
      {R"({"checks": [{"key": ""}]})", 400, "checks[0]: the key is empty"},
      {R"({"checks": [{"key": "a"}, {"key": "b", "cost": -3}]})", 400, "checks[1]: cost must be"},
      {R"({"checks": [{"key": ")" + std::string(300, 'x') + R"("}]})", 400, "checks[0]: the key is 300 bytes"},
      {R"({"checks": [{"key": "a"}, {"key": "b"}, {"key": "c"}]})", 413, "3 checks in one request; at most 2"},
      {R"({"checks": [{"key": "a"}, {"key": "\u001eweb\u001fpath\u001d/a"}]})", 400,
       "checks[1]: keys that start with byte 0x1E"},
  };
  for (const Case& c : cases) {
    const HttpResponse r = request("POST", "/v1/check", c.body);
    EXPECT_EQ(r.status, c.status) << c.body;
    EXPECT_NE(r.body.find(c.reason), std::string::npos) << c.body << " -> " << r.body;
  }
}

// An all-or-nothing batch holds every shard it touches until it is decided: capped at 64 as on
// the native API (issue 34, finding 4), while a batch decided check by check may hold 1,000.
TEST_F(RoutesTest, AnAllOrNothingBatchIsCappedAt64Checks) {
  auto batch = [](size_t n, bool all) {
    std::string body = R"({"checks": [)";
    for (size_t i = 0; i < n; ++i) body += (i ? "," : "") + std::string(R"({"key": "k)") + std::to_string(i) + R"("})";
    return body + "], \"all_or_nothing\": " + (all ? "true" : "false") + "}";
  };
  EXPECT_EQ(request("POST", "/v1/check", batch(kMaxAllOrNothingChecks, true)).status, 200u);
  const HttpResponse r = request("POST", "/v1/check", batch(kMaxAllOrNothingChecks + 1, true));
  EXPECT_EQ(r.status, 413u);
  EXPECT_NE(r.body.find("65 checks in one all-or-nothing request; at most 64"), std::string::npos) << r.body;
  EXPECT_EQ(request("POST", "/v1/check", batch(kMaxAllOrNothingChecks + 1, false)).status, 200u);
}

TEST_F(RoutesTest, JsonIsEnvoysRateLimitRequestAnswered200Or429) {
  const std::string body = R"({"domain": "web", "descriptors": [{"entries": [{"key": "path", "value": "/a"}]}]})";
  for (int i = 0; i < 2; ++i) {
    const HttpResponse r = request("POST", "/json", body);
    ASSERT_EQ(r.status, 200u) << r.body;
    const auto response = parse<rpb::RateLimitResponse>(r.body);
    EXPECT_EQ(response.overall_code(), rpb::RateLimitResponse::OK);
    EXPECT_EQ(response.statuses(0).limit_remaining(), uint32_t(1 - i));
    EXPECT_NE(r.body.find("\"overallCode\":\"OK\""), std::string::npos) << r.body;  // the reference server's shape
  }
  const HttpResponse over = request("POST", "/json", body);
  EXPECT_EQ(over.status, 429u);
  EXPECT_EQ(parse<rpb::RateLimitResponse>(over.body).overall_code(), rpb::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(request("POST", "/json", R"({"domain": "web"})").status, 400u);
  EXPECT_EQ(request("POST", "/json", "{").status, 400u);
  routes_->set_rls_config(nullptr);
  const HttpResponse none = request("POST", "/json", body);
  EXPECT_EQ(none.status, 404u);
  EXPECT_NE(none.body.find("--rls-config"), std::string::npos);
}

// The reference server's /rlconfig: the limits in force, one line each.
TEST_F(RoutesTest, RlconfigPrintsTheLimitsInForce) {
  const HttpResponse r = request("GET", "/rlconfig");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, "web.path: unit=SECOND requests_per_unit=2, shadow_mode: false\n");
  routes_->set_rls_config(nullptr);
  EXPECT_EQ(request("GET", "/rlconfig").status, 404u);
  EXPECT_EQ(request("POST", "/rlconfig").status, 405u);
}

TEST_F(RoutesTest, ReadyOnceAMemberIsHeardOrAloneLongEnoughAndNotWhileDraining) {
  EXPECT_EQ(request("GET", "/healthz").status, 200u);
  EXPECT_EQ(request("GET", "/readyz").status, 503u);
  handler_.members_list.push_back(MemberInfo{"peer", "127.0.0.1:2", MemberState::kUnreachable, 1, 0, 0, false});
  EXPECT_EQ(request("GET", "/readyz").status, 503u);
  handler_.members_list.back().state = MemberState::kAlive;
  EXPECT_EQ(request("GET", "/readyz").status, 200u);
  EXPECT_EQ(request("GET", "/healthcheck").status, 200u);  // the reference server's name for it
  handler_.members_list.pop_back();
  alone_ = true;
  EXPECT_EQ(request("GET", "/readyz").status, 200u);
  routes_->drain();
  EXPECT_EQ(request("GET", "/readyz").status, 503u);
  EXPECT_EQ(request("GET", "/healthcheck").status, 503u);
  EXPECT_EQ(request("GET", "/healthz").status, 200u);
}

// A batch goes to the node kChecksPerSlice checks at a time, so 1,000 checks from one client
// never hold the node's thread (and every other client's checks) for one long turn (issue 34,
// finding 4). All or nothing is decided in one turn, as it must be; it is capped at 64.
TEST_F(RoutesTest, ABatchIsDecidedASliceAtATimeAndAnsweredWhole) {
  std::string body = R"({"checks": [)";
  for (int i = 0; i < 100; ++i) body += std::string(i ? "," : "") + R"({"key": "k)" + std::to_string(i) + R"("})";
  const HttpResponse r = request("POST", "/v1/check", body + "]}");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(jobs_run_, (100 + kChecksPerSlice - 1) / kChecksPerSlice);
  const auto batch = parse<hv1::CheckBatchResponse>(r.body);
  ASSERT_EQ(batch.results_size(), 100);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(batch.results(i).key(), "k" + std::to_string(i));
    EXPECT_TRUE(batch.results(i).allowed());
  }
  EXPECT_EQ(handler_.checks_seen(), 100u);

  jobs_run_ = 0;
  std::string together = R"({"all_or_nothing": true, "checks": [)";
  for (int i = 0; i < 64; ++i) together += std::string(i ? "," : "") + R"({"key": "k)" + std::to_string(i) + R"("})";
  EXPECT_EQ(request("POST", "/v1/check", together + "]}").status, 200u);
  EXPECT_EQ(jobs_run_, 1);

  // A slice that cannot be queued (the node stopping): 503; the slices before it were decided.
  jobs_run_ = 0;
  refuse_after_ = 2;
  EXPECT_EQ(request("POST", "/v1/check", body + "]}").status, 503u);
  EXPECT_EQ(handler_.checks_seen(), 100u + 64u + 2u * kChecksPerSlice);
}

// --http-token-file (issue 34, finding 10): every endpoint but health needs the bearer token.
TEST_F(RoutesTest, WithATokenEveryEndpointButHealthNeedsIt) {
  alone_ = true;
  routes_->set_token("s3cret-token-0123456789");
  const std::vector<std::string> guarded = {"/v1/check?key=a", "/metrics", "/v1/members", "/v1/stats"};
  for (const std::string& auth :
       {std::string(), std::string("Bearer wrong-token-0123456789"), std::string("Bearer s3cret-token-012345678"),
        std::string("Basic s3cret-token-0123456789"), std::string("Bearer s3cret-token-0123456789 ")}) {
    authorization_ = auth;
    for (const std::string& target : guarded) {
      const HttpResponse r = request("GET", target);
      EXPECT_EQ(r.status, 401u) << target << " with \"" << auth << "\"";
      // What the operator's page reads asks a browser for its password; the rest, for Bearer.
      const bool page = target == "/v1/members" || target == "/v1/stats";
      EXPECT_EQ(header(r, "WWW-Authenticate"),
                page ? "Basic realm=\"tollgate\", charset=\"UTF-8\"" : "Bearer realm=\"tollgate\"");
    }
    EXPECT_EQ(request("POST", "/json", "{}").status, 401u);
    EXPECT_EQ(request("GET", "/healthz").status, 200u);
    EXPECT_EQ(request("GET", "/readyz").status, 200u);
  }
  EXPECT_EQ(handler_.checks_seen(), 0u);  // nothing reached the node
  for (const std::string& auth :
       {std::string("Bearer s3cret-token-0123456789"), std::string("bearer s3cret-token-0123456789")}) {
    authorization_ = auth;
    for (const std::string& target : guarded)
      EXPECT_EQ(request("GET", target).status, 200u) << target << " with " << auth;
  }
  // A reload without a token opens the endpoints again; one with another token closes them to the old.
  routes_->set_token("another-token-0123456789");
  EXPECT_EQ(request("GET", "/v1/stats").status, 401u);
  routes_->set_token("");
  authorization_.clear();
  EXPECT_EQ(request("GET", "/v1/stats").status, 200u);
  const StatsList s = routes_->stats();
  EXPECT_NE(std::find(s.begin(), s.end(), std::pair<std::string, int64_t>{"http.unauthorized", 5 * 5 + 1}), s.end());
}

// The operator's page (issue 41): a browser cannot send Bearer on a navigation, so the read-only
// paths it reads take Basic too (any user, the token as the password). A browser attaches Basic
// to every request to this origin, another site's included: it must never authorise an effect.
TEST_F(RoutesTest, BasicCredentialsOpenTheReadOnlyPathsAndNeverAnEffect) {
  alone_ = true;
  routes_->set_token("s3cret-token-0123456789");
  const std::string good = "Basic b3BlcmF0b3I6czNjcmV0LXRva2VuLTAxMjM0NTY3ODk=";  // operator:s3cret-token-...
  const std::vector<std::string> reads = {"/",         "/ui/app.js", "/ui/app.css",        "/v1/members",
                                          "/v1/stats", "/v1/rules",  "/v1/balance?key=k1", "/v1/top"};
  authorization_ = good;
  for (const std::string& target : reads) EXPECT_EQ(request("GET", target).status, 200u) << target;
  authorization_ = "basic b3BlcmF0b3I6czNjcmV0LXRva2VuLTAxMjM0NTY3ODk=";  // the scheme in any case
  EXPECT_EQ(request("GET", "/v1/stats").status, 200u);
  // Never a check, a reset, a lease, Envoy's JSON or a metrics scrape (Bearer only).
  authorization_ = good;
  const std::vector<std::pair<std::string, std::string>> effects = {
      {"GET", "/v1/check?key=k1"}, {"POST", "/v1/check"}, {"POST", "/v1/reset?key=k1"}, {"POST", "/v1/leases"},
      {"DELETE", "/v1/leases/00"}, {"POST", "/json"},     {"GET", "/metrics"},          {"POST", "/v1/stats"}};
  for (const auto& [method, target] : effects) {
    const HttpResponse r = request(method, target, R"({"key": "k1"})");
    EXPECT_EQ(r.status, 401u) << method << " " << target;
    EXPECT_EQ(header(r, "WWW-Authenticate"), "Bearer realm=\"tollgate\"") << method << " " << target;
  }
  EXPECT_EQ(handler_.checks_seen(), 0u);
  // A wrong password, no user part, not base64, or the token without Basic's encoding: 401, and
  // the page asks again.
  for (const std::string& auth :
       {std::string("Basic b3BlcmF0b3I6d3JvbmctdG9rZW4tMDEyMzQ1Njc4OTA="),
        std::string("Basic czNjcmV0LXRva2VuLTAxMjM0NTY3ODk="), std::string("Basic s3cret-token-0123456789"),
        std::string("Basic "), std::string("Basic b3BlcmF0b3I6czNjcmV0LXRva2VuLTAxMjM0NTY3ODk"),
        std::string("Basic ====")}) {
    authorization_ = auth;
    const HttpResponse r = request("GET", "/");
    EXPECT_EQ(r.status, 401u) << auth;
    EXPECT_EQ(header(r, "WWW-Authenticate"), "Basic realm=\"tollgate\", charset=\"UTF-8\"") << auth;
  }
}

TEST_F(RoutesTest, ThePageComesFromTheBinaryUnderAPolicyThatAllowsOnlyThisOrigin) {
  const HttpResponse page = request("GET", "/");
  ASSERT_EQ(page.status, 200u);
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("<script src=\"/ui/app.js\""), std::string::npos);
  const std::string csp = header(page, "Content-Security-Policy");
  for (const char* directive : {"default-src 'none'", "script-src 'self'", "connect-src 'self'",
                                "frame-ancestors 'none'", "form-action 'none'"}) {
    EXPECT_NE(csp.find(directive), std::string::npos) << directive << " in " << csp;
  }
  EXPECT_EQ(header(page, "X-Content-Type-Options"), "nosniff");
  const HttpResponse js = request("GET", "/ui/app.js");
  EXPECT_EQ(js.status, 200u);
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(js.body.find("textContent"), std::string::npos);
  EXPECT_EQ(js.body.find("innerHTML"), std::string::npos);  // keys are hostile text, never markup
  EXPECT_EQ(request("GET", "/ui/app.css").content_type, "text/css; charset=utf-8");
  EXPECT_EQ(request("GET", "/ui/nothing.js").status, 404u);
  EXPECT_EQ(request("POST", "/").status, 405u);
  RoutesOptions o;
  o.metrics_only = true;  // --metrics-listen: no page
  make_routes(o);
  EXPECT_EQ(request("GET", "/").status, 404u);
  EXPECT_EQ(request("GET", "/v1/balance?key=k1").status, 404u);
}

TEST_F(RoutesTest, BalanceReadsABucketWithoutChargingIt) {
  ASSERT_EQ(request("GET", "/v1/check?key=k1&cost=2").status, 200u);
  const size_t checks = handler_.checks_seen();
  const auto balance = [&](const std::string& key) {
    const HttpResponse r = request("GET", "/v1/balance?key=" + key);
    EXPECT_EQ(r.status, 200u) << r.body;
    hv1::BalanceResult b;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.body, &b).ok()) << r.body;
    return b;
  };
  for (int i = 0; i < 3; ++i) {  // read again and again: nothing is spent
    const hv1::BalanceResult b = balance("k1");
    EXPECT_TRUE(b.limited());
    EXPECT_TRUE(b.held());
    EXPECT_EQ(b.rule(), "k*");
    EXPECT_DOUBLE_EQ(b.balance(), 3.0);
    EXPECT_DOUBLE_EQ(b.debt(), 0.0);
    EXPECT_EQ(b.limit().burst(), 5);
    EXPECT_EQ(b.limit().rate(), "5/s");
  }
  EXPECT_EQ(handler_.checks_seen(), checks);
  const hv1::BalanceResult fresh = balance("k9");  // no bucket here: full at its first check
  EXPECT_TRUE(fresh.limited());
  EXPECT_FALSE(fresh.held());
  EXPECT_DOUBLE_EQ(fresh.balance(), 5.0);
  EXPECT_FALSE(balance("nobody").limited());
  for (const char* bad : {"/v1/balance", "/v1/balance?key=", "/v1/balance?key=a&key=b", "/v1/balance?k=a"}) {
    EXPECT_EQ(request("GET", bad).status, 400u) << bad;
  }
  EXPECT_EQ(request("GET", "/v1/balance?key=" + std::string(300, 'k')).status, 400u);
}

TEST_F(RoutesTest, RulesListsEveryRuleInForceWithThisNodesCounts) {
  handler_.rules_version = 42;
  for (int i = 0; i < 7; ++i) (void)request("GET", "/v1/check?key=k1");  // burst 5: two denied
  const HttpResponse r = request("GET", "/v1/rules");
  ASSERT_EQ(r.status, 200u);
  hv1::RulesResult m;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.body, &m).ok()) << r.body;
  EXPECT_EQ(m.version(), 42);
  EXPECT_EQ(m.omitted(), 0u);
  std::vector<std::string> labels;
  for (const auto& rule : m.rules()) labels.push_back(rule.rule());
  ASSERT_EQ(labels.size(), 3u) << r.body;  // k*, big, and the RLS config's one limit
  EXPECT_EQ(labels[0], "k*");
  EXPECT_EQ(labels[1], "big");
  EXPECT_EQ(labels[2].rfind("rls:", 0), 0u) << labels[2];
  EXPECT_EQ(m.rules(0).checks(), 7u);
  EXPECT_EQ(m.rules(0).denied(), 2u);
  EXPECT_EQ(m.rules(0).limit().burst(), 5);
  EXPECT_EQ(m.rules(1).checks(), 0u);
}

// The token file: one line of RFC 6750 characters, or an error naming the file and column.
TEST(TokenFile, OneLineOfTokenCharactersOrAnErrorThatSaysWhere) {
  char dir[] = "/tmp/tollgate-token-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/token";
  auto write = [&](const std::string& text, mode_t mode = 0640) {
    std::ofstream(path, std::ios::trunc) << text;
    ::chmod(path.c_str(), mode);
  };
  auto error_of = [&](const std::string& text) {
    write(text);
    try {
      (void)read_token_file(path);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(read)");
  };
  write("abcDEF0123456789-._~+/==\n");
  EXPECT_EQ(read_token_file(path), "abcDEF0123456789-._~+/==");
  write("abcDEF0123456789\r\n");
  EXPECT_EQ(read_token_file(path), "abcDEF0123456789");
  EXPECT_EQ(token_file_warning(path), std::nullopt);  // 0640
  write("abcDEF0123456789", 0644);
  EXPECT_NE(token_file_warning(path).value_or(""), "") << "readable by others";
  EXPECT_NE(error_of("short\n").find(path + ":1: the token has 5 characters; it must have 16 to 512"),
            std::string::npos)
      << error_of("short\n");
  EXPECT_NE(error_of("").find("has 0 characters"), std::string::npos);
  EXPECT_NE(error_of("abcdefgh ijklmnopq\n").find(path + ":1:9: the token may hold"), std::string::npos)
      << error_of("abcdefgh ijklmnopq\n");
  EXPECT_NE(error_of("abcdefgh=ijklmnopq").find("found 'i'"), std::string::npos);  // '=' at the end only
  EXPECT_NE(error_of("abcdefghijklmnopq\nsecond line").find("found 0x0A"), std::string::npos);
  EXPECT_NE(error_of(std::string(513, 'a')).find("has 513 characters"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// --metrics-listen: what a scraper and a probe need, and nothing that checks or reads keys.
TEST_F(RoutesTest, AMetricsOnlyListenerServesMetricsAndHealthOnly) {
  RoutesOptions o;
  o.metrics_only = true;
  make_routes(o);
  alone_ = true;
  EXPECT_EQ(request("GET", "/metrics").status, 200u);
  EXPECT_EQ(request("GET", "/healthz").status, 200u);
  EXPECT_EQ(request("GET", "/readyz").status, 200u);
  for (const char* target : {"/v1/check?key=a", "/v1/members", "/v1/stats", "/json"}) {
    EXPECT_EQ(request("GET", target).status, 404u) << target;
  }
  EXPECT_EQ(request("POST", "/v1/check", R"({"checks":[{"key":"a"}]})").status, 404u);
  EXPECT_EQ(handler_.checks_seen(), 0u);
}

TEST_F(RoutesTest, MetricsArePrometheusTextWithDecisionAndStateLabels) {
  handler_.members_list.push_back(MemberInfo{"peer", "127.0.0.1:2", MemberState::kSuspect, 1, 0, 0, false});
  ASSERT_EQ(request("POST", "/v1/leases", R"({"key": "db"})").status, 200u);
  handler_.leases->add_remote("db", 1);  // a member's lease heard of
  const HttpResponse r = request("GET", "/metrics");
  ASSERT_EQ(r.status, 200u);
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
  for (const char* line :
       {"# TYPE tollgate_checks_total counter", "tollgate_checks_total{decision=\"allowed\"} 2",
        "tollgate_checks_total{decision=\"denied\"} 1", "# TYPE tollgate_keys gauge", "tollgate_keys 7",
        "tollgate_api_requests_total 9", "tollgate_members{state=\"alive\"} 1", "tollgate_members{state=\"suspect\"} 1",
        "tollgate_members{state=\"dead\"} 0", "tollgate_rule_checks_total{rule=\"k*\"} 5",
        "tollgate_rule_allowed_total{rule=\"k*\"} 4", "tollgate_rule_denied_total{rule=\"k*\"} 1",
        "tollgate_rule_near_limit_total{rule=\"k*\"} 2", "tollgate_rule_shadow_denied_total{rule=\"k*\"} 1",
        // Issue 40: each concurrency rule's slots, cluster-wide and this node's.
        "# TYPE tollgate_rule_leases_in_flight gauge", "tollgate_rule_leases_in_flight{rule=\"db\"} 2",
        "tollgate_rule_leases_held{rule=\"db\"} 1",
        // --threads: each thread's share, one family with a thread label.
        "# TYPE tollgate_api_threads gauge", "tollgate_api_threads 2",
        "# TYPE tollgate_api_thread_connections_open gauge", "tollgate_api_thread_connections_open{thread=\"0\"} 3",
        "tollgate_api_thread_connections_open{thread=\"1\"} 4", "# TYPE tollgate_api_thread_checks_total counter",
        "tollgate_api_thread_checks_total{thread=\"0\"} 10", "tollgate_api_thread_checks_total{thread=\"1\"} 11",
        // Label values are escaped by the serializer.
        "tollgate_rule_checks_total{rule=\"rls:web.path_/a \\\"b\\\"\"} 1",
        // Kind, unit and help from the declaration, not the name.
        "# HELP tollgate_keys Buckets held", "# TYPE tollgate_state_write_seconds gauge",
        "tollgate_state_write_seconds 1.5",
        // A stat nobody declared says so (the daemon's suite checks there is none).
        "# HELP tollgate_never_declared_total tollgated stat never_declared (undeclared)",
        "# TYPE tollgate_never_declared_total counter"}) {
    EXPECT_NE(r.body.find(std::string(line) + "\n"), std::string::npos) << line << " not in\n" << r.body;
  }
  EXPECT_EQ(r.body.find("tollgate_checks_total 3"), std::string::npos) << "the unlabelled sum is left out";
  EXPECT_EQ(r.body.find("# TYPE tollgate_api_thread_checks_total",
                        r.body.find("# TYPE tollgate_api_thread_checks_total") + 1),
            std::string::npos)
      << "one family for every thread";
}

TEST_F(RoutesTest, MetricsAppendTheFamiliesCollectedElsewhere) {
  prometheus::Histogram latency({0.001, 0.01});
  latency.Observe(0.005);
  latency.Observe(0.5);
  RoutesOptions o;
  o.extra_metrics = [&latency] {
    return std::vector<prometheus::MetricFamily>{
        {"tollgate_check_duration_seconds", "help", prometheus::MetricType::Histogram, {latency.Collect()}}};
  };
  make_routes(o);
  const std::string body = request("GET", "/metrics").body;
  for (const char* line :
       {"# TYPE tollgate_check_duration_seconds histogram", "tollgate_check_duration_seconds_bucket{le=\"0.001\"} 0",
        "tollgate_check_duration_seconds_bucket{le=\"0.01\"} 1",
        "tollgate_check_duration_seconds_bucket{le=\"+Inf\"} 2", "tollgate_check_duration_seconds_count 2"}) {
    EXPECT_NE(body.find(std::string(line) + "\n"), std::string::npos) << line << " not in\n" << body;
  }
}

TEST_F(RoutesTest, MembersAndStatsHaveTheCliJsonShape) {
  EXPECT_EQ(
      request("GET", "/v1/stats").body,
      "{\"stats\": {\"checks\": 3, \"checks_allowed\": 2, \"checks_denied\": 1, \"keys\": 7, \"api.requests\": 9, "
      "\"api.threads\": 2, \"api.thread.0.connections_open\": 3, \"api.thread.1.connections_open\": 4, "
      "\"api.thread.0.checks\": 10, \"api.thread.1.checks\": 11, \"state_write_ns\": 1500000000, "
      "\"never_declared\": 4}}\n");
  const std::string members = request("GET", "/v1/members").body;
  EXPECT_EQ(members.rfind("{\"members\": [{\"id\": \"me\", \"address\": \"127.0.0.1:1\", \"state\": \"alive\"", 0), 0u)
      << members;
}

// Issue 41: GET /v1/top merges what the node holds (its own summary and its members' units) into
// bounds per key, busiest rule first; bad parameters are 400 before the node.
TEST_F(RoutesTest, TopMergesTheMembersSummariesIntoBoundsPerKey) {
  handler_.top_answer = tollgate::testing::two_rules_top();
  const HttpResponse all = request("GET", "/v1/top?k=1");
  EXPECT_EQ(all.status, 200u);
  EXPECT_EQ(
      all.body,
      "{\"rules\": [{\"rule\": \"user:*\", \"members_reporting\": 2, \"denied\": {\"total\": 95, \"error_bound\": 2, "
      "\"unreported_bound\": 7, \"keys\": [{\"key\": \"user:hot\", \"lower\": 79, \"upper\": 80}]}, \"tokens\": "
      "{\"total\": 0, \"error_bound\": 0, \"unreported_bound\": 0, \"keys\": []}}, {\"rule\": \"ip:*\", "
      "\"members_reporting\": 1, \"denied\": {\"total\": 0, \"error_bound\": 0, \"unreported_bound\": 0, \"keys\": "
      "[]}, \"tokens\": {\"total\": 7, \"error_bound\": 0, \"unreported_bound\": 0, \"keys\": [{\"key\": \"ip:1\", "
      "\"lower\": 7, \"upper\": 7}]}}]}\n");
  EXPECT_EQ(handler_.top_rule_asked, "");
  const HttpResponse one = request("GET", "/v1/top?rule=user%3A*");
  EXPECT_EQ(one.status, 200u);
  EXPECT_EQ(handler_.top_rule_asked, "user:*");
  EXPECT_NE(one.body.find("{\"key\": \"user:\\\"q\\\"\", \"lower\": 5, \"upper\": 7}"), std::string::npos) << one.body;
  EXPECT_EQ(one.body.find("ip:*"), std::string::npos);
  const int calls = handler_.calls;
  for (const char* bad : {"/v1/top?k=0", "/v1/top?k=101", "/v1/top?k=x", "/v1/top?k=1&k=2", "/v1/top?rule=a&rule=b",
                          "/v1/top?rule=", "/v1/top?key=a"}) {
    EXPECT_EQ(request("GET", bad).status, 400u) << bad;
  }
  EXPECT_EQ(handler_.calls, calls) << "refused before the node";
  EXPECT_EQ(request("POST", "/v1/top").status, 405u);
  // Prometheus: the counts by rank, never a key as a label.
  const std::string metrics = request("GET", "/metrics").body;
  EXPECT_NE(metrics.find("tollgate_top_denied{rule=\"user:*\",rank=\"1\"} 80\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tollgate_top_denied{rule=\"user:*\",rank=\"2\"} 7\n"), std::string::npos);
  EXPECT_NE(metrics.find("tollgate_top_tokens{rule=\"ip:*\",rank=\"1\"} 7\n"), std::string::npos);
  EXPECT_NE(metrics.find("tollgate_top_error_bound{rule=\"user:*\",metric=\"denied\"} 2\n"), std::string::npos);
  EXPECT_EQ(metrics.find("user:hot"), std::string::npos) << "no key in the metrics";
}

// Issue 40: POST /v1/leases acquires, PUT renews, DELETE releases; 429 at the limit, 404 for a
// lease not held, 400 for what no lease request can be, each before the node.
TEST_F(RoutesTest, LeasesAreAcquiredRenewedAndReleasedAsJson) {
  const HttpResponse first = request("POST", "/v1/leases", R"({"key": "db", "ttl": "4s"})");
  ASSERT_EQ(first.status, 200u) << first.body;
  const auto a = parse<hv1::LeaseResult>(first.body);
  EXPECT_TRUE(a.granted());
  EXPECT_TRUE(a.limited());
  EXPECT_EQ(a.id().size(), 32u);
  EXPECT_EQ(a.key(), "db");
  EXPECT_EQ(a.count(), 1);
  EXPECT_EQ(a.in_flight(), 1);
  EXPECT_EQ(a.limit(), 2);
  EXPECT_EQ(a.expires_in().seconds(), 4);
  EXPECT_NE(first.body.find("\"expires_in\":\"4s\""), std::string::npos) << first.body;
  // The second slot, at the rule's 10 s; then the limit: 429, nothing held.
  const auto b = parse<hv1::LeaseResult>(request("POST", "/v1/leases", R"({"key": "db"})").body);
  EXPECT_TRUE(b.granted());
  EXPECT_EQ(b.expires_in().seconds(), 10);
  const HttpResponse full = request("POST", "/v1/leases", R"({"key": "db"})");
  EXPECT_EQ(full.status, 429u);
  const auto c = parse<hv1::LeaseResult>(full.body);
  EXPECT_FALSE(c.granted());
  EXPECT_EQ(c.id(), "");
  EXPECT_EQ(c.reason(), "over the concurrency limit");
  EXPECT_EQ(c.in_flight(), 2);
  EXPECT_EQ(request("POST", "/v1/leases", R"({"key": "db", "count": 3})").status, 429u);  // never grantable
  // Renewed from now, by the body's TTL or (no body) the rule's.
  handler_.now += 3 * kSec;
  const HttpResponse renewed = request("PUT", "/v1/leases/" + a.id(), R"({"ttl": "20s"})");
  ASSERT_EQ(renewed.status, 200u) << renewed.body;
  EXPECT_EQ(parse<hv1::LeaseResult>(renewed.body).expires_in().seconds(), 20);
  EXPECT_TRUE(parse<hv1::LeaseResult>(renewed.body).found());
  EXPECT_EQ(parse<hv1::LeaseResult>(request("PUT", "/v1/leases/" + a.id()).body).expires_in().seconds(), 10);
  // Released once: the slot is free again; a second release is 404.
  const HttpResponse released = request("DELETE", "/v1/leases/" + a.id());
  ASSERT_EQ(released.status, 200u) << released.body;
  EXPECT_TRUE(parse<hv1::LeaseResult>(released.body).found());
  EXPECT_EQ(request("DELETE", "/v1/leases/" + a.id()).status, 404u);
  EXPECT_EQ(request("PUT", "/v1/leases/" + a.id()).status, 404u);
  EXPECT_EQ(request("POST", "/v1/leases", R"({"key": "db"})").status, 200u);
  // A key no concurrency rule governs: go ahead, nothing held.
  const HttpResponse free = request("POST", "/v1/leases", R"({"key": "k1"})");
  EXPECT_EQ(free.status, 200u);
  EXPECT_FALSE(parse<hv1::LeaseResult>(free.body).limited());
  EXPECT_TRUE(parse<hv1::LeaseResult>(free.body).granted());
  EXPECT_EQ(parse<hv1::LeaseResult>(free.body).id(), "");

  // Refused before the node.
  const int calls = handler_.calls;
  for (const auto& [method, target, body] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/v1/leases", ""},
           {"POST", "/v1/leases", R"({"key": ""})"},
           {"POST", "/v1/leases", R"({"key": "db", "count": 0})"},
           {"POST", "/v1/leases", R"({"key": "db", "ttl": "-1s"})"},
           {"POST", "/v1/leases", R"({"key": "db", "tll": "1s"})"},
           {"POST", "/v1/leases", R"({"key": "db"})"},
           {"POST", "/v1/leases", "{\"key\": \"" + std::string(300, 'x') + "\"}"},
           {"POST", "/v1/leases?key=db", R"({"key": "db"})"},
           {"PUT", "/v1/leases/nothex", ""},
           {"DELETE", "/v1/leases/", ""},
           {"DELETE", "/v1/leases/" + a.id(), R"({"ttl": "1s"})"},
           {"PUT", "/v1/leases/" + a.id(), R"({"ttl": "soon"})"},
       }) {
    const HttpResponse r = request(method, target, body);
    EXPECT_EQ(r.status, 400u) << method << " " << target << " " << body << ": " << r.body;
    EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
  }
  EXPECT_EQ(handler_.calls, calls);
  const HttpResponse get = request("GET", "/v1/leases");
  EXPECT_EQ(get.status, 405u);
  EXPECT_EQ(header(get, "Allow"), "POST");
  EXPECT_EQ(header(request("POST", "/v1/leases/" + a.id()), "Allow"), "PUT, DELETE");
}

TEST_F(RoutesTest, UnknownPathsAndMethodsAnd503WhenTheNodeRefuses) {
  EXPECT_EQ(request("GET", "/nope").status, 404u);
  // An error quoting bytes that are not UTF-8 is still valid JSON (found by fuzz_http_routes).
  const HttpResponse odd = request("GET", "/v\xc1\x94heck");
  EXPECT_EQ(odd.status, 404u);
  EXPECT_NE(odd.body.find("no such endpoint: /v??heck"), std::string::npos) << odd.body;
  const HttpResponse wrong = request("DELETE", "/v1/check?key=k1");
  EXPECT_EQ(wrong.status, 405u);
  EXPECT_EQ(header(wrong, "Allow"), "GET, POST");
  EXPECT_EQ(request("GET", "/json").status, 405u);
  refuse_ = true;
  EXPECT_EQ(request("GET", "/v1/check?key=k1").status, 503u);
  EXPECT_EQ(request("GET", "/metrics").status, 503u);
  const StatsList s = routes_->stats();
  auto stat = [&](const std::string& name) {
    for (const auto& [n, v] : s) {
      if (n == name) return v;
    }
    return int64_t(-1);
  };
  EXPECT_EQ(stat("http.requests"), 6);
  EXPECT_EQ(stat("http.responses_4xx"), 4);
  EXPECT_EQ(stat("http.responses_5xx"), 2);
  EXPECT_EQ(stat("http.responses_2xx"), 0);
}

}  // namespace
}  // namespace tollgate::http

namespace tollgate::http {
namespace {

// Issue 38: /v1/check's JSON is written straight (http/check_json.h), no longer by protobuf's
// printer. What it writes must read back, with protobuf's own JSON parser, as exactly the message
// the printer used to print: keys with quotes, backslashes, control characters and non-ASCII
// text, limited or not, waiting that can or cannot help, debt, every reason, the extremes.
TEST(CheckJson, WhatTheWriterWritesIsTheCheckResultMessageFieldForField) {
  std::mt19937_64 random(38);
  const std::vector<std::string> keys = {
      "k1", "", "a\"b\\c", "line\nbreak\ttab\x01", "caf\xc3\xa9 \xe4\xb8\xad", std::string(256, 'x'), "</script>&"};
  const int64_t extremes[] = {0, 1, -1, INT64_MAX, INT64_MIN + 1, 1'000'000'000};
  auto any = [&] { return random() % 3 == 0 ? extremes[random() % 6] : int64_t(random() % 2'000'001) - 1'000'000; };
  size_t limited = 0, never = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string& key = keys[size_t(i) % keys.size()];
    Decision d;
    d.allowed = random() % 2 == 0;
    d.remaining = any();
    d.retry_after_ns = random() % 3 == 0 ? kRetryNever : std::abs(any());
    d.reason = DenyReason(random() % 9);
    d.limited = random() % 4 != 0;
    if (d.limited) {
      d.limit.rate = Rate{1 + std::abs(any()) % 1'000'000, 1 + std::abs(any()) % (int64_t(1) << 62)};
      d.limit.burst = 1 + std::abs(any()) % (int64_t(1) << 62);
      d.limit.max_debt = std::abs(any());
    }
    limited += d.has_limit();
    never += d.retry_after_ns == kRetryNever;
    const CheckItem item{key, std::abs(any())};
    std::string written;
    append_check_result_json(written, item, d);
    v1::CheckResult read, want;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(written, &read).ok()) << written;
    fill_check_result(item, d, want);
    ASSERT_EQ(read.SerializeAsString(), want.SerializeAsString()) << written << "\nwant " << want.DebugString();
  }
  EXPECT_GT(limited, 1000u);  // the cases above were all met
  EXPECT_GT(never, 500u);
}

}  // namespace
}  // namespace tollgate::http
