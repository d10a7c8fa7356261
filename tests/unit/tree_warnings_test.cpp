// nanscope tests — tree_warnings_test.cpp: early warnings of a history (history.hpp) attached to the same
// recorder as a layer-tree writer (tree.hpp) are written into both tree files. Checked through the files,
// parsed with nlohmann-json, against history::warnings() (the independent record of what was raised) and, for
// the steps-to-overflow estimate, against the closed form of geometric growth:
//  - every pass's root list ("nanscope" -> "warnings") equals the warnings history raised at that step, field by
//    field; kept nodes carry their own ("nanscope_warnings"), pruned nodes' warnings are in the root list only;
//  - without warnings (or with extras off) the files are byte-identical to a run without a history, and with
//    warnings they differ from it by the new keys only;
//  - hostile site names (quotes, backslashes, control characters, invalid UTF-8) give strict ASCII JSON.
#include <doctest/doctest.h>
#include "support/files.hpp"

#include <nanscope/history.hpp>
#include <nanscope/nanscope.hpp>

#if NANSCOPE_TEST_HAVE_JSON
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {
using json = nlohmann::json;
using nanscope::early_warning;
using nanscope::scope;

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

nanscope::recorder_options quiet(std::string* sink) {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.warn_abs_max[0] = 0.0;  // the recorder's own fp16 threshold warning off: only the history speaks
  o.sink = [sink](std::string_view t) {
    if (sink != nullptr) sink->append(t.data(), t.size());
  };
  return o;
}

/// Net: layers.0 .. layers.3 (blocks of one Linear each; pruning keeps blocks 0 and 3) and a checkpoint in the
/// root. With `grow`: layers.1.fc's output is 0.5 * 1.3^s, layers.3.fc's 0.25 * 1.2^s, layers.2.fc's jumps 32x
/// at step 20, and the checkpoint "probe" is 2^(s/2); everything else is constant.
struct net {
  bool grow = true;
  std::string fc1_name = "fc";  ///< layers.1's Linear (scope names are relative to the enclosing scope)
  void run(nanscope::recorder& rec, std::uint64_t s) const {
    const double ds = static_cast<double>(s);
    std::vector<float> x(16, 0.5f);
    scope root(rec, "", "Net");
    root.input(x);
    for (int i = 0; i < 4; ++i) {
      const std::string blk = "layers." + std::to_string(i);
      scope b(rec, blk, "Block");
      scope fc(rec, i == 1 ? fc1_name : std::string("fc"), "Linear");
      double v = 0.5;
      if (grow && i == 1) v = 0.5 * std::pow(1.3, ds);
      if (grow && i == 2 && s >= 20) v = 16.0;
      if (grow && i == 3) v = 0.25 * std::pow(1.2, ds);
      std::vector<float> y(16, static_cast<float>(v));
      y[3] = static_cast<float>(-v);
      fc.input(x);
      fc.output(y);
    }
    std::vector<float> probe(8, static_cast<float>(grow ? std::exp2(0.5 * ds) : 1.0));
    rec.checkpoint(probe, "probe");
  }
};

double num(const json& j) {
  REQUIRE(j.is_number());
  return j.get<double>();
}

/// One written warning against the history's record (every field; module_path checked by the caller).
void check_entry(const json& e, const early_warning& w) {
  CAPTURE(e.dump());
  CHECK(e.at("site").get<std::string>() == w.site);
  CHECK(e.at("step").get<std::uint64_t>() == w.step);
  CHECK(e.at("rule").get<std::string>() == nanscope::name(w.rule));
  CHECK(e.at("target").get<std::string>() == nanscope::lp_format_name(w.target));
  CHECK(num(e.at("abs_max")) == w.abs_max);  // shortest round-trip digits: exact
  CHECK(num(e.at("ema_abs_max")) == w.ema_abs_max);
  CHECK(num(e.at("warmup_max")) == w.warmup_max);
  CHECK(num(e.at("slope_bits_per_step")) == w.slope_bits);
  CHECK(num(e.at("r2")) == w.fit_r2);
  CHECK(e.at("trend_points").get<std::uint32_t>() == w.trend_points);
  CHECK(num(e.at("headroom_bits")) == w.headroom_bits);
  if (w.steps_to_overflow < 0) CHECK(e.at("steps_to_overflow").is_null());
  else CHECK(num(e.at("steps_to_overflow")) == w.steps_to_overflow);
  std::string text = w.text();
  REQUIRE(!text.empty());
  text.pop_back();  // the final newline
  CHECK(e.at("text").get<std::string>() == text);
}

void collect_nodes(const json& n, std::map<std::string, const json*>& out) {
  // a checkpoint's node carries its scope's path: the warnings are the scope's own node's, not the checkpoint's
  if (!n.contains("nanscope_checkpoint")) out[n.at("module_path").get<std::string>()] = &n;
  if (n.contains("children"))
    for (const auto& c : n.at("children")) collect_nodes(c, out);
}

/// Removes the keys of the early warnings (and the run id of the pair, which differs between writers).
void strip(json& n, bool root) {
  n.erase("nanscope_warnings");
  if (root) {
    if (n.contains("nanscope")) n["nanscope"].erase("warnings");
    if (n.contains("nanscope_pair")) n["nanscope_pair"].erase("run");
  }
  if (n.contains("children"))
    for (auto& c : n["children"]) strip(c, false);
}

bool any_warning_key(const std::string& text) { return text.find("warnings\"") != std::string::npos; }

}  // namespace

TEST_CASE("tree warnings: each pass's files carry the warnings history raised in that pass, field by field") {
  const std::string dir = nstest::make_temp_dir("tree_warn");
  std::string sink;
  nanscope::recorder rec(quiet(&sink));
  nanscope::history hist;  // default rules, fp16 target
  hist.attach(rec);
  nanscope::tree_writer tree(rec, nanscope::tree_options{}.in(dir).with_rank(0));
  const net model;
  std::size_t written = 0, node_entries = 0, passes_with = 0;
  std::map<std::string, int> rules_seen;
  for (std::uint64_t s = 0; s < 30; ++s) {
    const std::size_t before = hist.warnings().size();
    model.run(rec, s);
    const std::vector<early_warning> all = hist.warnings();
    const std::vector<early_warning> now(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
    for (const auto& w : now) REQUIRE(w.step == s);
    const std::string summary_text = nstest::read_existing(tree.summary_path());
    const std::string full_text = nstest::read_existing(tree.full_path());
    const json summary = json::parse(summary_text), full = json::parse(full_text);
    CHECK(summary.at("nanscope").at("step").get<std::uint64_t>() == s);
    if (now.empty()) {
      CHECK_FALSE(any_warning_key(summary_text));
      CHECK_FALSE(any_warning_key(full_text));
      continue;
    }
    ++passes_with;
    for (const json* doc : {&summary, &full}) {
      const json& list = doc->at("nanscope").at("warnings");
      REQUIRE(list.size() == now.size());
      std::map<std::string, const json*> nodes;
      collect_nodes(*doc, nodes);
      std::map<std::string, std::vector<std::size_t>> by_node;  // module_path -> indices into `now`
      for (std::size_t i = 0; i < now.size(); ++i) {
        check_entry(list[i], now[i]);
        // the site's module path, in the tree's "{Class}.path" form (the checkpoint's: its scope, the root)
        const std::string path = now[i].site.substr(0, now[i].site.find(':'));
        const std::string expect_path = path.empty() ? "Net" : "Net." + path;
        CHECK(list[i].at("module_path").get<std::string>() == expect_path);
        by_node[expect_path].push_back(i);
        ++rules_seen[list[i].at("rule").get<std::string>()];
      }
      // kept nodes carry exactly their own warnings (no module_path there); pruned ones are not in the file
      for (const auto& kv : nodes) {
        const json& n = *kv.second;
        const auto it = by_node.find(kv.first);
        if (it == by_node.end()) {
          CHECK_FALSE(n.contains("nanscope_warnings"));
          continue;
        }
        REQUIRE(n.contains("nanscope_warnings"));
        const json& own = n.at("nanscope_warnings");
        REQUIRE(own.size() == it->second.size());
        for (std::size_t k = 0; k < own.size(); ++k) {
          CHECK_FALSE(own[k].contains("module_path"));
          check_entry(own[k], now[it->second[k]]);
          ++node_entries;
        }
      }
      // the native tree's pruning never drops a node with a warning (HuggingFace's would drop layers.1)
      for (const auto& kv : by_node) CHECK_MESSAGE(nodes.count(kv.first) == 1, kv.first);
      CHECK(nodes.count("Net.layers.3.fc") == 1);
    }
    // the two files of the pass carry the same warnings
    CHECK(summary.at("nanscope").at("warnings") == full.at("nanscope").at("warnings"));
    written += now.size();
    // ... and the sink got each warning's text too
    for (const auto& w : now) CHECK(sink.find(w.text()) != std::string::npos);
  }
  // every warning history raised was in some pass's files: layers.1/3 and the probe by the trend, the jump of
  // layers.2 at step 20; the root list of each pass holds them all
  const auto all = hist.warnings();
  CHECK(written == all.size());
  CHECK(passes_with >= 2);
  CHECK(rules_seen["steps-to-overflow"] >= 3 * 2);  // three sites, both files
  CHECK(rules_seen["jump"] >= 2);
  CHECK(node_entries >= 2);  // at least layers.3.fc's and the probe's (on the root) in both files
  // the estimate of layers.1.fc (0.5 * 1.3^s, an exact straight line in log2) is the closed form
  bool found = false;
  for (const auto& w : all) {
    if (w.site != "layers.1.fc:output" || w.rule != nanscope::warning_rule::overflow_steps) continue;
    found = true;
    const double a = static_cast<double>(static_cast<float>(0.5 * std::pow(1.3, static_cast<double>(w.step))));
    const double exact = (std::log2(65504.0) - std::log2(a)) / std::log2(1.3);
    CHECK(w.steps_to_overflow == doctest::Approx(exact).epsilon(1e-4));
  }
  CHECK(found);
}

TEST_CASE("tree warnings: without warnings the files are byte-identical to a run without a history") {
  for (const bool extras : {true, false}) {
    for (const bool grow : {false, true}) {
      // extras off: no warning is written even when history raises some
      if (grow && extras) continue;
      CAPTURE(extras);
      CAPTURE(grow);
      const std::string with_dir = nstest::make_temp_dir("tree_warn"), without_dir = nstest::make_temp_dir("tree_warn");
      net model;
      model.grow = grow;
      nanscope::history hist;
      std::string a_summary, a_full, b_summary, b_full;
      {
        nanscope::recorder rec(quiet(nullptr));
        hist.attach(rec);
        nanscope::tree_writer tree(rec, nanscope::tree_options{}.in(with_dir).with_rank(0).with_extras(extras));
        for (std::uint64_t s = 0; s < 25; ++s) model.run(rec, s);
        a_summary = replace_all(nstest::read_existing(tree.summary_path()), tree.run_id(), "RUN");
        a_full = replace_all(nstest::read_existing(tree.full_path()), tree.run_id(), "RUN");
        hist.detach();
      }
      {
        nanscope::recorder rec(quiet(nullptr));
        nanscope::tree_writer tree(rec, nanscope::tree_options{}.in(without_dir).with_rank(0).with_extras(extras));
        for (std::uint64_t s = 0; s < 25; ++s) model.run(rec, s);
        b_summary = replace_all(nstest::read_existing(tree.summary_path()), tree.run_id(), "RUN");
        b_full = replace_all(nstest::read_existing(tree.full_path()), tree.run_id(), "RUN");
      }
      CHECK(hist.site_count() == 5);  // the history was fed
      CHECK(hist.warnings().empty() == !grow);
      CHECK(a_summary == b_summary);
      CHECK(a_full == b_full);
      CHECK(a_summary.size() > 500);
    }
  }
}

TEST_CASE("tree warnings: with warnings the files differ from a run without a history by the new keys only (and pruning keeps the warned layer)") {
  const std::string with_dir = nstest::make_temp_dir("tree_warn"), without_dir = nstest::make_temp_dir("tree_warn");
  const net model;
  nanscope::history hist;
  std::vector<std::string> with_files, without_files;
  {
    nanscope::recorder rec(quiet(nullptr));
    hist.attach(rec);
    nanscope::tree_writer tree(
        rec, nanscope::tree_options{}.in(with_dir).with_rank(0).with_style(nanscope::tree_style::numeric).with_pruning(false));
    const std::string pruned_dir = nstest::make_temp_dir("tree_warn");
    nanscope::tree_writer pruned(
        rec, nanscope::tree_options{}.in(pruned_dir).with_rank(0).with_style(nanscope::tree_style::numeric));
    for (std::uint64_t s = 0; s <= 20; ++s) model.run(rec, s);  // step 20: the jump of layers.2
    with_files = {nstest::read_existing(tree.summary_path()), nstest::read_existing(tree.full_path())};
    // pruned, the middle layer block whose fc warned stays (HuggingFace's pruning would have dropped it)
    std::map<std::string, const json*> kept;
    const json p = json::parse(nstest::read_existing(pruned.summary_path()));
    collect_nodes(p, kept);
    CHECK(kept.count("Net.layers.2.fc") == 1);
    CHECK(kept.at("Net.layers.2.fc")->contains("nanscope_warnings"));
    hist.detach();
  }
  {
    nanscope::recorder rec(quiet(nullptr));
    nanscope::tree_writer tree(
        rec, nanscope::tree_options{}.in(without_dir).with_rank(0).with_style(nanscope::tree_style::numeric).with_pruning(false));
    for (std::uint64_t s = 0; s <= 20; ++s) model.run(rec, s);
    without_files = {nstest::read_existing(tree.summary_path()), nstest::read_existing(tree.full_path())};
  }
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(any_warning_key(with_files[i]));
    CHECK_FALSE(any_warning_key(without_files[i]));
    json a = json::parse(with_files[i]), b = json::parse(without_files[i]);
    REQUIRE(a.at("nanscope").at("warnings").size() == 1);  // layers.2.fc's jump, at step 20
    CHECK(a["nanscope"]["warnings"][0]["rule"] == "jump");
    CHECK(a["nanscope"]["warnings"][0]["module_path"] == "Net.layers.2.fc");
    strip(a, true);
    strip(b, true);
    CHECK(a == b);
    // key order is kept: "nanscope_pair" stays the root's last key
    const std::string& t = with_files[i];
    CHECK(t.rfind("\"nanscope_pair\"") > t.rfind("\"warnings\""));
  }
}

TEST_CASE("tree warnings: hostile site names stay strict ASCII JSON") {
  const std::string dir = nstest::make_temp_dir("tree_warn");
  nanscope::recorder rec(quiet(nullptr));
  nanscope::history hist;
  hist.attach(rec);
  nanscope::tree_writer tree(rec, nanscope::tree_options{}.in(dir).with_rank(0).with_pruning(false));
  const std::string printable = "q\"uo\\te\n\t\x01\x1f\x7f \xc3\xa9 \xf0\x9f\x98\x80";  // valid UTF-8
  const std::string invalid = "bad\xff\xc3(\xed\xa0\x80\xf4\x90";                                  // not UTF-8
  for (int which = 0; which < 2; ++which) {
    const std::string& name = which == 0 ? printable : invalid;
    CAPTURE(name);
    net model;
    model.fc1_name = name;
    hist.clear();
    for (std::uint64_t s = 0; s < 8; ++s) model.run(rec, s);  // the trend's warnings come with the 8th pass
    const auto ws = hist.warnings();
    const std::string site = "layers.1." + name + ":output";
    bool found = false;
    for (const auto& w : ws) found = found || w.site == site;
    REQUIRE(found);
    for (const std::string& path : {tree.summary_path(), tree.full_path()}) {
      const std::string text = nstest::read_existing(path);
      std::size_t outside = 0;  // ensure_ascii: printable ASCII and newlines only
      for (unsigned char c : text) outside += (c >= 0x20 && c < 0x7f) || c == '\n' ? 0 : 1;
      CHECK(outside == 0);
      const json t = json::parse(text);  // strict: throws on invalid JSON or invalid UTF-8
      const json& list = t.at("nanscope").at("warnings");
      REQUIRE(!list.empty());
      // the hostile node's own list: its site is written as the node's module_path is (same escaping)
      std::map<std::string, const json*> nodes;
      collect_nodes(t, nodes);
      const json* hostile = nullptr;
      for (const auto& kv : nodes)
        if (kv.first.rfind("Net.layers.1.", 0) == 0 && kv.first != "Net.layers.1.fc") hostile = kv.second;
      REQUIRE(hostile != nullptr);
      const std::string node_path = hostile->at("module_path").get<std::string>();
      REQUIRE(hostile->contains("nanscope_warnings"));
      const json& e = hostile->at("nanscope_warnings").at(0);
      CHECK(e.at("site").get<std::string>() == node_path.substr(4) + ":output");
      CHECK(e.at("text").get<std::string>().find(node_path.substr(4)) != std::string::npos);
      if (which == 0) CHECK(e.at("site").get<std::string>() == site);  // valid UTF-8 survives as is
    }
  }
}

#endif  // NANSCOPE_TEST_HAVE_JSON
