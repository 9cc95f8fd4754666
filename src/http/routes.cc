#include "http/routes.h"

#include <google/protobuf/stubs/common.h>  // internal::IsStructurallyValidUTF8 (Debian 12's 3.21)
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>
#include <openssl/crypto.h>  // CRYPTO_memcmp
#include <openssl/evp.h>     // EVP_DecodeBlock (Basic credentials)
#include <uriparser/Uri.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

#include "core/clock.h"
#include "core/token_bucket.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "http/check_json.h"
#include "http/metrics.h"
#include "http/page_assets.h"
#include "json/json.h"
#include "rls/decide.h"
#include "rls/messages.h"
#include "tollgate/http/v1/http.pb.h"

namespace tollgate::http {
namespace {

namespace json = google::protobuf::util;
namespace hv1 = tollgate::http::v1;
namespace rpb = envoy::service::ratelimit::v3;

constexpr unsigned kTooManyRequests = 429;
constexpr const char* kReservedKeyError =
    "keys that start with byte 0x1E (%1E) name the buckets of Envoy's rate limit service; they are charged "
    "through it (gRPC or POST /json), never through /v1/check";

// `snake_case`: /v1/check's shape, every field printed; else the reference server's /json shape
// (Go's protojson defaults: lowerCamelCase, fields at their default left out).
std::string to_json(const google::protobuf::Message& m, bool snake_case) {
  json::JsonPrintOptions o;
  o.always_print_primitive_fields = snake_case;
  o.preserve_proto_field_names = snake_case;
  std::string out;
  if (!json::MessageToJsonString(m, &out, o).ok()) return R"({"error": "cannot write the answer as JSON"})";
  return out + "\n";
}

// Parses a JSON body into `m`; "" or what is wrong.
std::string from_json(const std::string& body, google::protobuf::Message& m) {
  json::JsonParseOptions o;
  o.ignore_unknown_fields = false;  // a misspelt field is an error, never ignored
  const auto status = json::JsonStringToMessage(body, &m, o);
  return status.ok() ? "" : "the body is not a valid JSON request: " + std::string(status.message());
}

using rls::ceil_seconds;

// The IETF draft's fields (draft-ietf-httpapi-ratelimit-headers) for one decision; nothing when
// no limit governs the key.
void add_ratelimit_fields(const Decision& d, HttpResponse& response) {
  if (!d.has_limit() || d.limit.rate.tokens <= 0) return;
  response.headers.emplace_back("RateLimit-Policy", "\"tollgate\";q=" + std::to_string(d.limit.burst) +
                                                        ";w=" + std::to_string(ceil_seconds(d.limit.rate.period_ns)));
  const int64_t reset_ns = d.allowed ? rls::until_full_ns(d) : d.retry_after_ns;
  std::string fields = "\"tollgate\";r=" + std::to_string(std::max<int64_t>(0, d.remaining));
  if (reset_ns >= 0 && reset_ns != kRetryNever) fields += ";t=" + std::to_string(ceil_seconds(reset_ns));
  response.headers.emplace_back("RateLimit", fields);
  if (!d.allowed && d.retry_after_ns != kRetryNever) {
    response.headers.emplace_back("Retry-After", std::to_string(std::max<int64_t>(1, ceil_seconds(d.retry_after_ns))));
  }
}

// The query's parameters, decoded (uriparser); nullopt and `error` when malformed.
std::optional<std::vector<std::pair<std::string, std::string>>> parse_query(const std::string& query,
                                                                            std::string* error) {
  std::vector<std::pair<std::string, std::string>> out;
  if (query.empty()) return out;
  // uriparser decodes into C strings: an encoded NUL would cut a key short, silently.
  if (query.find("%00") != std::string::npos) {
    *error = "the query holds an encoded NUL (%00), which no key or parameter may contain";
    return std::nullopt;
  }
  UriQueryListA* list = nullptr;
  int count = 0;
  if (uriDissectQueryMallocExA(&list, &count, query.data(), query.data() + query.size(), URI_TRUE, URI_BR_DONT_TOUCH) !=
      URI_SUCCESS) {
    *error = "the query string is malformed";
    return std::nullopt;
  }
  for (const UriQueryListA* item = list; item; item = item->next) {
    out.emplace_back(item->key ? item->key : "", item->value ? item->value : "");
  }
  uriFreeQueryListA(list);
  // The answer is JSON, which carries text: a key that is not UTF-8 could not be echoed back.
  for (const auto& [name, value] : out) {
    if (!google::protobuf::internal::IsStructurallyValidUTF8(name) ||
        !google::protobuf::internal::IsStructurallyValidUTF8(value)) {
      *error =
          "the query decodes to bytes that are not UTF-8; keys over HTTP are text (the native API takes any bytes)";
      return std::nullopt;
    }
  }
  return out;
}

constexpr std::string_view kLeasesPrefix = "/v1/leases/";

// A JSON Duration ("30s") as nanoseconds, saturated at int64's range (the lease table caps a TTL
// at its max_ttl anyway); nullopt when negative.
std::optional<int64_t> ttl_nanos(const google::protobuf::Duration& d) {
  if (d.seconds() < 0 || d.nanos() < 0) return std::nullopt;
  if (d.seconds() >= INT64_MAX / kNanosPerSecond - 1) return INT64_MAX;
  return google::protobuf::util::TimeUtil::DurationToNanoseconds(d);
}

void set_expires_in(hv1::LeaseResult& r, int64_t ns) {
  *r.mutable_expires_in() = google::protobuf::util::TimeUtil::NanosecondsToDuration(ns);
}

template <typename Int>
bool parse_int(const std::string& text, Int* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

HttpResponse error_response(unsigned status, const std::string& message) {
  hv1::ErrorBody body;
  // Messages quote what the client sent (a path, a method, a parameter): bytes that are not
  // UTF-8 would make the JSON invalid, so they are shown as '?'.
  if (google::protobuf::internal::IsStructurallyValidUTF8(message)) {
    body.set_error(message);
  } else {
    std::string shown = message;
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
    body.set_error(shown);
  }
  HttpResponse r;
  r.status = status;
  r.body = to_json(body, true);
  return r;
}

Routes::Routes(NodeRunner run_on_node, RoutesOptions options, NodeRunner run_checks)
    : run_on_node_(std::move(run_on_node)),
      run_checks_(run_checks ? std::move(run_checks) : run_on_node_),
      options_(std::move(options)) {}

void Routes::set_rls_config(std::shared_ptr<const RlsConfig> config) {
  std::lock_guard lock(config_mu_);
  rls_config_ = std::move(config);
}

void Routes::count_response(unsigned status) {
  if (status >= 500) {
    ++responses_5xx_;
  } else if (status >= 400) {
    ++responses_4xx_;
  } else {
    ++responses_2xx_;
  }
}

std::span<const Routes::Stat> Routes::stat_table() {
  static const Stat kStats[] = {
      {{"http.requests", StatKind::kCounter, "HTTP requests the parser accepted"}, &Routes::requests_},
      {{"http.responses_2xx", StatKind::kCounter, "HTTP answers 2xx"}, &Routes::responses_2xx_},
      {{"http.responses_4xx", StatKind::kCounter, "HTTP answers 4xx, the server's own (400, 413, 431) included"},
       &Routes::responses_4xx_},
      {{"http.responses_5xx", StatKind::kCounter, "HTTP answers 5xx"}, &Routes::responses_5xx_},
      {{"http.checks", StatKind::kCounter, "Checks asked through HTTP (a batch counts each)"}, &Routes::checks_},
      {{"http.unauthorized", StatKind::kCounter, "Requests answered 401 (--http-token-file)"}, &Routes::unauthorized_},
  };
  return kStats;
}

StatsList Routes::stats() const {
  StatsList s;
  append_stats(stat_table(), *this, s);
  return s;
}

namespace {

// The operator's page (src/http/page/, compiled in): it reads only this origin's JSON, and the
// policy forbids anything else (an injected script, a frame, a form posted elsewhere), as a
// second defence behind writing every key with textContent.
HttpResponse page(std::string_view path) {
  for (const PageAsset& a : page_assets()) {
    if (a.path != path) continue;
    HttpResponse r;
    r.content_type = std::string(a.content_type);
    r.body = std::string(a.bytes);
    r.headers = {{"Content-Security-Policy",
                  "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' "
                  "data:; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"},
                 {"X-Content-Type-Options", "nosniff"},
                 {"Referrer-Policy", "no-referrer"},
                 {"Cache-Control", "no-cache"}};
    return r;
  }
  return error_response(404, "no such part of the page: " + std::string(path));
}

// The paths a browser reads the operator's page through: GETs with no effect. Only these take
// Basic credentials (a browser attaches them to every request to this origin, another site's
// included, so they must never authorise a check, a reset or a lease).
bool read_only_for_browsers(std::string_view path) {
  return path == "/" || path.starts_with("/ui/") || path == "/v1/top" || path == "/v1/members" || path == "/v1/stats" ||
         path == "/v1/balance" || path == "/v1/rules";
}

// The case-insensitive scheme (RFC 9110 11.1) and what follows it, or nullopt.
std::optional<std::string_view> credentials(std::string_view authorization, std::string_view scheme) {
  if (authorization.size() <= scheme.size() + 1 || authorization[scheme.size()] != ' ') return std::nullopt;
  for (size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return std::nullopt;
  }
  return authorization.substr(scheme.size() + 1);
}

bool same_secret(std::string_view given, const std::string& token) {
  return given.size() == token.size() && CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
}

// Basic's password (RFC 7617: base64 of "user:password"; any user), decoded by OpenSSL.
std::optional<std::string> basic_password(std::string_view encoded) {
  if (encoded.empty() || encoded.size() % 4 != 0 || encoded.size() > 4096) return std::nullopt;
  std::string decoded(encoded.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                reinterpret_cast<const unsigned char*>(encoded.data()), int(encoded.size()));
  if (n < 0) return std::nullopt;
  size_t len = size_t(n);  // EVP_DecodeBlock counts the padding's bytes too
  for (size_t i = encoded.size(); i > 0 && encoded[i - 1] == '=' && len > 0; --i) --len;
  decoded.resize(len);
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) return std::nullopt;
  return decoded.substr(colon + 1);
}

}  // namespace

void Routes::handle(const HttpRequest& request, Reply reply) {
  ++requests_;
  // Every answer is counted by its status class on its way out.
  Reply counted = [this, reply = std::move(reply)](HttpResponse r) {
    count_response(r.status);
    reply(std::move(r));
  };
  const size_t q = request.target.find('?');
  const std::string path = request.target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : request.target.substr(q + 1);
  const bool get = request.method == "GET";
  // /healthcheck: the reference server's name for its readiness check.
  const bool health = path == "/healthz" || path == "/readyz" || path == "/healthcheck";
  if (options_.metrics_only && !health && path != "/metrics") {
    return counted(error_response(404, "no such endpoint here: " + path +
                                           " (this listener, --metrics-listen, serves /metrics, /healthz, /readyz and "
                                           "/healthcheck)"));
  }
  // Health answers are for load balancers and probes, which carry no credential; they say
  // nothing about keys.
  if (!health && !authorized(request, path)) {
    ++unauthorized_;
    // A browser asks for the page's credentials (any user name, the token as password) when
    // Basic is offered; an API client sends Bearer.
    const bool page = get && read_only_for_browsers(path);
    HttpResponse r = error_response(401, page ? "this page needs the token of tollgated's --http-token-file (as the "
                                                "password, any user name; or Authorization: Bearer TOKEN)"
                                              : "this endpoint needs Authorization: Bearer TOKEN (tollgated's "
                                                "--http-token-file)");
    r.headers.emplace_back("WWW-Authenticate",
                           page ? "Basic realm=\"tollgate\", charset=\"UTF-8\"" : "Bearer realm=\"tollgate\"");
    return counted(std::move(r));
  }
  if (path == "/" || path.starts_with("/ui/")) {
    if (get) return counted(page(path));
  } else if (path == "/v1/check") {
    if (get) return check_get(query, std::move(counted));
    if (request.method == "POST") return check_post(request.body, std::move(counted));
  } else if (path == "/v1/reset") {
    if (request.method == "POST") return reset(query, std::move(counted));
  } else if (path == "/v1/leases" || path.starts_with(kLeasesPrefix)) {
    if (!query.empty()) {
      return counted(error_response(400, "lease requests take no query string: their parameters are the JSON body"));
    }
    if (path == "/v1/leases") {
      if (request.method == "POST") return lease_acquire(request.body, std::move(counted));
    } else if (request.method == "PUT" || request.method == "DELETE") {
      return lease_by_id(request.method, path.substr(kLeasesPrefix.size()), request.body, std::move(counted));
    }
  } else if (path == "/json") {
    if (request.method == "POST") return rls_json(request.body, std::move(counted));
  } else if (path == "/rlconfig") {
    if (get) return rls_config_dump(std::move(counted));
  } else if (path == "/v1/top") {
    if (get) return top(query, std::move(counted));
  } else if (path == "/v1/balance") {
    if (get) return balance(query, std::move(counted));
  } else if (path == "/v1/rules") {
    if (get) return rules(std::move(counted));
  } else if (path == "/metrics" || health || path == "/v1/members" || path == "/v1/stats") {
    if (get) {
      if (path == "/metrics") return metrics(std::move(counted));
      if (path == "/readyz" || path == "/healthcheck") return readyz(std::move(counted));
      if (path == "/v1/members") return members(std::move(counted));
      if (path == "/v1/stats") return stats_json(std::move(counted));
      HttpResponse ok;
      ok.content_type = "text/plain; charset=utf-8";
      ok.body = "ok\n";
      return counted(std::move(ok));
    }
  } else {
    return counted(error_response(
        404, "no such endpoint: " + path +
                 " (endpoints: /v1/check, /v1/reset, /v1/leases, /v1/top, /v1/balance, /v1/rules, /json, "
                 "/rlconfig, "
                 "/metrics, /healthz, /readyz, /healthcheck, /v1/members, /v1/stats)"));
  }
  HttpResponse r = error_response(405, "method " + request.method + " is not allowed on " + path);
  r.headers.emplace_back("Allow", path == "/v1/check"                                              ? "GET, POST"
                                  : path == "/json" || path == "/v1/reset" || path == "/v1/leases" ? "POST"
                                  : path.starts_with(kLeasesPrefix)                                ? "PUT, DELETE"
                                                                                                   : "GET");
  counted(std::move(r));
}

void Routes::set_token(std::string token) {
  auto t = token.empty() ? nullptr : std::make_shared<const std::string>(std::move(token));
  std::lock_guard lock(config_mu_);
  token_ = std::move(t);
}

bool Routes::authorized(const HttpRequest& request, std::string_view path) const {
  std::shared_ptr<const std::string> token;
  {
    std::lock_guard lock(config_mu_);
    token = token_;
  }
  if (!token) return true;
  // The token is compared in constant time.
  if (auto bearer = credentials(request.authorization, "bearer")) return same_secret(*bearer, *token);
  if (request.method != "GET" || !read_only_for_browsers(path)) return false;
  const auto basic = credentials(request.authorization, "basic");
  if (!basic) return false;
  const std::optional<std::string> password = basic_password(*basic);
  return password && same_secret(*password, *token);
}

void Routes::on_node(NodeJob job, const Reply& reply) {
  if (!run_on_node_(std::move(job), reply))
    reply(error_response(503, "tollgated is busy or stopping; the request was not decided"));
}

void Routes::on_checks(NodeJob job, const Reply& reply) {
  if (!run_checks_(std::move(job), reply))
    reply(error_response(503, "tollgated is busy or stopping; the request was not decided"));
}

// POST /v1/reset?key=K: the key full again at every node (Node::reset, docs/design.md 6.6).
void Routes::reset(const std::string& query, Reply reply) {
  std::string why;
  const auto params = parse_query(query, &why);
  if (!params) return reply(error_response(400, why));
  if (params->size() != 1 || (*params)[0].first != "key") {
    return reply(error_response(400, "a reset takes one parameter: /v1/reset?key=K"));
  }
  const std::string key = (*params)[0].second;
  if (std::string problem = reset_key_problem(key, options_.max_key_bytes); !problem.empty()) {
    return reply(error_response(400, problem));
  }
  on_node(
      [key, reply](RequestHandler& handler) -> std::function<void()> {
        const ResetReply r = handler.reset(key);
        return [key, reply, r] {
          if (!r.error.empty()) return reply(error_response(503, r.error));
          HttpResponse ok;
          ok.body = "{\"key\":" + tollgate::json::json_string(key) + ",\"limited\":" + (r.limited ? "true" : "false") +
                    ",\"remaining\":\"" + std::to_string(r.remaining) + "\"}";
          reply(std::move(ok));
        };
      },
      reply);
}

// POST /v1/leases {"key": K, "count": N, "ttl": "30s"}: 200 and the lease's id when granted (or
// when no concurrency rule governs K: nothing is held then, and the id is ""), 429 when the
// cluster holds the key's limit already or the count exceeds it, 503 when this node holds
// --max-leases (a client that fails open goes ahead, as with any answer it cannot use).
void Routes::lease_acquire(const std::string& body, Reply reply) {
  hv1::LeaseAcquireRequest request;
  if (std::string why = from_json(body, request); !why.empty()) return reply(error_response(400, why));
  const std::string& key = request.key();
  if (key.empty()) return reply(error_response(400, "a lease needs a non-empty \"key\""));
  if (key.size() > options_.max_key_bytes) {
    return reply(error_response(
        400, "the key is " + std::to_string(key.size()) + " bytes; at most " + std::to_string(options_.max_key_bytes)));
  }
  if (is_reserved_key(key)) return reply(error_response(400, kReservedKeyError));
  const int64_t count = request.has_count() ? request.count() : 1;
  if (count < 1 || count > kMaxTokens) {
    return reply(error_response(400, "count must be a whole number from 1 to " + std::to_string(kMaxTokens)));
  }
  const std::optional<int64_t> ttl = ttl_nanos(request.ttl());
  if (!ttl) return reply(error_response(400, "ttl must not be negative (absent or \"0s\": the rule's lease_ttl)"));
  on_node(
      [key, count, ttl = *ttl, reply](RequestHandler& handler) -> std::function<void()> {
        const LeaseGrant g = handler.acquire(key, count, ttl);
        return [key, count, reply, g] {
          hv1::LeaseResult result;
          result.set_key(key);
          result.set_count(count);
          result.set_granted(g.granted());
          result.set_reason(lease_outcome_name(g.outcome));
          result.set_limited(g.outcome != LeaseOutcome::kUnlimited);
          result.set_in_flight(g.in_flight);
          result.set_limit(g.limit);
          if (g.outcome == LeaseOutcome::kTooManyLeases) {
            return reply(error_response(503, "this node holds as many leases as it may (100,000 at once); none taken"));
          }
          if (g.outcome == LeaseOutcome::kInvalid) return reply(error_response(400, "invalid lease request"));
          HttpResponse r;
          if (g.outcome == LeaseOutcome::kGranted) {
            result.set_id(g.id.hex());
            set_expires_in(result, g.ttl_ns);
          } else if (g.outcome != LeaseOutcome::kUnlimited) {
            r.status = kTooManyRequests;  // kOverLimit, kNever: the reason says which
          }
          r.body = to_json(result, true);
          reply(std::move(r));
        };
      },
      reply);
}

// PUT /v1/leases/ID [{"ttl": "30s"}] renews, DELETE /v1/leases/ID releases: 200, or 404 when
// this node holds no such lease (it expired, was released, or is another node's: a lease is
// released where it was acquired).
void Routes::lease_by_id(const std::string& method, const std::string& id_text, const std::string& body, Reply reply) {
  const std::optional<LeaseId> id = LeaseId::parse(id_text);
  if (!id) {
    return reply(error_response(400, "a lease id is the 32 lowercase hex characters POST /v1/leases answered"));
  }
  const bool renew = method == "PUT";
  int64_t ttl = 0;
  if (renew && !body.empty()) {
    hv1::LeaseRenewRequest request;
    if (std::string why = from_json(body, request); !why.empty()) return reply(error_response(400, why));
    const std::optional<int64_t> t = ttl_nanos(request.ttl());
    if (!t) return reply(error_response(400, "ttl must not be negative (absent or \"0s\": the rule's lease_ttl)"));
    ttl = *t;
  } else if (!renew && !body.empty()) {
    return reply(error_response(400, "DELETE /v1/leases/ID takes no body"));
  }
  on_node(
      [id = *id, renew, ttl, reply](RequestHandler& handler) -> std::function<void()> {
        std::optional<int64_t> left;
        bool found = false;
        if (renew) {
          left = handler.renew(id, ttl);
          found = left.has_value();
        } else {
          found = handler.release(id);
        }
        return [id, found, left, reply] {
          if (!found) {
            return reply(error_response(404, "no such lease here: " + id.hex() +
                                                 " (it expired, was released, or was acquired at another node)"));
          }
          hv1::LeaseResult result;
          result.set_id(id.hex());
          result.set_found(true);
          if (left) set_expires_in(result, *left);
          HttpResponse r;
          r.body = to_json(result, true);
          reply(std::move(r));
        };
      },
      reply);
}

void Routes::check_get(const std::string& query, Reply reply) {
  std::string why;
  const auto params = parse_query(query, &why);
  if (!params) return reply(error_response(400, why));
  std::optional<std::string> key;
  int64_t cost = 1;
  unsigned deny_status = kTooManyRequests;
  std::vector<std::string_view> seen;
  for (const auto& [name, value] : *params) {
    // A parameter given twice is refused, never "the last one wins": with nginx keyed by a
    // client's header, `key=a&key=victim` would charge someone else, and `&cost=0` check for free.
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return reply(error_response(400, "parameter \"" + name + "\" is given twice"));
    }
    seen.push_back(name);
    if (name == "key") {
      key = value;
    } else if (name == "cost") {
      if (!parse_int(value, &cost) || cost < 0 || cost > kMaxTokens) {
        return reply(error_response(
            400, "cost must be a whole number from 0 to " + std::to_string(kMaxTokens) + ", got \"" + value + "\""));
      }
    } else if (name == "deny_status") {
      if (value != "429" && value != "403") {
        return reply(error_response(
            400,
            "deny_status must be 429 or 403 (nginx's auth_request passes 401 and 403 only), got \"" + value + "\""));
      }
      deny_status = value == "403" ? 403 : kTooManyRequests;
    } else {
      return reply(error_response(400, "unknown parameter \"" + name + "\" (expected key, cost, deny_status)"));
    }
  }
  if (!key || key->empty())
    return reply(error_response(400, "a check needs a non-empty key: /v1/check?key=K[&cost=N]"));
  if (key->size() > options_.max_key_bytes) {
    return reply(error_response(400, "the key is " + std::to_string(key->size()) + " bytes; at most " +
                                         std::to_string(options_.max_key_bytes)));
  }
  if (is_reserved_key(*key)) return reply(error_response(400, kReservedKeyError));
  ++checks_;
  on_checks(
      [key = std::move(*key), cost, deny_status, reply](RequestHandler& handler) -> std::function<void()> {
        const CheckItem item{key, cost};
        Decision d;
        handler.check(std::span(&item, 1), std::span(&d, 1));
        return [key, cost, deny_status, reply, d] {
          HttpResponse r;
          r.status = d.allowed ? 200 : deny_status;
          append_check_result_json(r.body, {key, cost}, d);
          r.body += '\n';
          add_ratelimit_fields(d, r);
          reply(std::move(r));
        };
      },
      reply);
}

struct Routes::Batch {
  std::shared_ptr<hv1::CheckBatchRequest> request;
  std::vector<Decision> decisions;  // one per check, filled a slice at a time
};

void Routes::check_post(const std::string& body, Reply reply) {
  auto request = std::make_shared<hv1::CheckBatchRequest>();
  if (std::string why = from_json(body, *request); !why.empty()) return reply(error_response(400, why));
  if (request->checks_size() == 0) return reply(error_response(400, "\"checks\" is empty: nothing to decide"));
  if (size_t(request->checks_size()) > options_.max_batch) {
    return reply(error_response(413, std::to_string(request->checks_size()) + " checks in one request; at most " +
                                         std::to_string(options_.max_batch)));
  }
  // Decided in one go, holding every shard it touches: capped as the native API caps it.
  if (request->all_or_nothing() && size_t(request->checks_size()) > kMaxAllOrNothingChecks) {
    return reply(error_response(413, std::to_string(request->checks_size()) +
                                         " checks in one all-or-nothing request; at most " +
                                         std::to_string(kMaxAllOrNothingChecks)));
  }
  for (int i = 0; i < request->checks_size(); ++i) {
    hv1::CheckItem& c = *request->mutable_checks(i);
    const std::string at = "checks[" + std::to_string(i) + "]: ";
    if (c.key().empty()) return reply(error_response(400, at + "the key is empty"));
    if (c.key().size() > options_.max_key_bytes) {
      return reply(error_response(400, at + "the key is " + std::to_string(c.key().size()) + " bytes; at most " +
                                           std::to_string(options_.max_key_bytes)));
    }
    if (is_reserved_key(c.key())) return reply(error_response(400, at + kReservedKeyError));
    if (!c.has_cost()) c.set_cost(1);
    if (c.cost() < 0 || c.cost() > kMaxTokens) {
      return reply(error_response(400, at + "cost must be a whole number from 0 to " + std::to_string(kMaxTokens)));
    }
  }
  checks_ += request->checks_size();
  auto batch = std::make_shared<Batch>();
  batch->request = std::move(request);
  batch->decisions.resize(size_t(batch->request->checks_size()));
  check_slice(std::move(batch), 0, std::move(reply));
}

// Checks [from, from + kChecksPerSlice) of `batch` on the node's thread (all of them if the
// batch is all or nothing: it is decided together), then the next slice from the HTTP thread,
// queued behind whatever came meanwhile; the answer once the last slice is decided. A slice that
// cannot be queued (the node is busy or stopping) answers 503; the slices decided before it
// stay charged, as checks whose answers were lost would.
void Routes::check_slice(std::shared_ptr<Batch> batch, size_t from, Reply reply) {
  const size_t n = batch->decisions.size();
  const bool together = batch->request->all_or_nothing();
  const size_t to = together ? n : std::min(n, from + size_t(kChecksPerSlice));
  on_checks(
      [this, batch, from, to, together, reply](RequestHandler& handler) -> std::function<void()> {
        std::vector<CheckItem> items;
        items.reserve(to - from);
        for (size_t i = from; i < to; ++i) {
          const hv1::CheckItem& c = batch->request->checks(int(i));
          items.push_back({c.key(), c.cost()});
        }
        std::span<Decision> out(batch->decisions.data() + from, to - from);
        if (together) {
          handler.check_all(items, out);
        } else {
          handler.check(items, out);
        }
        return [this, batch, to, reply] {
          if (to < batch->decisions.size()) return check_slice(batch, to, reply);
          // tollgate.http.v1.CheckBatchResponse: {"results": [...], "allowed": every check's}.
          HttpResponse r;
          r.body = "{\"results\":[";
          bool all = true;
          for (int i = 0; i < batch->request->checks_size(); ++i) {
            const hv1::CheckItem& c = batch->request->checks(i);
            const Decision& d = batch->decisions[size_t(i)];
            if (i > 0) r.body += ',';
            append_check_result_json(r.body, {c.key(), c.cost()}, d);
            all = all && d.allowed;
          }
          r.body += all ? "],\"allowed\":true}\n" : "],\"allowed\":false}\n";
          reply(std::move(r));
        };
      },
      reply);
}

void Routes::rls_json(const std::string& body, Reply reply) {
  std::shared_ptr<const RlsConfig> config;
  {
    std::lock_guard lock(config_mu_);
    config = rls_config_;
  }
  if (!config) return reply(error_response(404, "POST /json needs an RLS config: start tollgated with --rls-config"));
  // Read as text (JSON strings), then handed over in binary to rls.proto's bytes-typed twin.
  hv1::RlsJsonRequest text;
  if (std::string why = from_json(body, text); !why.empty()) return reply(error_response(400, why));
  rpb::RateLimitRequest request;
  if (!request.ParseFromString(text.SerializeAsString()))
    return reply(error_response(400, "the request cannot be read"));
  auto plan = std::make_shared<rls::Plan>();
  if (std::string why = rls::plan_from_message(request, config, options_.max_key_bytes, *plan); !why.empty()) {
    return reply(error_response(400, why));
  }
  checks_ += int64_t(plan->descriptors.size());
  on_checks(
      [plan, reply, headers = options_.rls_headers](RequestHandler& handler) -> std::function<void()> {
        auto results = std::make_shared<std::vector<rls::DescriptorResult>>();
        const rls::Code overall = rls::decide(handler, *plan, *results);
        return [plan, reply, headers, results, overall] {
          rpb::RateLimitResponse response;
          rls::fill_response(overall, *results, headers, response);
          // The dynamic metadata is for Envoy (a Struct on its wire; rls.proto's mirror of it would
          // print here as a list of fields, not the object the reference's JSON shows): left out.
          response.clear_dynamic_metadata();
          HttpResponse r;
          r.status = overall == rls::Code::kOk ? 200 : kTooManyRequests;
          r.body = to_json(response, false);  // the reference server's shape: lowerCamelCase
          reply(std::move(r));
        };
      },
      reply);
}

void Routes::metrics(Reply reply) {
  on_node(
      [this, reply](RequestHandler& handler) -> std::function<void()> {
        auto stats = std::make_shared<StatsList>(handler.stats());
        auto members = std::make_shared<std::vector<MemberInfo>>(handler.members());
        auto rules = std::make_shared<std::vector<std::pair<std::string, RuleCounters>>>(handler.rule_counters());
        auto leases = std::make_shared<std::vector<std::pair<std::string, RuleLeases>>>(handler.rule_leases());
        auto tops = std::make_shared<std::vector<TopParts>>(handler.top_parts(""));
        return [this, reply, stats, members, rules, leases, tops] {
          HttpResponse r;
          r.content_type = "text/plain; version=0.0.4; charset=utf-8";
          static const StatCatalog kNone;
          r.body = render_metrics(
              *stats, options_.stat_catalog ? *options_.stat_catalog : kNone, *members, *rules,
              options_.extra_metrics ? options_.extra_metrics() : std::vector<prometheus::MetricFamily>{}, *leases,
              merge_top_parts(*tops, kTopMetricRanks));
          reply(std::move(r));
        };
      },
      reply);
}

// The RLS config in force, as the reference server's /rlconfig prints it: one line per limited
// descriptor, "LABEL: unit=UNIT requests_per_unit=N, shadow_mode: BOOL".
void Routes::rls_config_dump(Reply reply) {
  std::shared_ptr<const RlsConfig> config;
  {
    std::lock_guard lock(config_mu_);
    config = rls_config_;
  }
  if (!config) return reply(error_response(404, "no RLS config: start tollgated with --rls-config"));
  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  for (uint32_t i = 0; i < config->limit_count(); ++i) {
    const RlsLimit& l = config->limit(i);
    std::string unit = rls_unit_name(l.unit);
    std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    r.body += config->label(i) + ": unit=" + unit + " requests_per_unit=" + std::to_string(l.requests_per_unit) +
              (l.unit_multiplier != 1 ? " unit_multiplier=" + std::to_string(l.unit_multiplier) : "") +
              ", shadow_mode: " + (l.bucket.shadow || config->shadow_all() ? "true" : "false") + "\n";
  }
  reply(std::move(r));
}

void Routes::readyz(Reply reply) {
  if (draining_) return reply(error_response(503, "draining: tollgated is leaving the cluster"));
  on_node(
      [this, reply](RequestHandler& handler) -> std::function<void()> {
        const std::vector<MemberInfo> members = handler.members();
        const bool heard = std::any_of(members.begin(), members.end(),
                                       [](const MemberInfo& m) { return !m.self && m.state == MemberState::kAlive; });
        const bool ready = heard || options_.alone_long_enough();
        const StatsList stats = handler.stats();
        const bool syncing = std::any_of(stats.begin(), stats.end(),
                                         [](const auto& s) { return s.first == "syncing" && s.second != 0; });
        const bool no_rls_config = std::any_of(
            stats.begin(), stats.end(), [](const auto& s) { return s.first == "rls_config_missing" && s.second != 0; });
        return
            [reply, ready, syncing, no_rls_config] {
      if (!ready)
        return reply(error_response(503, "not ready: no member heard from yet, and not alone for fail_after"));
      if (syncing) {
        return reply(error_response(503,
                                    "not ready: learning balances from a peer (long-window keys are denied until then; "
                                    "--sync-deadline)"));
      }
      HttpResponse ok;
      ok.content_type = "text/plain; charset=utf-8";
      ok.body =
          no_rls_config
              ? "ready, without an RLS config yet (--rls-config-optional, or no config from --rls-xds yet): every "
                "rate limit call is "
                "answered OK\n"
              : "ready\n";
      reply(std::move(ok));
            };
      },
      reply);
}

void Routes::members(Reply reply) {
  on_node(
      [reply](RequestHandler& handler) -> std::function<void()> {
        auto members = std::make_shared<std::vector<MemberInfo>>(handler.members());
        return [reply, members] {
          HttpResponse r;
          r.body = tollgate::json::format_members_json(*members);
          reply(std::move(r));
        };
      },
      reply);
}

// GET /v1/top?rule=R&k=K (issue 41; docs/design.md 7.8): per rule (every rule this node or a
// live member counted, busiest first, without `rule`), the K keys (10; at most 100) with the
// most denied checks and the most tokens admitted cluster-wide over the last one to two
// --top-window, each as [lower, upper] bounds of its true count. The node's thread only copies
// what it holds (pointers to the members' summaries); the merge runs here.
void Routes::top(const std::string& query, Reply reply) {
  std::string why;
  const auto params = parse_query(query, &why);
  if (!params) return reply(error_response(400, why));
  std::optional<std::string> rule;
  std::optional<size_t> k;
  for (const auto& [name, value] : *params) {
    if (name == "rule" && !rule) {
      rule = value;
    } else if (name == "k" && !k) {
      size_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > kMaxTopKeys) {
        return reply(error_response(400, "k must be a whole number from 1 to " + std::to_string(kMaxTopKeys)));
      }
      k = n;
    } else {
      return reply(error_response(400, "/v1/top takes rule=R and k=K, each at most once (got " + name + ")"));
    }
  }
  if (rule && rule->empty()) return reply(error_response(400, "rule= names a rule (its match, as /metrics labels it)"));
  on_node(
      [rule = rule.value_or(""), reply,
       k = k.value_or(kDefaultTopKeys)](RequestHandler& handler) -> std::function<void()> {
        auto parts = std::make_shared<std::vector<TopParts>>(handler.top_parts(rule));
        return [parts, reply, k] {
          HttpResponse r;
          r.body = tollgate::json::format_top_json(merge_top_parts(*parts, k));
          reply(std::move(r));
        };
      },
      reply);
}

// GET /v1/balance?key=K: K's bucket as this node holds it, read without a check (nothing is
// charged, and the read does not keep the key from eviction). A key this node holds no bucket
// for is full at its first check, unless a remembered debt brings it back lower (design.md 4).
void Routes::balance(const std::string& query, Reply reply) {
  std::string why;
  const auto params = parse_query(query, &why);
  if (!params) return reply(error_response(400, why));
  if (params->size() != 1 || (*params)[0].first != "key" || (*params)[0].second.empty()) {
    return reply(error_response(400, "/v1/balance takes one parameter: key=K"));
  }
  std::string key = (*params)[0].second;
  if (key.size() > options_.max_key_bytes) {
    return reply(error_response(
        400, "the key is longer than any key a bucket holds (" + std::to_string(options_.max_key_bytes) + " bytes)"));
  }
  on_node(
      [key = std::move(key), reply](RequestHandler& handler) -> std::function<void()> {
        auto b = std::make_shared<std::optional<KeyBalance>>(handler.balance(key));
        return [key, b, reply] {
          if (!*b) return reply(error_response(501, "balances cannot be read through this front end"));
          const KeyBalance& k = **b;
          hv1::BalanceResult m;
          m.set_key(key);
          m.set_limited(k.limited);
          if (k.limited) {
            const double tokens = double(k.balance_microtokens) / double(kMicrotokensPerToken);
            m.set_rule(k.rule);
            m.set_held(k.held);
            m.set_balance(tokens);
            m.set_debt(tokens < 0 ? -tokens : 0.0);
            fill_limit(k.limit, *m.mutable_limit());
          }
          HttpResponse r;
          r.body = to_json(m, true);
          reply(std::move(r));
        };
      },
      reply);
}

// GET /v1/rules: the rules in force (at most 1,000; `omitted` counts the rest) with this node's
// counts under each, and their version.
void Routes::rules(Reply reply) {
  on_node(
      [reply](RequestHandler& handler) -> std::function<void()> {
        auto rules = std::make_shared<RulesInForce>(handler.rules_in_force(1000));
        return [rules, reply] {
          hv1::RulesResult m;
          m.set_version(rules->version);
          m.set_omitted(rules->omitted);
          for (const RuleInForce& r : rules->rules) {
            hv1::RuleInForce* out = m.add_rules();
            out->set_rule(r.label);
            fill_limit(r.limit, *out->mutable_limit());
            out->set_checks(r.counts.checks);
            out->set_allowed(r.counts.allowed);
            out->set_denied(r.counts.denied);
          }
          HttpResponse r;
          r.body = to_json(m, true);
          reply(std::move(r));
        };
      },
      reply);
}

void Routes::stats_json(Reply reply) {
  on_node(
      [reply](RequestHandler& handler) -> std::function<void()> {
        auto stats = std::make_shared<StatsList>(handler.stats());
        return [reply, stats] {
          HttpResponse r;
          r.body = tollgate::json::format_stats_json(*stats);
          reply(std::move(r));
        };
      },
      reply);
}

}  // namespace tollgate::http
