// nanscope — history.hpp: per-site history (EMA, running max, RMS, warm-up max, trend of log2 abs-max) and the
// early-warning rules (jump, large against warm-up, steps to overflow) that warn before a site overflows.
//
//   nanscope::history hist;                 // default rules: fp16 target, see history_rules
//   hist.attach(rec);                       // fed from every output/checkpoint the recorder checks
//   ... training loop ...
//   for (const auto& w : hist.warnings()) std::puts(w.text().c_str());
//
// Memory is O(1) per site: a few doubles and a fixed ring of the last `window` values (at most
// history_max_window). The history reads only the pass results the recorder already computes (abs_max, mean,
// std); it never reads tensor data. site_history is usable on its own (observe(step, abs_max, rms)).
// Warnings go to on_warning (else the recorder's sink), to warnings(), and to the attached recorder's listeners
// (recorder::notify_warning): a tree_writer on the same recorder writes them into the layer tree.
#ifndef NANSCOPE_HISTORY_HPP
#define NANSCOPE_HISTORY_HPP

#include "config.hpp"
#include "dtype.hpp"
#include "early_warning.hpp"
#include "margins.hpp"
#include "recorder.hpp"

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// The longest trend window a site can keep (the ring is this size, whatever window a rule asks for).
inline constexpr std::uint32_t history_max_window = 64;

/// The rules of one site. A factor or threshold <= 0 disables its rule.
struct history_rules {
  lp_format target = lp_format::f16;  ///< the format whose largest finite value is the limit
  double ema_alpha = 0.1;             ///< weight of the newest value in the EMAs
  std::uint32_t warmup_steps = 10;    ///< N: the first N observations define the warm-up max; jump/warm-up rules
                                      ///< start after them
  std::uint32_t window = 16;          ///< W: observations in the least-squares trend (<= history_max_window)
  std::uint32_t min_points = 8;       ///< observations the trend needs before steps-to-overflow is estimated
  double jump_factor = 16.0;          ///< jump: abs_max > jump_factor x 2^EMA(log2 abs_max)
  double warmup_factor = 64.0;        ///< large against warm-up: abs_max >= warmup_factor x first-N max
  double overflow_steps = 100.0;      ///< steps to overflow: warn when the estimate is below this many steps
  double min_slope = 0.02;            ///< bits/step; a flatter trend gives no estimate
  double min_fit = 0.8;               ///< r^2 the trend's line must reach for an estimate (noise gives low r^2)
};

/// The statistics of one site, updated in O(window) time and O(1) memory per observation.
class site_history {
 public:
  explicit site_history(history_rules r = {}) : rules_(r) {
    if (rules_.window < 2) rules_.window = 2;
    if (rules_.window > history_max_window) rules_.window = history_max_window;
    if (rules_.min_points < 2) rules_.min_points = 2;
  }

  const history_rules& rules() const { return rules_; }
  /// Observations taken (zero, negative and non-finite abs_max values are not observations).
  std::uint64_t count() const { return count_; }
  std::uint64_t last_step() const { return last_step_; }
  double last_log2() const { return last_log2_; }
  double ema_log2() const { return ema_log2_; }        ///< EMA of log2 abs_max
  double max_log2() const { return max_log2_; }        ///< running max of log2 abs_max
  double max_abs() const { return max_abs_; }          ///< running max of abs_max
  double last_rms() const { return last_rms_; }        ///< NaN when never given
  double ema_rms() const { return ema_rms_; }          ///< EMA of the RMS values given (NaN when none)
  double warmup_max() const { return warmup_max_; }    ///< max abs_max over the first N observations
  bool warmed_up() const { return count_ >= rules_.warmup_steps; }
  /// Points in the trend (at most the window).
  std::uint32_t trend_points() const { return n_; }
  /// Least-squares slope of log2 abs_max against the step number over the window; 0 with fewer than 2 points
  /// or a single distinct step.
  double slope() const { return fit().slope; }
  double fit_r2() const { return fit().r2; }
  /// Bits between the last abs_max and the target's largest finite value (negative: already beyond it).
  double headroom() const { return headroom_bits(last_abs_, lp_dtype(rules_.target)); }
  /// Estimated steps until the site's abs_max passes the target's largest finite value: headroom / slope, from
  /// the last observation. -1 when there is no rising trend (too few points, slope below min_slope, or a fit
  /// below min_fit); 0 when the last value is already beyond the limit.
  double steps_to_overflow() const {
    if (count_ == 0) return -1.0;
    const double h = headroom();
    if (!detail::is_finite_bits(h)) return -1.0;
    if (h <= 0.0) return 0.0;
    const line l = fit();
    if (n_ < rules_.min_points || !(l.slope >= rules_.min_slope) || !(l.slope > 0.0) || !(l.r2 >= rules_.min_fit))
      return -1.0;
    return h / l.slope;
  }

  /// Adds the observation of `step` and returns the rules that fire on it (each rule fires once per site; the
  /// next firing of a rule needs reset()). `rms` < 0 or NaN: not given.
  std::vector<early_warning> observe(std::uint64_t step, double abs_max, double rms = -1.0) {
    std::vector<early_warning> out;
    const double a = abs_max < 0 ? -abs_max : abs_max;
    if (!detail::is_finite_bits(a) || !(a > 0.0)) return out;
    const double y = std::log2(a);
    const double ema_before = ema_log2_;
    const bool warm_before = warmed_up();
    // --- statistics ---
    if (count_ == 0) {
      ema_log2_ = y;
      max_log2_ = y;
      max_abs_ = a;
    } else {
      ema_log2_ += rules_.ema_alpha * (y - ema_log2_);
      if (y > max_log2_) max_log2_ = y;
      if (a > max_abs_) max_abs_ = a;
    }
    if (count_ < rules_.warmup_steps && a > warmup_max_) warmup_max_ = a;
    if (detail::is_finite_bits(rms) && rms >= 0.0) {
      last_rms_ = rms;
      ema_rms_ = rms_seen_ ? ema_rms_ + rules_.ema_alpha * (rms - ema_rms_) : rms;
      rms_seen_ = true;
    }
    ++count_;
    last_step_ = step;
    last_log2_ = y;
    last_abs_ = a;
    xs_[pos_] = static_cast<double>(step);
    ys_[pos_] = y;
    pos_ = (pos_ + 1) % rules_.window;
    if (n_ < rules_.window) ++n_;
    // --- rules ---
    auto make = [&](warning_rule r) {
      early_warning w;
      w.step = step;
      w.rule = r;
      w.target = rules_.target;
      w.abs_max = a;
      w.ema_abs_max = std::exp2(ema_before);
      w.warmup_max = warmup_max_;
      const line l = fit();
      w.slope_bits = l.slope;
      w.fit_r2 = l.r2;
      w.trend_points = n_;
      w.headroom_bits = headroom();
      w.steps_to_overflow = steps_to_overflow();
      return w;
    };
    if (warm_before && !fired(warning_rule::jump) && rules_.jump_factor > 0.0 &&
        y > ema_before + std::log2(rules_.jump_factor)) {
      fired_ |= bit(warning_rule::jump);
      out.push_back(make(warning_rule::jump));
    }
    if (warm_before && !fired(warning_rule::warmup) && rules_.warmup_factor > 0.0 && warmup_max_ > 0.0 &&
        a >= rules_.warmup_factor * warmup_max_) {
      fired_ |= bit(warning_rule::warmup);
      out.push_back(make(warning_rule::warmup));
    }
    if (!fired(warning_rule::overflow_steps) && rules_.overflow_steps > 0.0) {
      const double est = steps_to_overflow();
      if (est >= 0.0 && est < rules_.overflow_steps) {
        fired_ |= bit(warning_rule::overflow_steps);
        out.push_back(make(warning_rule::overflow_steps));
      }
    }
    return out;
  }

  /// Re-arms the rules (the statistics stay).
  void rearm() { fired_ = 0; }
  bool fired(warning_rule r) const { return (fired_ & bit(r)) != 0; }

 private:
  struct line {
    double slope = 0.0;
    double r2 = 0.0;
  };
  static unsigned bit(warning_rule r) { return 1u << static_cast<unsigned>(r); }
  line fit() const {
    line l;
    if (n_ < 2) return l;
    double mx = 0.0, my = 0.0;
    for (std::uint32_t i = 0; i < n_; ++i) {
      mx += xs_[i];
      my += ys_[i];
    }
    mx /= n_;
    my /= n_;
    double sxx = 0.0, sxy = 0.0, syy = 0.0;
    for (std::uint32_t i = 0; i < n_; ++i) {
      const double dx = xs_[i] - mx, dy = ys_[i] - my;
      sxx += dx * dx;
      sxy += dx * dy;
      syy += dy * dy;
    }
    if (!(sxx > 0.0)) return l;
    l.slope = sxy / sxx;
    l.r2 = syy > 0.0 ? (sxy * sxy) / (sxx * syy) : 1.0;
    return l;
  }

  history_rules rules_;
  std::uint64_t count_ = 0;
  std::uint64_t last_step_ = 0;
  double last_log2_ = 0.0;
  double last_abs_ = 0.0;
  double ema_log2_ = 0.0;
  double max_log2_ = 0.0;
  double max_abs_ = 0.0;
  double warmup_max_ = 0.0;
  double last_rms_ = detail::qnan;
  double ema_rms_ = detail::qnan;
  bool rms_seen_ = false;
  unsigned fired_ = 0;
  std::uint32_t pos_ = 0, n_ = 0;
  std::array<double, history_max_window> xs_{};
  std::array<double, history_max_window> ys_{};
};

/// Root mean square of a checked tensor's finite values, from the pass results (mean and m2); NaN when the
/// mode did not compute them or no value was finite.
inline double rms_of(const health_result& h) {
  const std::uint64_t n = h.finite();
  if (n == 0 || !detail::is_finite_bits(h.mean)) return detail::qnan;
  const long double var = h.m2 / static_cast<long double>(n);
  const long double ms = static_cast<long double>(h.mean) * static_cast<long double>(h.mean) + var;
  return static_cast<double>(std::sqrt(ms));
}

/// Per-site rules for sites whose key matches `pattern` (glob, as site_rule; matched against "path:context",
/// and against the module path alone).
struct history_site_rules {
  std::string pattern;
  history_rules rules;
};

struct history_options {
  history_rules rules;                          ///< defaults for every site
  std::vector<history_site_rules> site_rules;   ///< overrides; the last matching entry wins
  bool outputs_only = true;  ///< feed outputs and checkpoints only (false: inputs and parameters too)
  /// Called for each warning (on the recording thread, outside the history's lock). Default when attached: the
  /// warning's text goes to the recorder's sink (stderr without one).
  std::function<void(const early_warning&)> on_warning;
  /// Keep at most this many warnings for warnings() (the oldest are dropped).
  std::size_t keep = 1024;
};

/// The history of every site of a recorder: a scope listener fed with each checked tensor. Thread-safe.
/// attach(recorder) adds it to the recorder's listeners (next to a layer-tree writer, for example).
class history : public scope_listener {
 public:
  explicit history(history_options o = {}) : opts_(std::move(o)) {}
  ~history() override { end_attachments(); }
  history(const history&) = delete;
  history& operator=(const history&) = delete;

  /// Adds this history to `r`'s listeners (it detaches from a previous recorder first). The history and the
  /// recorder may then end in either order (attachment.hpp).
  void attach(recorder& r) {
    detach();
    connection c = r.connect(*this);
    std::lock_guard<std::mutex> lk(conn_m_);
    conn_ = std::move(c);
  }
  /// Leaves the recorder's listeners (waits for calls in progress on other threads).
  void detach() {
    connection c;
    {
      std::lock_guard<std::mutex> lk(conn_m_);
      c = std::move(conn_);
    }
    c.disconnect();
  }
  /// Whether attach() attached it and neither side has ended that attachment since.
  bool attached() const {
    std::lock_guard<std::mutex> lk(conn_m_);
    return conn_.connected();
  }

  /// Feeds one observation of `site` (standalone use, or a site the recorder does not see). Returns the
  /// warnings it raised (also reported through on_warning / the sink).
  std::vector<early_warning> observe(std::string_view site, std::uint64_t step, double abs_max, double rms = -1.0) {
    std::vector<early_warning> ws;
    {
      std::lock_guard<std::mutex> lk(m_);
      site_history& h = site_locked(site);
      ws = h.observe(step, abs_max, rms);
      for (auto& w : ws) {
        w.site.assign(site.data(), site.size());
        all_.push_back(w);
        if (all_.size() > opts_.keep && !all_.empty()) all_.erase(all_.begin());
      }
    }
    for (const auto& w : ws) deliver(w);
    return ws;
  }

  /// A copy of the site's history (nullptr-like empty optional: `found` false when the site is unknown).
  bool find(std::string_view site, site_history& out) const {
    std::lock_guard<std::mutex> lk(m_);
    auto it = sites_.find(std::string(site));
    if (it == sites_.end()) return false;
    out = it->second;
    return true;
  }
  std::size_t site_count() const {
    std::lock_guard<std::mutex> lk(m_);
    return sites_.size();
  }
  /// Every warning raised so far (at most options().keep), oldest first.
  std::vector<early_warning> warnings() const {
    std::lock_guard<std::mutex> lk(m_);
    return all_;
  }
  /// Forgets every site and warning.
  void clear() {
    std::lock_guard<std::mutex> lk(m_);
    sites_.clear();
    all_.clear();
  }
  const history_options& options() const { return opts_; }

  // --- scope_listener ---
  void scope_opened(const frame&, bool) noexcept override {}
  void tensor_recorded(const frame& f, const tensor_record& rec) noexcept override {
    if (rec.is_tensor && rec.health.is_float() && rec.health.reads_data() &&
        (!opts_.outputs_only || rec.role == tensor_role::output || rec.role == tensor_role::checkpoint)) {
#if NANSCOPE_IMPL_EXCEPTIONS
      try {  // a listener must not throw: a failing sink, or memory running out, loses the warning, not the run
        std::string key = f.module_path;
        key += ':';
        key += rec.context;
        forward(f, observe(key, f.step, rec.health.abs_max, rms_of(rec.health)));
      } catch (...) {
      }
#else
      std::string key = f.module_path;
      key += ':';
      key += rec.context;
      forward(f, observe(key, f.step, rec.health.abs_max, rms_of(rec.health)));
#endif
    }
  }
  void scope_closed(const frame&, bool) noexcept override {}

 private:
  site_history& site_locked(std::string_view site) {
    std::string key(site);
    auto it = sites_.find(key);
    if (it != sites_.end()) return it->second;
    // Resolved once per site: no pattern matching on later observations.
    history_rules r = opts_.rules;
    const std::string_view path = site.substr(0, site.find(':'));
    for (const auto& sr : opts_.site_rules)
      if (detail::glob_match(sr.pattern, site) || detail::glob_match(sr.pattern, path)) r = sr.rules;
    return sites_.emplace(std::move(key), site_history(r)).first->second;
  }
  /// The warnings raised by a tensor recorded into `f` go to the attached recorder's listeners (the layer tree
  /// writes them into the node of `f`).
  void forward(const frame& f, const std::vector<early_warning>& ws) {
    if (ws.empty()) return;
    current().with_recorder([&](recorder& r) {
      for (const auto& w : ws) r.notify_warning(f, w);
    });
  }
  attachment_ref current() const {
    std::lock_guard<std::mutex> lk(conn_m_);
    return conn_.ref();
  }
  void deliver(const early_warning& w) {
    if (opts_.on_warning) {
      opts_.on_warning(w);
      return;
    }
    const std::string t = w.text();
    if (!current().with_recorder([&](recorder& r) { r.write_to_sink(t); })) {
      std::fwrite(t.data(), 1, t.size(), stderr);
      std::fflush(stderr);
    }
  }

  history_options opts_;
  mutable std::mutex m_;
  std::unordered_map<std::string, site_history> sites_;
  std::vector<early_warning> all_;
  mutable std::mutex conn_m_;  ///< guards conn_ (never held while the attachment ends or the recorder is called)
  connection conn_;             ///< the attachment attach() made
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_HISTORY_HPP
