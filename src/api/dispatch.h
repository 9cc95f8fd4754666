// The Unix-socket API's dispatch: one request frame in, its framed response out, answered
// through the RequestHandler. Pure: no sockets, no threads, so tests and the api_frames fuzzer
// call it directly. The listener and connections (api_server.cc, connection.cc) only move bytes.
//
// A check batch of more than kChecksPerSlice checks can be answered a slice at a time
// (answer() hands it over as a SlicedBatch, answer_slice() finishes it), so one client's large
// batch does not hold up every other client's single check on the daemon's one thread.
#ifndef TOLLGATE_SRC_API_DISPATCH_H_
#define TOLLGATE_SRC_API_DISPATCH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "request/request_handler.h"
#include "util/relaxed_counter.h"

namespace google::protobuf {
class Arena;
}
namespace tollgate::v1::api {
class Request;
class Response;
class LeaseRequest;
class LeaseResult;
}  // namespace tollgate::v1::api

namespace tollgate::api {

using tollgate::kChecksPerSlice;  // src/request/request_handler.h
// (An all-or-nothing batch is capped at tollgate::kMaxAllOrNothingChecks, tollgate/types.h.)

// Monotonic counts of what the dispatch answered, written on the server's thread, readable from any.
struct DispatchCounters {
  RelaxedCounter requests = 0;  // frames read, valid or not
  RelaxedCounter checks = 0;    // checks answered by the handler
  RelaxedCounter errors_frame_too_large = 0;
  RelaxedCounter errors_malformed = 0;
  RelaxedCounter errors_unsupported_version = 0;
  RelaxedCounter errors_batch_too_large = 0;
  RelaxedCounter errors_empty_request = 0;
  RelaxedCounter errors_internal = 0;  // the handler threw; answered with an INTERNAL error
};

// A request being answered a slice at a time: a large check batch (kChecksPerSlice checks a
// slice), or a top of several rules (one rule's merge a slice). Owns its request and response.
class SlicedBatch {
 public:
  ~SlicedBatch();

 private:
  friend class Dispatch;
  SlicedBatch() = default;
  std::unique_ptr<google::protobuf::Arena> arena_;
  ::tollgate::v1::api::Request* request_ = nullptr;
  ::tollgate::v1::api::Response* response_ = nullptr;
  int next_ = 0;                     // the first check (or rule) not answered yet
  std::vector<TopParts> top_parts_;  // a top request: what to merge, one rule a slice
  std::vector<RuleTop> tops_;        // the rules merged so far
  size_t top_k_ = 0;
};

class Dispatch {
 public:
  // `handler` and `counters` must outlive the dispatch.
  Dispatch(RequestHandler& handler, size_t max_checks_per_batch, uint32_t max_frame_bytes, DispatchCounters& counters)
      : handler_(handler),
        max_checks_per_batch_(max_checks_per_batch),
        max_frame_bytes_(max_frame_bytes),
        counters_(counters) {}

  enum class Outcome : uint8_t {
    kAnswered,  // the response is appended to `out`
    kClose,     // the frame is not a Request: an error is appended; close after writing it
    kSliced,    // a large check batch or a top of several rules, handed over in *sliced: finish
                // it with answer_slice()
  };
  // Answers one request frame's payload. Large batches are sliced only when `sliced` is given.
  Outcome answer(std::string_view payload, std::string& out, std::unique_ptr<SlicedBatch>* sliced = nullptr);
  // Answers the next slice of `batch`; when the batch is complete, appends its response to `out`
  // and returns true.
  bool answer_slice(SlicedBatch& batch, std::string& out);
  // Appends the FRAME_TOO_LARGE error for a length header of `length` bytes.
  void answer_too_large(uint64_t length, std::string& out);

  uint32_t max_frame_bytes() const { return max_frame_bytes_; }

 private:
  void check_all(const ::tollgate::v1::api::Request& request, ::tollgate::v1::api::Response& response);
  void lease(const ::tollgate::v1::api::LeaseRequest& request, ::tollgate::v1::api::LeaseResult& result);
  // One slice of a top request: merges the next rule; when all are, fills the response.
  bool top_slice(SlicedBatch& s);
  void check_range(const ::tollgate::v1::api::Request& request, int begin, int end,
                   ::tollgate::v1::api::Response& response);
  void write_frame(const ::tollgate::v1::api::Response& response, std::string& out);

  RequestHandler& handler_;
  const size_t max_checks_per_batch_;
  const uint32_t max_frame_bytes_;
  DispatchCounters& counters_;
};

}  // namespace tollgate::api

#endif  // TOLLGATE_SRC_API_DISPATCH_H_
