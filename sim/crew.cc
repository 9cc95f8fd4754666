#include "crew.h"

#include <algorithm>
#include <utility>

namespace tollgate::sim {

namespace {

// Waits until `a` differs from `old`: a short spin (the next window usually starts within
// microseconds), then a futex wait so an idle member costs nothing.
void await_change(const std::atomic<uint32_t>& a, uint32_t old) {
  for (int spin = 0; spin < 2000; ++spin) {
    if (a.load(std::memory_order_acquire) != old) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  while (a.load(std::memory_order_acquire) == old) a.wait(old, std::memory_order_acquire);
}

}  // namespace

Crew::Crew(unsigned size, std::function<void(unsigned)> job) : job_(std::move(job)), failed_(std::max(1u, size)) {
  for (unsigned i = 1; i < size; ++i) threads_.emplace_back([this, i] { member(i); });
}

Crew::~Crew() {
  stopping_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Crew::run() {
  if (threads_.empty()) {
    job_(0);
    return;
  }
  pending_.store(uint32_t(threads_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  try {
    job_(0);
  } catch (...) {
    failed_[0] = std::current_exception();
  }
  // Whatever happened, the others are still using what the caller owns: wait for them.
  for (uint32_t left; (left = pending_.load(std::memory_order_acquire)) != 0;) await_change(pending_, left);
  for (std::exception_ptr& e : failed_) {
    if (e) std::rethrow_exception(std::exchange(e, nullptr));
  }
}

void Crew::member(unsigned index) {
  uint32_t seen = 0;
  for (;;) {
    await_change(generation_, seen);
    seen = generation_.load(std::memory_order_acquire);
    if (stopping_) return;
    try {
      job_(index);
    } catch (...) {
      failed_[index] = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace tollgate::sim
