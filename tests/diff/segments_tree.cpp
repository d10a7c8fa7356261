// nanscope_segments_tree DIR: a decode step of a toy serving engine over a continuous batch of 4 requests (ids 17,
// 23, 42, 8; token rows {0, 5, 12, 12, 20}: request 42 has no token this step), recorded under a
// NANSCOPE_SEGMENTS guard with the unit "request", through the real recorder and tree writer, for the
// nanscope-diff and nanscope report tests of issue 32 item 3.
//
// Server has the children attn (Attention) and lm_head (Linear), each recording its input and output, [20, 4].
//   DIR/good   every value finite
//   DIR/nan    attn makes NaN in rows 6 and 9 (request 23, rows 5-11); lm_head carries them and makes -inf in
//              row 19 (request 8, rows 12-19)
// Runs to compare with nan (the bad segments of A and B, tests/diff/CMakeLists.txt):
//   DIR/moved      attn makes NaN in rows 2 (request 17, rows 0-4), 6 and 9; lm_head makes -inf in rows 3 and 10
//                  (requests 17 and 23), none in request 8
//   DIR/swapped    attn makes NaN in rows 2 and 9 (requests 17 and 23); lm_head -inf in row 19: nan's counts in
//                  every tensor, in other requests
//   DIR/rebatched  nan's values with token rows {0, 5, 13, 13, 20}: request 23 is rows 5-12
//   DIR/renamed    nan's values with ids 17, 31, 42, 8: rows 5-11 are request 31
//   DIR/reordered  nan's values with request 42 (no token) first: rows {0, 0, 5, 12, 20}, ids 42, 17, 23, 8
//   DIR/experts    nan's values and segmentation with the unit "expert"
//   DIR/added      nan's values over 5 requests, rows {0, 5, 12, 12, 16, 20}, ids 17, 23, 42, 8, 99: row 19 is
//                  request 99 (rows 16-19)
// Each run writes Server_debug_tree_SUMMARY.json and _FULL_TENSORS.json in the numeric style with extras. Exit
// status 0, or 1 with the writer's error on stderr.
//
// nanscope_segments_tree DIR --blocks: instead, two runs of a small model checked against block-scaled targets
// (recorder_options::block_scaled: mxfp8_e4m3, mxfp4 and nvfp4, warning above 20% of blocks with loss; a checkpoint
// NANSCOPE_DETECT_OVERFLOW_BLOCKS_TO with nvfp4), for tests/report/blocks_test.py (issue 33 item 3). Model [8, 64]
// has the children embed, mlp (with fc1 and a child whose name is markup) and the checkpoint "before head":
//   DIR/blocks_a  embed all 0.5 (no block loses); fc1 an outlier in rows 0, 2, 4 and 6; the markup child an
//                 outlier in every row
//   DIR/blocks_b  embed not checked (a site rule turns the target off); fc1 an outlier in row 0 only; the markup
//                 child as in A
#include <nanscope/block_scaled.hpp>
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

/// One run: the batch's segmentation and where attn makes NaN (column 1, or 3 for odd rows) and lm_head -inf
/// (column 2).
struct run_spec {
  const char* name;
  std::vector<std::int64_t> cu, ids;
  std::vector<std::size_t> nan_rows, ninf_rows;
  const char* unit = "request";
};

int run(const std::string& dir, const run_spec& spec) {
  nanscope::recorder_options ro;
  ro.policy = nanscope::on_detect::print_and_continue;
  ro.sink = [](std::string_view) {};
  nanscope::recorder rec(ro);
  nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).with_style(nanscope::tree_style::numeric)
                                   .with_pruning(false));
  const std::vector<std::int64_t>& cu = spec.cu;
  const std::vector<std::int64_t>& ids = spec.ids;
  std::vector<float> x(20 * 4), h(20 * 4), y(20 * 4);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.125f - 0.25f;
  {
    NANSCOPE_SEGMENTS_TO(rec, nanscope::segments::rows(cu).with_ids(ids).with_unit(spec.unit));
    nanscope::scope root(rec, "", "Server");
    root.input(nanscope::view_of(x.data(), {20, 4}, "x"));
    {
      nanscope::scope a(rec, "attn", "Attention");
      a.input(nanscope::view_of(x.data(), {20, 4}, "x"));
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = x[i] * 0.5f;
      for (const std::size_t r : spec.nan_rows) h[r * 4 + (r % 2 ? 3 : 1)] = bits_f32(0x7FC00000u);
      a.output(nanscope::view_of(h.data(), {20, 4}, "h"));
    }
    {
      nanscope::scope l(rec, "lm_head", "Linear");
      l.input(nanscope::view_of(h.data(), {20, 4}, "h"));
      for (std::size_t i = 0; i < y.size(); ++i) y[i] = h[i] + 1.0f;
      for (const std::size_t r : spec.ninf_rows) y[r * 4 + 2] = bits_f32(0xFF800000u);
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

/// The module name of the markup child (shown as text by `nanscope report`).
const char* const markup_name = "<img src=x onerror=alert(1)>\"&amp;";

/// One run of the block-scaled model (DIR --blocks); `b` picks run B.
int run_blocks(const std::string& dir, bool b) {
  nanscope::recorder_options ro;
  ro.policy = nanscope::on_detect::print_and_continue;
  ro.sink = [](std::string_view) {};
  ro.block_scaled = nanscope::block_target{nanscope::block_format_set{}
                                               .with(nanscope::block_format::mxfp8_e4m3)
                                               .with(nanscope::block_format::mxfp4)
                                               .with(nanscope::block_format::nvfp4)}
                        .with_warn_lossy_fraction(0.2);
  if (b) ro.rules.emplace_back("*embed", nanscope::allow::none, false, std::nullopt, nanscope::block_target{});
  nanscope::recorder rec(ro);
  nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).with_style(nanscope::tree_style::numeric)
                                   .with_pruning(false));
  const std::int64_t rows = 8, cols = 64;
  std::vector<float> x(rows * cols), e(rows * cols, 0.5f), h(rows * cols), g(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.0625f;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      // small values (multiples of 1/256) and outliers: fc1 in rows 0, 2, 4, 6 (B: row 0), the markup child in
      // every row
      const float small = static_cast<float>((r * 37 + c * 11) % 97 - 48) / 256.0f;
      h[static_cast<std::size_t>(r * cols + c)] = small;
      g[static_cast<std::size_t>(r * cols + c)] = small * 0.5f;
    }
  for (std::int64_t r = 0; r < rows; ++r) {
    if (r % 2 == 0 && (!b || r == 0)) h[static_cast<std::size_t>(r * cols + 5 + 3 * r)] = 300.0f + 100.0f * static_cast<float>(r);
    g[static_cast<std::size_t>(r * cols + 40)] = 5000.0f;
  }
  {
    nanscope::scope root(rec, "", "Model");
    root.input(nanscope::view_of(x.data(), {rows, cols}, "x"));
    {
      nanscope::scope s(rec, "embed", "Embedding");
      s.output(nanscope::view_of(e.data(), {rows, cols}, "e"));
    }
    {
      nanscope::scope m(rec, "mlp", "MLP");
      {
        nanscope::scope s(rec, "fc1", "Linear");
        s.input(nanscope::view_of(e.data(), {rows, cols}, "e"));
        s.output(nanscope::view_of(h.data(), {rows, cols}, "h"));
      }
      {
        nanscope::scope s(rec, markup_name, "Act");
        s.output(nanscope::view_of(g.data(), {rows, cols}, "g"));
      }
    }
    NANSCOPE_DETECT_OVERFLOW_BLOCKS_TO(rec, nanscope::view_of(h.data(), {rows, cols}, "h"), "before head",
                                       nanscope::block_format::nvfp4);
    root.output(nanscope::view_of(g.data(), {rows, cols}, "g"));
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
  if (argc == 3 && std::strcmp(argv[2], "--blocks") == 0) {
    const std::string dir = argv[1];
    return run_blocks(dir + "/blocks_a", false) != 0 || run_blocks(dir + "/blocks_b", true) != 0 ? 1 : 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: nanscope_segments_tree DIR [--blocks]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::vector<std::int64_t> cu = {0, 5, 12, 12, 20}, ids = {17, 23, 42, 8};
  const run_spec runs[] = {
      {"good", cu, ids, {}, {}},
      {"nan", cu, ids, {6, 9}, {19}},
      {"moved", cu, ids, {2, 6, 9}, {3, 10}},
      {"swapped", cu, ids, {2, 9}, {19}},
      {"rebatched", {0, 5, 13, 13, 20}, ids, {6, 9}, {19}},
      {"renamed", cu, {17, 31, 42, 8}, {6, 9}, {19}},
      {"reordered", {0, 0, 5, 12, 20}, {42, 17, 23, 8}, {6, 9}, {19}},
      {"experts", cu, ids, {6, 9}, {19}, "expert"},
      {"added", {0, 5, 12, 12, 16, 20}, {17, 23, 42, 8, 99}, {6, 9}, {19}},
  };
  for (const run_spec& r : runs)
    if (run(dir + "/" + r.name, r) != 0) return 1;
  return 0;
}
