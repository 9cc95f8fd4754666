// The rules retriever as a component of tollgated: at start the rules come from the cached copy
// (or a first fetch when there is none), then every poll's new body is offered to the node's
// host (NodeHost::offer_rules), which puts it in force or refuses it, and the rules in force are
// cached, so that a restart while the rules service is down starts with the last good rules.
#ifndef TOLLGATE_SRC_RETRIEVER_RULES_FEED_H_
#define TOLLGATE_SRC_RETRIEVER_RULES_FEED_H_

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "retriever/rules_retriever.h"
#include "tollgate/types.h"
#include "util/stat_def.h"

namespace boost::asio {
class thread_pool;
}

namespace tollgate {

class NodeHost;

struct RulesFeedOptions {
  std::string url;    // http[s]://HOST[:PORT]/PATH
  std::string cache;  // the last good copy
  std::string ca;     // https: the CAs to trust (PEM); empty: the system's
  int64_t poll_ns = 10'000'000'000;
  std::function<void()> before_cache_write;  // tests: runs on the writer's thread before each write
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
  ~RulesFeed();  // waits for a cache write under way: the rules in force reach the disk

  void start();     // the first poll at once, then every poll_ns
  void poll_now();  // SIGHUP
  void stop();
  // Every second, on the node's thread: retries a failed cache write.
  void retry_cache_write();
  void append_stats(StatsList& s) const;
  static std::vector<StatDef> stat_defs();  // the declarations of append_stats' (util/stat_def.h)

 private:
  void apply(const std::string& body);
  // The cache is written off the node's thread: its fsyncs can take seconds on a busy disk, and
  // the node's thread decides checks (a job waiting past --http-node-wait is answered 503).
  // One write at a time; a body offered while one is under way replaces any still waiting.
  void write_cache(std::string body);
  void cache_written(const std::string& failed);

  boost::asio::io_context& io_;
  NodeHost& host_;
  RulesFeedOptions options_;
  std::string etag_;
  std::unique_ptr<RulesRetriever> retriever_;
  std::unique_ptr<boost::asio::thread_pool> writer_;  // one thread: the cache's writes, in order
  bool writing_ = false;                              // a write is under way on writer_
  std::optional<std::string> next_write_;             // what to write when it is done
  bool cache_stale_ = false;                          // the last cache write failed: retried every second
  uint64_t cache_write_failures_ = 0;
  std::shared_ptr<char> alive_ =
      std::make_shared<char>();  // the host's answer to an offer finds the feed gone without it
};

}  // namespace tollgate

#endif  // TOLLGATE_SRC_RETRIEVER_RULES_FEED_H_
