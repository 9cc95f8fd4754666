// One check batch's (or lease request's) round trip through tollgated's client API over a
// connected socket, blocking, with nothing of ours around it (no client library): shared by
// tollgate-wire-latency and tollgate-rls-bench.
#ifndef TOLLGATE_BENCH_NATIVE_ROUND_TRIP_H_
#define TOLLGATE_BENCH_NATIVE_ROUND_TRIP_H_

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "api/framing.h"
#include "tollgate/v1/api.pb.h"
#include "util/big_endian.h"
#include "util/frame_reader.h"

namespace tollgate::bench {

// Reused between calls so that a round trip allocates nothing in steady state.
struct NativeBuffers {
  std::string frame, answer;
  tollgate::v1::api::Request request;
  tollgate::v1::api::Response response;
};

// Frames request `id`, checking each of `keys` at cost 1, into b.frame. Throws
// std::runtime_error if it does not fit one frame.
inline void frame_check_request(uint64_t id, std::span<const std::string> keys, NativeBuffers& b) {
  b.request.Clear();
  b.request.set_version(tollgate::api::kApiVersion);
  b.request.set_id(id);
  for (const std::string& key : keys) {
    tollgate::v1::api::Check& c = *b.request.mutable_check()->add_checks();
    c.set_key(key);
    c.set_cost(1);
  }
  b.frame.clear();
  if (!tollgate::api::append_frame(b.request, tollgate::api::kDefaultMaxFrameBytes, b.frame)) {
    throw std::runtime_error("a check batch of " + std::to_string(keys.size()) + " does not fit one request frame");
  }
}

// Parses b.answer into b.response and checks it is request `id`'s `n` check results; throws
// std::runtime_error otherwise.
inline void parse_check_answer(uint64_t id, size_t n, NativeBuffers& b) {
  if (!b.response.ParseFromString(b.answer) || b.response.id() != id || !b.response.has_check() ||
      size_t(b.response.check().results_size()) != n) {
    throw std::runtime_error("the daemon's answer is not the " + std::to_string(n) + " check results asked for" +
                             (b.response.has_error() ? ": " + b.response.error().message() : std::string()));
  }
}

// Writes b.frame and reads the answer's frame into b.answer. Throws
// boost::system::system_error when the connection fails, std::runtime_error for a frame too long.
template <typename Socket>
void exchange_frames(Socket& socket, NativeBuffers& b) {
  namespace asio = boost::asio;
  asio::write(socket, asio::buffer(b.frame));
  unsigned char header[tollgate::kFrameHeaderBytes];
  asio::read(socket, asio::buffer(header));
  const uint32_t length = tollgate::load_be32(header);
  if (length > tollgate::api::kMaxResponseFrameBytes) {
    throw std::runtime_error("answer frame of " + std::to_string(length) + " bytes: not a tollgate daemon?");
  }
  b.answer.resize(length);
  asio::read(socket, asio::buffer(b.answer));
}

// Sends one request `id` checking each of `keys` at cost 1 and reads its answer. Throws
// boost::system::system_error when the connection fails and std::runtime_error for an answer
// that is not the check results asked for.
template <typename Socket>
void native_round_trip(Socket& socket, uint64_t id, std::span<const std::string> keys, NativeBuffers& b) {
  frame_check_request(id, keys, b);
  exchange_frames(socket, b);
  parse_check_answer(id, keys.size(), b);
}

// One lease request `id` (b.request's lease, set by the caller) and its answer in
// b.response.lease(). Throws as native_round_trip does.
template <typename Socket>
const tollgate::v1::api::LeaseResult& native_lease_call(Socket& socket, uint64_t id, NativeBuffers& b) {
  b.request.set_version(tollgate::api::kApiVersion);
  b.request.set_id(id);
  b.frame.clear();
  if (!tollgate::api::append_frame(b.request, tollgate::api::kDefaultMaxFrameBytes, b.frame)) {
    throw std::runtime_error("a lease request does not fit one request frame");
  }
  exchange_frames(socket, b);
  if (!b.response.ParseFromString(b.answer) || b.response.id() != id || !b.response.has_lease()) {
    throw std::runtime_error("the daemon's answer is not a lease result" +
                             (b.response.has_error() ? ": " + b.response.error().message() : std::string()));
  }
  return b.response.lease();
}

}  // namespace tollgate::bench

#endif  // TOLLGATE_BENCH_NATIVE_ROUND_TRIP_H_
