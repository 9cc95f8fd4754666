// One accepted client API connection: reads frames, has the dispatch answer each, and writes the
// answers back in request order. A large check batch is answered a slice at a time, the
// connection reading nothing meanwhile; a connection whose unwritten answers exceed the output
// cap stops answering (even frames already read) and reading until they drain; a frame that
// does not complete within the frame timeout closes it. The server sweeps for connections idle
// too long or whose answers the client does not take (idle_since(), write_stalled_since()). Runs on the server's
// io_context; owned by the server's connection set and by its own in-flight handlers.
#ifndef TOLLGATE_SRC_API_CONNECTION_H_
#define TOLLGATE_SRC_API_CONNECTION_H_

#include <array>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/dispatch.h"
#include "api/framing.h"

namespace tollgate::api {

class Connection;

// What a connection asks of the server that owns it.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  virtual boost::asio::io_context& io() = 0;
  virtual Dispatch& dispatch() = 0;
  virtual bool stopped() const = 0;
  virtual size_t max_pending_output_bytes() const = 0;
  // Room under the server's budget for all its connections' answers (max_output_bytes). Without
  // it a connection answers nothing more and calls wait_for_output_room(); the server calls its
  // resume() once the answers held in all have fallen below the budget.
  virtual bool output_room() const = 0;
  virtual void wait_for_output_room(std::shared_ptr<Connection> connection) = 0;
  virtual std::chrono::milliseconds frame_timeout() const = 0;
  // Before each slice of a large batch (ApiServerOptions::yield_after_answer_when_busy).
  virtual void before_slice() = 0;
  // Answers were handed to the socket.
  virtual void answered() = 0;
  // A connection's answers not yet taken by its client went from `before` to `after` bytes (for
  // the server's total and the high-water mark).
  virtual void output_changed(size_t before, size_t after) = 0;
  virtual void frame_timed_out() = 0;
  virtual void offense(std::string_view peer, std::string_view what) = 0;
  // The connection closed; the caller still holds a reference to it.
  virtual void connection_closed(Connection* connection) = 0;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;
  Connection(std::shared_ptr<ConnectionHost> host, Socket socket, std::string peer);

  using TimePoint = std::chrono::steady_clock::time_point;

  void start() {
    last_active_ = std::chrono::steady_clock::now();
    read();
  }
  // Answers what has been read, then closes (the graceful stop). A batch being answered in
  // slices is finished first, and so are the whole requests read behind it.
  void drain();
  // Closes the socket at once; pending answers are dropped. Idempotent.
  void close();
  // The server's answer budget has room again (after wait_for_output_room).
  void resume();

  // Nothing half read, unanswered or unwritten: closing it now loses nothing the client sent.
  bool idle() const { return !closed_ && decoder_.buffered() == 0 && output_bytes() == 0 && !sliced_; }
  // When a byte last arrived or an answer was last taken by the client (or the connection began).
  TimePoint last_active() const { return last_active_; }
  // Since when a write has been waiting for the client to take it; nullopt if none is.
  std::optional<TimePoint> write_stalled_since() const {
    return writing_in_flight_ ? std::optional<TimePoint>(write_started_) : std::nullopt;
  }
  // Who the client is ("pid 4242 (uid 1000)", "127.0.0.1"), and the group its connections are
  // counted in for the per-client cap ("uid 1000", "tcp 127.0.0.1").
  const std::string& peer() const { return peer_; }

 private:
  size_t output_bytes() const { return pending_out_.size() + writing_.size(); }
  void read();
  void on_read(const boost::system::error_code& ec, size_t n);
  // Answers the whole frames buffered, in order, until one is a large check batch (answered in
  // slices by continue_slice(), which comes back here) or a protocol error ends the connection.
  void process_frames();
  void continue_slice();
  // Arms the frame deadline when part of a frame is buffered, and disarms it when none is.
  void watch_partial_frame();
  void flush();
  void on_write(const boost::system::error_code& ec);
  // May another request be answered? No when this connection's answers reach the output cap (its
  // on_write comes back) or the server's budget is spent (registered for resume()).
  bool room_to_answer();
  void report_output();  // tells the server output_bytes() changed since last told

  // Bytes read from a socket at a time. Requests are small (a one-check request is ~20 bytes),
  // so one read usually carries many pipelined requests.
  static constexpr size_t kReadChunkBytes = 16 * 1024;

 public:
  // Capacity an answer buffer keeps once written; a larger one is freed.
  static constexpr size_t kKeepOutputCapacity = 16 * 1024;

 private:
  std::shared_ptr<ConnectionHost> host_;
  Socket socket_;
  FrameReader decoder_;
  std::array<char, kReadChunkBytes> read_buffer_{};
  std::string pending_out_;        // framed responses not yet handed to a write
  std::string writing_;            // the buffer of the write in flight
  size_t reported_output_ = 0;     // output_bytes() as the server last heard it
  bool waiting_for_room_ = false;  // registered with the server (wait_for_output_room)
  bool slice_held_ = false;        // a slice waits for room to answer (on_write or resume() goes on)
  bool reading_ = false;
  bool writing_in_flight_ = false;
  bool close_after_flush_ = false;  // a protocol error: answer it, then close
  bool closed_ = false;
  boost::asio::steady_timer frame_timer_;
  std::optional<std::chrono::steady_clock::time_point> partial_since_;  // a frame has begun
  std::unique_ptr<SlicedBatch> sliced_;  // a large check batch being answered (no reading meanwhile)
  bool draining_ = false;                // drain(): answer what has been read, read no more
  std::string peer_;                     // who the client is, for offense reports
  TimePoint last_active_{};
  TimePoint write_started_{};
};

}  // namespace tollgate::api

#endif  // TOLLGATE_SRC_API_CONNECTION_H_
