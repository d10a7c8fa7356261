// nanscope — attachment.hpp: how objects attach to a recorder: one shared control block per attachment, which
// either side may end first, in any order, on any thread, with the other side told exactly once.
//
// The parties:
//   - the recorder owns an attachment_hub (its registry: the attached listeners and the gate). It holds the hub
//     through a shared_ptr, and so does every attachment, so that a side which ends later still finds the hub's
//     lock even when the recorder is gone;
//   - an attached object derives from `attachable` (scope_listener and check_gate do), which keeps the list of
//     its attachments and ends them all when it is destroyed;
//   - `connection` is the optional handle recorder::connect returns for one attachment (a scoped connection).
//
// Ending an attachment, whoever does it, waits until the calls into the attached object on other threads have
// returned (not those of the calling thread: an object may detach itself from inside its own callback), so the
// object may be destroyed as soon as the call returns. When the recorder's side ends it (the recorder is
// destroyed, or remove_listener / set_listener / set_gate detached it), the object is told once, through
// attachable::detached, outside every lock; when the object's side ends it, the recorder's side is told by the
// attachment leaving its registry. Nothing reaches the recorder through an attachment after the recorder's end:
// connection::with_recorder pins it, and the recorder's destructor waits for the pins. docs/recorder.md,
// "Lifetimes", has the whole model.
#ifndef NANSCOPE_ATTACHMENT_HPP
#define NANSCOPE_ATTACHMENT_HPP

#include "config.hpp"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

class recorder;

namespace detail {
class attachment_hub;
struct attachment;

/// Marks, on this thread, a call into an attached object (key: its attachment) or a pin of a recorder (key: its
/// hub) in progress: an ending waits for the calls and pins of the other threads only. Never moved (the chain
/// links the marks by address).
class call_mark {
 public:
  explicit call_mark(const void* key) noexcept : key_(key), prev_(top()) { top() = this; }
  ~call_mark() { top() = prev_; }
  call_mark(const call_mark&) = delete;
  call_mark& operator=(const call_mark&) = delete;
  /// How many marks of `key` this thread has.
  static unsigned count(const void* key) noexcept {
    unsigned n = 0;
    for (const call_mark* m = top(); m != nullptr; m = m->prev_)
      if (m->key_ == key) ++n;
    return n;
  }

 private:
  static call_mark*& top() noexcept {
    thread_local call_mark* t = nullptr;
    return t;
  }
  const void* key_;
  call_mark* prev_;
};
}  // namespace detail

/// The base of every object that attaches to a recorder (scope_listener and check_gate derive from it). It keeps
/// the object's attachments and ends them when the object is destroyed, so a destroyed object is never called.
/// Copying an attachable copies none of its attachments.
class attachable {
 public:
  attachable() = default;
  attachable(const attachable&) noexcept {}
  attachable& operator=(const attachable&) noexcept { return *this; }
  /// Ends every attachment. A derived class whose callbacks may run on other threads calls end_attachments()
  /// first in its own destructor: by the time this base destructor runs, the derived part is gone.
  virtual ~attachable() { end_attachments(); }

  /// One of this object's attachments was ended by the recorder's side: the recorder `r` is being destroyed, or
  /// remove_listener / set_listener / set_gate detached it. Called exactly once for such an attachment, on the
  /// thread that ended it, outside the recorder's locks, after the calls into this object on other threads have
  /// returned. `r` may be read during the call (its step, say) and must not be kept. Default: nothing.
  virtual void detached(recorder& r) noexcept { (void)r; }

  /// How many attachments of this object are in effect now.
  std::size_t attachment_count() const noexcept;

 protected:
  /// Ends every attachment of this object (waiting for the calls into it on other threads); afterwards no
  /// recorder calls it. Safe to call any number of times, from any thread, and from inside its own callback.
  void end_attachments() noexcept;

 private:
  friend class detail::attachment_hub;
  /// Adds `a` to this object's list, dropping the ended ones (may throw std::bad_alloc: nothing is attached then).
  void keep(std::shared_ptr<detail::attachment> a);
  mutable std::mutex links_m_;
  std::vector<std::shared_ptr<detail::attachment>> links_;  ///< (under links_m_)
  unsigned walkers_ = 0;  ///< end_attachments calls in progress (under links_m_)
};

namespace detail {

/// One attachment: what the hub and the attached object share.
struct attachment {
  enum class state : std::uint8_t {
    attached,  ///< in effect: the recorder calls the object
    ending,    ///< the recorder's side is ending it and telling the object (see ender)
    ended,     ///< over; neither side touches the other through it
  };
  attachment(std::shared_ptr<attachment_hub> h, attachable* t, void* p, bool g) noexcept
      : hub(std::move(h)), target(t), typed(p), gate(g) {}
  const std::shared_ptr<attachment_hub> hub;
  attachable* const target;
  /// The object as the recorder knows it (a scope_listener* or check_gate*): handed out and compared without a
  /// cast that would read the object, which may be gone by then on another thread.
  void* const typed;
  const bool gate;                         ///< the recorder's check gate (else a scope listener)
  std::atomic<state> st{state::attached};  ///< written under hub->m_; read without it only to prune lists
  unsigned calling = 0;                    ///< calls into target in progress (under hub->m_)
  std::thread::id ender;                   ///< the thread telling the object (state ending; under hub->m_)
};

/// A recorder's registry of attachments: the listeners (any number, called in attach order) and the check gate
/// (at most one). Thread-safe. The recorder owns it through a shared_ptr; attachments share it.
class attachment_hub : public std::enable_shared_from_this<attachment_hub> {
 public:
  explicit attachment_hub(recorder& owner) noexcept : owner_(&owner) {}
  attachment_hub(const attachment_hub&) = delete;
  attachment_hub& operator=(const attachment_hub&) = delete;

  /// Attaches `t` as a listener, or (gate) as the check gate, replacing the previous gate, which is told. Returns
  /// the attachment, ended already when `t` is an attached listener here already or the recorder is ending;
  /// `replaced` (gates) receives the previous gate (nullptr if none).
  std::shared_ptr<attachment> attach(attachable& t, void* typed, bool gate, void** replaced = nullptr) {
    if (replaced != nullptr) *replaced = nullptr;
    auto a = std::make_shared<attachment>(shared_from_this(), &t, typed, gate);
    t.keep(a);  // the object's side first: if the hub's side fails, the object holds an attachment never in effect
    std::shared_ptr<attachment> old_gate;
    {
      std::unique_lock<std::mutex> lk(m_);
      if (closed_) {
        a->st.store(attachment::state::ended, std::memory_order_release);
        return a;
      }
      if (gate) {
        old_gate = std::move(gate_);
        gate_ = a;
        has_gate_.store(true, std::memory_order_release);
        if (old_gate) {
          if (replaced != nullptr) *replaced = old_gate->typed;
          begin_ending_locked(*old_gate);
          wait_calls_locked(lk, *old_gate);
        }
      } else {
        for (const auto& e : *list_) {
          if (e->typed == typed && e->st.load(std::memory_order_relaxed) == attachment::state::attached) {
            a->st.store(attachment::state::ended, std::memory_order_release);
            return a;
          }
        }
        auto next = std::make_shared<list_type>();
        next->reserve(list_->size() + 1);
        for (const auto& e : *list_)
          if (e->st.load(std::memory_order_relaxed) != attachment::state::ended) next->push_back(e);
        next->push_back(a);
        list_ = std::move(next);
        count_.fetch_add(1, std::memory_order_acq_rel);
      }
    }
    if (old_gate) tell(*old_gate, *owner_);
    return a;
  }

  /// Ends the attachment of listener `t` from the recorder's side (remove_listener): `t` is told. Returns
  /// whether `t` was attached.
  bool detach_listener(const void* typed) noexcept {
    std::shared_ptr<attachment> found;
    recorder* r = nullptr;
    {
      std::unique_lock<std::mutex> lk(m_);
      for (const auto& e : *list_)
        if (e->typed == typed && e->st.load(std::memory_order_relaxed) == attachment::state::attached) found = e;
      if (!found) return false;
      begin_ending_locked(*found);
      wait_calls_locked(lk, *found);
      r = owner_;
    }
    tell(*found, *r);
    return true;
  }
  /// Ends the gate's attachment from the recorder's side (set_gate(nullptr)): the gate is told. Returns the gate
  /// that was attached (nullptr if none).
  void* detach_gate() noexcept {
    std::shared_ptr<attachment> g;
    recorder* r = nullptr;
    {
      std::unique_lock<std::mutex> lk(m_);
      g = std::move(gate_);
      gate_.reset();
      has_gate_.store(false, std::memory_order_release);
      if (!g) return nullptr;
      begin_ending_locked(*g);
      wait_calls_locked(lk, *g);
      r = owner_;
    }
    tell(*g, *r);
    return g->typed;
  }

  /// Ends `a` from the attached object's side (its destructor, connection::disconnect): waits for the calls into
  /// it on other threads, and for a telling in progress on another thread to finish. Allocates nothing.
  void end(attachment& a) noexcept {
    std::unique_lock<std::mutex> lk(m_);
    switch (a.st.load(std::memory_order_relaxed)) {
      case attachment::state::attached:
        a.st.store(attachment::state::ended, std::memory_order_release);
        if (a.gate) {
          if (gate_.get() == &a) {
            gate_.reset();
            has_gate_.store(false, std::memory_order_release);
          }
        } else {
          count_.fetch_sub(1, std::memory_order_acq_rel);
        }
        wait_calls_locked(lk, a);
        return;
      case attachment::state::ending:
        if (a.ender == std::this_thread::get_id()) return;  // from inside its own detached(): being told now
        cv_.wait(lk, [&] { return a.st.load(std::memory_order_relaxed) == attachment::state::ended; });
        return;
      case attachment::state::ended:
        return;
    }
  }

  /// The recorder's end (its destructor): ends every attachment, waits for the calls on other threads and for
  /// the pins, tells every attached object, and from then on refuses new attachments. Allocates nothing.
  void close(recorder& r) noexcept {
    std::shared_ptr<const list_type> old;
    std::shared_ptr<attachment> g;
    const std::thread::id me = std::this_thread::get_id();
    {
      std::unique_lock<std::mutex> lk(m_);
      closed_ = true;
      old = std::move(list_);
      list_ = empty_;
      g = std::move(gate_);
      gate_.reset();
      has_gate_.store(false, std::memory_order_release);
      for (const auto& e : *old)
        if (e->st.load(std::memory_order_relaxed) == attachment::state::attached) begin_ending_locked(*e);
      if (g && g->st.load(std::memory_order_relaxed) == attachment::state::attached) begin_ending_locked(*g);
      cv_.wait(lk, [&] {
        for (const auto& e : *old)
          if (e->ender == me && e->calling > call_mark::count(e.get())) return false;
        if (g && g->ender == me && g->calling > call_mark::count(g.get())) return false;
        return pins_ <= call_mark::count(this);
      });
    }
    // told outside the lock, in attach order, the gate last
    for (const auto& e : *old)
      if (is_ending_by(*e, me)) tell(*e, r);
    if (g && is_ending_by(*g, me)) tell(*g, r);
    // another thread telling an object it detached just before (remove_listener, set_gate) holds `r` too
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait(lk, [&] { return telling_ == 0; });
    owner_ = nullptr;
  }

  /// Calls fn(object) (as attached: a scope_listener*) for every attached listener, outside the lock, in attach order; one detached meanwhile is
  /// skipped. Allocates nothing, so it cannot throw (a scope's destructor calls it); fn must not throw.
  template <class F>
  void for_each_listener(F&& fn) const noexcept {
    if (count_.load(std::memory_order_acquire) == 0) return;
    std::shared_ptr<const list_type> list;
    {
      std::lock_guard<std::mutex> lk(m_);
      list = list_;
    }
    for (const auto& held : *list) {
      attachment& e = *held;
      {
        std::lock_guard<std::mutex> lk(m_);
        if (e.st.load(std::memory_order_relaxed) != attachment::state::attached) continue;
        ++e.calling;
      }
      {
        call_mark mark(&e);
        fn(e.typed);
      }
      std::lock_guard<std::mutex> lk(m_);
      --e.calling;
      // an ending waits for the other threads' calls only, not for 0: any call that ends may be the one it awaits
      if (e.st.load(std::memory_order_relaxed) != attachment::state::attached) cv_.notify_all();
    }
  }

  /// The listeners attached now, oldest first.
  std::vector<void*> listeners() const {
    std::vector<void*> out;
    std::lock_guard<std::mutex> lk(m_);
    for (const auto& e : *list_)
      if (e->st.load(std::memory_order_relaxed) == attachment::state::attached) out.push_back(e->typed);
    return out;
  }
  /// The most recently attached listener still attached (nullptr if none).
  void* newest_listener() const noexcept {
    std::lock_guard<std::mutex> lk(m_);
    for (auto it = list_->rbegin(); it != list_->rend(); ++it)
      if ((*it)->st.load(std::memory_order_relaxed) == attachment::state::attached) return (*it)->typed;
    return nullptr;
  }
  /// Whether pred(object) holds for an attached listener (under the hub's lock: pred must be quick and must not
  /// touch the hub).
  template <class P>
  bool any_listener(P&& pred) const {
    if (count_.load(std::memory_order_acquire) == 0) return false;
    std::lock_guard<std::mutex> lk(m_);
    for (const auto& e : *list_)
      if (e->st.load(std::memory_order_relaxed) == attachment::state::attached && pred(e->typed)) return true;
    return false;
  }
  std::size_t listener_count() const noexcept { return count_.load(std::memory_order_acquire); }
  /// The gate attached now (nullptr if none): for comparison and display; call it through gate_hold.
  void* gate() const noexcept {
    if (!has_gate_.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard<std::mutex> lk(m_);
    return gate_ && gate_->st.load(std::memory_order_relaxed) == attachment::state::attached ? gate_->typed
                                                                                               : nullptr;
  }

  /// Runs fn(recorder) if `a` is in effect, with the recorder pinned (its destructor waits); returns whether it
  /// ran. fn may throw (the pin is released).
  template <class F>
  bool with_owner(const attachment& a, F&& fn) {
    recorder* r = nullptr;
    {
      std::lock_guard<std::mutex> lk(m_);
      if (a.st.load(std::memory_order_relaxed) != attachment::state::attached || owner_ == nullptr) return false;
      r = owner_;
      ++pins_;
    }
    struct unpin {
      attachment_hub& h;
      ~unpin() {
        std::lock_guard<std::mutex> lk(h.m_);
        --h.pins_;
        if (h.closed_) h.cv_.notify_all();
      }
    } release{*this};
    call_mark mark(this);
    fn(*r);
    return true;
  }

  /// The gate's attachment held for one check (admit ... checked) or one step boundary: it is not ended (nor its
  /// object destroyed) before the hold ends. Constructed in place; allocates nothing.
  class gate_hold {
   public:
    explicit gate_hold(const attachment_hub& h) noexcept : hub_(h), a_(acquire(h)), mark_(a_) {}
    ~gate_hold() {
      if (a_ == nullptr) return;
      std::lock_guard<std::mutex> lk(hub_.m_);
      --a_->calling;
      if (a_->st.load(std::memory_order_relaxed) != attachment::state::attached) hub_.cv_.notify_all();
    }
    gate_hold(const gate_hold&) = delete;
    gate_hold& operator=(const gate_hold&) = delete;
    /// The gate (as attached: a check_gate*), or nullptr when none is attached.
    void* get() const noexcept { return a_ != nullptr ? a_->typed : nullptr; }

   private:
    static attachment* acquire(const attachment_hub& h) noexcept {
      if (!h.has_gate_.load(std::memory_order_acquire)) return nullptr;
      std::lock_guard<std::mutex> lk(h.m_);
      if (!h.gate_ || h.gate_->st.load(std::memory_order_relaxed) != attachment::state::attached) return nullptr;
      ++h.gate_->calling;
      return h.gate_.get();
    }
    const attachment_hub& hub_;
    attachment* const a_;
    call_mark mark_;  ///< (key nullptr when no gate: never asked for)
  };

 private:
  using list_type = std::vector<std::shared_ptr<attachment>>;

  void begin_ending_locked(attachment& a) noexcept {
    a.st.store(attachment::state::ending, std::memory_order_release);
    a.ender = std::this_thread::get_id();
    ++telling_;
    if (!a.gate) count_.fetch_sub(1, std::memory_order_acq_rel);
  }
  void wait_calls_locked(std::unique_lock<std::mutex>& lk, const attachment& a) noexcept {
    const unsigned mine = call_mark::count(&a);
    cv_.wait(lk, [&] { return a.calling <= mine; });
  }
  bool is_ending_by(const attachment& a, std::thread::id me) const noexcept {
    std::lock_guard<std::mutex> lk(m_);
    return a.st.load(std::memory_order_relaxed) == attachment::state::ending && a.ender == me;
  }
  /// Tells the object of `a` (in state ending, by this thread) and ends `a`.
  void tell(attachment& a, recorder& r) noexcept {
    a.target->detached(r);
    std::lock_guard<std::mutex> lk(m_);
    a.st.store(attachment::state::ended, std::memory_order_release);
    --telling_;
    cv_.notify_all();
  }

  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  recorder* owner_;  ///< nullptr once closed and told (under m_)
  bool closed_ = false;
  unsigned pins_ = 0;    ///< with_owner calls in progress
  unsigned telling_ = 0;  ///< attachments in state ending (their objects being told, on any thread)
  const std::shared_ptr<const list_type> empty_ = std::make_shared<const list_type>();
  std::shared_ptr<const list_type> list_ = empty_;  ///< replaced (never changed in place) under m_
  std::shared_ptr<attachment> gate_;
  std::atomic<bool> has_gate_{false};
  std::atomic<std::size_t> count_{0};  ///< listeners attached
};

}  // namespace detail

inline std::size_t attachable::attachment_count() const noexcept {
  std::lock_guard<std::mutex> lk(links_m_);
  std::size_t n = 0;
  for (const auto& a : links_)
    if (a->st.load(std::memory_order_acquire) == detail::attachment::state::attached) ++n;
  return n;
}

inline void attachable::end_attachments() noexcept {
  // Not under links_m_ while an ending waits (a callback on another thread may ask attachment_count()): the list
  // is walked by index, and keep() only appends while a walk is in progress, so no entry is skipped.
  std::unique_lock<std::mutex> lk(links_m_);
  ++walkers_;
  for (std::size_t i = 0; i < links_.size(); ++i) {
    std::shared_ptr<detail::attachment> a = links_[i];
    lk.unlock();
    a->hub->end(*a);
    lk.lock();
  }
  --walkers_;
}

inline void attachable::keep(std::shared_ptr<detail::attachment> a) {
  std::lock_guard<std::mutex> lk(links_m_);
  if (walkers_ == 0) {  // drop the ended ones (not while end_attachments walks the list by index)
    std::size_t kept = 0;
    for (std::size_t i = 0; i < links_.size(); ++i)
      if (links_[i]->st.load(std::memory_order_acquire) != detail::attachment::state::ended)
        links_[kept++] = std::move(links_[i]);
    links_.resize(kept);
  }
  links_.push_back(std::move(a));
}

/// A copyable view of one attachment that does not own it (connection::ref): asks whether it is in effect and
/// reaches the recorder through it, pinned, while it is.
class attachment_ref {
 public:
  attachment_ref() noexcept = default;
  explicit attachment_ref(std::shared_ptr<detail::attachment> a) noexcept : a_(std::move(a)) {}
  /// Whether the attachment is in effect (false once either side ended it).
  bool connected() const noexcept {
    return a_ && a_->st.load(std::memory_order_acquire) == detail::attachment::state::attached;
  }
  /// Runs fn(recorder&) while the attachment is in effect, with the recorder pinned (its destructor waits for
  /// fn to return); returns whether fn ran. Never reaches a recorder that has ended.
  template <class F>
  bool with_recorder(F&& fn) const {
    return a_ && a_->hub->with_owner(*a_, std::forward<F>(fn));
  }

 private:
  std::shared_ptr<detail::attachment> a_;
};

/// A handle on one attachment (recorder::connect): ends it when destroyed, or earlier with disconnect(). Movable;
/// an empty (default-constructed or moved-from) connection does nothing.
class connection {
 public:
  connection() noexcept = default;
  explicit connection(std::shared_ptr<detail::attachment> a) noexcept : a_(std::move(a)) {}
  connection(connection&&) noexcept = default;
  connection& operator=(connection&& o) noexcept {
    if (this != &o) {
      disconnect();
      a_ = std::move(o.a_);
    }
    return *this;
  }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() { disconnect(); }

  /// Ends the attachment (waiting for the calls into the object on other threads); then empties the handle.
  void disconnect() noexcept {
    if (!a_) return;
    a_->hub->end(*a_);
    a_.reset();
  }
  /// Whether the attachment is in effect (false once either side ended it).
  bool connected() const noexcept {
    return a_ && a_->st.load(std::memory_order_acquire) == detail::attachment::state::attached;
  }
  explicit operator bool() const noexcept { return connected(); }
  /// Runs fn(recorder&) while the attachment is in effect, with the recorder pinned (its destructor waits for
  /// fn to return); returns whether fn ran. Never reaches a recorder that has ended.
  template <class F>
  bool with_recorder(F&& fn) const {
    return a_ && a_->hub->with_owner(*a_, std::forward<F>(fn));
  }
  /// A view that other threads may copy and use while this handle is replaced or ended.
  attachment_ref ref() const noexcept { return attachment_ref(a_); }

 private:
  std::shared_ptr<detail::attachment> a_;
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_ATTACHMENT_HPP
