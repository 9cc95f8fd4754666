#include "daemon/api_workers.h"

#include <spdlog/spdlog.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>

namespace tollgate {

namespace asio = boost::asio;

namespace {

// A worker's RequestHandler: checks on the worker's thread, the rest on the node's.
class WorkerHandler final : public RequestHandler {
 public:
  WorkerHandler(asio::io_context& node_io, RequestHandler& node, const std::atomic<bool>& node_loop_ended)
      : node_io_(node_io), node_(node), node_loop_ended_(node_loop_ended) {}

  void check(std::span<const CheckItem> items, std::span<Decision> out) override { node_.check(items, out); }
  bool check_all(std::span<const CheckItem> items, std::span<Decision> out) override {
    return node_.check_all(items, out);
  }
  void refund(std::span<const CheckItem> items, std::span<Decision> out) override { node_.refund(items, out); }
  std::vector<MemberInfo> members() override {
    return on_node_thread<std::vector<MemberInfo>>([this] { return node_.members(); }, {});
  }
  StatsList stats() override {
    return on_node_thread<StatsList>([this] { return node_.stats(); }, {});
  }
  std::vector<std::pair<std::string, RuleCounters>> rule_counters() override {
    return on_node_thread<std::vector<std::pair<std::string, RuleCounters>>>([this] { return node_.rule_counters(); },
                                                                             {});
  }
  ResetReply reset(std::string_view key) override {
    return on_node_thread<ResetReply>([this, key] { return node_.reset(key); },
                                      {.error = "the daemon is shutting down", .limited = false, .remaining = 0});
  }
  std::string set_faults(const FaultSettings& faults) override {
    return on_node_thread<std::string>([this, &faults] { return node_.set_faults(faults); },
                                       "the daemon is shutting down");
  }

 private:
  // Runs `fn` on the node's thread and waits for its result (or its exception), unless the
  // node's loop has ended: then `if_ended`. These are rare requests (an operator's `tollgate
  // members`); the worker's other connections wait meanwhile, as they would behind a round.
  template <typename T, typename F>
  T on_node_thread(F fn, T if_ended) {
    auto task = std::make_shared<std::packaged_task<T()>>(std::move(fn));
    std::future<T> result = task->get_future();
    asio::post(node_io_, [task] { (*task)(); });
    while (result.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      if (node_loop_ended_.load()) return if_ended;
    }
    return result.get();
  }

  asio::io_context& node_io_;
  RequestHandler& node_;
  const std::atomic<bool>& node_loop_ended_;
};

thread_local size_t t_api_thread = 0;

}  // namespace

size_t current_api_thread() { return t_api_thread; }

struct ApiWorkers::Worker {
  Worker(ApiWorkers& owner, const api::ApiServerOptions& options, size_t index)
      : guard(io.get_executor()),
        handler(owner.node_io_, owner.node_, owner.node_loop_ended_),
        server(io, handler, options) {
    server.serve_handed();
    thread = std::thread([this, index] { run(index); });
  }
  // Stops and joins the thread if it still runs (~ApiWorkers, or a later worker that failed to
  // start), then closes what the server still holds.
  ~Worker() {
    if (thread.joinable()) {
      guard.reset();
      io.stop();
      thread.join();
    }
    server.stop();  // the io_context no longer runs: this thread may
  }

  void run(size_t index) {
    t_api_thread = index;
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        // A bug, not a client's doing (those are counted and answered): say so and go on
        // serving the other connections.
        spdlog::error("client API thread {}: {}", index, e.what());
      }
    }
  }

  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  WorkerHandler handler;
  api::ApiServer server;  // never started: it serves connections handed to it
  std::thread thread;
};

ApiWorkers::ApiWorkers(size_t count, asio::io_context& node_io, RequestHandler& node,
                       const api::ApiServerOptions& options)
    : node_io_(node_io), node_(node) {
  for (size_t i = 0; i < count; ++i) workers_.push_back(std::make_unique<Worker>(*this, options, i + 1));
}

ApiWorkers::~ApiWorkers() {
  node_loop_ended_.store(true);
  workers_.clear();  // each stops and joins its thread
}

std::vector<api::ApiServer*> ApiWorkers::servers() const {
  std::vector<api::ApiServer*> out;
  for (const auto& w : workers_) out.push_back(&w->server);
  return out;
}

void ApiWorkers::drain() {
  for (auto& w : workers_) asio::post(w->io, [server = &w->server] { server->drain(); });
}

void ApiWorkers::stop(std::function<void()> done) {
  if (workers_.empty()) {
    asio::post(node_io_, std::move(done));
    return;
  }
  auto remaining = std::make_shared<size_t>(workers_.size());
  auto shared_done = std::make_shared<std::function<void()>>(std::move(done));
  for (auto& w : workers_) {
    asio::post(w->io, [this, server = &w->server, remaining, shared_done] {
      server->stop();
      // The count is touched on the node's thread only.
      asio::post(node_io_, [remaining, shared_done] {
        if (--*remaining == 0) (*shared_done)();
      });
    });
  }
}

}  // namespace tollgate
