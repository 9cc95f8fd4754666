// Client implementation: the caller side. Callers build and frame their request on their own
// thread, then either exchange it over a connection of their own (client/direct_connection.h:
// synchronous checks, while the io connection is up and the pool has one) or hand it to the
// background thread's connection (client/io_connection.h) with a fresh id and a completion, and
// (sync calls) wait on a future until their deadline. The protocol without I/O (stamping,
// answer validation, result conversion) is client/protocol.h, shared by both paths.
#include "tollgate/client.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <stdexcept>
#include <thread>

#include "api/endpoint.h"
#include "client/direct_connection.h"
#include "client/io_connection.h"
#include "client/protocol.h"
#include "tollgate/duration.h"

namespace tollgate {

using SteadyClock = std::chrono::steady_clock;
using client::Completion;
using client::deadline_after;
using client::ResponseCheck;
namespace pb = ::tollgate::v1::api;

const char* reply_source_name(ReplySource source) {
  switch (source) {
    case ReplySource::kDaemon:
      return "daemon";
    case ReplySource::kFailOpen:
      return "fail-open";
    case ReplySource::kFailClosed:
      return "fail-closed";
  }
  return "unknown";
}

namespace {

api::Endpoint parse_or_throw(const std::string& text) {
  std::string error;
  auto endpoint = api::parse_endpoint(text, &error);
  if (!endpoint) throw std::invalid_argument(error);
  return *endpoint;
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(ClientOptions options)
      : options_(std::move(options)),
        endpoint_(parse_or_throw(options_.endpoint)),
        direct_(endpoint_, options_.direct_connections),
        io_(options_, endpoint_, counters_) {}

  // check_batch and check_all.
  std::vector<CheckReply> check_many(std::span<const CheckItem> items, std::chrono::nanoseconds deadline,
                                     bool all_or_nothing);

  // Frames `request` (giving it an id) and hands it to the io connection; `done` runs on the io
  // thread.
  void submit(pb::Request& request, SteadyClock::time_point deadline, Completion done) {
    const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    std::string frame;
    if (!client::frame_request(request, id, options_.max_request_bytes, &frame)) {
      io_.fail(std::move(done), "request of " + std::to_string(request.ByteSizeLong()) +
                                    " bytes exceeds max_request_bytes (" + std::to_string(options_.max_request_bytes) +
                                    ")");
      return;
    }
    io_.submit(id, deadline, std::move(frame), std::move(done));
  }

  // A synchronous call: `convert(response, error)` turns the outcome into the caller's result (on
  // whichever thread completes it: the io thread, or the caller when it gives up at the
  // deadline). The caller waits until `timeout` at most.
  // With `direct`, the call first tries the caller-thread path (call_direct).
  // `late`, if given, is called (on the io thread) with an answer that arrives after the caller
  // gave up: what it granted can still be undone (a lease released).
  template <typename Result, typename Convert>
  Result call(pb::Request& request, std::chrono::nanoseconds timeout, Convert convert, bool direct = false,
              std::function<void(const pb::Response&)> late = {}) {
    if (io_.on_io_thread()) {
      return convert(nullptr, "synchronous client call from a client callback (it would wait on itself)");
    }
    const auto deadline = deadline_after(timeout);
    if (direct) {
      if (std::optional<Result> result = call_direct<Result>(request, deadline, convert)) return std::move(*result);
    }
    struct Shared {
      std::promise<Result> promise;
      std::atomic<bool> abandoned{false};  // the caller stopped waiting
    };
    auto shared = std::make_shared<Shared>();
    std::future<Result> future = shared->promise.get_future();
    submit(request, deadline, [this, shared, convert, late](const pb::Response* response, const std::string& error) {
      if (shared->abandoned.load()) {
        if (response != nullptr) counters_.late_replies.fetch_add(1, std::memory_order_relaxed);
        if (response != nullptr && late) late(*response);
        return;
      }
      shared->promise.set_value(convert(response, error));
    });
    if (future.wait_until(deadline) == std::future_status::ready) return future.get();
    shared->abandoned.store(true);
    // The answer may have landed between the wait and the flag; prefer it.
    if (future.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return future.get();
    return convert(nullptr, "no answer from the daemon within " + format_duration(timeout.count()));
  }

  // The caller-thread path: nullopt when it cannot be taken (the io connection is down, every
  // pooled connection is in use and the pool is full, or a new one cannot be opened), and the
  // caller goes through the io thread instead. Otherwise the call's outcome: the daemon's
  // answer, or a failure (deadline, broken connection) that the io path could not have avoided.
  template <typename Result, typename Convert>
  std::optional<Result> call_direct(pb::Request& request, SteadyClock::time_point deadline, Convert& convert) {
    if (options_.direct_connections == 0 || !io_.connected()) return std::nullopt;
    const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
    std::string frame;
    if (!client::frame_request(request, id, options_.max_request_bytes, &frame))
      return std::nullopt;  // the io path says why
    // A pooled connection the daemon closed while it sat idle (it restarted) fails before
    // anything is sent: then one more, perhaps fresh, connection is tried.
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::unique_ptr<client::DirectConnection> connection = direct_.take(deadline);
      if (!connection) return std::nullopt;
      std::string_view payload;
      std::string error;
      switch (connection->exchange(frame, deadline, &payload, &error)) {
        case client::DirectConnection::Outcome::kNotSent:
          direct_.discard();
          continue;
        case client::DirectConnection::Outcome::kTimedOut:
          // Its answer may still come: the connection is out of step, so it goes, answer and all.
          direct_.discard();
          return convert(nullptr, "no answer from the daemon within the deadline");
        case client::DirectConnection::Outcome::kFailed:
          direct_.discard();
          return convert(nullptr, "lost the connection to " + endpoint_.to_string() + ": " + error);
        case client::DirectConnection::Outcome::kAnswered:
          break;
      }
      pb::Response response;
      const ResponseCheck check = client::validate_response(payload, &response);
      if (check.kind == ResponseCheck::Kind::kConnectionError) {
        direct_.discard();
        return convert(nullptr, check.error);
      }
      if (response.id() != id) {
        // A daemon out of step with us: this connection is done.
        direct_.discard();
        return convert(nullptr, "the daemon answered request " + std::to_string(response.id()) + " when asked " +
                                    std::to_string(id));
      }
      direct_.give_back(std::move(connection));
      counters_.direct_calls.fetch_add(1, std::memory_order_relaxed);
      if (check.kind == ResponseCheck::Kind::kCallError) return convert(nullptr, check.error);
      return convert(&response, std::string());
    }
    return std::nullopt;
  }

  CheckReply fallback(std::string error) const {
    CheckReply reply;
    reply.allowed = options_.fail_open;
    reply.source = options_.fail_open ? ReplySource::kFailOpen : ReplySource::kFailClosed;
    reply.error = std::move(error);
    return reply;
  }

  // Replies for a batch of `count` checks from an outcome.
  std::vector<CheckReply> check_replies(const pb::Response* response, const std::string& error, size_t count) const {
    std::vector<CheckReply> replies;
    replies.reserve(count);
    std::string why = error;
    if (response != nullptr) {
      if (response->has_check() && static_cast<size_t>(response->check().results_size()) == count) {
        for (const pb::Result& r : response->check().results()) replies.push_back(client::check_reply(r));
        return replies;
      }
      why = response->has_check() ? "daemon answered " + std::to_string(response->check().results_size()) +
                                        " results for " + std::to_string(count) + " checks"
                                  : client::unexpected_body(*response, "check results");
    }
    for (size_t i = 0; i < count; ++i) replies.push_back(fallback(why));
    return replies;
  }

  // Counts replies handed to a caller.
  void count(const std::vector<CheckReply>& replies) {
    if (replies.empty()) return;
    auto& counter = replies.front().from_daemon() ? counters_.daemon_replies : counters_.fallback_replies;
    counter.fetch_add(replies.size(), std::memory_order_relaxed);
  }

  ClientCounters counters() const {
    ClientCounters c;
    c.daemon_replies = counters_.daemon_replies.load(std::memory_order_relaxed);
    c.fallback_replies = counters_.fallback_replies.load(std::memory_order_relaxed);
    c.late_replies = counters_.late_replies.load(std::memory_order_relaxed);
    c.connects = counters_.connects.load(std::memory_order_relaxed);
    c.connect_failures = counters_.connect_failures.load(std::memory_order_relaxed);
    c.disconnects = counters_.disconnects.load(std::memory_order_relaxed);
    c.direct_calls = counters_.direct_calls.load(std::memory_order_relaxed);
    return c;
  }

  const ClientOptions options_;
  const api::Endpoint endpoint_;
  client::SharedCounters counters_;
  std::atomic<uint64_t> next_id_{1};  // 0 is the daemon's "no request" id
  client::DirectPool direct_;
  client::IoConnection io_;  // last: its thread is joined first, before what it uses goes
};

// --- Client ----------------------------------------------------------------------------------

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Client::~Client() = default;

CheckReply Client::check(std::string_view key, int64_t cost) { return check(key, cost, impl_->options_.deadline); }

CheckReply Client::check(std::string_view key, int64_t cost, std::chrono::nanoseconds deadline) {
  const CheckItem item{key, cost};
  return std::move(check_batch(std::span<const CheckItem>(&item, 1), deadline).front());
}

std::vector<CheckReply> Client::check_batch(std::span<const CheckItem> items) {
  return check_batch(items, impl_->options_.deadline);
}

std::vector<CheckReply> Client::check_batch(std::span<const CheckItem> items, std::chrono::nanoseconds deadline) {
  return impl_->check_many(items, deadline, /*all_or_nothing=*/false);
}

std::vector<CheckReply> Client::check_all(std::span<const CheckItem> items) {
  return check_all(items, impl_->options_.deadline);
}

std::vector<CheckReply> Client::check_all(std::span<const CheckItem> items, std::chrono::nanoseconds deadline) {
  return impl_->check_many(items, deadline, /*all_or_nothing=*/true);
}

std::vector<CheckReply> Client::Impl::check_many(std::span<const CheckItem> items, std::chrono::nanoseconds deadline,
                                                 bool all_or_nothing) {
  if (items.empty()) return {};
  pb::Request request;
  request.mutable_check()->set_all_or_nothing(all_or_nothing);
  auto& checks = *request.mutable_check()->mutable_checks();
  checks.Reserve(static_cast<int>(items.size()));
  for (const CheckItem& item : items) {
    pb::Check& c = *checks.Add();
    c.set_key(item.key.data(), item.key.size());
    c.set_cost(item.cost);
  }
  const size_t count = items.size();
  Impl* impl = this;
  std::vector<CheckReply> replies = impl->call<std::vector<CheckReply>>(
      request, deadline,
      [impl, count](const pb::Response* response, const std::string& error) {
    return impl->check_replies(response, error, count);
      },
      /*direct=*/true);
  impl->count(replies);
  return replies;
}

void Client::check_async(std::string_view key, int64_t cost, CheckCallback done) {
  pb::Request request;
  pb::Check& c = *request.mutable_check()->mutable_checks()->Add();
  c.set_key(key.data(), key.size());
  c.set_cost(cost);
  Impl* impl = impl_.get();
  impl->submit(request, deadline_after(impl->options_.deadline),
               [impl, done = std::move(done)](const pb::Response* response, const std::string& error) {
    std::vector<CheckReply> replies = impl->check_replies(response, error, 1);
    impl->count(replies);
    done(std::move(replies.front()));
  });
}

std::optional<std::vector<MemberInfo>> Client::members(std::string* error) {
  pb::Request request;
  request.mutable_members();
  using Result = std::pair<std::optional<std::vector<MemberInfo>>, std::string>;
  Result result = impl_->call<Result>(
      request, impl_->options_.admin_timeout, [](const pb::Response* response, const std::string& why) -> Result {
        if (response == nullptr) return {std::nullopt, why};
        if (!response->has_members()) return {std::nullopt, client::unexpected_body(*response, "members")};
        std::vector<MemberInfo> members;
        for (const pb::Member& m : response->members().members()) {
          MemberInfo info;
          info.id = m.id();
          info.address = m.address();
          // A state added by a newer daemon reads as unreachable: not known to be alive.
          if (!parse_member_state(m.state(), &info.state)) info.state = MemberState::kUnreachable;
          info.incarnation = m.incarnation();
          info.heartbeat = m.heartbeat();
          // Clamped first: the value comes off the wire, and * 10^6 must not overflow.
          info.last_heard_ns = std::clamp<int64_t>(m.last_heard_ms(), 0, INT64_MAX / 1'000'000) * 1'000'000;
          info.self = m.self();
          members.push_back(std::move(info));
        }
        return {std::move(members), std::string()};
      });
  if (!result.first && error) *error = std::move(result.second);
  return std::move(result.first);
}

std::optional<StatsList> Client::stats(std::string* error) {
  pb::Request request;
  request.mutable_stats();
  using Result = std::pair<std::optional<StatsList>, std::string>;
  Result result = impl_->call<Result>(request, impl_->options_.admin_timeout,
                                      [](const pb::Response* response, const std::string& why) -> Result {
                                        if (response == nullptr) return {std::nullopt, why};
                                        if (!response->has_stats())
                                          return {std::nullopt, client::unexpected_body(*response, "stats")};
                                        StatsList stats;
                                        for (const pb::Counter& c : response->stats().counters())
                                          stats.emplace_back(c.name(), c.value());
                                        return {std::move(stats), std::string()};
                                      });
  if (!result.first && error) *error = std::move(result.second);
  return std::move(result.first);
}

namespace {

MergedTop merged_from_pb(const pb::MergedTop& m) {
  MergedTop out;
  out.total = m.total();
  out.error_bound = m.error_bound();
  out.unreported_bound = m.unreported_bound();
  out.keys.reserve(size_t(m.keys_size()));
  for (const pb::TopKey& k : m.keys())
    out.keys.push_back(MergedKey{k.key(), k.lower(), k.upper(), k.envoy_descriptor()});
  return out;
}

}  // namespace

std::optional<std::vector<RuleTop>> Client::top(std::string_view rule, size_t k, std::string* error) {
  pb::Request request;
  pb::TopRequest& t = *request.mutable_top();
  t.set_rule(std::string(rule));
  t.set_k(uint32_t(std::min<size_t>(k, UINT32_MAX)));
  using Result = std::pair<std::optional<std::vector<RuleTop>>, std::string>;
  Result result = impl_->call<Result>(
      request, impl_->options_.admin_timeout, [](const pb::Response* response, const std::string& why) -> Result {
        if (response == nullptr) return {std::nullopt, why};
        if (!response->has_top()) return {std::nullopt, client::unexpected_body(*response, "top")};
        if (!response->top().error().empty()) return {std::nullopt, "tollgated: " + response->top().error()};
        std::vector<RuleTop> tops;
        for (const pb::RuleTop& r : response->top().rules()) {
          tops.push_back(
              RuleTop{r.rule(), merged_from_pb(r.denied()), merged_from_pb(r.tokens()), size_t(r.members_reporting())});
        }
        return {std::move(tops), std::string()};
      });
  if (!result.first && error) *error = std::move(result.second);
  return std::move(result.first);
}

std::string Client::set_faults(const FaultSettings& faults) {
  pb::Request request;
  pb::FaultsRequest& f = *request.mutable_faults();
  for (const std::string& id : faults.drop_to) f.add_drop_to(id);
  for (const std::string& id : faults.drop_from) f.add_drop_from(id);
  f.set_loss(faults.loss);
  f.set_delay_ms(faults.delay_ms);
  f.set_duplicate(faults.duplicate);
  f.set_jitter_ms(faults.jitter_ms);
  return impl_->call<std::string>(request, impl_->options_.admin_timeout,
                                  [](const pb::Response* response, const std::string& why) -> std::string {
                                    if (response == nullptr) return why;
                                    if (!response->has_faults())
                                      return client::unexpected_body(*response, "faults result");
                                    return response->faults().error();
                                  });
}

ResetReply Client::reset(std::string_view key) {
  pb::Request request;
  request.mutable_reset()->set_key(std::string(key));
  return impl_->call<ResetReply>(request, impl_->options_.admin_timeout,
                                 [](const pb::Response* response, const std::string& why) -> ResetReply {
                                   ResetReply r;
                                   if (response == nullptr) {
                                     r.error = why;
                                   } else if (!response->has_reset()) {
                                     r.error = client::unexpected_body(*response, "reset result");
                                   } else {
                                     r.error = response->reset().error();
                                     r.limited = response->reset().limited();
                                     r.remaining = response->reset().remaining();
                                   }
                                   return r;
                                 });
}

namespace {

std::chrono::nanoseconds clamp_ns(int64_t ns) { return std::chrono::nanoseconds(std::max<int64_t>(0, ns)); }

}  // namespace

Lease Client::acquire(std::string_view key, int64_t count, std::chrono::nanoseconds ttl) {
  pb::Request request;
  pb::LeaseAcquire& a = *request.mutable_lease()->mutable_acquire();
  a.set_key(std::string(key));
  a.set_count(count);
  a.set_ttl_ns(ttl.count());
  const bool fail_open = impl_->options_.fail_open;
  Lease lease = impl_->call<Lease>(
      request, impl_->options_.deadline,
      [fail_open](const pb::Response* response, const std::string& why) -> Lease {
        Lease l;
        std::string error = why;
        if (response != nullptr && !response->has_lease()) error = client::unexpected_body(*response, "lease result");
        if (response == nullptr || !response->has_lease() ||
            response->lease().outcome() == pb::LEASE_OUTCOME_UNSPECIFIED) {
          if (error.empty()) error = "the daemon's answer has no lease outcome";
          l.source = fail_open ? ReplySource::kFailOpen : ReplySource::kFailClosed;
          l.granted_ = fail_open;
          l.error = std::move(error);
          return l;
        }
        const pb::LeaseResult& r = response->lease();
        l.granted_ = r.outcome() == pb::LEASE_GRANTED || r.outcome() == pb::LEASE_UNLIMITED;
        l.limited = r.outcome() != pb::LEASE_UNLIMITED;
        if (r.outcome() == pb::LEASE_GRANTED) l.id_ = r.id();
        l.in_flight = r.in_flight();
        l.limit = r.limit();
        l.expires_in = clamp_ns(r.expires_in_ns());
        l.reason = r.reason();
        return l;
      },
      /*direct=*/false,
      [this](const pb::Response& late) {
    // Granted after acquire gave up: nobody holds it, so it goes back at once.
    if (late.has_lease() && late.lease().outcome() == pb::LEASE_GRANTED) release_async(late.lease().id());
      });
  if (!lease.id_.empty()) lease.client_ = this;
  return lease;
}

bool Client::release_lease(std::string_view id) {
  pb::Request request;
  request.mutable_lease()->mutable_release()->set_id(std::string(id));
  return impl_->call<bool>(request, impl_->options_.admin_timeout,
                           [](const pb::Response* response, const std::string&) {
    return response != nullptr && response->has_lease() && response->lease().found();
  });
}

std::optional<std::chrono::nanoseconds> Client::renew_lease(std::string_view id, std::chrono::nanoseconds ttl) {
  pb::Request request;
  pb::LeaseRenew& r = *request.mutable_lease()->mutable_renew();
  r.set_id(std::string(id));
  r.set_ttl_ns(ttl.count());
  using Result = std::optional<std::chrono::nanoseconds>;
  return impl_->call<Result>(request, impl_->options_.admin_timeout,
                             [](const pb::Response* response, const std::string&) -> Result {
                               if (response == nullptr || !response->has_lease() || !response->lease().found())
                                 return std::nullopt;
                               return clamp_ns(response->lease().expires_in_ns());
                             });
}

void Client::release_async(std::string id) {
  pb::Request request;
  request.mutable_lease()->mutable_release()->set_id(std::move(id));
  impl_->submit(request, deadline_after(impl_->options_.admin_timeout), [](const pb::Response*, const std::string&) {});
}

Lease::Lease(Lease&& other) noexcept { *this = std::move(other); }

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this == &other) return *this;
  if (client_ && !id_.empty()) client_->release_async(std::move(id_));
  client_ = std::exchange(other.client_, nullptr);
  granted_ = std::exchange(other.granted_, false);
  id_ = std::exchange(other.id_, std::string());
  static_cast<LeaseFacts&>(*this) = std::move(other);
  source = other.source;
  error = std::move(other.error);
  return *this;
}

Lease::~Lease() {
  if (client_ && !id_.empty()) client_->release_async(std::move(id_));
}

bool Lease::release() {
  if (!client_ || id_.empty()) return false;
  const bool held = client_->release_lease(id_);
  id_.clear();
  client_ = nullptr;
  return held;
}

bool Lease::renew(std::chrono::nanoseconds ttl) {
  if (!client_ || id_.empty()) return false;
  const auto left = client_->renew_lease(id_, ttl);
  if (left) expires_in = *left;
  return left.has_value();
}

bool Client::connected() const { return impl_->io_.connected(); }

bool Client::wait_connected(std::chrono::nanoseconds timeout) { return impl_->io_.wait_connected(timeout); }

ClientCounters Client::counters() const { return impl_->counters(); }

const ClientOptions& Client::options() const { return impl_->options_; }

}  // namespace tollgate
