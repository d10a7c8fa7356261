// nanscope tests — history_test.cpp: per-site history (history.hpp) against a naive recomputation from the full
// series, the rules on hand-computed series (geometric growth: exact steps to overflow), clean noisy series that
// must raise nothing, and the history fed by a recorder.
#include <nanscope/history.hpp>
#include <nanscope/recorder.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using nanscope::early_warning;
using nanscope::history_rules;
using nanscope::lp_format;
using nanscope::site_history;
using nanscope::warning_rule;

struct obs {
  std::uint64_t step;
  double abs_max;
  double rms;
};

// Least squares over the last `w` points of the series, written from the normal equations (not the centred
// form history.hpp uses), in long double.
void naive_fit(const std::vector<obs>& s, std::size_t w, double& slope, double& r2) {
  const std::size_t n = s.size() < w ? s.size() : w;
  long double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = s.size() - n; i < s.size(); ++i) {
    const long double x = static_cast<long double>(s[i].step), y = std::log2(static_cast<long double>(s[i].abs_max));
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    syy += y * y;
  }
  const long double N = static_cast<long double>(n);
  const long double vx = N * sxx - sx * sx, vy = N * syy - sy * sy, cxy = N * sxy - sx * sy;
  slope = static_cast<double>(cxy / vx);
  r2 = static_cast<double>(vy > 0 ? cxy * cxy / (vx * vy) : 1.0L);
}

TEST_CASE("history: every statistic matches a naive recomputation from the full series") {
  std::mt19937_64 gen(7);
  std::normal_distribution<double> noise(0.0, 0.7);
  std::uniform_int_distribution<int> gap(1, 3);
  history_rules r;
  r.window = 13;
  r.warmup_steps = 9;
  r.ema_alpha = 0.15;
  r.jump_factor = r.warmup_factor = r.overflow_steps = 0.0;  // statistics only
  site_history h(r);
  std::vector<obs> series;
  std::uint64_t step = 5;
  for (int i = 0; i < 200; ++i) {
    step += static_cast<std::uint64_t>(gap(gen));  // sampled sites see gaps: x is the step number
    const double a = std::exp2(3.0 + 0.01 * i + noise(gen));
    const double rms = a / (2.0 + std::fabs(noise(gen)));
    series.push_back({step, a, rms});
    CHECK(h.observe(step, (i % 2) ? a : -a, rms).empty());  // the sign of abs_max is ignored

    // naive recomputation over the whole series so far
    double ema = std::log2(series[0].abs_max), mx = ema, wmax = 0.0, ema_rms = series[0].rms;
    for (std::size_t k = 0; k < series.size(); ++k) {
      const double y = std::log2(series[k].abs_max);
      if (k > 0) {
        ema = (1 - r.ema_alpha) * ema + r.ema_alpha * y;
        ema_rms = (1 - r.ema_alpha) * ema_rms + r.ema_alpha * series[k].rms;
      }
      mx = std::max(mx, y);
      if (k < r.warmup_steps) wmax = std::max(wmax, series[k].abs_max);
    }
    CHECK(h.count() == series.size());
    CHECK(h.last_step() == step);
    CHECK(h.ema_log2() == doctest::Approx(ema).epsilon(1e-12));
    CHECK(h.max_log2() == doctest::Approx(mx).epsilon(1e-12));
    CHECK(h.warmup_max() == wmax);
    CHECK(h.last_rms() == rms);
    CHECK(h.ema_rms() == doctest::Approx(ema_rms).epsilon(1e-12));
    if (series.size() >= 2) {
      double slope = 0, r2 = 0;
      naive_fit(series, r.window, slope, r2);
      CHECK(h.slope() == doctest::Approx(slope).epsilon(1e-9));
      CHECK(h.fit_r2() == doctest::Approx(r2).epsilon(1e-9));
      CHECK(h.trend_points() == std::min<std::size_t>(series.size(), r.window));
    }
  }
}

TEST_CASE("history: zero, negative zero and non-finite abs_max are not observations") {
  site_history h;
  CHECK(h.observe(1, 0.0).empty());
  CHECK(h.observe(2, -0.0).empty());
  CHECK(h.observe(3, std::numeric_limits<double>::infinity()).empty());
  CHECK(h.observe(4, std::numeric_limits<double>::quiet_NaN()).empty());
  CHECK(h.count() == 0);
  CHECK(h.steps_to_overflow() == -1.0);
  h.observe(5, 8.0);
  CHECK(h.count() == 1);
  CHECK(h.last_log2() == 3.0);
}

TEST_CASE("history: geometric growth gives the exact steps to overflow, and the warning at the first step it is "
          "below the threshold") {
  struct fmt_case {
    lp_format f;
    double max_finite;
  };
  for (fmt_case fc : {fmt_case{lp_format::f16, 65504.0}, fmt_case{lp_format::e4m3fn, 448.0},
                      fmt_case{lp_format::e5m2, 57344.0}, fmt_case{lp_format::bf16, 3.3895313892515355e38}}) {
    CAPTURE(nanscope::lp_format_name(fc.f));
    history_rules r;
    r.target = fc.f;
    r.overflow_steps = 40.0;
    r.jump_factor = r.warmup_factor = 0.0;
    site_history h(r);
    const double a0 = 0.01, g = 1.3;  // abs_max = a0 * g^s
    const double k = std::log2(g);
    bool fired = false;
    for (std::uint64_t s = 0; s < 2000 && !fired; ++s) {
      const double a = a0 * std::pow(g, static_cast<double>(s));
      const auto ws = h.observe(s, a);
      const double exact = (std::log2(fc.max_finite) - std::log2(a)) / k;
      if (h.trend_points() >= r.min_points) {
        CHECK(h.slope() == doctest::Approx(k).epsilon(1e-9));
        CHECK(h.steps_to_overflow() == doctest::Approx(exact).epsilon(1e-9));
      } else {
        CHECK(h.steps_to_overflow() == -1.0);
      }
      const bool expect = h.trend_points() >= r.min_points && exact < r.overflow_steps;
      if (expect) {
        REQUIRE(ws.size() == 1);
        CHECK(ws[0].rule == warning_rule::overflow_steps);
        CHECK(ws[0].step == s);
        CHECK(ws[0].steps_to_overflow == doctest::Approx(exact).epsilon(1e-9));
        CHECK(ws[0].target == fc.f);
        // the step before did not qualify (or the trend was too short): it is the first step below the threshold
        const double before = (std::log2(fc.max_finite) - std::log2(a / g)) / k;
        CHECK((before >= r.overflow_steps || h.trend_points() == r.min_points));
        fired = true;
      } else {
        CHECK(ws.empty());
      }
    }
    CHECK(fired);
    // fires once: later steps raise nothing more until rearm()
    CHECK(h.observe(5000, 1e3).empty());
  }
}

TEST_CASE("history: the estimate is 0 once the value is beyond the limit; flat and falling trends have none") {
  history_rules r;
  r.jump_factor = r.warmup_factor = 0.0;
  site_history rising(r), flat(r), falling(r);
  for (std::uint64_t s = 0; s < 20; ++s) {
    rising.observe(s, std::exp2(10.0 + static_cast<double>(s)));  // passes 65504 (2^16) at s = 6
    flat.observe(s, 100.0);
    falling.observe(s, std::exp2(10.0 - static_cast<double>(s)));
  }
  CHECK(rising.steps_to_overflow() == 0.0);
  CHECK(rising.headroom() < 0.0);
  CHECK(flat.steps_to_overflow() == -1.0);
  CHECK(flat.slope() == 0.0);
  CHECK(falling.steps_to_overflow() == -1.0);
  CHECK(falling.slope() == doctest::Approx(-1.0));
}

TEST_CASE("history: the jump rule fires above k x EMA, only after warm-up, once") {
  history_rules r;
  r.warmup_factor = r.overflow_steps = 0.0;
  r.jump_factor = 16.0;
  r.warmup_steps = 10;
  {
    site_history h(r);
    CHECK(h.observe(0, 1.0).empty());
    CHECK(h.observe(1, 100.0).empty());  // during warm-up: no jump rule
    site_history h2(r);
    for (std::uint64_t s = 0; s < 30; ++s) CHECK(h2.observe(s, 2.0).empty());
    CHECK(h2.observe(30, 31.9).empty());  // 15.95x: below
    site_history h3(r);
    for (std::uint64_t s = 0; s < 30; ++s) CHECK(h3.observe(s, 2.0).empty());
    const auto ws = h3.observe(30, 32.5);  // 16.25x its EMA (2.0)
    REQUIRE(ws.size() == 1);
    CHECK(ws[0].rule == warning_rule::jump);
    CHECK(ws[0].ema_abs_max == doctest::Approx(2.0));
    CHECK(h3.observe(31, 1000.0).empty());  // once
    h3.rearm();
    CHECK(h3.observe(32, 1e6).size() == 1);
  }
}

TEST_CASE("history: the warm-up rule compares with the max of the first N observations") {
  history_rules r;
  r.jump_factor = r.overflow_steps = 0.0;
  r.warmup_factor = 64.0;
  r.warmup_steps = 5;
  site_history h(r);
  const double warm[] = {1.0, 3.0, 2.0, 0.5, 1.5};
  for (std::uint64_t s = 0; s < 5; ++s) CHECK(h.observe(s, warm[s]).empty());
  CHECK(h.warmup_max() == 3.0);
  CHECK(h.observe(5, 191.0).empty());      // < 64 x 3
  CHECK(h.warmup_max() == 3.0);            // later values do not move the warm-up max
  const auto ws = h.observe(6, 192.0);     // == 64 x 3
  REQUIRE(ws.size() == 1);
  CHECK(ws[0].rule == warning_rule::warmup);
  CHECK(ws[0].warmup_max == 3.0);
}

TEST_CASE("history: clean noisy series raise nothing (20 seeds, default rules)") {
  for (unsigned seed = 0; seed < 20; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 gen(seed);
    std::normal_distribution<double> z(0.0, 1.0);
    site_history h;  // defaults: fp16, jump 16x, warm-up 64x, steps-to-overflow < 100
    for (std::uint64_t s = 0; s < 3000; ++s) {
      // abs max of a tensor of ~4096 standard normals (about 3.5-4.5) times a slowly drifting scale with noise
      const double a = (3.8 + 0.3 * z(gen)) * (1.0 + 0.1 * std::sin(static_cast<double>(s) / 50.0));
      CHECK(h.observe(s, a).empty());
    }
  }
}

// A listener that counts what it is forwarded.
struct counting_listener : nanscope::scope_listener {
  int opened = 0, recorded = 0, closed = 0;
  void scope_opened(const nanscope::frame&, bool) noexcept override { ++opened; }
  void tensor_recorded(const nanscope::frame&, const nanscope::tensor_record&) noexcept override { ++recorded; }
  void scope_closed(const nanscope::frame&, bool) noexcept override { ++closed; }
};

TEST_CASE("history: attached to a recorder it is fed each output, warns to the sink, next to another listener") {
  std::string sink;
  nanscope::recorder_options o;
  o.sink = [&](std::string_view t) { sink.append(t); };
  o.warn_abs_max[0] = 0.0;  // the recorder's own threshold warning off: only the history speaks
  nanscope::recorder rec(o);
  counting_listener prev;
  rec.add_listener(&prev);
  nanscope::history_options ho;
  ho.rules.overflow_steps = 30.0;
  ho.rules.warmup_factor = 0.0;  // growth of 64x over the warm-up max would fire too (s = 28): tested above
  nanscope::history hist(ho);
  hist.attach(rec);
  CHECK(rec.listener_count() == 2);
  std::vector<float> quiet(64, 1.0f), loud(64, 1.0f);
  std::uint64_t warned_at = ~std::uint64_t{0};
  for (std::uint64_t s = 0; s < 60; ++s) {
    for (auto& v : loud) v = static_cast<float>(0.5 * std::pow(1.25, static_cast<double>(s)));
    {
      nanscope::scope root(rec, "model", "Model");
      {
        nanscope::scope a(rec, "quiet", "Linear");
        a.output(quiet);
      }
      {
        nanscope::scope b(rec, "loud", "Linear");
        b.input(quiet);  // inputs are not fed by default
        b.output(loud);
      }
    }
    if (warned_at == ~std::uint64_t{0} && !hist.warnings().empty()) warned_at = s;
  }
  const auto ws = hist.warnings();
  REQUIRE(ws.size() == 1);
  CHECK(ws[0].site == "model.loud:output");
  CHECK(ws[0].rule == warning_rule::overflow_steps);
  // 0.5 * 1.25^s passes 65504 at s = 53; the estimate drops below 30 at s = 24
  const double exact = (std::log2(65504.0) - std::log2(0.5 * std::pow(1.25, double(ws[0].step)))) / std::log2(1.25);
  CHECK(exact < 30.0);
  CHECK(exact + 1.0 >= 30.0);  // the step before was not below the threshold
  CHECK(ws[0].step == warned_at);
  CHECK(sink.find("model.loud:output will overflow fp16") != std::string::npos);
  CHECK(sink.find("model.quiet") == std::string::npos);
  nanscope::site_history q;
  REQUIRE(hist.find("model.quiet:output", q));
  CHECK(q.count() == 60);
  CHECK(q.last_rms() == doctest::Approx(1.0));
  CHECK(!hist.find("model.loud:input[0]", q));
  CHECK(prev.opened == 180);
  CHECK(prev.recorded == 60 * 3);
  CHECK(prev.closed == 180);
  hist.detach();
  CHECK(rec.listener_count() == 1);
  CHECK(rec.listener() == &prev);
}

TEST_CASE("history: per-site rules are resolved by glob on the site") {
  nanscope::history_options ho;
  ho.rules.overflow_steps = 0.0;  // off by default
  history_rules strict;
  strict.overflow_steps = 1000.0;
  strict.target = lp_format::e4m3fn;
  ho.site_rules.push_back({"enc.*", strict});
  std::vector<early_warning> got;
  ho.on_warning = [&](const early_warning& w) { got.push_back(w); };
  nanscope::history hist(ho);
  for (std::uint64_t s = 0; s < 20; ++s) {
    const double a = std::exp2(static_cast<double>(s) * 0.1);
    hist.observe("dec.0:output", s, a);
    hist.observe("enc.3:output", s, a);
  }
  REQUIRE(got.size() == 1);
  CHECK(got[0].site == "enc.3:output");
  CHECK(got[0].target == lp_format::e4m3fn);
  CHECK(hist.warnings().size() == 1);
}

}  // namespace

TEST_CASE("early_warning::text: a long site is written whole with its numbers and the newline") {
  // text() formatted into a 512-byte buffer: a long site cut the numbers and the '\n' (the next sink line ran on)
  nanscope::early_warning w;
  w.site = "model." + std::string(600, 'm') + ":output";
  w.step = 12;
  w.abs_max = 3000.0;
  w.ema_abs_max = 100.0;
  w.headroom_bits = 4.45;
  w.slope_bits = 0.5;
  for (auto rule : {nanscope::warning_rule::jump, nanscope::warning_rule::warmup, nanscope::warning_rule::overflow_steps}) {
    w.rule = rule;
    w.warmup_max = 100.0;
    w.steps_to_overflow = 1e300;  // the largest estimate prints 301 digits
    const std::string t = w.text();
    CAPTURE(t);
    CHECK(t.rfind("nanscope: early warning at step 12: " + w.site + " ", 0) == 0);
    REQUIRE_FALSE(t.empty());
    CHECK(t.back() == '\n');
    CHECK(t.find("abs_max 3000") != std::string::npos);
    CHECK(t.find("bits/step") != std::string::npos);
  }
  w.rule = static_cast<nanscope::warning_rule>(7);  // not a rule: a text, not an uninitialised buffer
  const std::string t = w.text();
  CHECK(t.find("unknown rule 7") != std::string::npos);
  CHECK(t.back() == '\n');
}
