// The one way onto the node's thread for front ends with threads of their own (request/node_queue.h):
// bounded, turns of 16, a job past its deadline expired (never decided), one stop gate, and
// every job run exactly once, whatever goes first.
#include "request/node_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace tollgate::request {
namespace {

using Outcome = NodeQueue::Outcome;
constexpr auto kLater = std::chrono::hours(1);

struct Recorder {
  std::vector<Outcome> outcomes;
  std::vector<std::thread::id> threads;
  NodeQueue::Job job() {
    return [this](Outcome o) {
      outcomes.push_back(o);
      threads.push_back(std::this_thread::get_id());
    };
  }
};

TEST(NodeQueue, JobsRunOnTheNodesThreadInTurnsOfSixteen) {
  boost::asio::io_context io;
  Recorder r;
  NodeQueue q(io, 100);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater));
  EXPECT_EQ(q.pending(), 40u);
  EXPECT_TRUE(r.outcomes.empty());  // nothing runs on the submitter's thread
  io.run_one();
  EXPECT_EQ(r.outcomes.size(), 16u);  // one turn, then the node's other handlers get the thread
  io.run_one();
  EXPECT_EQ(r.outcomes.size(), 32u);
  io.run_one();
  EXPECT_EQ(r.outcomes.size(), 40u);
  EXPECT_EQ(io.poll(), 0u);  // no turn left posted
  for (Outcome o : r.outcomes) EXPECT_EQ(o, Outcome::kRun);
}

TEST(NodeQueue, BeyondItsCallsOrBytesSubmitRefusesAtOnce) {
  boost::asio::io_context io;
  Recorder r;
  NodeQueue q(io, 2, 100);
  EXPECT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater, 60));
  EXPECT_FALSE(q.submit(r.job(), NodeQueue::Clock::now() + kLater, 41));  // 101 bytes
  EXPECT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater, 40));
  EXPECT_FALSE(q.submit(r.job(), NodeQueue::Clock::now() + kLater, 0));  // a third call
  io.run();
  EXPECT_EQ(r.outcomes.size(), 2u);  // a refused job never runs
  // Room again once the node took them.
  EXPECT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater, 100));
}

TEST(NodeQueue, AJobWhoseDeadlinePassedWhileQueuedRunsExpired) {
  boost::asio::io_context io;
  Recorder r;
  NodeQueue q(io, 10);
  ASSERT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() - std::chrono::milliseconds(1)));
  ASSERT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater));
  io.run();
  EXPECT_EQ(r.outcomes, (std::vector<Outcome>{Outcome::kExpired, Outcome::kRun}));
}

TEST(NodeQueue, AfterStopQueuedAndLaterJobsRunStopped) {
  boost::asio::io_context io;
  Recorder r;
  NodeQueue q(io, 10);
  ASSERT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater));
  q.stop();
  ASSERT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater));
  io.run();
  EXPECT_EQ(r.outcomes, (std::vector<Outcome>{Outcome::kStopped, Outcome::kStopped}));
}

// The node's thread has ended: what it never reached runs on the caller, shut down, and nothing
// more is taken.
TEST(NodeQueue, ShutdownRunsWhatIsLeftOnTheCallerAndRefusesMore) {
  boost::asio::io_context io;
  Recorder r;
  NodeQueue q(io, 10);
  ASSERT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater));
  ASSERT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater));
  q.shutdown();
  EXPECT_EQ(r.outcomes, (std::vector<Outcome>{Outcome::kShutDown, Outcome::kShutDown}));
  EXPECT_EQ(r.threads[0], std::this_thread::get_id());
  EXPECT_FALSE(q.submit(r.job(), NodeQueue::Clock::now() + kLater));
  io.run();  // the turn posted before the shutdown finds nothing: no job runs twice
  EXPECT_EQ(r.outcomes.size(), 2u);
}

// A queue destroyed while its turn is posted: the turn runs later on a state it still holds, and
// finds nothing (under ASan, a turn holding the queue itself would be a use after free).
TEST(NodeQueue, ATurnPostedBeforeTheQueueWentFindsNothing) {
  boost::asio::io_context io;
  Recorder r;
  {
    NodeQueue q(io, 10);
    ASSERT_TRUE(q.submit(r.job(), NodeQueue::Clock::now() + kLater));
  }
  EXPECT_EQ(r.outcomes, (std::vector<Outcome>{Outcome::kShutDown}));
  EXPECT_EQ(io.run(), 1u);
  EXPECT_EQ(r.outcomes.size(), 1u);
}

// Submitters on other threads while the node's thread drains: each job runs once.
TEST(NodeQueue, ManySubmittersEachJobRunsOnce) {
  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::thread node([&] { io.run(); });
  NodeQueue q(io, 1'000'000);
  std::atomic<int> ran{0};
  std::vector<std::thread> submitters;
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&] {
      for (int i = 0; i < 10'000; ++i) {
        ASSERT_TRUE(q.submit([&](Outcome o) { ran += o == Outcome::kRun; }, NodeQueue::Clock::now() + kLater));
      }
    });
  }
  for (auto& t : submitters) t.join();
  std::promise<void> drained;
  // A job queued last runs after every earlier one: the queue is FIFO.
  ASSERT_TRUE(q.submit([&](Outcome) { drained.set_value(); }, NodeQueue::Clock::now() + kLater));
  drained.get_future().wait();
  EXPECT_EQ(ran.load(), 40'000);
  guard.reset();
  node.join();
}

}  // namespace
}  // namespace tollgate::request
