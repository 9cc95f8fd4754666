// A fixed team of threads that runs one job on every member at once, the caller being member 0:
// the virtual back end's per-window step. Made for many short jobs (about a millisecond of work
// each, tens of thousands per run): members spin briefly before sleeping, so a job starts without
// a system call when the previous one has just ended.
#ifndef TOLLGATE_SIM_CREW_H_
#define TOLLGATE_SIM_CREW_H_

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace tollgate::sim {

class Crew {
 public:
  // `size` members (at least 1): the caller and size - 1 threads started now.
  Crew(unsigned size, std::function<void(unsigned member)> job);
  ~Crew();  // stops and joins the threads
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  unsigned size() const { return unsigned(threads_.size()) + 1; }

  // Runs job(0) on the calling thread and job(1..size-1) on the others; returns when all have
  // returned. Everything the caller wrote before is visible to the jobs, and everything the jobs
  // wrote is visible to the caller after. If jobs throw, run() rethrows one of their exceptions,
  // after all of them have returned.
  void run();

 private:
  void member(unsigned index);

  std::function<void(unsigned)> job_;
  std::atomic<uint32_t> generation_{0};     // bumped once per run(); members wait for a new one
  std::atomic<uint32_t> pending_{0};        // members still running this generation's job
  bool stopping_ = false;                   // written before the last generation bump
  std::vector<std::exception_ptr> failed_;  // per member: what its last job threw
  std::vector<std::thread> threads_;
};

}  // namespace tollgate::sim

#endif  // TOLLGATE_SIM_CREW_H_
