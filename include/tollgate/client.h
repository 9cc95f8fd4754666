// The C++ client of the local tollgate daemon (tollgated): admission checks and admin calls over
// the daemon's client API (a Unix socket, or TCP on loopback).
//
//   tollgate::Client client({.endpoint = "unix:/run/tollgate/tollgated.sock"});
//   tollgate::CheckReply r = client.check("api:login:alice");
//   if (!r.allowed) return reject(r.retry_after_ns);
//
// Availability: a check never waits longer than its deadline (2 ms by default). When the daemon
// is unreachable, too slow, or refuses the request, the reply is made up locally: allowed =
// options.fail_open (true by default, so a daemon outage never takes the service down), with
// `source` saying so and `error` saying why. The connection is kept open and re-established in
// the background with capped exponential backoff and jitter; while it is down, checks fail open
// (or closed) at once instead of waiting for their deadline.
//
// Threading: every method may be called from any number of threads at once, except that the
// destructor must not run concurrently with other calls. One background thread per Client owns
// the main connection: async and admin calls are handed to it and pipelined there. Synchronous
// checks do their own I/O on the calling thread, over a small pool of connections
// (ClientOptions::direct_connections), and fall back to the background thread when the pool is
// busy. Create one Client per process and share it.
//
// Link with tollgate::client (find_package(tollgate)). This header pulls in no Asio or protobuf.
#ifndef TOLLGATE_CLIENT_H_
#define TOLLGATE_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tollgate/lease.h"
#include "tollgate/top.h"
#include "tollgate/types.h"

namespace tollgate {

// Where the daemon listens unless told otherwise (tollgated --listen, tollgate --endpoint).
inline constexpr std::string_view kDefaultEndpoint = "unix:/run/tollgate/tollgated.sock";
// Environment variable the `tollgate` CLI reads when --endpoint is not given. The library itself
// reads no environment: pass ClientOptions::endpoint.
inline constexpr std::string_view kEndpointEnvVar = "TOLLGATE_ENDPOINT";

struct ClientOptions {
  // "unix:PATH" or "tcp:HOST:PORT" (HOST an IP address or localhost).
  std::string endpoint = std::string(kDefaultEndpoint);
  // How long check() and check_batch() wait for the daemon's answer.
  std::chrono::nanoseconds deadline = std::chrono::milliseconds(2);
  // The decision when the daemon does not decide: true admits, false denies.
  bool fail_open = true;
  // How long members(), stats() and set_faults() wait.
  std::chrono::nanoseconds admin_timeout = std::chrono::seconds(1);
  // Reconnection: the first retry after a failure waits about reconnect_initial, each further
  // failure doubles it up to reconnect_max; every wait is drawn uniformly from [d/2, d] so that
  // many clients do not reconnect in lockstep after a daemon restart.
  std::chrono::nanoseconds reconnect_initial = std::chrono::milliseconds(10);  // at least 1 ms is used
  std::chrono::nanoseconds reconnect_max = std::chrono::seconds(1);
  // A connection attempt that has not completed by then is abandoned (and retried later).
  std::chrono::nanoseconds connect_timeout = std::chrono::seconds(1);
  // Largest request frame sent, in bytes; must not exceed the daemon's limit (64 KiB by default).
  // A larger request (a huge batch) fails at once without being sent.
  uint32_t max_request_bytes = 64 * 1024;
  // check() and check_batch() are answered on the calling thread, over a connection of the
  // caller's own taken from a pool of at most this many (opened on demand, kept while they
  // work), instead of being handed to the client's io thread and back: two thread wake-ups fewer
  // per call, which halves a quiet check's latency and cuts most of its p99 on a busy host
  // (docs/failure-modes.md, "key flood"). A caller that finds every pooled connection in use,
  // or the client not connected, goes through the io thread as before. 0 turns this off.
  uint32_t direct_connections = 4;
};

// Who made a decision.
enum class ReplySource : uint8_t {
  kDaemon,      // the daemon decided
  kFailOpen,    // no answer from the daemon (see error); admitted because fail_open is true
  kFailClosed,  // no answer from the daemon (see error); denied because fail_open is false
};
// "daemon", "fail-open", "fail-closed". Never null.
const char* reply_source_name(ReplySource source);

// A Decision, and who made it. The Decision's fields are the daemon's when source == kDaemon;
// otherwise `allowed` is the fail-open choice and the rest stay as constructed (not limited, no
// limit, nothing remaining).
struct CheckReply : Decision {
  CheckReply() { limited = false; }

  ReplySource source = ReplySource::kDaemon;
  std::string error;  // why the daemon did not decide; empty when source == kDaemon

  bool from_daemon() const { return source == ReplySource::kDaemon; }
};

// What the client has seen since construction (monotonic counts).
struct ClientCounters {
  uint64_t daemon_replies = 0;    // checks decided by the daemon
  uint64_t fallback_replies = 0;  // checks decided by fail_open (kFailOpen or kFailClosed)
  uint64_t late_replies = 0;      // answers that arrived after their caller had given up
  uint64_t connects = 0;          // connections established
  uint64_t connect_failures = 0;  // connection attempts that failed
  uint64_t disconnects = 0;       // established connections lost
  uint64_t direct_calls = 0;      // sync calls answered over a caller-thread connection
};

class Client;

// A concurrency lease (a rule's `concurrency: N`; docs/design.md 6.7), as Client::acquire
// answers it. Move-only; its destructor releases it (without waiting for the daemon's answer),
// so `if (auto lease = client.acquire("jobs:nightly")) run();` holds the slot exactly while
// run() does. A Lease must not outlive its Client. While the daemon is unreachable, acquire
// answers by fail_open: granted without an id (nothing to release), or denied.
class Lease : public LeaseFacts {
 public:
  Lease() = default;
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  ~Lease();

  // True when the caller may go ahead: the daemon granted a lease, no concurrency rule governs
  // the key, or the daemon did not answer and fail_open is true.
  bool granted() const { return granted_; }
  explicit operator bool() const { return granted_; }
  // The daemon's id of the lease (32 hex digits); empty when there is nothing to release.
  const std::string& id() const { return id_; }
  // Frees the lease now; true if the daemon held it. Afterwards the Lease holds nothing.
  bool release();
  // Extends the lease by `ttl` from now (0: the rule's lease_ttl); false if the daemon no longer
  // holds it (expired, released) or did not answer.
  bool renew(std::chrono::nanoseconds ttl = {});

  ReplySource source = ReplySource::kDaemon;
  std::string error;  // why the daemon did not decide; empty when source == kDaemon

 private:
  friend class Client;
  Client* client_ = nullptr;
  bool granted_ = false;
  std::string id_;
};

class Client {
 public:
  // Starts the background thread and the first connection attempt; does not wait for it.
  // Throws std::invalid_argument if options.endpoint does not parse.
  explicit Client(ClientOptions options = {});
  // Completes every outstanding call (async callbacks run, with an error), closes the connection
  // and joins the background thread.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One admission check of `cost` tokens (0 = query without taking). Blocks the calling thread
  // for at most `deadline` (options.deadline by default), plus scheduling noise.
  CheckReply check(std::string_view key, int64_t cost = 1);
  CheckReply check(std::string_view key, int64_t cost, std::chrono::nanoseconds deadline);

  // Several checks in one request, decided by the daemon in order; one reply per item, in the
  // same order. All replies come from the daemon or none do.
  std::vector<CheckReply> check_batch(std::span<const CheckItem> items);
  std::vector<CheckReply> check_batch(std::span<const CheckItem> items, std::chrono::nanoseconds deadline);

  // Several checks decided together, all or nothing (at most 64): if any is denied, none is
  // charged, and those that would have passed come back denied with
  // DenyReason::kOtherCheckDenied. For a request that must pass several limits at once (per
  // user and per tenant, say) without spending one when another says no.
  std::vector<CheckReply> check_all(std::span<const CheckItem> items);
  std::vector<CheckReply> check_all(std::span<const CheckItem> items, std::chrono::nanoseconds deadline);

  // Asynchronous check with options.deadline. Returns at once; `done` is called exactly once, on
  // the client's background thread, with the daemon's answer or a fail-open/closed reply (at the
  // latest when the deadline passes, or when the Client is destroyed). `done` must be quick and
  // must not throw; it may call check_async(), but a synchronous method called from it fails at
  // once (it would wait on the very thread that must answer it).
  using CheckCallback = std::function<void(CheckReply)>;
  void check_async(std::string_view key, int64_t cost, CheckCallback done);

  // Admin calls (the CLI), waiting at most options.admin_timeout. On failure they return nullopt
  // (or a non-empty error text) and, if `error` is given, say why.
  std::optional<std::vector<MemberInfo>> members(std::string* error = nullptr);
  std::optional<StatsList> stats(std::string* error = nullptr);
  // Who is being limited (`tollgate top`): `rule`'s top keys ("" : every rule counted, busiest
  // first), `k` per metric (0: kDefaultTopKeys; at most kMaxTopKeys), merged over the live
  // members' summaries of the last one to two --top-window.
  std::optional<std::vector<RuleTop>> top(std::string_view rule = {}, size_t k = 0, std::string* error = nullptr);
  // Replaces the daemon's fault settings. Returns "" on success, else the client's or the
  // daemon's error.
  std::string set_faults(const FaultSettings& faults);
  // Makes `key` full again at every node (`tollgate reset KEY`; docs/design.md 6.6). On failure
  // the reply's error says why (the client's, or the daemon's).
  ResetReply reset(std::string_view key);

  // Takes `count` slots of `key`'s concurrency limit for `ttl` (0: the rule's lease_ttl),
  // waiting at most options.deadline; see Lease.
  Lease acquire(std::string_view key, int64_t count = 1, std::chrono::nanoseconds ttl = {});
  // By id, for a lease held elsewhere than in a Lease (another process of the same service):
  // true if the daemon held it.
  bool release_lease(std::string_view id);
  std::optional<std::chrono::nanoseconds> renew_lease(std::string_view id, std::chrono::nanoseconds ttl = {});

  // True while a connection to the daemon is established.
  bool connected() const;
  // Waits up to `timeout` for a connection to be established; true if one is.
  bool wait_connected(std::chrono::nanoseconds timeout);

  ClientCounters counters() const;
  const ClientOptions& options() const;

 private:
  friend class Lease;
  // A release whose answer nobody waits for (Lease's destructor).
  void release_async(std::string id);
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate

#endif  // TOLLGATE_CLIENT_H_
