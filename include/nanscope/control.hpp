// nanscope — control.hpp: runtime control without a rebuild (a TOML config file reloaded at step boundaries,
// environment variables) and the overhead budget (round-robin site sampling with a bounded skip).
//
//   nanscope::controller ctl;               // reads NANSCOPE_* variables; NANSCOPE_CONFIG names a TOML file
//   ctl.attach(nanscope::default_recorder());
//   ... training / serving loop ...         // at every step boundary: file re-read if it changed, budget applied
//   std::fputs(ctl.report().text().c_str(), stderr);
//
// The per-check decision is a cached per-site lookup (site patterns are matched once per site and config
// version, never per check). When the configuration switches checking off for a step, the recorder is disabled
// (recorder::set_enabled(false)): scopes do nothing but count steps, which costs what compiled-out checks cost
// up to one atomic load per scope. The TOML file is read by nanscope's own reader (detail/toml_config.hpp, no
// dependency; short of memory it throws std::bad_alloc, which keeps the configuration); with
// NANSCOPE_CONFIG_NO_TOML a configured file is reported as unsupported and the environment variables still
// work. See docs/runtime-control.md.
#ifndef NANSCOPE_CONTROL_HPP
#define NANSCOPE_CONTROL_HPP

#include "config.hpp"
#include "health.hpp"
#include "recorder.hpp"
#include "detail/read_file.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <sys/stat.h>

// GCC 12 warns about std::regex's own internals (a std::function in _Compiler's lookahead state "may be used
// uninitialized") at -O1 with sanitizers, at every inlining site in this header: a false positive. The
// suppression is scoped to this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define NANSCOPE_IMPL_CONTROL_POP_DIAGNOSTICS 1
#endif

#if NANSCOPE_IMPL_EXCEPTIONS
#include <regex>
#define NANSCOPE_IMPL_HAS_REGEX 1
#else
#define NANSCOPE_IMPL_HAS_REGEX 0  // std::regex reports a bad pattern only by throwing
#endif

// 1 unless NANSCOPE_CONFIG_NO_TOML: config files are read (nanscope's own reader, detail/toml_config.hpp).
#if !defined(NANSCOPE_CONFIG_NO_TOML)
#define NANSCOPE_HAS_TOML 1
#else
#define NANSCOPE_HAS_TOML 0
#endif

NANSCOPE_NAMESPACE_BEGIN

inline constexpr std::uint64_t no_step_limit = (std::numeric_limits<std::uint64_t>::max)();

/// Sites matching `pattern` (a glob as site_rule, or a regex over the whole key). A pattern containing ':' is
/// matched against "module.path:context", otherwise against the module path.
struct site_select {
  std::string pattern;
  bool regex = false;
  bool on = true;              ///< false: the matching sites are not checked
  bool has_mode = false;       ///< mode overrides the recorder's check mode
  check_mode mode = check_mode::stats;
  std::uint64_t every = 1;     ///< check every k-th step (counted from `from`)
  std::uint64_t from = 0;      ///< first step checked
  std::uint64_t to = no_step_limit;  ///< last step checked (inclusive)
};

/// What to check, when, and at what cost. Defaults: everything, every step, no budget.
struct control_config {
  bool enabled = true;
  bool sites_default_on = true;  ///< sites that no entry matches
  bool has_mode = false;
  check_mode mode = check_mode::stats;
  std::uint64_t every = 1;
  std::uint64_t from = 0;
  std::uint64_t to = no_step_limit;
  std::vector<site_select> sites;  ///< the last matching entry wins
  double budget = 0.0;             ///< nanscope's time as a fraction of the un-instrumented step time; 0: none
  std::uint32_t max_skip = 8;      ///< with a budget: a site is never skipped more than this many steps in a row

  /// Is step `s` inside the global schedule?
  bool step_on(std::uint64_t s) const { return enabled && s >= from && s <= to && (s - from) % every == 0; }
};

namespace detail {
inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}
inline std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return std::string(s.substr(b, e - b));
}
/// A check mode name ("stats", "curt_health", ...; any case) or "off" (`off` true).
inline bool parse_mode(std::string_view text, check_mode& m, bool& off) {
  const std::string t = lower(trim(text));
  off = false;
  if (t == "off") { off = true; return true; }
  if (t == "stats") { m = check_mode::stats; return true; }
  if (t == "curt_health") { m = check_mode::curt_health; return true; }
  if (t == "concise_health") { m = check_mode::concise_health; return true; }
  if (t == "full_health") { m = check_mode::full_health; return true; }
  if (t == "shape") { m = check_mode::shape; return true; }
  if (t == "no_tensor") { m = check_mode::no_tensor; return true; }
  return false;
}
inline bool parse_u64(std::string_view text, std::uint64_t& v) {
  const std::string t = trim(text);
  if (t.empty() || t.size() > 19) return false;
  std::uint64_t r = 0;
  for (char c : t) {
    if (c < '0' || c > '9') return false;
    r = r * 10 + static_cast<std::uint64_t>(c - '0');
  }
  v = r;
  return true;
}
inline bool parse_bool(std::string_view text, bool& b) {
  const std::string t = lower(trim(text));
  if (t == "1" || t == "on" || t == "true" || t == "yes") { b = true; return true; }
  if (t == "0" || t == "off" || t == "false" || t == "no") { b = false; return true; }
  return false;
}
/// "0.02" or "2%": a fraction in [0, 1].
inline bool parse_budget(std::string_view text, double& f) {
  std::string t = trim(text);
  bool percent = false;
  if (!t.empty() && t.back() == '%') {
    percent = true;
    t.pop_back();
  }
  if (t.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !is_finite_bits(v)) return false;
  const double frac = percent ? v / 100.0 : v;
  if (!(frac >= 0.0) || frac > 1.0) return false;
  f = frac;
  return true;
}
/// "a:b", "a:", ":b" or "a".
inline bool parse_steps(std::string_view text, std::uint64_t& from, std::uint64_t& to) {
  const std::string t = trim(text);
  const std::size_t c = t.find(':');
  std::uint64_t a = 0, b = no_step_limit;
  if (c == std::string::npos) {
    if (!parse_u64(t, a)) return false;
    b = a;
  } else {
    const std::string l = trim(std::string_view(t).substr(0, c)), r = trim(std::string_view(t).substr(c + 1));
    if (!l.empty() && !parse_u64(l, a)) return false;
    if (!r.empty() && !parse_u64(r, b)) return false;
  }
  if (b < a) return false;
  from = a;
  to = b;
  return true;
}
}  // namespace detail

/// Applies the NANSCOPE_* environment variables on top of `cfg` (they override a file's values). `get` reads one
/// variable (nullptr: unset; default std::getenv). Problems are appended to `errors`, one line each; the bad
/// variable is ignored.
///   NANSCOPE_ENABLE=0|1          NANSCOPE_MODE=stats|curt_health|...|off      NANSCOPE_EVERY=k
///   NANSCOPE_STEPS=a:b           NANSCOPE_SITES=glob,re:regex,!excluded        NANSCOPE_BUDGET=0.02|2%
///   NANSCOPE_MAX_SKIP=n          (NANSCOPE_CONFIG=file.toml is read by the controller)
inline void apply_environment(control_config& cfg, std::string& errors,
                              const std::function<const char*(const char*)>& get = {}) {
  auto env = [&](const char* n) -> const char* { return get ? get(n) : std::getenv(n); };
  auto bad = [&](const char* n, const char* v, const char* what) {
    errors += std::string("nanscope: ignoring ") + n + "='" + v + "': " + what + "\n";
  };
  if (const char* v = env("NANSCOPE_ENABLE")) {
    bool b = true;
    if (detail::parse_bool(v, b)) cfg.enabled = b;
    else bad("NANSCOPE_ENABLE", v, "expected 0/1, on/off, true/false");
  }
  if (const char* v = env("NANSCOPE_MODE")) {
    check_mode m = check_mode::stats;
    bool off = false;
    if (!detail::parse_mode(v, m, off)) {
      bad("NANSCOPE_MODE", v, "expected stats, curt_health, concise_health, full_health, shape, no_tensor or off");
    } else if (off) {
      cfg.enabled = false;
    } else {
      cfg.has_mode = true;
      cfg.mode = m;
    }
  }
  if (const char* v = env("NANSCOPE_EVERY")) {
    std::uint64_t k = 0;
    if (detail::parse_u64(v, k) && k >= 1) cfg.every = k;
    else bad("NANSCOPE_EVERY", v, "expected an integer >= 1");
  }
  if (const char* v = env("NANSCOPE_STEPS")) {
    std::uint64_t a = 0, b = 0;
    if (detail::parse_steps(v, a, b)) {
      cfg.from = a;
      cfg.to = b;
    } else {
      bad("NANSCOPE_STEPS", v, "expected FROM:TO, FROM:, :TO or STEP (TO >= FROM)");
    }
  }
  if (const char* v = env("NANSCOPE_BUDGET")) {
    double f = 0;
    if (detail::parse_budget(v, f)) cfg.budget = f;
    else bad("NANSCOPE_BUDGET", v, "expected a fraction in [0, 1] (0.02) or a percentage (2%)");
  }
  if (const char* v = env("NANSCOPE_MAX_SKIP")) {
    std::uint64_t k = 0;
    if (detail::parse_u64(v, k) && k <= 1000000) cfg.max_skip = static_cast<std::uint32_t>(k);
    else bad("NANSCOPE_MAX_SKIP", v, "expected an integer in [0, 1000000]");
  }
  if (const char* v = env("NANSCOPE_SITES")) {
    std::string_view rest(v);
    std::vector<site_select> add;
    bool any_positive = false, ok = true;
    while (ok) {
      const std::size_t c = rest.find(',');
      std::string item = detail::trim(rest.substr(0, c));
      if (!item.empty()) {
        site_select s;
        if (item[0] == '!' || item[0] == '-') {
          s.on = false;
          item.erase(0, 1);
        } else {
          any_positive = true;
        }
        if (item.compare(0, 3, "re:") == 0) {
          s.regex = true;
          item.erase(0, 3);
        }
        if (item.empty()) ok = false;
        s.pattern = std::move(item);
        add.push_back(std::move(s));
      }
      if (c == std::string_view::npos) break;
      rest.remove_prefix(c + 1);
    }
    if (!ok || add.empty()) {
      bad("NANSCOPE_SITES", v, "expected a comma-separated list of globs (re:REGEX for a regex, !PATTERN to exclude)");
    } else {
      if (any_positive) cfg.sites_default_on = false;
      for (auto& s : add) cfg.sites.push_back(std::move(s));
    }
  }
}

NANSCOPE_NAMESPACE_END
#include "detail/control_toml.hpp"  // after control_config and detail::parse_mode/parse_bool/parse_budget
NANSCOPE_NAMESPACE_BEGIN

/// Parses a TOML configuration (docs/runtime-control.md) into `cfg` (which keeps its values for absent keys).
/// Returns false with `error` naming the source, line and problem; `cfg` is then unspecified. Out of memory it
/// throws std::bad_alloc (nothing noexcept allocates).
inline bool parse_control_toml(std::string_view text, std::string_view source, control_config& cfg,
                               std::string& error) {
#if NANSCOPE_HAS_TOML
  return detail::control_from_toml(text, source, cfg, error);
#else
  (void)text;
  (void)cfg;
  error = std::string(source) +
          ": nanscope was built with NANSCOPE_CONFIG_NO_TOML (no config file reader); only the NANSCOPE_* "
          "environment variables apply";
  return false;
#endif
}

/// The overhead budget's scheduler: which sites to check in a step so that nanscope's time stays under
/// `budget` x the un-instrumented step time, round-robin, never skipping a site more than `max_skip` steps in a
/// row (a site due by that bound is checked even over budget). Deterministic; not thread-safe (the controller
/// locks around it).
class budget_scheduler {
 public:
  void configure(double budget, std::uint32_t max_skip) {
    budget_ = budget;
    max_skip_ = max_skip;
  }
  double budget() const { return budget_; }
  /// A new site (checked in its first step, to learn its cost). Returns its id. After reserve_site() it cannot
  /// throw.
  std::uint32_t add_site() {
    sites_.push_back(site{});
    return static_cast<std::uint32_t>(sites_.size() - 1);
  }
  /// Makes room for one more site (may throw std::bad_alloc; nothing changes then).
  void reserve_site() { sites_.reserve(sites_.size() + 1); }
  std::size_t size() const { return sites_.size(); }
  /// Starts step `s`; `plain_ns` is the previous step's time without nanscope's (0: unknown).
  void begin_step(std::uint64_t s, std::uint64_t plain_ns) {
    if (plain_ns > 0) plain_ema_ = plain_ema_ > 0 ? plain_ema_ + 0.3 * (static_cast<double>(plain_ns) - plain_ema_)
                                                  : static_cast<double>(plain_ns);
    planned_ns_ = 0.0;
    if (!(budget_ > 0.0) || sites_.empty() || !(plain_ema_ > 0.0)) {
      for (auto& st : sites_) st.chosen = true;
      return;
    }
    const double allowance = budget_ * plain_ema_;
    // Due sites and sites whose cost is unknown first.
    for (auto& st : sites_) {
      st.chosen = false;
      if (st.cost < 0.0) {
        st.chosen = true;
      } else if (st.last != none && s > st.last && s - st.last > max_skip_) {
        st.chosen = true;
        planned_ns_ += st.cost;
      }
    }
    // Then round-robin from the cursor while the allowance lasts; the first site that does not fit starts the
    // next step's round.
    const std::size_t n = sites_.size();
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = (cursor_ + k) % n;
      site& st = sites_[i];
      if (st.chosen) continue;
      if (planned_ns_ + st.cost > allowance) {
        cursor_ = i;
        return;
      }
      st.chosen = true;
      planned_ns_ += st.cost;
    }
  }
  bool admit(std::uint32_t id) const { return id < sites_.size() && sites_[id].chosen; }
  /// Site `id` was checked at step `step` in `ns`.
  void charge(std::uint32_t id, std::uint64_t step, std::uint64_t ns) {
    if (id >= sites_.size()) return;
    site& st = sites_[id];
    if (st.last != none && step > st.last) {
      const std::uint64_t gap = step - st.last - 1;
      if (gap > max_gap_) max_gap_ = gap;
    }
    if (st.last == step && st.cost >= 0.0) {
      st.cost += static_cast<double>(ns);  // checked again in the same step (a loop): its cost per step adds up
    } else if (st.cost < 0.0) {
      st.cost = static_cast<double>(ns);
    } else {
      st.cost += 0.3 * (static_cast<double>(ns) - st.cost);
    }
    st.last = step;
  }
  /// The longest run of steps any site went unchecked between two checks.
  std::uint64_t max_gap() const { return max_gap_; }
  double planned_ns() const { return planned_ns_; }
  double plain_step_ns() const { return plain_ema_; }

 private:
  static constexpr std::uint64_t none = ~std::uint64_t{0};
  struct site {
    std::uint64_t last = none;  ///< last step checked
    double cost = -1.0;         ///< EMA of its check time per step, ns; < 0: unknown
    bool chosen = true;
  };
  std::vector<site> sites_;
  std::size_t cursor_ = 0;
  double budget_ = 0.0;
  std::uint32_t max_skip_ = 8;
  double plain_ema_ = 0.0;
  double planned_ns_ = 0.0;
  std::uint64_t max_gap_ = 0;
};

/// What the controller checked and what it cost.
struct control_report {
  std::uint64_t steps = 0;          ///< step boundaries seen
  std::uint64_t checks = 0;         ///< tensors checked
  std::uint64_t skipped = 0;        ///< tensors skipped (config or budget)
  std::uint64_t bytes = 0;          ///< bytes read by the checks
  std::uint64_t check_ns = 0;       ///< time in the checks
  std::uint64_t step_ns = 0;        ///< wall time of the completed steps
  std::uint64_t last_checks = 0, last_skipped = 0, last_bytes = 0, last_check_ns = 0, last_step_ns = 0;
  std::uint64_t sites = 0;
  std::uint64_t max_gap = 0;        ///< longest run of steps a site went unchecked (budget sampling)
  std::uint64_t reloads = 0;        ///< configurations applied from the file
  std::uint64_t errors = 0;         ///< bad files / variables reported
  std::string last_error;
  bool enabled = true;              ///< checking on for the current step
  double budget = 0.0;

  /// nanscope's time over the rest of the step time (the overhead ratio the budget bounds).
  double overhead() const {
    return step_ns > check_ns ? static_cast<double>(check_ns) / static_cast<double>(step_ns - check_ns) : 0.0;
  }
  std::string text() const {
    char buf[640];
    std::snprintf(buf, sizeof buf,
                  "nanscope control: %llu steps, %llu sites, %llu checks (%llu skipped), %.3f MB read, %.3f ms in "
                  "checks of %.3f ms in steps (overhead %.2f%%%s), longest skip %llu steps, %llu reloads, %llu "
                  "errors\n",
                  static_cast<unsigned long long>(steps), static_cast<unsigned long long>(sites),
                  static_cast<unsigned long long>(checks), static_cast<unsigned long long>(skipped),
                  static_cast<double>(bytes) / 1e6, static_cast<double>(check_ns) / 1e6,
                  static_cast<double>(step_ns) / 1e6, overhead() * 100.0,
                  budget > 0 ? (", budget " + std::to_string(budget * 100.0).substr(0, 5) + "%").c_str() : "",
                  static_cast<unsigned long long>(max_gap), static_cast<unsigned long long>(reloads),
                  static_cast<unsigned long long>(errors));
    return buf;
  }
};

struct controller_options {
  std::string config_path;     ///< TOML file; empty: NANSCOPE_CONFIG (when read_environment), else none
  bool read_environment = true;
  control_config base;         ///< the configuration before the file and the environment
  /// Monotonic clock in ns (tests inject one); default std::chrono::steady_clock.
  std::function<std::uint64_t()> now_ns;
  /// Variable lookup (tests inject one); default std::getenv.
  std::function<const char*(const char*)> getenv;
  /// Where errors go; default: the attached recorder's sink, else stderr.
  std::function<void(std::string_view)> on_error;
};

/// The recorder's check gate: applies a control_config (file + environment, reloaded at step boundaries) and the
/// overhead budget. Thread-safe.
class controller : public check_gate {
 public:
  explicit controller(controller_options o = {}) : opts_(std::move(o)) {
    if (!opts_.now_ns)
      opts_.now_ns = [] {
        return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now().time_since_epoch())
                                              .count());
      };
    if (opts_.config_path.empty() && opts_.read_environment) {
      const char* p = opts_.getenv ? opts_.getenv("NANSCOPE_CONFIG") : std::getenv("NANSCOPE_CONFIG");
      if (p != nullptr) opts_.config_path = p;
    }
    std::string errs;
    std::lock_guard<std::mutex> lk(m_);
    poll_file_locked(errs, true);
    if (!cfg_) cfg_ = std::make_shared<compiled>();  // only when even the base was refused (a bad regex)
    last_boundary_ns_ = opts_.now_ns();
    pending_errors_ += errs;
  }
  /// Detaches (the recorder is enabled again) and waits for calls in progress on other threads.
  ~controller() override {
    detach();
    end_attachments();
  }
  controller(const controller&) = delete;
  controller& operator=(const controller&) = delete;

  /// Becomes `r`'s check gate (detaching from a previous recorder first, and replacing `r`'s previous gate, which
  /// is told) and applies the configuration to the current step. Do it between steps. The controller and the
  /// recorder may then end in either order (attachment.hpp).
  void attach(recorder& r) {
    detach();
    connection c = r.connect_gate(*this);
    {
      std::lock_guard<std::mutex> lk(conn_m_);
      conn_ = std::move(c);
    }
    bool on = true;
    {
      std::lock_guard<std::mutex> lk(m_);
      on = cfg_->cfg.step_on(r.step());
      report_.enabled = on;
    }
    r.set_enabled(on);
    flush_errors();
  }
  /// Stops being the gate of the recorder attach() named (which is enabled again); waits for calls in progress on
  /// other threads. Nothing when not attached.
  void detach() noexcept {
    connection c;
    {
      std::lock_guard<std::mutex> lk(conn_m_);
      c = std::move(conn_);
    }
    c.with_recorder([](recorder& r) { r.set_enabled(true); });
    c.disconnect();
  }
  /// Whether attach() attached it and neither side has ended that attachment since.
  bool attached() const {
    std::lock_guard<std::mutex> lk(conn_m_);
    return conn_.connected();
  }
  /// The recorder ended, or replaced this gate (set_gate, connect_gate): it is enabled again (this controller may
  /// have switched it off for the step).
  void detached(recorder& r) noexcept override { r.set_enabled(true); }

  /// Re-reads the file if it changed (what every step boundary does). Returns true when a new configuration was
  /// applied.
  bool reload_if_changed() {
    std::string errs;
    bool applied = false;
    {
      std::lock_guard<std::mutex> lk(m_);
      applied = poll_file_locked(errs, false);
      pending_errors_ += errs;
    }
    flush_errors();
    return applied;
  }
  /// Replaces the programmatic base configuration (file and environment still apply on top).
  void set_base(control_config c) {
    std::string errs;
    {
      std::lock_guard<std::mutex> lk(m_);
      opts_.base = std::move(c);
      poll_file_locked(errs, true);  // the file and the environment again, on top of the new base
      pending_errors_ += errs;
    }
    flush_errors();
  }
  control_config config() const {
    std::lock_guard<std::mutex> lk(m_);
    return cfg_->cfg;
  }
  control_report report() const {
    std::lock_guard<std::mutex> lk(m_);
    control_report r = report_;
    r.sites = sched_.size();
    r.max_gap = sched_.max_gap();
    r.budget = cfg_->cfg.budget;
    return r;
  }

  // --- check_gate ---
  /// Allocates only for a site seen the first time; when that fails (memory is short), the tensor is checked
  /// without the site's rules and the failure is counted (report().errors).
  std::uint32_t admit(const frame& f, tensor_role, std::string_view context, check_mode& mode) noexcept override {
    std::lock_guard<std::mutex> lk(m_);
    std::uint32_t id = 0;
#if NANSCOPE_IMPL_EXCEPTIONS
    try {
      id = site_id_locked(f.module_path, context);
    } catch (...) {
      note_no_memory_locked();
      return untracked;
    }
#else
    id = site_id_locked(f.module_path, context);
#endif
    site_state& st = sites_[id];
    if (st.generation != generation_) resolve_locked(st, f.module_path, key_);
    const std::uint64_t s = f.step;
    const bool on = st.on && cfg_->cfg.step_on(s) && s >= st.from && s <= st.to && (s - st.from) % st.every == 0 &&
                    sched_.admit(id);
    if (!on) {
      ++report_.skipped;
      ++step_skipped_;
      return skip;
    }
    if (st.has_mode) mode = st.mode;
    st.admitted_step = s;
    return id;
  }
  void checked(std::uint32_t ticket, std::uint64_t bytes, std::uint64_t ns) noexcept override {
    std::lock_guard<std::mutex> lk(m_);
    if (ticket >= sites_.size()) return;  // `untracked`
    sched_.charge(ticket, sites_[ticket].admitted_step, ns);
    ++report_.checks;
    report_.bytes += bytes;
    report_.check_ns += ns;
    ++step_checks_;
    step_bytes_ += bytes;
    step_check_ns_ += ns;
  }
  /// Re-reads the file if it changed and plans the next step. What cannot be done for want of memory is counted
  /// (report().errors) and the previous configuration kept: nothing here throws or ends the process.
  void step_boundary(std::uint64_t next) noexcept override {
#if NANSCOPE_IMPL_EXCEPTIONS
    try {
      boundary(next);
    } catch (...) {
      std::lock_guard<std::mutex> lk(m_);
      note_no_memory_locked();
    }
#else
    boundary(next);
#endif
  }

 private:
  /// admit's ticket for a tensor checked without a site (its site could not be recorded).
  static constexpr std::uint32_t untracked = 0xFFFFFFFEu;

  /// The id of site path:context, made on its first sight (may throw std::bad_alloc: nothing changes then).
  std::uint32_t site_id_locked(const std::string& path, std::string_view context) {
    key_.assign(path);
    key_ += ':';
    key_.append(context.data(), context.size());
    auto it = ids_.find(key_);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<std::uint32_t>(sites_.size());
    sites_.reserve(sites_.size() + 1);
    sched_.reserve_site();
    ids_.emplace(key_, id);  // the last step that may throw; the two below cannot after the reserves
    sites_.push_back(site_state{});
    sched_.add_site();
    return id;
  }
  /// Memory ran out in a noexcept hook: counted, and said on stderr without allocating.
  void note_no_memory_locked() noexcept {
    ++report_.errors;
    ++no_memory_;
    std::fputs("nanscope: controller: out of memory in a step boundary or check; the previous configuration and "
               "schedule stay\n",
               stderr);
  }

  void boundary(std::uint64_t next) {
    bool on = true;
    {
      std::lock_guard<std::mutex> lk(m_);
      const std::uint64_t now = opts_.now_ns();
      const std::uint64_t elapsed = now > last_boundary_ns_ ? now - last_boundary_ns_ : 0;
      last_boundary_ns_ = now;
      ++report_.steps;
      report_.step_ns += elapsed;
      report_.last_step_ns = elapsed;
      report_.last_checks = step_checks_;
      report_.last_skipped = step_skipped_;
      report_.last_bytes = step_bytes_;
      report_.last_check_ns = step_check_ns_;
      const std::uint64_t plain = elapsed > step_check_ns_ ? elapsed - step_check_ns_ : 0;
      step_checks_ = step_skipped_ = step_bytes_ = step_check_ns_ = 0;
      std::string errs;
#if NANSCOPE_IMPL_EXCEPTIONS
      try {
        poll_file_locked(errs, false);
        pending_errors_ += errs;
      } catch (...) {  // out of memory while reading: keep the configuration
        note_no_memory_locked();
      }
#else
      poll_file_locked(errs, false);
      pending_errors_ += errs;
#endif
      sched_.begin_step(next, plain);
      on = cfg_->cfg.step_on(next);
      report_.enabled = on;
    }
    current().with_recorder([&](recorder& r) { r.set_enabled(on); });
    flush_errors();
  }

  attachment_ref current() const {
    std::lock_guard<std::mutex> lk(conn_m_);
    return conn_.ref();
  }

  struct compiled {
    control_config cfg;
#if NANSCOPE_IMPL_HAS_REGEX
    std::vector<std::regex> regexes;  ///< parallel to cfg.sites (empty entries for globs)
#endif
  };
  struct site_state {
    std::uint64_t generation = 0;
    bool on = true;
    bool has_mode = false;
    check_mode mode = check_mode::stats;
    std::uint64_t every = 1, from = 0, to = no_step_limit;
    std::uint64_t admitted_step = 0;  ///< the step of the last admit (for checked())
  };
  struct file_state {
    bool exists = false;
    std::uint64_t dev = 0, ino = 0, size = 0;
    std::int64_t mtime_s = 0, mtime_ns = 0;
    bool operator==(const file_state& o) const {
      return exists == o.exists && dev == o.dev && ino == o.ino && size == o.size && mtime_s == o.mtime_s &&
             mtime_ns == o.mtime_ns;
    }
  };

  void resolve_locked(site_state& st, const std::string& path, const std::string& key) {
    const control_config& c = cfg_->cfg;
    st = site_state{};
    st.generation = generation_;
    st.on = c.sites_default_on;
    st.has_mode = c.has_mode;
    st.mode = c.mode;
    for (std::size_t i = 0; i < c.sites.size(); ++i) {
      const site_select& s = c.sites[i];
      const bool with_context = s.pattern.find(':') != std::string::npos;
      const std::string& subject = with_context ? key : path;
      bool match = false;
      if (s.regex) {
#if NANSCOPE_IMPL_HAS_REGEX
        match = std::regex_match(subject, cfg_->regexes[i]);
#endif
      } else {
        match = detail::glob_match(s.pattern, subject);
      }
      if (!match) continue;
      st.on = s.on;
      if (s.has_mode) {
        st.has_mode = true;
        st.mode = s.mode;
      }
      st.every = s.every;
      st.from = s.from;
      st.to = s.to;
    }
  }

  /// Compiles `c` (regexes) and makes it current. Returns false (keeping the current one) on a bad regex.
  bool install_locked(const control_config& c, std::string& errs) {
    auto next = std::make_shared<compiled>();
    next->cfg = c;
    if (next->cfg.every == 0) next->cfg.every = 1;
    for (auto& s : next->cfg.sites)
      if (s.every == 0) s.every = 1;
#if NANSCOPE_IMPL_HAS_REGEX
    for (const auto& s : next->cfg.sites) {
      if (!s.regex) {
        next->regexes.emplace_back();
        continue;
      }
      try {
        next->regexes.emplace_back(s.pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        note_error_locked(errs, "nanscope: bad site regex '" + s.pattern + "': " + e.what() +
                                    "; keeping the previous configuration\n");
        return false;
      }
    }
#else
    for (const auto& s : next->cfg.sites)
      if (s.regex) {
        note_error_locked(errs, "nanscope: site regex '" + s.pattern +
                                    "' needs exceptions (std::regex); keeping the previous configuration\n");
        return false;
      }
#endif
    cfg_ = std::move(next);
    ++generation_;
    sched_.configure(cfg_->cfg.budget, cfg_->cfg.max_skip);
    return true;
  }

  void note_error_locked(std::string& errs, const std::string& e) {
    errs += e;
    ++report_.errors;
    report_.last_error = e;
  }

  static constexpr long long max_config_bytes = 1 << 20;  ///< a larger config file is refused
  /// Stats the file; on a change (or `force`) re-reads and applies it, the environment on top. Returns true when
  /// a configuration was applied.
  bool poll_file_locked(std::string& errs, bool force) {
    if (opts_.config_path.empty()) {
      if (!force) return false;
      control_config c = opts_.base;
      if (opts_.read_environment) env_overlay(c, errs);
      return install_locked(c, errs);
    }
    file_state now;
    struct stat sb {};
    if (::stat(opts_.config_path.c_str(), &sb) == 0) {
      now.exists = true;
      now.dev = static_cast<std::uint64_t>(sb.st_dev);
      now.ino = static_cast<std::uint64_t>(sb.st_ino);
      now.size = static_cast<std::uint64_t>(sb.st_size);
      now.mtime_s = static_cast<std::int64_t>(sb.st_mtim.tv_sec);
      now.mtime_ns = static_cast<std::int64_t>(sb.st_mtim.tv_nsec);
    }
    if (!force && polled_ && now == file_state_) return false;
    polled_ = true;
    file_state_ = now;
    control_config c = opts_.base;
    if (now.exists) {
      std::string error, text;
      // only a regular file of a config's size, checked on the open descriptor: a pipe would block the step
      // boundary until a writer came, a directory read as an empty file (the defaults, silently), a device
      // would never end
      const detail::read_result rd = detail::read_regular_file(opts_.config_path, max_config_bytes, text);
      if (!rd.ok()) error = opts_.config_path + ": " + detail::read_failure_text(rd, max_config_bytes, "a config file's limit");
      if (!error.empty() || !parse_control_toml(text, opts_.config_path, c, error)) {
        if (error.empty()) error = opts_.config_path + ": cannot be read";
        note_error_locked(errs, "nanscope: config " + error + "; keeping the previous configuration\n");
        if (!cfg_) {  // nothing to keep yet: the base and the environment
          control_config fallback = opts_.base;
          if (opts_.read_environment) env_overlay(fallback, errs);
          install_locked(fallback, errs);
        }
        return false;
      }
      have_file_cfg_ = true;
    } else if (force || !cfg_ || have_file_cfg_) {
      // no file (yet, or any more): the base and the environment
      if (cfg_ && have_file_cfg_) note_error_locked(errs, "nanscope: config " + opts_.config_path + " is gone; using the defaults and "
                                        "the environment\n");
      have_file_cfg_ = false;
    } else {
      return false;
    }
    if (opts_.read_environment) env_overlay(c, errs);
    const bool ok = install_locked(c, errs);
    if (ok && now.exists) ++report_.reloads;
    return ok;
  }

  void env_overlay(control_config& c, std::string& errs) {
    std::string e;
    apply_environment(c, e, opts_.getenv);
    if (!e.empty() && !env_reported_) {  // the environment does not change: report its problems once
      env_reported_ = true;
      note_error_locked(errs, e);
    }
  }

  void flush_errors() {
    std::string e;
    {
      std::lock_guard<std::mutex> lk(m_);
      e.swap(pending_errors_);
    }
    if (e.empty()) return;
    if (opts_.on_error) {
      detail::call_text_callback(opts_.on_error, e, "controller_options::on_error");
    } else if (!current().with_recorder([&](recorder& r) { r.write_to_sink(e); })) {
      std::fwrite(e.data(), 1, e.size(), stderr);
      std::fflush(stderr);
    }
  }

  controller_options opts_;
  mutable std::mutex m_;
  std::shared_ptr<const compiled> cfg_;
  std::uint64_t generation_ = 1;
  file_state file_state_;
  bool polled_ = false;
  bool have_file_cfg_ = false;
  bool env_reported_ = false;
  std::string pending_errors_;
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::vector<site_state> sites_;
  std::string key_;
  budget_scheduler sched_;
  control_report report_;
  std::uint64_t last_boundary_ns_ = 0;
  std::uint64_t step_checks_ = 0, step_skipped_ = 0, step_bytes_ = 0, step_check_ns_ = 0;
  std::uint64_t no_memory_ = 0;  ///< allocation failures in the noexcept hooks
  mutable std::mutex conn_m_;    ///< guards conn_ (never held while the attachment ends or the recorder is called)
  connection conn_;              ///< the attachment attach() made
};

NANSCOPE_NAMESPACE_END

#ifdef NANSCOPE_IMPL_CONTROL_POP_DIAGNOSTICS
#undef NANSCOPE_IMPL_CONTROL_POP_DIAGNOSTICS
#pragma GCC diagnostic pop
#endif

#endif  // NANSCOPE_CONTROL_HPP
