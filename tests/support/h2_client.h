#ifndef TOLLGATE_TESTS_SUPPORT_H2_CLIENT_H_
#define TOLLGATE_TESTS_SUPPORT_H2_CLIENT_H_

// An HTTP/2 client in memory, on libnghttp2's client session: the peer of the rate limit
// service's own HTTP/2 session (src/rls/h2_session.h) in its tests, and the writer of its fuzz
// seeds. It sends what Envoy's gRPC client sends for a unary call; a call can also be held after
// its HEADERS and reset, as an attacker does. Link PkgConfig::NGHTTP2 to use it.

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tollgate::testing {

inline nghttp2_nv nv(std::string_view name, std::string_view value) {
  return {(uint8_t*)name.data(), (uint8_t*)value.data(), name.size(), value.size(), NGHTTP2_NV_FLAG_NONE};
}

// A client as Envoy's gRPC client behaves: headers, one DATA with the message and END_STREAM.
class H2Client {
 public:
  struct Response {
    std::map<std::string, std::string> headers, trailers;
    std::string data;
    bool closed = false;
    uint32_t close_code = 0;
  };

  H2Client() {
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, &H2Client::on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &H2Client::on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, &H2Client::on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &H2Client::on_frame);
    nghttp2_session_client_new(&session_, cb, this);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~H2Client() { nghttp2_session_del(session_); }

  // A request; `body` is sent whole with END_STREAM, or never (`hold`: HEADERS only, for resets).
  int32_t call(std::string_view path, std::string body, bool hold = false,
               std::vector<std::pair<std::string, std::string>> extra = {}) {
    std::vector<nghttp2_nv> fields = {nv(":method", "POST"), nv(":scheme", "http"),
                                      nv(":path", path),     nv(":authority", "ratelimit"),
                                      nv("te", "trailers"),  nv("content-type", "application/grpc")};
    for (const auto& [k, v] : extra) fields.push_back(nv(k, v));
    bodies_.push_back({std::move(body), 0, hold});
    nghttp2_data_provider provider{};
    provider.source.ptr = &bodies_.back();
    provider.read_callback = &H2Client::read_body;
    return nghttp2_submit_request(session_, nullptr, fields.data(), fields.size(), &provider, nullptr);
  }
  // A request whose `body` is sent without END_STREAM: a message begun and never finished.
  int32_t call_unfinished(std::string_view path, std::string body) {
    const int32_t id = call(path, std::move(body));
    bodies_.back().unfinished = true;
    return id;
  }
  void reset(int32_t stream) { nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, NGHTTP2_CANCEL); }

  std::string output() {
    std::string out;
    for (;;) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n <= 0) return out;
      out.append((const char*)data, size_t(n));
    }
  }
  void input(const std::string& bytes) {
    if (nghttp2_session_mem_recv(session_, (const uint8_t*)bytes.data(), bytes.size()) < 0) failed = true;
  }

  std::map<int32_t, Response> responses;
  bool goaway = false;
  bool failed = false;  // the server sent what an nghttp2 client refuses
  uint32_t goaway_code = 0;

 private:
  struct Body {
    std::string bytes;
    size_t sent;
    bool hold;
    bool unfinished = false;
  };
  static ssize_t read_body(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                           nghttp2_data_source* source, void*) {
    auto* b = static_cast<Body*>(source->ptr);
    if (b->hold || (b->unfinished && b->sent == b->bytes.size())) return NGHTTP2_ERR_DEFERRED;
    const size_t n = std::min(length, b->bytes.size() - b->sent);
    std::memcpy(buf, b->bytes.data() + b->sent, n);
    b->sent += n;
    if (b->sent == b->bytes.size() && !b->unfinished) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return ssize_t(n);
  }
  static int on_header(nghttp2_session*, const nghttp2_frame* f, const uint8_t* name, size_t namelen,
                       const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    Response& r = static_cast<H2Client*>(user)->responses[f->hd.stream_id];
    auto& into = f->headers.cat == NGHTTP2_HCAT_HEADERS && !r.headers.empty() ? r.trailers : r.headers;
    into[std::string((const char*)name, namelen)] = std::string((const char*)value, valuelen);
    return 0;
  }
  static int on_data(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len, void* user) {
    static_cast<H2Client*>(user)->responses[id].data.append((const char*)data, len);
    return 0;
  }
  static int on_close(nghttp2_session*, int32_t id, uint32_t code, void* user) {
    Response& r = static_cast<H2Client*>(user)->responses[id];
    r.closed = true;
    r.close_code = code;
    return 0;
  }
  static int on_frame(nghttp2_session*, const nghttp2_frame* f, void* user) {
    if (f->hd.type == NGHTTP2_GOAWAY) {
      static_cast<H2Client*>(user)->goaway = true;
      static_cast<H2Client*>(user)->goaway_code = f->goaway.error_code;
    }
    return 0;
  }

  nghttp2_session* session_ = nullptr;
  std::deque<Body> bodies_;  // stable addresses for the providers
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_H2_CLIENT_H_
