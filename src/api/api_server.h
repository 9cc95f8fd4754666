// The daemon's client API server: listens on Unix and TCP endpoints (request/listener.h), and for
// each connection (api/connection.h) reads framed protobuf Requests (api/framing.h,
// proto/tollgate/v1/api.proto), answers each through the pure dispatch (api/dispatch.h) and the
// RequestHandler, and writes the Responses back in request order.
//
// Threading: everything runs on the io_context passed in, and the handler is called
// synchronously on the thread that runs it. ApiServer itself is not thread-safe: call start(),
// stop() and drain() on that thread, or while the io_context is not running; counters() and
// stats() may be read from any thread. Several servers on several threads may share one set of
// listeners (share_connections_with).
//
// Robustness: a frame whose length exceeds max_frame_bytes is rejected from its 4-byte header,
// before anything is allocated for it; a frame that is not a Request gets an Error response and
// the connection is closed; a request the server will not serve (wrong version, no body, too
// many checks) gets an Error response with its id and the connection stays open. None of these
// affects other connections. Each is counted.
#ifndef TOLLGATE_SRC_API_API_SERVER_H_
#define TOLLGATE_SRC_API_API_SERVER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "api/dispatch.h"
#include "api/endpoint.h"
#include "api/framing.h"
#include "guard/offense_limiter.h"
#include "request/request_handler.h"
#include "util/stat_def.h"

namespace boost::asio {
class io_context;
}

namespace tollgate::api {

struct ApiServerOptions {
  // Where to listen (parse_endpoint). Unix sockets are created with `unix_socket_mode`; a stale
  // socket file (left by a crash: nobody accepts on it) is replaced, a live one makes start()
  // fail, and a path that exists but is not a socket is never touched.
  std::vector<Endpoint> listen;
  uint32_t unix_socket_mode = 0660;
  // At most this many connections are open, so a flood of clients cannot exhaust the daemon's
  // file descriptors, and at most max_connections_per_client of them from one client (one uid
  // on a Unix socket, from SO_PEERCRED; one address over TCP). A newcomer over either limit
  // takes the place of the least recently active idle connection (nothing read but unanswered,
  // nothing unwritten) of the clients holding more than the newcomer, most first, then of its
  // own (over the per-client limit: only its own),
  // provided it has been idle for evict_idle_after; otherwise the newcomer is closed at once.
  // So a client that hoards idle connections cannot lock others out, and one that keeps all of
  // its connections busy can hold only its share.
  size_t max_connections = 1024;
  size_t max_connections_per_client = 512;
  std::chrono::milliseconds evict_idle_after{1'000};
  // A connection with nothing pending is closed after this long without a request (0: never).
  // Clients reconnect on their next call; the client library does so at once.
  std::chrono::milliseconds idle_timeout{300'000};
  // Largest request frame (payload bytes). Larger frames close the connection.
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
  // Largest number of checks in one request; more gets a BATCH_TOO_LARGE error.
  size_t max_checks_per_batch = 1000;
  // A connection stops reading while this many response bytes wait to be written: a client that
  // pipelines requests but never reads answers cannot grow the daemon's memory without bound.
  size_t max_pending_output_bytes = 1024 * 1024;
  // All connections of this server together stop answering while their unwritten answers reach
  // this many bytes, each going on once they fall below it: so the answers held never exceed
  // this plus one answer (about a batch's or the members list), however many clients never read.
  size_t max_output_bytes = 16 * 1024 * 1024;
  // A frame must arrive whole within this long of its first byte, and the client must take each
  // write of answers within this long, or the connection is closed: a client that sends half a
  // frame, or never reads, cannot hold a connection slot and its buffers for ever.
  std::chrono::milliseconds frame_timeout{10'000};
  // Before a slice of a large batch, if answers were written since the previous slice, give the
  // CPU away once (sched_yield). Writing to a socket wakes the reader as a "sync" wakeup: Linux
  // queues it on the writer's CPU, expecting the writer to sleep soon. A daemon busy with a
  // flood does not, and a client whose answer was ready waited up to a scheduler tick (0.5-2 ms
  // on a 2-vCPU VM, the other CPU idle) behind the batch. See docs/failure-modes.md.
  bool yield_after_answer_when_busy = true;
  // Told about each connection that misbehaves (malformed or oversized frame, a frame that never
  // completes, a connection over the limit), naming the client ("pid 4242", "127.0.0.1"); the
  // daemon rate-limits these into its log (OffenseLimiter). May be empty.
  OffenseReporter on_offense;
};

// Monotonic counts since construction (connections_open is a gauge), with the dispatch's.
struct ApiServerCounters : DispatchCounters {
  RelaxedCounter connections_accepted = 0;       // served (not counting rejected ones)
  RelaxedCounter connections_rejected = 0;       // closed at once: a connection limit reached, none evictable
  RelaxedCounter connections_evicted = 0;        // idle, closed to make room for a newcomer
  RelaxedCounter connections_timed_out = 0;      // closed: a frame did not complete within frame_timeout
  RelaxedCounter connections_write_stalled = 0;  // closed: answers not taken within frame_timeout
  RelaxedCounter connections_idle_closed = 0;    // closed: no request for idle_timeout
  RelaxedCounter connections_open = 0;           // gauge
  RelaxedCounter accept_errors = 0;              // accept() failed (e.g. out of file descriptors)
  RelaxedCounter busy_yields = 0;                // CPU given away before a slice, answers having been written
  // The most answer bytes one connection has held, unwritten or not yet taken by its client:
  // max_pending_output_bytes plus at most one answer.
  RelaxedCounter pending_output_high_water = 0;
  RelaxedCounter output_bytes = 0;         // gauge: answers held by all connections, not yet taken
  RelaxedCounter output_high_water = 0;    // the most output_bytes has been: max_output_bytes plus one answer
  RelaxedCounter output_budget_waits = 0;  // a connection waited for max_output_bytes to have room
};

class ApiServer {
 public:
  // `io` and `handler` must outlive the server. Does not listen until start().
  ApiServer(boost::asio::io_context& io, RequestHandler& handler, ApiServerOptions options);
  // Calls stop().
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds and listens on every endpoint of the options, then accepts in the background (on the
  // io_context). Returns "" on success; otherwise an error naming the endpoint and the cause
  // (e.g. `unix:/run/tollgate/tollgated.sock: another process is listening on this socket`), and
  // nothing is left listening. Call once.
  std::string start();

  // Closes the listeners and every connection (requests already read are not answered), and
  // removes the Unix socket files this server created, unless another process has replaced them
  // since. Idempotent.
  void stop();

  // The graceful stop (SIGTERM): closes the listeners and removes the socket files as stop()
  // does, reads nothing more, and closes each connection once the answers to every request it
  // has read are written. Call stop() afterwards to close whatever has not finished.
  void drain();

  // Several servers answering one daemon's clients, each on its own io_context and thread
  // (tollgated --threads): this server, the one started, accepts every connection and hands each
  // to whichever of `others` or itself has the fewest connections open or on their way, so
  // connections spread evenly in whatever order they come; a client's connections go first to
  // the servers where it holds less than its max_connections_per_client. The others are never
  // started (serve_handed() instead); each enforces its own connection limits (give each its
  // share). Call before start(), with servers that outlive this one's accepting.
  void share_connections_with(const std::vector<ApiServer*>& others);
  // Instead of start(), for one of those others: serves what it is handed (and closes idle and
  // stalled connections as a started server does). Call once, on its thread or before its
  // io_context runs.
  void serve_handed();

  // The endpoints actually listened on, in the order of options.listen; a TCP port 0 is replaced
  // by the port the kernel chose. Empty before start().
  std::vector<Endpoint> bound_endpoints() const;

  // Readable from any thread (written by the server's own).
  const ApiServerCounters& counters() const;
  // The counters as named stats ("api.connections_accepted", "api.errors.malformed", ...), in a
  // stable order, for the daemon to append to its own StatsList.
  StatsList stats() const;
  // Their declarations (util/stat_def.h): every name stats() reports is one of these.
  static std::vector<StatDef> stat_defs();

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace tollgate::api

#endif  // TOLLGATE_SRC_API_API_SERVER_H_
