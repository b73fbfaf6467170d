// The CPU path's threads: [0, n) split into contiguous chunks run on std::threads, as many as
// torch.get_num_threads() allows (read through the stable ABI). Not at::parallel_for: with an
// OpenMP build of torch that is a header template which runs in parallel only where the including
// code is compiled with OpenMP, and linking an extension's own OpenMP runtime next to torch's is not
// safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

#include "ops/torch_api.h"

namespace tcgemm {

// How many distinct threads ran the chunks of the latest cpu_parallel_for in this process (0 before
// the first). tcgemm._C.cpu_threads_of_last_call reads it, so that a test sees how the work was split
// without timing it (timings depend on what else the machine runs).
inline std::atomic<int64_t>& cpu_threads_of_last_call() {
  static std::atomic<int64_t> threads{0};
  return threads;
}

// Runs fn(begin, end) over chunks of [0, n) of at least `grain` items each (the calling thread
// takes the first). An exception from any chunk is rethrown after every thread has joined.
template <class F>
void cpu_parallel_for(int64_t n, int64_t grain, const F& fn) {
  if (n <= 0) return;
  const int64_t most = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  const int64_t allowed = static_cast<int64_t>(torch::stable::get_num_threads());
  const int64_t chunks = std::min<int64_t>(std::max<int64_t>(1, allowed), most);
  if (chunks == 1) {
    cpu_threads_of_last_call() = 1;
    return fn(int64_t{0}, n);
  }
  const int64_t step = (n + chunks - 1) / chunks;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(chunks));
  std::vector<std::thread::id> ran_on(static_cast<size_t>(chunks));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(chunks - 1));
  const auto run = [&](int64_t c) {
    ran_on[static_cast<size_t>(c)] = std::this_thread::get_id();
    try {
      fn(c * step, std::min(n, (c + 1) * step));
    } catch (...) {
      errors[static_cast<size_t>(c)] = std::current_exception();
    }
  };
  for (int64_t c = 1; c < chunks; ++c) threads.emplace_back(run, c);
  run(0);
  for (std::thread& t : threads) t.join();
  std::sort(ran_on.begin(), ran_on.end());
  cpu_threads_of_last_call() = std::unique(ran_on.begin(), ran_on.end()) - ran_on.begin();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace tcgemm
