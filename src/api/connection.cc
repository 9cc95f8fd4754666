#include "api/connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

namespace tollgate::api {

namespace asio = boost::asio;

Connection::Connection(std::shared_ptr<ConnectionHost> host, Socket socket, std::string peer)
    : host_(std::move(host)),
      socket_(std::move(socket)),
      decoder_(host_->dispatch().max_frame_bytes()),
      frame_timer_(host_->io()),
      peer_(std::move(peer)) {}

void Connection::drain() {
  if (closed_) return;
  draining_ = true;
  frame_timer_.cancel();
  if (sliced_) return;  // continue_slice() finishes, then answers the rest and closes
  process_frames();     // answers the whole frames read, then closes once they are written
}

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  pending_out_.clear();
  pending_out_.shrink_to_fit();
  host_->output_changed(reported_output_, 0);  // writing_ goes with the failing write
  reported_output_ = 0;
  frame_timer_.cancel();
  boost::system::error_code ignored;
  socket_.shutdown(Socket::shutdown_both, ignored);
  socket_.close(ignored);
  host_->connection_closed(this);
}

bool Connection::room_to_answer() {
  if (output_bytes() >= host_->max_pending_output_bytes()) return false;  // on_write comes back
  report_output();  // the answers just added count against the budget at once
  if (host_->output_room()) return true;
  if (!waiting_for_room_) {
    waiting_for_room_ = true;
    host_->wait_for_output_room(shared_from_this());
  }
  return false;
}

void Connection::resume() {
  waiting_for_room_ = false;
  if (closed_) return;
  if (sliced_) {
    if (slice_held_) {
      slice_held_ = false;
      continue_slice();
    }
    return;
  }
  process_frames();
}

void Connection::report_output() {
  const size_t now = output_bytes();
  if (now == reported_output_) return;
  host_->output_changed(reported_output_, now);
  reported_output_ = now;
}

void Connection::read() {
  if (reading_ || closed_ || close_after_flush_ || draining_ || sliced_) return;
  if (!room_to_answer()) return;  // resumed by on_write or resume()
  reading_ = true;
  socket_.async_read_some(asio::buffer(read_buffer_), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                                  size_t n) { self->on_read(ec, n); });
}

void Connection::on_read(const boost::system::error_code& ec, size_t n) {
  reading_ = false;
  if (closed_) return;
  if (ec == asio::error::eof && !host_->stopped()) {
    // The client has finished sending (it may have half-closed): answer what it sent, then close.
    close_after_flush_ = true;
    flush();
    return;
  }
  if (ec || host_->stopped()) {
    close();  // reset, or the server is stopping: nothing more to answer
    return;
  }
  last_active_ = std::chrono::steady_clock::now();
  decoder_.append(std::string_view(read_buffer_.data(), n));
  process_frames();
}

void Connection::process_frames() {
  std::string_view payload;
  Dispatch& dispatch = host_->dispatch();
  // Stops once the answers waiting for the client reach the output cap, even with whole frames
  // still buffered: a client that pipelines requests and never reads cannot make the daemon hold
  // more than the cap plus one answer. on_write() comes back here as the client takes them.
  bool held = false;  // by the output cap or the server's budget
  while (!close_after_flush_ && !sliced_ && !(held = !room_to_answer())) {
    const FrameReader::Status status = decoder_.next(&payload);
    if (status == FrameReader::Status::kNeedMore) break;
    if (status == FrameReader::Status::kTooLarge) {
      dispatch.answer_too_large(decoder_.rejected_length(), pending_out_);
      host_->offense(peer_, "request frame of " + std::to_string(decoder_.rejected_length()) +
                                " bytes exceeds the limit; connection closed");
      close_after_flush_ = true;
      break;
    }
    partial_since_.reset();  // a whole frame: the next one's clock starts with its first byte
    if (dispatch.answer(payload, pending_out_, &sliced_) == Dispatch::Outcome::kClose) {
      host_->offense(peer_, "malformed request frame; connection closed");
      close_after_flush_ = true;
    }
  }
  if (sliced_) {
    flush();  // the answers before the batch need not wait for it
    asio::post(host_->io(), [self = shared_from_this()] { self->continue_slice(); });
    return;
  }
  if (!close_after_flush_ && held) {
    // Held back by the output cap or budget: whole frames may be waiting, so this is no half frame.
    // A client that never takes its answers is closed by the server's write-stall sweep.
    partial_since_.reset();
    frame_timer_.cancel();
    flush();
    return;
  }
  if (draining_) close_after_flush_ = true;
  watch_partial_frame();
  flush();
  read();
}

void Connection::continue_slice() {
  if (closed_ || !sliced_) return;
  if (!room_to_answer()) {  // a slow reader's batch waits for it, as its other requests do
    slice_held_ = true;
    flush();
    return;
  }
  host_->before_slice();
  if (!host_->dispatch().answer_slice(*sliced_, pending_out_)) {
    asio::post(host_->io(), [self = shared_from_this()] { self->continue_slice(); });
    return;
  }
  sliced_.reset();
  process_frames();
}

void Connection::watch_partial_frame() {
  if (close_after_flush_ || decoder_.buffered() == 0) {
    partial_since_.reset();
    frame_timer_.cancel();
    return;
  }
  if (partial_since_) return;  // already counting down for this frame
  partial_since_ = std::chrono::steady_clock::now();
  frame_timer_.expires_after(host_->frame_timeout());
  frame_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec || self->closed_ || !self->partial_since_) return;
    self->host_->frame_timed_out();
    self->host_->offense(self->peer_,
                         "sent part of a request frame and then nothing within the frame timeout; connection closed");
    self->close();
  });
}

void Connection::flush() {
  report_output();
  if (writing_in_flight_ || closed_) return;
  if (pending_out_.empty()) {
    if (close_after_flush_) close();
    return;
  }
  writing_.swap(pending_out_);
  writing_in_flight_ = true;
  write_started_ = std::chrono::steady_clock::now();
  // Asio writes at once when the socket can take it (a speculative write): the reader has been
  // woken by the time async_write returns.
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](const boost::system::error_code& ec, size_t) { self->on_write(ec); });
  host_->answered();
}

void Connection::on_write(const boost::system::error_code& ec) {
  writing_in_flight_ = false;
  writing_.clear();
  // An idle connection keeps no more than a small buffer: 1,024 of them once held 1 MiB each.
  if (writing_.capacity() > kKeepOutputCapacity) std::string().swap(writing_);
  if (closed_) return;
  if (ec) {
    close();
    return;
  }
  last_active_ = std::chrono::steady_clock::now();
  flush();
  if (sliced_) {
    if (slice_held_) {  // held by the output cap: the client took answers, so the batch goes on
      slice_held_ = false;
      continue_slice();
    }
    return;  // otherwise continue_slice() goes on by itself
  }
  process_frames();  // frames held back by the output cap, then reading resumes
}

}  // namespace tollgate::api
