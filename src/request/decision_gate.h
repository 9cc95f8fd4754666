// Decisions made on a front end's own threads (the key table concurrent: --threads above 1, or
// a door that decides where it reads), and the node's stop(), which must know that no decision
// charges anything once it returns (the node seals what was charged right after).
//
// Dekker's handshake, both sides sequentially consistent: a decision counts itself in, then looks
// at the gate; close() shuts the gate, then waits for the count to drain. Either close() sees a
// decision under way and waits for it, or the decision sees the gate shut and is not made (the
// caller answers "unavailable", uncharged).
#ifndef TOLLGATE_SRC_REQUEST_DECISION_GATE_H_
#define TOLLGATE_SRC_REQUEST_DECISION_GATE_H_

#include <atomic>
#include <thread>

namespace tollgate::request {

class DecisionGate {
 public:
  // One decision under way for as long as it lives, however it ends (a throw included: close()
  // must not wait forever).
  class Pass {
   public:
    explicit Pass(DecisionGate& gate) : gate_(gate) {
      gate_.deciding_.fetch_add(1);
      open_ = !gate_.closed_.load();
    }
    ~Pass() { gate_.deciding_.fetch_sub(1); }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    // False once close() began: decide nothing.
    bool open() const { return open_; }

   private:
    DecisionGate& gate_;
    bool open_ = false;
  };

  // Returns once no decision is under way; every later Pass is shut. Idempotent.
  void close() {
    closed_.store(true);
    while (deciding_.load() != 0) std::this_thread::yield();
  }

 private:
  std::atomic<bool> closed_{false};
  std::atomic<int> deciding_{0};
};

}  // namespace tollgate::request

#endif  // TOLLGATE_SRC_REQUEST_DECISION_GATE_H_
