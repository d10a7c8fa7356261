// nanscope_segments_tree DIR: a decode step of a toy serving engine over a continuous batch of 4 requests (ids 17,
// 23, 42, 8; token rows {0, 5, 12, 12, 20}: request 42 has no token this step), recorded under a
// NANSCOPE_SEGMENTS guard with the unit "request", through the real recorder and tree writer, for the
// nanscope-diff and nanscope report tests of issue 32 item 3.
//
// Server has the children attn (Attention) and lm_head (Linear), each recording its input and output, [20, 4].
//   DIR/good   every value finite
//   DIR/nan    attn makes NaN in rows 6 and 9 (request 23, rows 5-11); lm_head carries them and makes -inf in
//              row 19 (request 8, rows 12-19)
// Each run writes Server_debug_tree_SUMMARY.json and _FULL_TENSORS.json in the numeric style with extras. Exit
// status 0, or 1 with the writer's error on stderr.
#include <nanscope/nanscope.hpp>
#include <nanscope/segments_guard.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

float bits_f32(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

int run(const std::string& dir, bool bad) {
  nanscope::recorder_options ro;
  ro.policy = nanscope::on_detect::print_and_continue;
  ro.sink = [](std::string_view) {};
  nanscope::recorder rec(ro);
  nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).with_style(nanscope::tree_style::numeric)
                                   .with_pruning(false));
  const std::vector<std::int64_t> cu = {0, 5, 12, 12, 20};
  const std::vector<std::int64_t> ids = {17, 23, 42, 8};
  std::vector<float> x(20 * 4), h(20 * 4), y(20 * 4);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.125f - 0.25f;
  {
    NANSCOPE_SEGMENTS_TO(rec, nanscope::segments::rows(cu).with_ids(ids).with_unit("request"));
    nanscope::scope root(rec, "", "Server");
    root.input(nanscope::view_of(x.data(), {20, 4}, "x"));
    {
      nanscope::scope a(rec, "attn", "Attention");
      a.input(nanscope::view_of(x.data(), {20, 4}, "x"));
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = x[i] * 0.5f;
      if (bad) {
        h[6 * 4 + 1] = bits_f32(0x7FC00000u);
        h[9 * 4 + 3] = bits_f32(0x7FC00000u);
      }
      a.output(nanscope::view_of(h.data(), {20, 4}, "h"));
    }
    {
      nanscope::scope l(rec, "lm_head", "Linear");
      l.input(nanscope::view_of(h.data(), {20, 4}, "h"));
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = h[i] + 1.0f;
      if (bad) y[19 * 4 + 2] = bits_f32(0xFF800000u);
      l.output(nanscope::view_of(y.data(), {20, 4}, "y"));
    }
    root.output(nanscope::view_of(y.data(), {20, 4}, "y"));
  }
  const std::string err = w.last_error();
  if (!err.empty()) {
    std::fprintf(stderr, "nanscope_segments_tree: %s: %s\n", dir.c_str(), err.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: nanscope_segments_tree DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  if (run(dir + "/good", false) != 0) return 1;
  return run(dir + "/nan", true);
}
