// The client API as the daemon reads it: a byte stream from a client socket cut into frames by
// tollgate::FrameReader (src/util/frame_reader.h), each frame answered by the daemon's own dispatch
// (api::Dispatch, src/api/dispatch.h) over a real KeyTable, following the read loop of
// src/api/connection.cc. The input layout is fuzz_util.h's StreamInput; flag bit 3 lowers the
// frame limit to 64 bytes so the oversize path is reached with small inputs.
//
// Contract: the frames do not depend on how the stream is split; a frame above the limit is
// refused (kTooLarge, with its length) before its payload is buffered, and nothing after it or
// after a malformed frame is read; what parses re-serializes to a Request that parses to the
// same bytes; the dispatch answers as this file's model of the protocol says (error codes, one
// result per check, too-long keys and negative costs denied); answering large batches a slice
// at a time writes the same bytes as answering them whole; every answer fits a response frame,
// and the client's decoder reads back exactly one Response per answer with the request's id.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <memory>
#include <span>

#include "api/dispatch.h"
#include "api/framing.h"
#include "core/key_table.h"
#include "fuzz_util.h"
#include "support/table_handler.h"
#include "tollgate/rules.h"
#include "tollgate/v1/api.pb.h"

namespace {

namespace api = tollgate::api;
namespace pb = ::tollgate::v1::api;

constexpr size_t kMaxChecksPerBatch = 1000;  // ApiServerOptions::max_checks_per_batch's default
constexpr size_t kMaxKeyBytes = 256;         // KeyTableOptions::max_key_bytes's default

// The daemon's request path over a KeyTable of its own ("*": 10/s, burst 5), its clock a
// millisecond per check, so two handlers fed the same checks decide the same.
struct TableHandler : tollgate::testing::TableHandler {
  TableHandler()
      : tollgate::testing::TableHandler(std::make_shared<tollgate::RuleSet>(
            std::vector<tollgate::Rule>{{"*", tollgate::Limit{tollgate::Rate{10, 1'000'000'000}, 5, 5}, 0}},
            std::nullopt)) {
    tick = 1'000'000;
  }
};

struct Answer {
  uint64_t id = 0;
  pb::Error::Code error = pb::Error::CODE_UNSPECIFIED;  // CODE_UNSPECIFIED: not an error
  size_t results = 0;                                   // for a check batch
  std::vector<pb::DenyReason> denied_by_rule;           // per check: a reason it must be denied for
  std::vector<bool> has_limit;                          // per check: decided by the node (carries its limit)
};

std::string serialize(const pb::Request& request) {
  std::string out;
  FUZZ_CHECK(request.SerializeToString(&out), "a parsed Request does not serialize");
  return out;
}

// What the protocol says the answer to one frame is (this file's model of it). Returns false when
// the connection is to be closed (the frame is not a Request).
bool expect(std::string_view payload, std::vector<Answer>& answers) {
  pb::Request request;
  Answer a;
  if (!request.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    a.error = pb::Error::MALFORMED;
    answers.push_back(a);
    return false;
  }
  // Protobuf keeps unknown fields, so a parsed request serializes, parses and serializes to the
  // same bytes. (Compared as bytes: a field-wise comparison calls a NaN loss different from
  // itself, and the daemon's FaultSettings check refuses NaN anyway.)
  const std::string once = serialize(request);
  pb::Request again;
  FUZZ_CHECK(again.ParseFromString(once), "a re-serialized Request does not parse");
  FUZZ_CHECK(serialize(again) == once, "a Request does not survive a round trip");

  a.id = request.id();
  if (request.version() != api::kApiVersion) {
    a.error = pb::Error::UNSUPPORTED_VERSION;
  } else if (request.body_case() == pb::Request::BODY_NOT_SET) {
    a.error = pb::Error::EMPTY_REQUEST;
  } else if (request.body_case() == pb::Request::kCheck) {
    const auto& checks = request.check().checks();
    if (checks.empty()) {
      a.error = pb::Error::EMPTY_REQUEST;
    } else if (static_cast<size_t>(checks.size()) > kMaxChecksPerBatch ||
               (request.check().all_or_nothing() &&
                static_cast<size_t>(checks.size()) > tollgate::kMaxAllOrNothingChecks)) {
      a.error = pb::Error::BATCH_TOO_LARGE;
    } else {
      a.results = static_cast<size_t>(checks.size());
      // A key of Envoy's buckets (first byte 0x1E) is denied before the node is asked; in an
      // all-or-nothing request it denies every check, none of which the node decides.
      bool any_reserved = false;
      for (const pb::Check& check : checks) any_reserved = any_reserved || tollgate::is_reserved_key(check.key());
      const bool none_decided = any_reserved && request.check().all_or_nothing();
      for (const pb::Check& check : checks) {
        const bool reserved = tollgate::is_reserved_key(check.key());
        a.denied_by_rule.push_back(reserved                            ? pb::DENY_REASON_RESERVED_KEY
                                   : none_decided                      ? pb::DENY_REASON_OTHER_CHECK_DENIED
                                   : check.key().size() > kMaxKeyBytes ? pb::DENY_REASON_KEY_TOO_LONG
                                   : check.cost() < 0                  ? pb::DENY_REASON_INVALID_COST
                                                                       : pb::DENY_REASON_NONE);
        a.has_limit.push_back(!reserved && !none_decided && check.key().size() <= kMaxKeyBytes);
      }
    }
  }
  answers.push_back(a);
  return true;
}

// Answers the frames of `payloads` through a fresh dispatch, whole or a slice at a time.
std::string dispatch_all(const std::vector<std::string>& payloads, uint32_t max_frame_bytes, bool too_large_after,
                         uint64_t rejected_length, bool sliced) {
  TableHandler handler;
  api::DispatchCounters counters;
  api::Dispatch dispatch(handler, kMaxChecksPerBatch, max_frame_bytes, counters);
  std::string out;
  for (const std::string& payload : payloads) {
    std::unique_ptr<api::SlicedBatch> batch;
    const api::Dispatch::Outcome outcome = dispatch.answer(payload, out, sliced ? &batch : nullptr);
    if (outcome == api::Dispatch::Outcome::kSliced) {
      FUZZ_CHECK(batch != nullptr, "kSliced without a batch");
      while (!dispatch.answer_slice(*batch, out)) {
      }
    } else {
      FUZZ_CHECK(batch == nullptr, "a batch handed over without kSliced");
    }
    if (outcome == api::Dispatch::Outcome::kClose) break;
  }
  if (too_large_after) dispatch.answer_too_large(rejected_length, out);
  FUZZ_CHECK(counters.requests == payloads.size() + (too_large_after ? 1 : 0), "requests miscounted");
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tollgate::fuzz::StreamInput in = tollgate::fuzz::split_stream_input(data, size);
  const uint32_t max_frame_bytes = (in.flags & 0x08) ? 64 : api::kDefaultMaxFrameBytes;

  // --- The server's read loop.
  tollgate::FrameReader decoder(max_frame_bytes);
  std::vector<Answer> answers;
  uint64_t rejected_length = 0;
  std::vector<std::string> frames;
  bool close = false, too_large = false;
  for (std::string_view chunk : in.chunks) {
    if (close) break;
    decoder.append(std::string_view(chunk.data(), chunk.size()));
    // frame_reader.h: buffered() is at most one incomplete frame plus the last piece fed.
    FUZZ_CHECK(decoder.buffered() <= 4 + size_t{max_frame_bytes} + chunk.size(), "the decoder holds too much");
    while (!close) {
      std::string_view payload;
      const tollgate::FrameReader::Status s = decoder.next(&payload);
      if (s == tollgate::FrameReader::Status::kNeedMore) break;
      if (s == tollgate::FrameReader::Status::kTooLarge) {
        FUZZ_CHECK(decoder.rejected_length() > max_frame_bytes, "refused a length within the limit");
        answers.push_back({0, pb::Error::FRAME_TOO_LARGE, 0, {}, {}});
        rejected_length = decoder.rejected_length();
        too_large = close = true;
        break;
      }
      FUZZ_CHECK(payload.size() <= max_frame_bytes, "a frame above the limit");
      frames.emplace_back(payload);
      if (!expect(payload, answers)) close = true;
    }
  }

  // --- The same stream in one pass: the frames must be the same, up to where the server stopped.
  const tollgate::fuzz::ReferenceFrames ref = tollgate::fuzz::reference_frames(in.stream, max_frame_bytes);
  FUZZ_CHECK(frames.size() <= ref.frames.size(), "more frames than the stream holds");
  for (size_t i = 0; i < frames.size(); ++i)
    FUZZ_CHECK(frames[i] == ref.frames[i], "a frame differs from the stream's");
  if (!close) {
    FUZZ_CHECK(frames.size() == ref.frames.size() && !ref.too_large, "frames depend on how the stream is split");
    FUZZ_CHECK(decoder.buffered() == ref.leftover, "buffered() disagrees with the stream");
  } else if (too_large) {
    FUZZ_CHECK(ref.too_large && frames.size() == ref.frames.size(), "kTooLarge depends on how the stream is split");
  }

  // --- The dispatch's answers, whole and sliced: the same bytes.
  const std::string out = dispatch_all(frames, max_frame_bytes, too_large, rejected_length, /*sliced=*/false);
  FUZZ_CHECK(dispatch_all(frames, max_frame_bytes, too_large, rejected_length, /*sliced=*/true) == out,
             "answering in slices differs from answering whole");

  // --- The client's side: one Response per answer, in order, with the request's id.
  tollgate::FrameReader client(api::kMaxResponseFrameBytes);
  client.append(std::string_view(out.data(), out.size()));
  for (const Answer& a : answers) {
    std::string_view payload;
    FUZZ_CHECK(client.next(&payload) == tollgate::FrameReader::Status::kFrame, "an answer is missing");
    pb::Response response;
    FUZZ_CHECK(response.ParseFromArray(payload.data(), static_cast<int>(payload.size())), "an answer does not parse");
    FUZZ_CHECK(response.version() == api::kApiVersion && response.id() == a.id, "an answer has the wrong id");
    if (a.error != pb::Error::CODE_UNSPECIFIED) {
      FUZZ_CHECK(response.has_error() && response.error().code() == a.error, "an answer has the wrong error");
    } else if (a.results > 0) {
      FUZZ_CHECK(static_cast<size_t>(response.check().results_size()) == a.results, "one result per check");
      for (size_t i = 0; i < a.results; ++i) {
        const pb::Result& r = response.check().results(static_cast<int>(i));
        if (a.denied_by_rule[i] != pb::DENY_REASON_NONE) {
          FUZZ_CHECK(!r.allowed() && r.reason_code() == a.denied_by_rule[i], "a check that must be denied was not");
        }
        if (a.has_limit[i]) {
          FUZZ_CHECK(r.limited() && r.has_limit() && r.limit().burst() == 5, "a result without its governing limit");
        }
      }
    } else {
      FUZZ_CHECK(!response.has_error(), "an error where none was due");
    }
  }
  std::string_view rest;
  FUZZ_CHECK(client.next(&rest) == tollgate::FrameReader::Status::kNeedMore && client.buffered() == 0,
             "bytes after the last answer");
  return 0;
}
