// The rules retriever as a component of tollgated: at start the rules come from the cached copy
// (or a first fetch when there is none), then every poll's new body is offered to the node's
// host (NodeHost::offer_rules), which puts it in force or refuses it, and the rules in force are
// cached, so that a restart while the rules service is down starts with the last good rules.
#ifndef TOLLGATE_SRC_RETRIEVER_RULES_FEED_H_
#define TOLLGATE_SRC_RETRIEVER_RULES_FEED_H_

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "retriever/rules_retriever.h"
#include "tollgate/types.h"
#include "util/stat_def.h"

namespace tollgate {

class NodeHost;

struct RulesFeedOptions {
  std::string url;    // http[s]://HOST[:PORT]/PATH
  std::string cache;  // the last good copy
  std::string ca;     // https: the CAs to trust (PEM); empty: the system's
  int64_t poll_ns = 10'000'000'000;
};

// The rules to start with: the cached copy, else a first fetch (which must also be cached).
struct InitialRules {
  std::string text;
  std::string origin;  // the cache's path or the URL, for errors
  std::string etag;    // of a first fetch
};

class RulesFeed {
 public:
  // Throws ConfigError when there is neither a usable cached copy nor a first fetch, or the
  // cache cannot be written.
  static InitialRules load_initial(const RulesFeedOptions& options);

  RulesFeed(boost::asio::io_context& io, NodeHost& host, RulesFeedOptions options, std::string etag);
  ~RulesFeed();

  void start();     // the first poll at once, then every poll_ns
  void poll_now();  // SIGHUP
  void stop();
  // Every second, on the node's thread: retries a failed cache write.
  void retry_cache_write();
  void append_stats(StatsList& s) const;
  static std::vector<StatDef> stat_defs();  // the declarations of append_stats' (util/stat_def.h)

 private:
  void apply(const std::string& body);
  void write_cache(const std::string& body);

  NodeHost& host_;
  RulesFeedOptions options_;
  std::string etag_;
  std::unique_ptr<RulesRetriever> retriever_;
  bool cache_stale_ = false;  // the last cache write failed: retried every second
  uint64_t cache_write_failures_ = 0;
  std::shared_ptr<char> alive_ =
      std::make_shared<char>();  // the host's answer to an offer finds the feed gone without it
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_RETRIEVER_RULES_FEED_H_
