#include "retriever/rules_retriever.h"

#include <spdlog/spdlog.h>
#include <uriparser/Uri.h>
#include <yaml-cpp/yaml.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <type_traits>

#include "config/content_version.h"
#include "core/clock.h"
#include "tollgate/duration.h"
#include "util/printable.h"

namespace tollgate {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

// True when `text` is a YAML document with nothing in it (blanks, comments, `---`, `~`). Text
// that is not YAML at all is not blank: the rules parser reports it with its line.
bool blank_yaml(const std::string& text) {
  try {
    return YAML::Load(text).IsNull();
  } catch (const YAML::Exception&) {
    return false;
  }
}

std::string range_text(const UriTextRangeA& r) {
  if (r.first == nullptr || r.afterLast == nullptr) return {};
  return std::string(r.first, r.afterLast);
}

// One GET, from resolving the name to the last byte of the answer, under one deadline. Stream
// is beast::tcp_stream for http://, or beast::ssl_stream over one for https://.
template <class Stream>
class Fetch : public std::enable_shared_from_this<Fetch<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  template <class... StreamArgs>
  Fetch(boost::asio::io_context& io, const HttpUrl& url, const std::string& if_none_match, const FetchLimits& limits,
        std::function<void(FetchResult)> done, StreamArgs&&... stream_args)
      : url_(url),
        limits_(limits),
        done_(std::move(done)),
        resolver_(io),
        stream_(std::forward<StreamArgs>(stream_args)...),
        deadline_(io) {
    request_.version(11);
    request_.method(http::verb::get);
    request_.target(url_.target);
    request_.set(http::field::host, url_.host_header);
    request_.set(http::field::user_agent, "tollgated rules retriever");
    request_.set(http::field::connection, "close");
    if (!if_none_match.empty()) request_.set(http::field::if_none_match, if_none_match);
    parser_.header_limit(16 * 1024);
    parser_.body_limit(limits_.max_body_bytes);
  }

  void start() {
    auto self = this->shared_from_this();
    deadline_.expires_after(limits_.timeout);
    deadline_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->finished_) return;
      // Answered now, whatever is in flight: a resolver cannot interrupt a getaddrinfo already
      // running, and a cancel would not stop a connect walking several addresses. Closing the
      // socket ends the walk; every step checks timed_out_, so one already queued starts none.
      self->timed_out_ = true;
      self->fail("");
    });
    if constexpr (kTls) {
      // SNI, and the certificate must name the host (or its IP address).
      if (!SSL_set_tlsext_host_name(stream_.native_handle(), url_.host.c_str())) {
        return fail("cannot set the TLS server name " + url_.host);
      }
      stream_.set_verify_callback(boost::asio::ssl::host_name_verification(url_.host));
    }
    resolver_.async_resolve(url_.host, url_.port,
                            [self](const boost::system::error_code& resolved, tcp::resolver::results_type results) {
      if (resolved || self->timed_out_)
        return self->fail("cannot resolve " + self->url_.host + ": " + resolved.message());
      beast::get_lowest_layer(self->stream_)
          .async_connect(results, [self](const boost::system::error_code& connected, const tcp::endpoint&) {
            if (connected || self->timed_out_) {
              return self->fail("cannot connect to " + self->url_.host_header + ": " + connected.message());
            }
            if constexpr (kTls) {
              self->stream_.async_handshake(boost::asio::ssl::stream_base::client,
                                            [self](const boost::system::error_code& shaken) {
            if (shaken || self->timed_out_)
              return self->fail("TLS handshake with " + self->url_.host_header + " failed: " + shaken.message());
            self->send();
              });
            } else {
              self->send();
            }
          });
    });
  }

 private:
  void send() {
    auto self = this->shared_from_this();
    http::async_write(stream_, request_, [self](const boost::system::error_code& sent, size_t) {
      if (sent || self->timed_out_) return self->fail("cannot send the request: " + sent.message());
      self->read_some();
    });
  }

  // A piece at a time, to hold the body to max_body_bytes: in tests/retriever/fetch_test.cc,
  // Boost 1.74's parser let a Content-Length above its body_limit through. The buffer is capped
  // too (buffer_): a chunk-size line or trailer that never ends is not bounded by the parser.
  void read_some() {
    auto self = this->shared_from_this();
    http::async_read_some(stream_, buffer_, parser_, [self](const boost::system::error_code& ec, size_t) {
      if (self->timed_out_) return self->fail("");
      if (!ec && !self->parser_.is_done()) {
        const auto announced = self->parser_.content_length();
        if ((announced && *announced > self->limits_.max_body_bytes) ||
            self->parser_.get().body().size() > self->limits_.max_body_bytes) {
          return self->on_read(http::error::body_limit);
        }
        return self->read_some();
      }
      self->on_read(ec);
    });
  }

  void on_read(const boost::system::error_code& ec) {
    if (ec == http::error::body_limit) {
      return fail("the body is larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
    }
    if (ec == http::error::header_limit) return fail("the response's header is larger than 16 KiB");
    if (ec == http::error::buffer_overflow)
      return fail("a line of the response (a chunk size or a trailer) is over 64 KiB");
    // Over TLS, a body that ends at the connection's end is complete only with the server's
    // close_notify: without it (stream_truncated) an attacker could have cut it short.
    if (ec) return fail("cannot read the response: " + ec.message());
    auto& response = parser_.get();
    if (response.body().size() > limits_.max_body_bytes) return on_read(http::error::body_limit);
    FetchResult r;
    if (response.result() == http::status::ok) {
      // A body that ends where the connection does would look complete if the connection were
      // cut: rules cut short could parse as fewer rules, and lift limits.
      if (!parser_.content_length() && !parser_.chunked()) {
        return fail(
            "the answer has neither a Content-Length nor chunked encoding (a cut connection would look "
            "complete)");
      }
      // Nothing but blanks and comments: a file being rewritten, or a misconfigured server.
      // Taken as rules, it would lift every limit on every node at once.
      if (blank_yaml(response.body())) {
        return fail("the body holds no rules (empty, or comments only): refused; publish `rules: []` to mean none");
      }
      r.kind = FetchResult::Kind::kNew;
      r.etag = std::string(response[http::field::etag]);
      r.body = std::move(response.body());
    } else if (response.result() == http::status::not_modified && request_.count(http::field::if_none_match) > 0) {
      r.kind = FetchResult::Kind::kNotModified;
    } else {
      r.kind = FetchResult::Kind::kFailed;
      r.error = "HTTP " + std::to_string(response.result_int());
      if (!response.reason().empty()) r.error += " " + std::string(response.reason());
    }
    finish(std::move(r));
  }

  void fail(std::string why) {
    FetchResult r;
    r.kind = FetchResult::Kind::kFailed;
    r.error = timed_out_ ? "no answer within " + format_duration(int64_t(limits_.timeout.count()) * kNanosPerMilli)
                         : std::move(why);
    finish(std::move(r));
  }

  void finish(FetchResult r) {
    if (finished_) return;
    finished_ = true;
    deadline_.cancel();
    resolver_.cancel();
    // No TLS close_notify: the answer is in, and the connection was Connection: close.
    auto& socket = beast::get_lowest_layer(stream_).socket();
    boost::system::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    done_(std::move(r));
  }

  HttpUrl url_;
  FetchLimits limits_;
  std::function<void(FetchResult)> done_;
  tcp::resolver resolver_;
  Stream stream_;
  boost::asio::steady_timer deadline_;
  beast::flat_buffer buffer_{64 * 1024};
  http::request<http::empty_body> request_;
  http::response_parser<http::string_body> parser_;
  bool finished_ = false;
  bool timed_out_ = false;
};

}  // namespace

std::optional<HttpUrl> parse_http_url(const std::string& url, std::string* why) {
  auto fail = [&](const std::string& w) -> std::optional<HttpUrl> {
    if (why) *why = w;
    return std::nullopt;
  };
  UriUriA uri;
  const char* error_pos = nullptr;
  if (uriParseSingleUriExA(&uri, url.data(), url.data() + url.size(), &error_pos) != URI_SUCCESS) {
    return fail("is not a URL (at character " + std::to_string(error_pos ? error_pos - url.data() + 1 : 0) + ")");
  }
  struct Free {
    UriUriA* u;
    ~Free() { uriFreeUriMembersA(u); }
  } free_uri{&uri};
  std::string scheme = range_text(uri.scheme);
  for (char& c : scheme) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "http" && scheme != "https") return fail("must start with http:// or https://");
  if (uri.userInfo.first != nullptr) return fail("must not carry credentials (they would be logged)");
  if (uri.fragment.first != nullptr) return fail("must not have a #fragment");
  HttpUrl out;
  out.tls = scheme == "https";
  out.host = range_text(uri.hostText);
  if (out.host.empty()) return fail("has no host");
  const bool ipv6 = uri.hostData.ip6 != nullptr || uri.hostData.ipFuture.first != nullptr;
  out.port = range_text(uri.portText);
  if (out.port.empty()) {
    out.port = out.tls ? "443" : "80";
  } else {
    const bool digits = out.port.size() <= 5 && out.port.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoul(out.port) == 0 || std::stoul(out.port) > 65535) return fail("has a bad port");
  }
  out.host_header = ipv6 ? "[" + out.host + "]" : out.host;
  if (!range_text(uri.portText).empty()) out.host_header += ":" + out.port;
  // The target: everything from the path's first character (after the authority) on.
  const size_t authority_end = url.find_first_of("/?", url.find("//") + 2);
  out.target = authority_end == std::string::npos ? "/" : url.substr(authority_end);
  if (out.target[0] != '/') out.target = "/" + out.target;
  return out;
}

std::shared_ptr<boost::asio::ssl::context> make_tls_context(const std::string& ca_file, std::string* why) {
  try {
    auto ctx = std::make_shared<boost::asio::ssl::context>(boost::asio::ssl::context::tls_client);
    ctx->set_options(boost::asio::ssl::context::no_sslv2 | boost::asio::ssl::context::no_sslv3 |
                     boost::asio::ssl::context::no_tlsv1 | boost::asio::ssl::context::no_tlsv1_1);
    if (ca_file.empty()) {
      ctx->set_default_verify_paths();
    } else {
      ctx->load_verify_file(ca_file);
    }
    ctx->set_verify_mode(boost::asio::ssl::verify_peer);
    return ctx;
  } catch (const boost::system::system_error& e) {
    if (why) *why = (ca_file.empty() ? std::string("the system's CA certificates") : ca_file) + ": " + e.what();
    return nullptr;
  }
}

void fetch_http(boost::asio::io_context& io, const HttpUrl& url, const std::string& if_none_match,
                const FetchLimits& limits, std::function<void(FetchResult)> done) {
  if (!url.tls) {
    std::make_shared<Fetch<beast::tcp_stream>>(io, url, if_none_match, limits, std::move(done), io)->start();
    return;
  }
  if (!limits.tls) {
    FetchResult r;
    r.error = "https:// needs a TLS context (FetchLimits::tls)";
    boost::asio::post(io, [done = std::move(done), r = std::move(r)]() mutable { done(std::move(r)); });
    return;
  }
  std::make_shared<Fetch<beast::ssl_stream<beast::tcp_stream>>>(io, url, if_none_match, limits, std::move(done), io,
                                                                *limits.tls)
      ->start();
}

FetchResult fetch_http_now(const HttpUrl& url, const FetchLimits& limits) {
  boost::asio::io_context io;
  FetchResult out;
  fetch_http(io, url, "", limits, [&out](FetchResult r) { out = std::move(r); });
  io.run();
  return out;
}

RulesRetriever::RulesRetriever(boost::asio::io_context& io, Options options, Apply apply)
    : io_(io),
      options_(std::move(options)),
      apply_(std::move(apply)),
      timer_(io),
      alive_(std::make_shared<bool>(true)) {
  // At least every ten minutes.
  const auto polls = std::chrono::minutes(10) / std::max(options_.poll, std::chrono::milliseconds(1));
  full_fetch_every_ = uint64_t(std::max<int64_t>(1, polls));
}

RulesRetriever::~RulesRetriever() { stop(); }

void RulesRetriever::start(const std::string& in_force, std::string etag) {
  last_body_version_ = in_force.empty() ? 0 : content_version(in_force);
  etag_ = std::move(etag);
  poll();
}

void RulesRetriever::stop() {
  *alive_ = false;
  timer_.cancel();
}

void RulesRetriever::poll_now() {
  if (!*alive_) return;
  if (in_flight_) {
    again_ = true;  // what it fetches may predate the edit that prompted this
    return;
  }
  timer_.cancel();  // the scheduled poll's handler sees operation_aborted and does nothing
  poll();
}

void RulesRetriever::poll() {
  in_flight_ = true;
  const bool full = ++polls_since_full_ >= full_fetch_every_;
  if (full) polls_since_full_ = 0;
  fetch_http(io_, options_.url, full ? std::string() : etag_, options_.limits, [this, alive = alive_](FetchResult r) {
    if (*alive) on_result(std::move(r));
  });
}

void RulesRetriever::schedule() {
  in_flight_ = false;
  if (again_) {
    again_ = false;
    return poll();
  }
  timer_.expires_after(options_.poll);
  timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!ec && *alive && !in_flight_) poll();  // (a poll_now() may have started one)
  });
}

void RulesRetriever::on_result(FetchResult r) {
  ++stats_.polls;
  if (r.kind == FetchResult::Kind::kFailed) {
    ++stats_.failures;
    // Logged once per change: a rules service down for an hour is one line, not 360.
    if (r.error != last_problem_) {
      spdlog::error("rules service {}: {}; the rules in force stay, and it is polled every {}", options_.url_text,
                    printable(r.error), format_duration(int64_t(options_.poll.count()) * kNanosPerMilli));
      last_problem_ = r.error;
    }
    return schedule();
  }
  if (!last_problem_.empty()) {
    spdlog::info("rules service {} answers again", options_.url_text);
    last_problem_.clear();
  }
  if (r.kind == FetchResult::Kind::kNotModified) {
    ++stats_.not_modified;
    return schedule();
  }
  // A server that sends no ETag (or a new one for the same bytes) sends the same rules again:
  // they are applied, or refused and logged, once.
  const int64_t version = content_version(r.body);
  etag_ = std::move(r.etag);
  if (version == last_body_version_) {
    ++stats_.not_modified;
    return schedule();
  }
  last_body_version_ = version;
  apply_(r.body);  // the daemon logs and counts a refusal; the rules in force stay
  schedule();
}

}  // namespace tollgate
