// nanscope — detail/thread_pool.hpp: a small persistent worker pool for splitting one large check across
// threads. Workers are created once; a job allocates nothing. When the pool is busy (another thread is
// running a job) the caller simply runs the work itself. Internal.
#ifndef NANSCOPE_DETAIL_THREAD_POOL_HPP
#define NANSCOPE_DETAIL_THREAD_POOL_HPP

#if !defined(NANSCOPE_CHECK_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/thread_pool.hpp is internal: include <nanscope/check.hpp> or <nanscope/nanscope.hpp>"
#endif

#include "../config.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

class thread_pool {
 public:
  using task_fn = void (*)(void* ctx, std::size_t index);

  explicit thread_pool(unsigned workers) {
    threads_.reserve(workers);
    for (unsigned i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
  }
  ~thread_pool() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  unsigned workers() const { return static_cast<unsigned>(threads_.size()); }

  /// Runs fn(ctx, i) for i in [0, count) on the caller plus up to `helpers` workers, and returns when all
  /// are done. If another job is running, the caller does all the work itself.
  void run(std::size_t count, unsigned helpers, task_fn fn, void* ctx) {
    std::unique_lock<std::mutex> busy(job_mutex_, std::try_to_lock);
    if (!busy.owns_lock() || helpers == 0 || threads_.empty()) {
      for (std::size_t i = 0; i < count; ++i) fn(ctx, i);
      return;
    }
    if (helpers > threads_.size()) helpers = static_cast<unsigned>(threads_.size());
    {
      std::lock_guard<std::mutex> lk(m_);
      fn_ = fn;
      ctx_ = ctx;
      count_ = count;
      next_.store(0, std::memory_order_relaxed);
      wanted_ = helpers;
      active_ = 0;
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock<std::mutex> lk(m_);
    wanted_ = 0;  // no late joiners
    done_cv_.wait(lk, [this] { return active_ == 0; });
    fn_ = nullptr;
  }

 private:
  void drain() {
    for (;;) {
      const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= count_) break;
      fn_(ctx_, i);
    }
  }
  void worker_loop() {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || (generation_ != seen && wanted_ > 0); });
      if (stop_) return;
      seen = generation_;
      --wanted_;
      ++active_;
      lk.unlock();
      drain();
      lk.lock();
      if (--active_ == 0) done_cv_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex job_mutex_;
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
  std::uint64_t generation_ = 0;
  unsigned wanted_ = 0, active_ = 0;
  task_fn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::size_t count_ = 0;
  std::atomic<std::size_t> next_{0};
};

/// Threads a default check may use (caller included): NANSCOPE_THREADS if set, else the hardware threads.
inline unsigned default_thread_count() {
  static const unsigned n = [] {
    if (const char* e = std::getenv("NANSCOPE_THREADS")) {
      const long v = std::strtol(e, nullptr, 10);
      if (v >= 1 && v <= 1024) return static_cast<unsigned>(v);
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1u : hw;
  }();
  return n;
}

/// The process-wide pool, created on first use with default_thread_count() - 1 workers.
inline thread_pool& default_pool() {
  static thread_pool pool(default_thread_count() > 1 ? default_thread_count() - 1 : 0);
  return pool;
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_THREAD_POOL_HPP
