// tollgate-throughput: how many checks per second one server answers to N connections driven by
// one client thread, closed loop (each connection sends its next request as soon as its answer
// is in). The same driver for two targets, so that they compare in one run:
//   --target native  tollgated's client API (unix:PATH or tcp:HOST:PORT): one request carries
//                    --batch checks at cost 1;
//   --target redis   Redis with a Lua token bucket (the usual way to rate-limit with Redis): one
//                    EVALSHA carries --batch keys, and the script checks and charges each.
// Keys are drawn uniformly from --keys. Prints one line: requests and checks per second, the
// checks allowed, and the request round trip's p50/p99/max in microseconds.
//
//   tollgate-throughput --target native --endpoint unix:/tmp/t.sock --connections 8 --batch 1
//   tollgate-throughput --target redis --endpoint unix:/tmp/redis.sock --connections 8 --batch 1
//
// scripts/threads-throughput runs both against tollgated --threads 1 and 2 (issue #18).
#include <hiredis/hiredis.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/endpoint.h"
#include "api/framing.h"
#include "native_round_trip.h"
#include "util/big_endian.h"
#include "util/frame_reader.h"
#include "util/percentile.h"

namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using Socket = asio::generic::stream_protocol::socket;

// The token bucket, as rate limiters on Redis write it: per key a hash of tokens and the time of
// the last refill (Redis's own clock), refilled by elapsed time, at most burst. ARGV: rate per
// second, burst, cost. Returns 1 (allowed) or 0 per key.
constexpr const char* kTokenBucketLua = R"lua(
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for i, key in ipairs(KEYS) do
  local b = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens = tonumber(b[1]) or burst
  local ts = tonumber(b[2]) or now
  tokens = math.min(burst, tokens + (now - ts) * rate / 1000000)
  local ok = 0
  if tokens >= cost then
    tokens = tokens - cost
    ok = 1
  end
  redis.call('HSET', key, 'tokens', tokens, 'ts', now)
  out[i] = ok
end
return out
)lua";

struct Options {
  std::string target = "native";
  std::string endpoint;
  size_t connections = 8;
  size_t batch = 1;
  size_t keys = 100'000;
  double seconds = 5;
  std::string prefix = "k";
  double redis_rate = 1e9, redis_burst = 1e9;  // the Lua bucket's limit (native: the daemon's rules)
};

struct Totals {
  uint64_t requests = 0, checks = 0, allowed = 0;
  std::vector<int64_t> rtt_us;
};

Socket connect(asio::io_context& io, const std::string& text) {
  std::string why;
  const auto ep = tollgate::api::parse_endpoint(text, &why);
  if (!ep) throw std::runtime_error("--endpoint " + text + ": " + why);
  if (ep->kind == tollgate::api::Endpoint::Kind::kUnix) {
    asio::local::stream_protocol::socket s(io);
    s.connect(asio::local::stream_protocol::endpoint(ep->path));
    return Socket(std::move(s));
  }
  asio::ip::tcp::socket s(io);
  asio::ip::tcp::resolver resolver(io);
  asio::connect(s, resolver.resolve(ep->host, std::to_string(ep->port)));
  s.set_option(asio::ip::tcp::no_delay(true));
  return Socket(std::move(s));
}

// One connection's closed loop. Subclasses build a request and decode its answer.
class Loop : public std::enable_shared_from_this<Loop> {
 public:
  Loop(Socket socket, const Options& o, Totals& totals, Clock::time_point end, uint64_t seed)
      : socket_(std::move(socket)), o_(o), totals_(totals), end_(end), rng_(seed), pick_(0, o.keys - 1) {}
  virtual ~Loop() = default;

  void next() {
    if (Clock::now() >= end_) return;
    keys_.clear();
    for (size_t i = 0; i < o_.batch; ++i) keys_.push_back(o_.prefix + std::to_string(pick_(rng_)));
    build(keys_, out_);
    sent_ = Clock::now();
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (ec) throw std::runtime_error("write: " + ec.message());
      self->read();
    });
  }

 protected:
  virtual void build(const std::vector<std::string>& keys, std::string& out) = 0;
  // Reads one answer, then calls done(allowed).
  virtual void read() = 0;
  void done(uint64_t allowed) {
    totals_.rtt_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent_).count());
    ++totals_.requests;
    totals_.checks += o_.batch;
    totals_.allowed += allowed;
    next();
  }

  Socket socket_;
  const Options& o_;

 private:
  Totals& totals_;
  Clock::time_point end_;
  std::mt19937_64 rng_;
  std::uniform_int_distribution<size_t> pick_;
  std::vector<std::string> keys_;
  std::string out_;
  Clock::time_point sent_;
};

class NativeLoop final : public Loop {
 public:
  using Loop::Loop;

 private:
  void build(const std::vector<std::string>& keys, std::string& out) override {
    tollgate::bench::frame_check_request(++id_, keys, b_);
    out = b_.frame;
  }
  void read() override {
    asio::async_read(socket_, asio::buffer(header_),
                     [this, self = shared_from_this()](boost::system::error_code ec, size_t) {
      if (ec) throw std::runtime_error("read: " + ec.message());
      const uint32_t length = tollgate::load_be32(header_);
      if (length > tollgate::api::kMaxResponseFrameBytes) throw std::runtime_error("answer frame too large");
      b_.answer.resize(length);
      asio::async_read(socket_, asio::buffer(b_.answer), [this, self](boost::system::error_code ec2, size_t) {
        if (ec2) throw std::runtime_error("read: " + ec2.message());
        tollgate::bench::parse_check_answer(id_, o_.batch, b_);
        uint64_t allowed = 0;
        for (const auto& r : b_.response.check().results()) allowed += r.allowed() ? 1 : 0;
        done(allowed);
      });
    });
  }

  tollgate::bench::NativeBuffers b_;
  uint64_t id_ = 0;
  unsigned char header_[tollgate::kFrameHeaderBytes] = {};
};

class RedisLoop final : public Loop {
 public:
  RedisLoop(Socket socket, const Options& o, Totals& totals, Clock::time_point end, uint64_t seed, std::string sha)
      : Loop(std::move(socket), o, totals, end, seed),
        sha_(std::move(sha)),
        rate_(std::to_string(o.redis_rate)),
        burst_(std::to_string(o.redis_burst)),
        reader_(redisReaderCreate(), &redisReaderFree) {}

 private:
  void build(const std::vector<std::string>& keys, std::string& out) override {
    // EVALSHA sha numkeys key... rate burst cost, in RESP (formatted by hiredis).
    const std::string numkeys = std::to_string(keys.size());
    argv_ = {"EVALSHA", sha_.c_str(), numkeys.c_str()};
    for (const std::string& k : keys) argv_.push_back(k.c_str());
    for (const std::string* a : {&rate_, &burst_, &cost_}) argv_.push_back(a->c_str());
    lens_.clear();
    for (const char* a : argv_) lens_.push_back(std::strlen(a));
    char* cmd = nullptr;
    const int n = redisFormatCommandArgv(&cmd, int(argv_.size()), argv_.data(), lens_.data());
    if (n < 0) throw std::runtime_error("redisFormatCommandArgv failed");
    out.assign(cmd, size_t(n));
    redisFreeCommand(cmd);
  }
  void read() override {
    socket_.async_read_some(asio::buffer(buffer_),
                            [this, self = shared_from_this()](boost::system::error_code ec, size_t n) {
      if (ec) throw std::runtime_error("read: " + ec.message());
      if (redisReaderFeed(reader_.get(), buffer_, n) != REDIS_OK) throw std::runtime_error("bad RESP from Redis");
      void* raw = nullptr;
      if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) throw std::runtime_error("bad RESP from Redis");
      if (!raw) return read();  // not whole yet
      std::unique_ptr<redisReply, decltype(&freeReplyObject)> reply(static_cast<redisReply*>(raw), &freeReplyObject);
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != o_.batch) {
        throw std::runtime_error("Redis answered " + (reply->type == REDIS_REPLY_ERROR
                                                          ? std::string(reply->str, reply->len)
                                                          : "not the array asked for"));
      }
      uint64_t allowed = 0;
      for (size_t i = 0; i < reply->elements; ++i) allowed += reply->element[i]->integer == 1 ? 1 : 0;
      done(allowed);
    });
  }

  std::string sha_, rate_, burst_, cost_ = "1";
  std::vector<const char*> argv_;
  std::vector<size_t> lens_;
  std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader_;
  char buffer_[16384] = {};
};

// SCRIPT LOAD over a connection of its own; returns the script's sha1.
std::string load_script(const std::string& endpoint) {
  std::string why;
  const auto ep = tollgate::api::parse_endpoint(endpoint, &why);
  if (!ep) throw std::runtime_error("--endpoint " + endpoint + ": " + why);
  redisContext* c = ep->kind == tollgate::api::Endpoint::Kind::kUnix ? redisConnectUnix(ep->path.c_str())
                                                                     : redisConnect(ep->host.c_str(), ep->port);
  if (!c || c->err)
    throw std::runtime_error("cannot connect to Redis at " + endpoint + (c ? std::string(": ") + c->errstr : ""));
  std::unique_ptr<redisContext, decltype(&redisFree)> context(c, &redisFree);
  auto* reply = static_cast<redisReply*>(redisCommand(c, "SCRIPT LOAD %s", kTokenBucketLua));
  if (!reply || reply->type != REDIS_REPLY_STRING) throw std::runtime_error("SCRIPT LOAD failed");
  std::string sha(reply->str, reply->len);
  freeReplyObject(reply);
  return sha;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tollgate-throughput: checks per second from N connections on one client thread, closed loop, "
      "against tollgated or Redis with a Lua token bucket"};
  Options o;
  app.add_option("--target", o.target, "native (tollgated's client API) or redis (EVALSHA of a Lua token bucket)")
      ->check(CLI::IsMember({"native", "redis"}));
  app.add_option("--endpoint", o.endpoint, "unix:PATH or tcp:HOST:PORT")->required();
  app.add_option("--connections", o.connections, "Connections, all driven by this one thread")
      ->check(CLI::Range(1, 1024));
  app.add_option("--batch", o.batch, "Checks per request")->check(CLI::Range(1, 1000));
  app.add_option("--keys", o.keys, "Distinct keys, PREFIX0..PREFIX{N-1}, drawn uniformly")
      ->check(CLI::Range(size_t(1), size_t(1) << 32));
  app.add_option("--prefix", o.prefix, "Key name prefix");
  app.add_option("--seconds", o.seconds, "How long to drive")->check(CLI::Range(0.1, 3600.0));
  app.add_option("--redis-rate", o.redis_rate, "Redis: the bucket's refill per second");
  app.add_option("--redis-burst", o.redis_burst, "Redis: the bucket's size");
  CLI11_PARSE(app, argc, argv);

  try {
    const std::string sha = o.target == "redis" ? load_script(o.endpoint) : "";
    asio::io_context io;
    Totals totals;
    const auto start = Clock::now();
    const auto end = start + std::chrono::nanoseconds(int64_t(o.seconds * 1e9));
    for (size_t i = 0; i < o.connections; ++i) {
      Socket socket = connect(io, o.endpoint);
      std::shared_ptr<Loop> loop;
      if (o.target == "native") {
        loop = std::make_shared<NativeLoop>(std::move(socket), o, totals, end, 1000 + i);
      } else {
        loop = std::make_shared<RedisLoop>(std::move(socket), o, totals, end, 1000 + i, sha);
      }
      loop->next();
    }
    io.run();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    using tollgate::cli::percentile;
    std::cout << "target=" << o.target << " connections=" << o.connections << " batch=" << o.batch
              << " seconds=" << elapsed << " requests=" << totals.requests << " checks=" << totals.checks
              << " allowed=" << totals.allowed << " requests_per_s=" << uint64_t(double(totals.requests) / elapsed)
              << " checks_per_s=" << uint64_t(double(totals.checks) / elapsed)
              << " p50_us=" << percentile(totals.rtt_us, 50) << " p99_us=" << percentile(totals.rtt_us, 99)
              << " max_us=" << percentile(totals.rtt_us, 100) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "tollgate-throughput: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
