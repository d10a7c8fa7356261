// nanscope — detail/listener_set.hpp: a recorder's listeners: attach and detach from any thread, call them
// outside any lock without allocating, and let a detach wait for the calls into that listener on other threads.
#ifndef NANSCOPE_DETAIL_LISTENER_SET_HPP
#define NANSCOPE_DETAIL_LISTENER_SET_HPP

#include "../config.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// Marks a call into a listener in progress on this thread (remove() does not wait for the calls of its own
/// thread: a listener may detach itself, or another one, from inside a callback).
struct listener_call {
  const void* entry;
  listener_call* prev;
  explicit listener_call(const void* e) : entry(e), prev(top()) { top() = this; }
  ~listener_call() { top() = prev; }
  listener_call(const listener_call&) = delete;
  listener_call& operator=(const listener_call&) = delete;
  static listener_call*& top() {
    thread_local listener_call* t = nullptr;
    return t;
  }
};

/// The listeners of one recorder (L: scope_listener). The list is replaced, never changed in place, by add() and
/// remove(): a call in progress keeps the list it started with, and its entries, alive. Each entry counts the
/// calls into its listener in progress, so remove() can wait for them.
template <class L>
class listener_set {
 public:
  /// Attaches `l` (nullptr and a listener attached already: no effect). `told_at_end`: remove_all hands it to
  /// its function (a listener that asked, when attached, to hear of the end of what it listens to).
  void add(L* l, bool told_at_end = false) {
    if (l == nullptr) return;
    std::lock_guard<std::mutex> lk(m_);
    for (const auto& e : *list_)
      if (e->l == l) return;
    auto next = std::make_shared<list_type>(*list_);
    next->push_back(std::make_shared<entry>(l, told_at_end));
    publish(std::move(next));
  }

  /// Detaches every listener at once (waiting, as remove() does, for the calls into them on other threads), then
  /// calls fn(listener) for those attached with told_at_end; others are not touched: they may be gone already.
  /// Allocates nothing (a destructor calls it).
  template <class F>
  void remove_all(F&& fn) {
    std::shared_ptr<const list_type> old;
    {
      std::unique_lock<std::mutex> lk(m_);
      old = list_;
      publish(empty_);
      for (const auto& e : *old) e->removed = true;
      cv_.wait(lk, [&] {
        for (const auto& e : *old)
          if (e->calling > own_calls(e.get())) return false;
        return true;
      });
    }
    for (const auto& e : *old)
      if (e->told_at_end) fn(*e->l);
  }

  /// Detaches `l`; returns whether it was attached. Waits until every call into it on other threads has returned
  /// (a call on this thread still running, `l` detaching itself from its own callback, is not waited for).
  bool remove(L* l) {
    std::unique_lock<std::mutex> lk(m_);
    std::shared_ptr<entry> found;
    for (const auto& e : *list_)
      if (e->l == l) found = e;
    if (!found) return false;
    auto next = std::make_shared<list_type>();
    next->reserve(list_->size() - 1);
    for (const auto& e : *list_)
      if (e != found) next->push_back(e);
    publish(std::move(next));
    found->removed = true;
    const unsigned mine = own_calls(found.get());
    cv_.wait(lk, [&] { return found->calling <= mine; });
    return true;
  }

  /// The listeners attached now, oldest first.
  std::vector<L*> snapshot() const {
    std::vector<L*> out;
    std::lock_guard<std::mutex> lk(m_);
    out.reserve(list_->size());
    for (const auto& e : *list_) out.push_back(e->l);
    return out;
  }

  /// The most recently attached listener still attached (nullptr if none).
  L* newest() const {
    std::lock_guard<std::mutex> lk(m_);
    return list_->empty() ? nullptr : list_->back()->l;
  }

  /// Whether pred(listener) holds for an attached listener (called under the set's lock: pred must be quick and
  /// must not touch the set).
  template <class P>
  bool any_of(P&& pred) const {
    if (size() == 0) return false;
    std::lock_guard<std::mutex> lk(m_);
    for (const auto& e : *list_)
      if (!e->removed && pred(*e->l)) return true;
    return false;
  }

  std::size_t size() const { return count_.load(std::memory_order_acquire); }

  /// Calls fn(listener) for every attached listener, outside the lock, in attach order. A listener detached
  /// meanwhile is skipped. Allocates nothing, so it cannot throw (~scope calls it); fn must not throw.
  template <class F>
  void for_each(F&& fn) const noexcept {
    if (size() == 0) return;
    std::shared_ptr<const list_type> list;
    {
      std::lock_guard<std::mutex> lk(m_);
      list = list_;
    }
    for (const auto& held : *list) {
      entry& e = *held;
      {
        std::lock_guard<std::mutex> lk(m_);
        if (e.removed) continue;
        ++e.calling;
      }
      {
        listener_call mark(&e);
        fn(*e.l);
      }
      std::lock_guard<std::mutex> lk(m_);
      --e.calling;
      // a detach waits for the other threads' calls only, not for 0: one of them ending may be what it waits for
      if (e.removed) cv_.notify_all();
    }
  }

 private:
  struct entry {
    entry(L* p, bool tell) : l(p), told_at_end(tell) {}
    L* l;
    bool told_at_end;
    unsigned calling = 0;  ///< calls into l in progress (under m_)
    bool removed = false;  ///< (under m_)
  };
  using list_type = std::vector<std::shared_ptr<entry>>;

  /// Calls into entry `e` in progress on this thread (a detach does not wait for them: they are its callers).
  static unsigned own_calls(const entry* e) {
    unsigned mine = 0;
    for (const listener_call* c = listener_call::top(); c != nullptr; c = c->prev)
      if (c->entry == e) ++mine;
    return mine;
  }

  void publish(std::shared_ptr<const list_type> next) {  // under m_
    list_ = std::move(next);
    count_.store(list_->size(), std::memory_order_release);
  }

  mutable std::mutex m_;  // guards list_ (the pointer) and the entries' counters
  mutable std::condition_variable cv_;
  const std::shared_ptr<const list_type> empty_ = std::make_shared<const list_type>();  ///< for remove_all
  std::shared_ptr<const list_type> list_ = empty_;
  std::atomic<std::size_t> count_{0};
};

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_LISTENER_SET_HPP
