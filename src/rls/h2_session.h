#ifndef TOLLGATE_SRC_RLS_H2_SESSION_H_
#define TOLLGATE_SRC_RLS_H2_SESSION_H_

// One HTTP/2 server connection of the rate limit service, sans I/O (docs/rls-h2-plan.md 5): bytes
// from the peer in, whole unary calls out, answers in, bytes for the peer out. libnghttp2 parses
// and writes the frames; this file adds gRPC (rls/grpc_wire.h) and the connection's budget
// (rls/reset_budget.h): a stream is only handed out as a call once its one message is whole, so
// a stream reset before that costs its headers and nothing else (R1). No sockets, threads or
// clocks: the connection that owns it passes the time, and tests drive it with an nghttp2 client
// session as the peer.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rls/grpc_wire.h"
#include "rls/reset_budget.h"

namespace tollgate::rls {

struct H2SessionOptions {
  size_t max_header_list_bytes = 16 * 1024;
  size_t max_message_bytes = 64 * 1024;
  uint32_t max_concurrent_streams = 100;  // advertised, and enforced by the budget's in-flight cap
  // Request bytes held until their message is whole, on this connection and (when `shared` is
  // given) on every connection that shares it: a stream whose bytes would pass either is
  // refused RESOURCE_EXHAUSTED, its bytes dropped. Flow control cannot bound them: the bytes
  // are taken from nghttp2 as they come, so its windows reopen at once.
  size_t max_buffered_bytes = 256 * 1024;
  std::atomic<int64_t>* shared_buffered = nullptr;
  int64_t max_shared_buffered = 16 << 20;
  ResetBudgetOptions budget;
  // nghttp2's own RST_STREAM token bucket behind ours (R3): GOAWAY once it is empty.
  uint64_t reset_burst = 1000;
  uint64_t resets_per_second = 100;
};

// A request whose one message is whole.
struct H2Call {
  int32_t stream = 0;
  wire::Method method = wire::Method::kUnknown;
  std::string request;                              // the message, without its prefix
  std::optional<std::chrono::nanoseconds> timeout;  // from grpc-timeout, from when it opened
  int64_t opened_ns = 0;
};

struct H2SessionStats {
  uint64_t calls = 0;          // handed out by take_calls()
  uint64_t refused = 0;        // streams answered with a refusal (grpc_wire's) before any call
  uint64_t answered_late = 0;  // answers to streams already closed (the peer gave up): dropped
  uint64_t malformed_timeouts = 0;
  uint64_t over_buffer = 0;  // streams refused for the buffered-bytes caps (also in `refused`)
};

class H2Session {
 public:
  explicit H2Session(H2SessionOptions options = {});
  ~H2Session();
  H2Session(const H2Session&) = delete;
  H2Session& operator=(const H2Session&) = delete;

  // Bytes from the peer, at `now_ns`. False once the connection is to end: a fatal protocol
  // error, or the reset budget spent (a GOAWAY is then in the output; send it, then close).
  bool receive(std::string_view bytes, int64_t now_ns);
  // The calls whole since the last take, in the order they became whole.
  std::vector<H2Call> take_calls();
  // Answers a call taken: the response message (protobuf bytes) with grpc-status OK, or a status.
  // A call whose stream has closed meanwhile is let go (counted); every call taken gets one.
  void answer(int32_t stream, std::string_view response, int64_t now_ns);
  void fail(int32_t stream, wire::Code code, std::string_view message, int64_t now_ns);
  // A server-streaming answer (health Watch): the response headers and `first` message now, the
  // stream left open; push() sends another message, end() the trailers with `code`. The call is
  // in flight (R4) until it ends or the peer closes it. False when the stream has closed
  // meanwhile (the call is let go, as answer() does).
  bool open_stream(int32_t stream, std::string_view first, int64_t now_ns);
  void push(int32_t stream, std::string_view message);
  void end(int32_t stream, wire::Code code, std::string_view message);
  // Whether an open_stream() answer is still open and not ending.
  bool streaming(int32_t stream) const;
  // Streams open (a call being read, one in flight, a streaming answer).
  size_t open_streams() const;
  // Request bytes held now (the caps' count for this connection).
  size_t buffered_bytes() const;
  // A PING for the peer to answer (keepalive: any bytes it sends after prove it is there).
  void ping();
  // Asks the peer to open no more streams (GOAWAY NO_ERROR): those open are still served, then
  // finished() turns true. For a drain, an idle connection or one past its age.
  void goaway();
  // Everything to send now (appended to `out`).
  void take_output(std::string& out);
  // True when neither side wants more (a GOAWAY done, or a fatal error).
  bool finished() const;

  const H2SessionStats& stats() const;
  const ResetBudget& budget() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tollgate::rls

#endif  // TOLLGATE_SRC_RLS_H2_SESSION_H_
