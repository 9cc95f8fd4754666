// gRPC's unary framing apart from HTTP/2 (src/rls/grpc_wire.h): what our own server will read and
// write around the protobuf bytes (docs/rls-h2-plan.md).
#include "rls/grpc_wire.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace tollgate::rls::wire {
namespace {

using namespace std::chrono_literals;

TEST(GrpcTimeout, EveryUnitIsReadAndEnvoysTwentyMillisecondsToo) {
  EXPECT_EQ(parse_timeout("20m"), std::chrono::nanoseconds(20ms));  // Envoy's rate limit filter
  EXPECT_EQ(parse_timeout("2H"), std::chrono::nanoseconds(2h));
  EXPECT_EQ(parse_timeout("3M"), std::chrono::nanoseconds(3min));
  EXPECT_EQ(parse_timeout("4S"), std::chrono::nanoseconds(4s));
  EXPECT_EQ(parse_timeout("5u"), std::chrono::nanoseconds(5us));
  EXPECT_EQ(parse_timeout("6n"), std::chrono::nanoseconds(6));
  EXPECT_EQ(parse_timeout("99999999S"), std::chrono::nanoseconds(99'999'999s));  // 8 digits, the most
  EXPECT_EQ(parse_timeout("00000020m"), std::chrono::nanoseconds(20ms));
}

TEST(GrpcTimeout, AnythingElseIsNoDeadline) {
  for (const char* bad : {"", "m", "20", "20x", "-1S", "2 0m", "20mm", "+5S", "0m", "00000000S", "123456789S", "1.5S",
                          "20M ", " 20m", "20\xffm"}) {
    EXPECT_EQ(parse_timeout(bad), std::nullopt) << '"' << bad << '"';
  }
}

TEST(GrpcMessage, PrintableBytesPassAndEveryOtherIsPercentEncoded) {
  EXPECT_EQ(percent_encode("tollgated is shutting down"), "tollgated is shutting down");
  EXPECT_EQ(percent_encode("100%"), "100%25");
  EXPECT_EQ(percent_encode("caf\xc3\xa9"), "caf%C3%A9");
  EXPECT_EQ(percent_encode(std::string("a\nb\0c\x7f", 6)), "a%0Ab%00c%7F");
  EXPECT_EQ(percent_encode(" ~"), " ~");
}

TEST(GrpcMethod, PathsAreExactAndCaseSensitive) {
  EXPECT_EQ(method_of("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"), Method::kShouldRateLimit);
  EXPECT_EQ(method_of("/grpc.health.v1.Health/Check"), Method::kHealthCheck);
  EXPECT_EQ(method_of("/grpc.health.v1.Health/Watch"), Method::kHealthWatch);
  EXPECT_EQ(method_of("/envoy.service.ratelimit.v3.RateLimitService/shouldratelimit"), Method::kUnknown);
  EXPECT_EQ(method_of("/envoy.service.ratelimit.v2.RateLimitService/ShouldRateLimit"), Method::kUnknown);
  EXPECT_EQ(method_of(""), Method::kUnknown);
}

// What Envoy's gRPC client sends for the rate limit filter (docs/rls-h2-plan.md section 1).
RequestHeaders envoys(size_t cap = 16384) {
  RequestHeaders h(cap);
  for (const auto& [name, value] : {std::pair{":method", "POST"},
                                    {":scheme", "http"},
                                    {":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
                                    {":authority", "ratelimit"},
                                    {"te", "trailers"},
                                    {"grpc-timeout", "20m"},
                                    {"content-type", "application/grpc"},
                                    {"x-envoy-internal", "true"}}) {
    EXPECT_TRUE(h.add(name, value));
  }
  return h;
}

TEST(GrpcRequestHeaders, EnvoysRequestIsServedWithItsDeadline) {
  const RequestHeaders h = envoys();
  EXPECT_EQ(h.refusal(), std::nullopt);
  EXPECT_EQ(h.method(), Method::kShouldRateLimit);
  EXPECT_EQ(h.timeout(), std::chrono::nanoseconds(20ms));
  EXPECT_FALSE(h.timeout_malformed());
  EXPECT_FALSE(h.compressed_encoding());
}

TEST(GrpcRequestHeaders, ContentTypeMustBeGrpcWithOrWithoutASubtype) {
  for (const char* ok : {"application/grpc", "application/grpc+proto", "application/grpc;charset=utf-8"}) {
    RequestHeaders h = envoys();
    h.add("content-type", ok);
    EXPECT_EQ(h.refusal(), std::nullopt) << ok;
  }
  for (const char* bad : {"application/grpc-web", "application/json", "application/grpcx", "text/plain", ""}) {
    RequestHeaders h = envoys();
    h.add("content-type", bad);
    ASSERT_TRUE(h.refusal()) << bad;
    EXPECT_EQ(h.refusal()->http_status, 415) << bad;
  }
  RequestHeaders none(16384);
  none.add(":method", "POST");
  none.add(":path", "/grpc.health.v1.Health/Check");
  ASSERT_TRUE(none.refusal());
  EXPECT_EQ(none.refusal()->http_status, 415);
}

TEST(GrpcRequestHeaders, OtherMethodsPathsAndEncodingsAreTold) {
  RequestHeaders get = envoys();
  get.add(":method", "GET");
  ASSERT_TRUE(get.refusal());
  EXPECT_EQ(get.refusal()->http_status, 405);

  RequestHeaders unknown = envoys();
  unknown.add(":path", "/envoy.service.ratelimit.v3.RateLimitService/Other");
  ASSERT_TRUE(unknown.refusal());
  EXPECT_EQ(unknown.refusal()->code, Code::kUnimplemented);
  EXPECT_EQ(unknown.refusal()->http_status, 200);

  RequestHeaders gzip = envoys();
  gzip.add("grpc-encoding", "gzip");
  EXPECT_TRUE(gzip.compressed_encoding());
  EXPECT_EQ(gzip.refusal(), std::nullopt);  // refused only if a message is compressed
  gzip.add("grpc-encoding", "identity");
  EXPECT_FALSE(gzip.compressed_encoding());

  RequestHeaders odd = envoys();
  odd.add("grpc-timeout", "soon");
  EXPECT_EQ(odd.timeout(), std::nullopt);
  EXPECT_TRUE(odd.timeout_malformed());
  EXPECT_EQ(odd.refusal(), std::nullopt);  // served, without a deadline, as gRPC and Envoy do
}

TEST(GrpcRequestHeaders, TheListIsCountedAsHttp2CountsItAndCappedThere) {
  RequestHeaders h(100);
  EXPECT_TRUE(h.add(":method", "POST"));  // 7 + 4 + 32
  EXPECT_EQ(h.list_bytes(), 43u);
  EXPECT_FALSE(h.add("content-type", "application/grpc"));  // 12 + 16 + 32: 103 > 100
  EXPECT_EQ(h.list_bytes(), 103u);
  EXPECT_TRUE(h.over_cap());
  EXPECT_FALSE(h.add("x", "y"));
  ASSERT_TRUE(h.refusal());
  EXPECT_EQ(h.refusal()->code, Code::kResourceExhausted);
}

TEST(GrpcMessageReader, OneMessageSplitAtEveryByteComesOutWhole) {
  std::string proto(300, '\0');  // over 255 bytes: the length's second byte counts
  for (size_t i = 0; i < proto.size(); ++i) proto[i] = char(i * 7);
  const std::string framed = frame_message(proto);
  ASSERT_EQ(framed.size(), 305u);
  EXPECT_EQ(framed.substr(0, 5), std::string("\0\0\0\x01\x2c", 5));
  for (size_t cut = 0; cut <= framed.size(); ++cut) {
    MessageReader r(1024, false);
    EXPECT_EQ(r.feed(std::string_view(framed).substr(0, cut)), std::nullopt) << cut;
    EXPECT_EQ(r.feed(std::string_view(framed).substr(cut)), std::nullopt) << cut;
    EXPECT_EQ(r.finish(), std::nullopt) << cut;
    EXPECT_EQ(r.message(), proto) << cut;
  }
  MessageReader bytewise(1024, false);
  for (const char c : framed) ASSERT_EQ(bytewise.feed(std::string_view(&c, 1)), std::nullopt);
  EXPECT_EQ(bytewise.finish(), std::nullopt);
  EXPECT_EQ(bytewise.message(), proto);
}

TEST(GrpcMessageReader, AnEmptyMessageIsAMessage) {
  MessageReader r(1024, false);
  EXPECT_EQ(r.feed(frame_message("")), std::nullopt);
  EXPECT_EQ(r.finish(), std::nullopt);
  EXPECT_EQ(r.message(), "");
}

TEST(GrpcMessageReader, AMessageOverTheCapIsRefusedFromItsPrefixAlone) {
  MessageReader at(64, false);
  EXPECT_EQ(at.feed(frame_message(std::string(64, 'x'))), std::nullopt);
  EXPECT_EQ(at.finish(), std::nullopt);

  MessageReader over(64, false);
  const std::optional<Refusal> r = over.feed(std::string("\0\0\0\0\x41", 5));  // 65 announced, none sent
  ASSERT_TRUE(r);
  EXPECT_EQ(r->code, Code::kResourceExhausted);
  EXPECT_EQ(over.feed(std::string(65, 'x')), r);  // refused it stays, and nothing more is kept
  EXPECT_EQ(over.finish(), r);

  MessageReader huge(64 * 1024, false);
  ASSERT_TRUE(huge.feed(std::string("\0\xff\xff\xff\xff", 5)));  // 4 GiB announced
}

TEST(GrpcMessageReader, CardinalityCompressionAndTruncationAreRefused) {
  MessageReader none(64, false);
  ASSERT_TRUE(none.finish());
  EXPECT_EQ(none.finish()->code, Code::kUnimplemented);

  MessageReader two(64, false);
  EXPECT_EQ(two.feed(frame_message("a")), std::nullopt);
  const std::optional<Refusal> second = two.feed(std::string_view("\0", 1));
  ASSERT_TRUE(second);
  EXPECT_EQ(second->code, Code::kUnimplemented);
  EXPECT_EQ(two.finish(), second);

  MessageReader joined(64, false);
  ASSERT_TRUE(joined.feed(frame_message("a") + frame_message("b")));

  MessageReader flag_alone(64, false);
  const std::optional<Refusal> internal = flag_alone.feed(std::string("\x01\0\0\0\x01x", 6));
  ASSERT_TRUE(internal);
  EXPECT_EQ(internal->code, Code::kInternal);

  MessageReader gzip(64, true);
  const std::optional<Refusal> unimplemented = gzip.feed(std::string("\x01\0\0\0\x01x", 6));
  ASSERT_TRUE(unimplemented);
  EXPECT_EQ(unimplemented->code, Code::kUnimplemented);

  MessageReader gzip_plain(64, true);  // an encoding named but this message sent plain: fine
  EXPECT_EQ(gzip_plain.feed(frame_message("x")), std::nullopt);
  EXPECT_EQ(gzip_plain.finish(), std::nullopt);

  MessageReader bad_flag(64, false);
  ASSERT_TRUE(bad_flag.feed(std::string("\x02\0\0\0\x01x", 6)));
  EXPECT_EQ(bad_flag.finish()->code, Code::kInternal);

  for (const std::string& part : {std::string("\0\0", 2), std::string("\0\0\0\0\x03xy", 7)}) {
    MessageReader cut(64, false);
    EXPECT_EQ(cut.feed(part), std::nullopt);
    ASSERT_TRUE(cut.finish());
    EXPECT_EQ(cut.finish()->code, Code::kInternal);
  }
}

}  // namespace
}  // namespace tollgate::rls::wire
