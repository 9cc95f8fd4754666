#include "retriever/rules_feed.h"

#include <spdlog/spdlog.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <filesystem>

#include "config/content_version.h"
#include "config/read_file.h"
#include "host/node_host.h"
#include "tollgate/config_error.h"
#include "tollgate/rules_file.h"

namespace tollgate {
namespace {

struct Source {
  HttpUrl url;
  FetchLimits limits;  // 5 s, 4 MiB
};

Source source_for(const RulesFeedOptions& options) {
  std::string why;
  const std::optional<HttpUrl> url = parse_http_url(options.url, &why);
  if (!url) throw ConfigError(options.url, 0, 0, why);  // parse_daemon_options checked it
  Source s{*url, {}};
  if (url->tls) {
    s.limits.tls = make_tls_context(options.ca, &why);
    if (!s.limits.tls) throw ConfigError(options.ca.empty() ? options.url : options.ca, 0, 0, why);
  }
  return s;
}

}  // namespace

InitialRules RulesFeed::load_initial(const RulesFeedOptions& options) {
  const Source source = source_for(options);
  if (!source.url.tls) {
    boost::system::error_code not_ip;
    const auto host = boost::asio::ip::make_address(source.url.host, not_ip);
    if (source.url.host != "localhost" && (not_ip || !host.is_loopback())) {
      spdlog::warn(
          "rules come over plain http from {}: whoever can alter that traffic sets this cluster's limits; "
          "use https:// (or keep the rules service on a trusted network)",
          source.url.host_header);
    }
  }
  // The cache first: a restart while the rules service is down starts with the last good rules,
  // and the first poll (at once) brings newer ones.
  std::error_code ec;
  if (std::filesystem::exists(options.cache, ec)) {
    try {
      InitialRules cached{read_config_file(options.cache, "rules cache"), options.cache, {}};
      (void)parse_rules(cached.text, options.cache);  // a broken copy is not used
      spdlog::info("rules from the cache {}, until {} answers", options.cache, options.url);
      return cached;
    } catch (const std::exception& e) {
      spdlog::warn("the rules cache is not used: {}", e.what());
    }
  }
  FetchResult r = fetch_http_now(source.url, source.limits);
  if (r.kind != FetchResult::Kind::kNew) {
    throw ConfigError(options.url, 0, 0,
                      "no rules to start with: the rules service answers " + r.error +
                          ", and there is no usable cached copy at " + options.cache);
  }
  (void)parse_rules(r.body, options.url);  // a broken one stops the start, with its line
  // The cache must be writable: found now rather than when the rules service is down.
  if (std::string failed = write_file_atomically(options.cache, r.body); !failed.empty()) {
    throw ConfigError(options.cache, 0, 0, "--rules-cache: " + failed);
  }
  spdlog::info("rules from {}", options.url);
  return {std::move(r.body), options.url, std::move(r.etag)};
}

RulesFeed::RulesFeed(boost::asio::io_context& io, NodeHost& host, RulesFeedOptions options, std::string etag)
    : io_(io), host_(host), options_(std::move(options)), etag_(std::move(etag)) {
  const Source source = source_for(options_);
  RulesRetriever::Options retriever;
  retriever.url = source.url;
  retriever.url_text = options_.url;
  retriever.poll = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(options_.poll_ns));
  retriever.limits = source.limits;
  retriever_ = std::make_unique<RulesRetriever>(io, retriever, [this](const std::string& body) { apply(body); });
}

RulesFeed::~RulesFeed() {
  if (writer_) writer_->join();
}

void RulesFeed::start() { retriever_->start(host_.rules_text(), etag_); }
void RulesFeed::poll_now() { retriever_->poll_now(); }
void RulesFeed::stop() { retriever_->stop(); }

void RulesFeed::apply(const std::string& body) {
  const int64_t before = host_.rules_version();
  const int64_t offered = content_version(body);
  host_.offer_rules(body, options_.url,
                    [this, before, offered, body, alive = std::weak_ptr<char>(alive_)](const std::string& refused) {
    if (alive.expired() || !refused.empty()) return;  // refused: logged and counted by the host
    if (host_.rules_version() == offered && offered != before) write_cache(body);
  });
}

void RulesFeed::retry_cache_write() {
  if (cache_stale_ && !writing_ && !next_write_) write_cache(host_.rules_text());
}

void RulesFeed::write_cache(std::string body) {
  if (writing_) {
    next_write_ = std::move(body);
    return;
  }
  if (!writer_) writer_ = std::make_unique<boost::asio::thread_pool>(1);
  writing_ = true;
  boost::asio::post(*writer_, [this, body = std::move(body), alive = std::weak_ptr<char>(alive_)] {
    if (options_.before_cache_write) options_.before_cache_write();
    std::string failed = write_file_atomically(options_.cache, body);
    // Back on the node's thread; the feed's destructor (there too) waits for this thread
    // first, so `alive` expires only after the post, and the check below runs on that thread.
    boost::asio::post(io_, [this, alive, failed = std::move(failed)] {
      if (!alive.expired()) cache_written(failed);
    });
  });
}

void RulesFeed::cache_written(const std::string& failed) {
  writing_ = false;
  if (failed.empty()) {
    if (cache_stale_) spdlog::info("the rules in force are cached again in {}", options_.cache);
    cache_stale_ = false;
  } else {
    ++cache_write_failures_;
    if (!cache_stale_) {  // logged once; retried every second
      spdlog::error(
          "the rules in force are not cached (a restart while the rules service is down would start with "
          "older rules), retrying every second: {}",
          failed);
    }
    cache_stale_ = true;
  }
  if (next_write_) {
    std::string body = std::move(*next_write_);
    next_write_.reset();
    write_cache(std::move(body));
  }
}

namespace {
constexpr StatDef kPolls{"rules_polls", StatKind::kCounter, "Polls of the rules service answered or failed"};
constexpr StatDef kNotModified{"rules_polls_not_modified", StatKind::kCounter,
                               "Polls answered 304, or with the bytes in force"};
constexpr StatDef kPollFailures{"rules_poll_failures", StatKind::kCounter,
                                "Polls unreachable, timed out, an HTTP error or a body over 4 MiB"};
constexpr StatDef kCacheWriteFailures{"rules_cache_write_failures", StatKind::kCounter,
                                      "Failed writes of the rules in force to --rules-cache"};
}  // namespace

std::vector<StatDef> RulesFeed::stat_defs() { return {kPolls, kNotModified, kPollFailures, kCacheWriteFailures}; }

void RulesFeed::append_stats(StatsList& s) const {
  const RulesRetrieverStats& polls = retriever_->stats();
  s.emplace_back(std::string(kPolls.name), int64_t(polls.polls));
  s.emplace_back(std::string(kNotModified.name), int64_t(polls.not_modified));
  s.emplace_back(std::string(kPollFailures.name), int64_t(polls.failures));
  s.emplace_back(std::string(kCacheWriteFailures.name), int64_t(cache_write_failures_));
}

}  // namespace tollgate
