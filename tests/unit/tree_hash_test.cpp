// The tree writer's "hash" key (tree_options::with_hash): present only with the option, on float and integer
// tensors, equal to nanscope::to_hex(check(...).hash) of the recorded view (a transposed one included), in
// both styles and whatever mode the recorder ran; files parsed with nlohmann-json.
#include "support/json_files.hpp"

#include <nanscope/nanscope.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {
using json = nlohmann::json;
using nanscope::dtype;
using nanscope::scope;
using nanscope::tensor_view;

std::string expected_hex(const tensor_view& v) {
  return nanscope::to_hex((nanscope::check)(v, nanscope::check_options{}.with_mode(nanscope::check_mode::no_tensor).with_hash()).hash);
}

struct hash_net {
  std::vector<float> a;
  std::vector<std::int64_t> ids{101, 7592, 2088, 102};
  std::vector<double> d{1.5, -2.0, 1e3};
  hash_net() : a(40000) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 97) * 0.25f - 3.0f;
  }
  tensor_view transposed() const {  // a [200, 200] matrix read as its transpose
    tensor_view v = tensor_view::contiguous(a.data(), dtype::f32, {200, 200});
    v.strides[0] = 1;
    v.strides[1] = 200;
    return v;
  }
  void run(nanscope::recorder& rec) const {
    scope root(rec, "", "HashNet");
    root.input(tensor_view::contiguous(ids.data(), dtype::i64, {1, 4}));
    {
      scope l(rec, "lin", "Linear");
      l.input(tensor_view::contiguous(a.data(), dtype::f32, {200, 200}));
      l.output(transposed());
    }
    {
      scope o(rec, "out", "Out");
      o.output(tensor_view::contiguous(d.data(), dtype::f64, {3}));
    }
  }
};

}  // namespace

TEST_CASE("tree: \"hash\" only with with_hash(), equal to the check's hash, in both styles and recorder modes") {
  const hash_net m;
  for (auto style : {nanscope::tree_style::torch_repr, nanscope::tree_style::numeric})
    for (auto mode : {nanscope::check_mode::stats, nanscope::check_mode::concise_health}) {
      nanscope::recorder_options ro;
      ro.mode = mode;
      nanscope::recorder rec(ro);
      const std::string with = nstest::make_temp_dir("tree_hash"), without = nstest::make_temp_dir("tree_hash");
      {
        nanscope::tree_writer w(rec, nanscope::tree_options{}.in(with).with_rank(0).with_style(style).with_hash());
        m.run(rec);
      }
      {
        nanscope::tree_writer w(rec, nanscope::tree_options{}.in(without).with_rank(0).with_style(style));
        m.run(rec);
      }
      const json t = nstest::load_json(with + "/HashNet_debug_tree_SUMMARY.json");
      CHECK(t["inputs"]["args"][0]["hash"] == expected_hex(tensor_view::contiguous(m.ids.data(), dtype::i64, {1, 4})));
      const json& lin = t["children"][0];
      CHECK(lin["inputs"]["args"][0]["hash"] ==
            expected_hex(tensor_view::contiguous(m.a.data(), dtype::f32, {200, 200})));
      const std::string th = lin["outputs"]["hash"];
      CHECK(th == expected_hex(m.transposed()));
      CHECK(th != lin["inputs"]["args"][0]["hash"]);  // same bytes, other logical order
      CHECK(th.size() == 32);
      const std::string dh = t["children"][1]["outputs"]["hash"];
      CHECK(dh.size() == 64);
      CHECK(dh == expected_hex(tensor_view::contiguous(m.d.data(), dtype::f64, {3})));
      const json full = nstest::load_json(with + "/HashNet_debug_tree_FULL_TENSORS.json");
      CHECK(full["children"][0]["outputs"]["hash"] == th);

      const std::string text = nstest::read_existing(without + "/HashNet_debug_tree_FULL_TENSORS.json");
      CHECK(text.find("\"hash\"") == std::string::npos);
      CHECK(text.find("\"health\"") != std::string::npos);
    }
}
