#include "rls/h2_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

namespace tollgate::rls {
namespace {

nghttp2_nv field(std::string_view name, std::string_view value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(), NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

struct H2Session::Impl {
  struct Stream {
    explicit Stream(const H2SessionOptions& o, int64_t now) : headers(o.max_header_list_bytes), opened_ns(now) {}
    wire::RequestHeaders headers;
    std::optional<wire::MessageReader> body;  // once the headers are whole and acceptable
    size_t buffered = 0;                      // its bytes counted against the caps
    int64_t opened_ns;
    bool answered = false;  // our response headers submitted
    bool in_call = false;   // handed out, its answer not yet given
    bool closed = false;
    std::string response;  // the framed message(s) being sent
    size_t sent = 0;
    // open_stream(): messages until end(), then trailers with end_code.
    bool streaming = false, ending = false, deferred = false;
    wire::Code end_code = wire::Code::kOk;
    std::string end_message;
  };

  explicit Impl(H2SessionOptions o) : options(o), budget(o.budget) {
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &Impl::on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, &Impl::on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &Impl::on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &Impl::on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, &Impl::on_close);
    nghttp2_option* opt = nullptr;
    nghttp2_option_new(&opt);
    nghttp2_option_set_stream_reset_rate_limit(opt, o.reset_burst, o.resets_per_second);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_session_server_new2(&session, cb, this, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    const nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, o.max_concurrent_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, uint32_t(o.max_header_list_bytes)},
    };
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, 2);
  }
  ~Impl() {
    nghttp2_session_del(session);
    if (options.shared_buffered) *options.shared_buffered -= int64_t(buffered);
  }

  // A stream's request bytes no longer held.
  void release(Stream& s) {
    buffered -= s.buffered;
    if (options.shared_buffered) *options.shared_buffered -= int64_t(s.buffered);
    s.buffered = 0;
    s.body.reset();
  }
  void erase(int32_t id) {
    if (Stream* s = stream_of(id)) release(*s);
    streams.erase(id);
  }
  // Counts `len` more bytes for `s`; false (nothing counted) when a cap would be passed.
  bool hold(Stream& s, size_t len) {
    if (buffered + len > options.max_buffered_bytes) return false;
    if (options.shared_buffered) {
      if (options.shared_buffered->fetch_add(int64_t(len)) + int64_t(len) > options.max_shared_buffered) {
        *options.shared_buffered -= int64_t(len);
        return false;
      }
    }
    buffered += len;
    s.buffered += len;
    return true;
  }

  Stream* stream_of(int32_t id) {
    auto it = streams.find(id);
    return it == streams.end() ? nullptr : &it->second;
  }

  // Trailers-only: the status in the one HEADERS frame that ends the stream.
  void refuse(int32_t id, Stream& s, const wire::Refusal& r, bool before_call = true) {
    if (s.answered) return;
    s.answered = true;
    if (before_call) ++stats.refused;
    const std::string http = std::to_string(r.http_status), status = std::to_string(int(r.code)),
                      message = wire::percent_encode(r.message);
    const nghttp2_nv nv[] = {field(":status", http), field("content-type", "application/grpc"),
                             field("grpc-status", status), field("grpc-message", message)};
    nghttp2_submit_response(session, id, nv, 4, nullptr);  // copies the fields
  }

  void respond(int32_t id, Stream& s, std::string_view proto) {
    s.answered = true;
    s.response = wire::frame_message(proto);
    const nghttp2_nv nv[] = {field(":status", "200"), field("content-type", "application/grpc")};
    nghttp2_data_provider provider{};
    provider.read_callback = &Impl::read_response;
    nghttp2_submit_response(session, id, nv, 2, &provider);
  }

  // A call taken is answered by `send` (unless its stream has closed meanwhile): its work has
  // ended (R4), and a closed stream is forgotten.
  template <typename Send>
  void end_call(int32_t id, int64_t now_ns, Send&& send) {
    now = now_ns;
    Stream* s = stream_of(id);
    if (!s || !s->in_call) return;
    if (s->closed) {
      ++stats.answered_late;
    } else {
      send(*s);
    }
    s->in_call = false;
    budget.done();
    if (s->closed) erase(id);
  }

  static ssize_t read_response(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length, uint32_t* flags,
                               nghttp2_data_source*, void* user) {
    Stream* s = static_cast<Impl*>(user)->stream_of(id);
    if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    const size_t n = std::min(length, s->response.size() - s->sent);
    std::memcpy(buf, s->response.data() + s->sent, n);
    s->sent += n;
    if (s->sent < s->response.size()) return ssize_t(n);
    if (!s->streaming) {
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const nghttp2_nv trailers[] = {field("grpc-status", "0")};  // an answer is OK; failures are trailers-only
      nghttp2_submit_trailer(session, id, trailers, 1);
    } else if (s->ending) {
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const std::string status = std::to_string(int(s->end_code)), message = wire::percent_encode(s->end_message);
      const nghttp2_nv trailers[] = {field("grpc-status", status), field("grpc-message", message)};
      nghttp2_submit_trailer(session, id, trailers, s->end_message.empty() ? 1 : 2);  // copies the fields
    } else if (n == 0) {
      s->deferred = true;  // until push() or end()
      return NGHTTP2_ERR_DEFERRED;
    }
    return ssize_t(n);
  }

  // push() and end(): the data provider is woken if it was waiting.
  void wake(int32_t id, Stream& s) {
    if (!s.deferred) return;
    s.deferred = false;
    nghttp2_session_resume_data(session, id);
  }

  static int on_begin_headers(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    auto* self = static_cast<Impl*>(user);
    if (!self->budget.open()) {  // R4: work in flight at its cap
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
      return 0;
    }
    self->streams.try_emplace(frame->hd.stream_id, self->options, self->now);
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                       const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    Stream* s = static_cast<Impl*>(user)->stream_of(frame->hd.stream_id);
    if (!s || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;  // trailers from a client: ignored
    s->headers.add({reinterpret_cast<const char*>(name), namelen}, {reinterpret_cast<const char*>(value), valuelen});
    return 0;
  }

  static int on_data(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len, void* user) {
    auto* self = static_cast<Impl*>(user);
    Stream* s = self->stream_of(id);
    if (!s || !s->body || s->answered) return 0;
    if (!self->hold(*s, len)) {
      ++self->stats.over_buffer;
      self->refuse(id, *s, {wire::Code::kResourceExhausted, "too many request bytes held at once", 200});
      self->release(*s);
      return 0;
    }
    if (auto r = s->body->feed({reinterpret_cast<const char*>(data), len})) {
      self->refuse(id, *s, *r);
      self->release(*s);
    }
    return 0;
  }

  static int on_frame(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto* self = static_cast<Impl*>(user);
    const int32_t id = frame->hd.stream_id;
    Stream* s = self->stream_of(id);
    if (!s) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      if (s->headers.timeout_malformed()) ++self->stats.malformed_timeouts;
      if (auto r = s->headers.refusal()) {
        self->refuse(id, *s, *r);
        return 0;
      }
      s->body.emplace(self->options.max_message_bytes, s->headers.compressed_encoding());
    }
    const bool ends = (frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
                      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM);
    if (!ends || s->answered || !s->body) return 0;
    if (auto r = s->body->finish()) {
      self->refuse(id, *s, *r);
      self->release(*s);
      return 0;
    }
    s->in_call = true;
    ++self->stats.calls;
    self->calls.push_back(
        {id, s->headers.method(), std::string(s->body->message()), s->headers.timeout(), s->opened_ns});
    self->release(*s);  // the call has its message now
    return 0;
  }

  static int on_close(nghttp2_session* session, int32_t id, uint32_t, void* user) {
    auto* self = static_cast<Impl*>(user);
    Stream* s = self->stream_of(id);
    if (!s) return 0;  // refused at its start: never counted
    if (self->budget.close(s->opened_ns, self->now, s->answered) && !self->goaway) {
      self->goaway = true;  // R2: half of a window's streams closed prematurely
      nghttp2_submit_goaway(session, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session),
                            NGHTTP2_ENHANCE_YOUR_CALM, nullptr, 0);
    }
    if (s->in_call && s->streaming) {  // a server-streaming answer ends with its stream
      self->budget.done();
      self->erase(id);
      return 0;
    }
    if (s->in_call) {
      auto waiting =
          std::find_if(self->calls.begin(), self->calls.end(), [&](const H2Call& c) { return c.stream == id; });
      if (waiting == self->calls.end()) {
        s->closed = true;  // taken: its work goes on, counted until answered (R4)
        return 0;
      }
      self->calls.erase(waiting);  // not taken yet: never handed out
      --self->stats.calls;
    }
    self->budget.done();
    self->erase(id);
    return 0;
  }

  H2SessionOptions options;
  size_t buffered = 0;  // request bytes held, all streams
  ResetBudget budget;
  H2SessionStats stats;
  nghttp2_session* session = nullptr;
  std::unordered_map<int32_t, Stream> streams;  // node-based: references stay valid
  std::vector<H2Call> calls;
  int64_t now = 0;
  bool goaway = false;  // ENHANCE_YOUR_CALM (R2)
  bool graceful_goaway = false;
  bool fatal = false;
};

H2Session::H2Session(H2SessionOptions options) : impl_(std::make_unique<Impl>(options)) {}
H2Session::~H2Session() = default;

bool H2Session::receive(std::string_view bytes, int64_t now_ns) {
  impl_->now = now_ns;
  const ssize_t n =
      nghttp2_session_mem_recv(impl_->session, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (n < 0) impl_->fatal = true;
  return !impl_->fatal && !impl_->goaway;
}

std::vector<H2Call> H2Session::take_calls() { return std::exchange(impl_->calls, {}); }

void H2Session::answer(int32_t stream, std::string_view response, int64_t now_ns) {
  impl_->end_call(stream, now_ns, [&](Impl::Stream& s) { impl_->respond(stream, s, response); });
}

void H2Session::fail(int32_t stream, wire::Code code, std::string_view message, int64_t now_ns) {
  impl_->end_call(stream, now_ns, [&](Impl::Stream& s) { impl_->refuse(stream, s, {code, message, 200}, false); });
}

bool H2Session::open_stream(int32_t stream, std::string_view first, int64_t now_ns) {
  impl_->now = now_ns;
  Impl::Stream* s = impl_->stream_of(stream);
  if (!s || !s->in_call) return false;
  if (s->closed) {
    impl_->end_call(stream, now_ns, [](Impl::Stream&) {});  // counts it answered late, lets it go
    return false;
  }
  s->streaming = true;
  impl_->respond(stream, *s, first);
  return true;
}

void H2Session::push(int32_t stream, std::string_view message) {
  Impl::Stream* s = impl_->stream_of(stream);
  if (!s || !s->streaming || s->ending || s->closed) return;
  s->response.erase(0, s->sent);
  s->sent = 0;
  s->response += wire::frame_message(message);
  impl_->wake(stream, *s);
}

void H2Session::end(int32_t stream, wire::Code code, std::string_view message) {
  Impl::Stream* s = impl_->stream_of(stream);
  if (!s || !s->streaming || s->ending || s->closed) return;
  s->ending = true;
  s->end_code = code;
  s->end_message = std::string(message);
  impl_->wake(stream, *s);
}

bool H2Session::streaming(int32_t stream) const {
  const auto it = impl_->streams.find(stream);
  return it != impl_->streams.end() && it->second.streaming && !it->second.ending && !it->second.closed;
}

size_t H2Session::open_streams() const { return impl_->streams.size(); }
size_t H2Session::buffered_bytes() const { return impl_->buffered; }

void H2Session::ping() {
  if (!impl_->fatal) nghttp2_submit_ping(impl_->session, NGHTTP2_FLAG_NONE, nullptr);
}

void H2Session::goaway() {
  if (impl_->fatal || impl_->goaway || impl_->graceful_goaway) return;
  impl_->graceful_goaway = true;
  nghttp2_submit_goaway(impl_->session, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(impl_->session),
                        NGHTTP2_NO_ERROR, nullptr, 0);
}

void H2Session::take_output(std::string& out) {
  if (impl_->fatal) return;
  for (;;) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(impl_->session, &data);
    if (n < 0) {
      impl_->fatal = true;
      return;
    }
    if (n == 0) return;
    out.append(reinterpret_cast<const char*>(data), size_t(n));
  }
}

bool H2Session::finished() const {
  return impl_->fatal || (!nghttp2_session_want_read(impl_->session) && !nghttp2_session_want_write(impl_->session));
}

const H2SessionStats& H2Session::stats() const { return impl_->stats; }
const ResetBudget& H2Session::budget() const { return impl_->budget; }

}  // namespace tollgate::rls
