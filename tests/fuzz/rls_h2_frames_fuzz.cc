// The rate limit service's own HTTP/2 session (src/rls/h2_session.h) as a connection reads it:
// the client preface, then the input's bytes as the client's stream, in fuzz_util.h's
// StreamInput chunks, at a millisecond a chunk. Every call handed out is answered at once (flag
// bit 3 clear) or left in flight until the end (set); bit 4 answers with a failure instead. A
// health Watch is answered streaming: its first message, one more each chunk, trailers at the end.
// Small budgets (8 streams in flight, 4 premature closes of 16) so that inputs of a few hundred
// bytes reach the refusals and the GOAWAY.
//
// Contract: no call is handed out twice, each carries an odd stream id, a known method and a
// message within the cap; work in flight never exceeds its cap; once receive() says the
// connection ends, nothing more is fed; the output stays bounded by what the input asked for;
// the request bytes held stay within their caps, and all are given back when the session goes.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "rls/h2_session.h"

namespace {

namespace rls = tollgate::rls;

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tollgate::fuzz::StreamInput in = tollgate::fuzz::split_stream_input(data, size);
  rls::H2SessionOptions o;
  o.max_message_bytes = 256;
  o.max_header_list_bytes = 512;
  o.budget.max_in_flight = 8;
  o.budget.window = 16;
  o.budget.max_premature = 4;
  o.max_buffered_bytes = 1024;
  std::atomic<int64_t> shared{0};
  o.shared_buffered = &shared;
  o.max_shared_buffered = 768;
  {
    rls::H2Session session(o);
    const bool hold = in.flags & 0x8;
    const bool fail = in.flags & 0x10;
    std::set<int32_t> handed;
    std::vector<int32_t> held, watches;
    std::string out;
    int64_t now = 0;
    bool open = session.receive(kPreface, now);
    for (std::string_view chunk : in.chunks) {
      if (!open) break;
      now += 1'000'000;
      open = session.receive(chunk, now);
      for (rls::H2Call& call : session.take_calls()) {
        FUZZ_CHECK(call.stream > 0 && call.stream % 2 == 1, "a call on a stream the client could not open");
        FUZZ_CHECK(handed.insert(call.stream).second, "a call handed out twice");
        FUZZ_CHECK(call.method != rls::wire::Method::kUnknown, "a call to an unknown method");
        FUZZ_CHECK(call.request.size() <= o.max_message_bytes, "a call's message over the cap");
        if (call.method == rls::wire::Method::kHealthWatch && !fail) {
          if (session.open_stream(call.stream, "\x08\x01", now)) watches.push_back(call.stream);
        } else if (hold) {
          held.push_back(call.stream);
        } else if (fail) {
          session.fail(call.stream, rls::wire::Code::kUnavailable, "fuzz", now);
        } else {
          session.answer(call.stream, call.request, now);
        }
      }
      for (int32_t id : watches) session.push(id, "\x08\x02");
      FUZZ_CHECK(session.budget().in_flight() <= o.budget.max_in_flight, "work in flight over its cap");
      FUZZ_CHECK(session.buffered_bytes() <= o.max_buffered_bytes, "request bytes held over the cap");
      FUZZ_CHECK(shared.load() == int64_t(session.buffered_bytes()), "the shared count is not what is held");
      session.take_output(out);
      FUZZ_CHECK(out.size() <= 4096 + 64 * in.stream.size(), "output out of proportion to the input");
      out.clear();
    }
    for (int32_t id : held) session.answer(id, "", now);
    for (int32_t id : watches) session.end(id, rls::wire::Code::kUnavailable, "fuzz");
    FUZZ_CHECK(session.budget().in_flight() <= o.budget.max_in_flight, "work in flight over its cap");
    session.take_output(out);
  }
  FUZZ_CHECK(shared.load() == 0, "a session gone left request bytes counted");
  return 0;
}
