// The rules retriever of the design material: every host polls a rules service (any web server
// or object store) for the rules file, with If-None-Match, and hands each new version to the
// daemon, which validates it before it replaces the rules in force. Asynchronous on the
// daemon's io_context: a slow or dead rules service never holds up a check or a round.
#ifndef TOLLGATE_SRC_RETRIEVER_RULES_RETRIEVER_H_
#define TOLLGATE_SRC_RETRIEVER_RULES_RETRIEVER_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace boost::asio::ssl {
class context;
}

namespace tollgate {

// An http:// or https:// URL split for a request.
struct HttpUrl {
  bool tls = false;         // https
  std::string host;         // name or IP address (an IPv6 address without its brackets)
  std::string port;         // "80" unless given
  std::string target;       // path and query, "/" at least
  std::string host_header;  // the Host field: host[:port], IPv6 in brackets
};

// "http[s]://HOST[:PORT]/PATH[?QUERY]". nullopt, with *why, for anything else: another scheme,
// credentials in the URL (they would end up in logs), a fragment, no host.
std::optional<HttpUrl> parse_http_url(const std::string& url, std::string* why);

struct FetchResult {
  enum class Kind { kNew, kNotModified, kFailed };
  Kind kind = Kind::kFailed;
  std::string body;   // kNew: the whole body
  std::string etag;   // kNew: the response's ETag, empty when it sent none
  std::string error;  // kFailed: what went wrong, e.g. "HTTP 404 Not Found" or "timed out after 5s"
};

struct FetchLimits {
  std::chrono::milliseconds timeout{5000};  // resolve, connect, handshake, send and receive, in all
  size_t max_body_bytes = 4u << 20;         // a larger body fails the fetch
  // For https://: verifies the server's certificate chain and that it names the URL's host.
  std::shared_ptr<boost::asio::ssl::context> tls;
};

// A TLS 1.2+ client context that trusts `ca_file` (PEM), or the system's CA certificates when
// empty. nullptr, with *why, when they cannot be loaded.
std::shared_ptr<boost::asio::ssl::context> make_tls_context(const std::string& ca_file, std::string* why);

// One GET of `url` on `io`; `done` runs once, on io's thread. A 200 is kNew, a 304 (when
// `if_none_match` is given) kNotModified, anything else kFailed. Redirects are not followed.
void fetch_http(boost::asio::io_context& io, const HttpUrl& url, const std::string& if_none_match,
                const FetchLimits& limits, std::function<void(FetchResult)> done);

// The same, blocking, on an io_context of its own: for a daemon starting with no rules yet.
FetchResult fetch_http_now(const HttpUrl& url, const FetchLimits& limits);

struct RulesRetrieverStats {
  uint64_t polls = 0;         // requests answered or failed
  uint64_t not_modified = 0;  // answered 304, or 200 with the bytes seen last time
  uint64_t failures = 0;      // unreachable, timed out, an HTTP error, a body too large
};

class RulesRetriever {
 public:
  // Given a new body, on io's thread: puts its rules in force, or refuses them (logged and
  // counted by the daemon; the rules in force stay).
  using Apply = std::function<void(const std::string& body)>;

  struct Options {
    HttpUrl url;
    std::string url_text;  // as given, for logs
    std::chrono::milliseconds poll{10000};
    FetchLimits limits;
  };

  RulesRetriever(boost::asio::io_context& io, Options options, Apply apply);
  ~RulesRetriever();

  // `in_force`: the bytes whose rules are in force (from the cache or a first fetch), so that
  // the same bytes are not applied twice. The first poll runs at once.
  void start(const std::string& in_force, std::string etag);
  void stop();  // no poll after this one; the one in flight is ignored
  // Polls at once (SIGHUP), or right after the poll in flight; then every `poll` again.
  void poll_now();

  const RulesRetrieverStats& stats() const { return stats_; }

 private:
  void poll();
  void schedule();
  void on_result(FetchResult r);

  boost::asio::io_context& io_;
  Options options_;
  Apply apply_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<bool> alive_;  // false once stopped: a fetch in flight then does nothing
  std::string etag_;             // of the last body received, good or refused
  // Polls since the last one without If-None-Match: one in every full_fetch_every_ asks for the
  // whole file whatever the ETag, as servers' ETags can miss an edit (nginx's is the mtime in
  // seconds and the size: two same-sized versions published within a second look alike).
  uint64_t polls_since_full_ = 0;
  uint64_t full_fetch_every_ = 1;
  int64_t last_body_version_ = 0;  // content_version of that body
  std::string last_problem_;       // the failure last logged: the same one is not logged again
  bool in_flight_ = false;         // a fetch has started and not answered
  bool again_ = false;             // poll_now() during a fetch: poll once more when it answers
  RulesRetrieverStats stats_;
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_RETRIEVER_RULES_RETRIEVER_H_
