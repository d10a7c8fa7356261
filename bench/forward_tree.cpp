// The layer-tree writer (tree.hpp) on the 24-layer encoder of encoder24.hpp (264 module scopes, 265 recorded
// f32 outputs):
//
//   forward24_checked          every layer output checked (STATS) through a recorder, no tree
//   forward24_tree/pruned      the same, with a tree_writer writing the SUMMARY file of every pass (pruning on:
//                              layers 1..22 are dropped as the Python tool does)
//   forward24_tree/unpruned    the same without pruning (every layer in the file)
//   tree_summary/pruned        the writer alone: one pass's scope events, captured once, replayed into a
//   tree_summary/unpruned      tree_writer (JSON text, file write, fsync, rename); bytes/s = MB/s of JSON
//
// Compare forward24_tree with forward24_checked (the tree's own cost) and with forward24_plain
// (forward24_plain.cpp: no checks at all). Files go to a fresh directory under $TMPDIR (default /tmp); each pass
// is committed with fsync + rename like any tree file, so the filesystem's fsync cost is part of the rows.
#include <nanscope/macros.hpp>
#include <nanscope/recorder.hpp>
#include <nanscope/tree.hpp>
#include <nanscope/adapters/eigen.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace {
nanscope::recorder& bench_recorder() {
  static nanscope::recorder rec([] {
    nanscope::recorder_options o;
    o.sink = [](std::string_view) {};
    return o;
  }());
  return rec;
}
}  // namespace

#define BLOCK_ROOT_SCOPE(name, cls) NANSCOPE_SCOPE_TO(bench_recorder(), name, cls)
#define BLOCK_SCOPE(name, cls) NANSCOPE_SCOPE_TO(bench_recorder(), encoder24::block_name(name), cls)
#define BLOCK_OUTPUT(x) NANSCOPE_OUTPUT_TO(bench_recorder(), x)
#include "encoder24.hpp"

#include <benchmark/benchmark.h>

namespace {
std::string bench_dir() {
  const char* t = std::getenv("TMPDIR");
  std::string tmpl = std::string(t != nullptr && *t != '\0' ? t : "/tmp") + "/nanscope_bench_tree_XXXXXX";
  if (::mkdtemp(&tmpl[0]) == nullptr) return "/tmp";
  return tmpl;
}

nanscope::tree_options summary_options(bool prune) {
  static const std::string dir = bench_dir();
  nanscope::tree_options o = nanscope::tree_options{}.in(dir).with_rank(0).with_pruning(prune);
  o.write_full = false;
  return o;
}

void forward24_checked(benchmark::State& state) {
  const block::weights w = block::make_weights();
  const block::Mat x = block::random_matrix(block::seq, block::d_model, 2.0f, 99);
  for (auto _ : state) {
    block::Mat y = encoder24::forward(x, w);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

void forward24_tree(benchmark::State& state, bool prune) {
  const block::weights w = block::make_weights();
  const block::Mat x = block::random_matrix(block::seq, block::d_model, 2.0f, 99);
  nanscope::tree_writer tree(bench_recorder(), summary_options(prune));
  for (auto _ : state) {
    block::Mat y = encoder24::forward(x, w);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  if (!tree.last_error().empty() || tree.trees_written() == 0) state.SkipWithError(("tree: " + tree.last_error()).c_str());
  state.counters["json_bytes_per_pass"] = static_cast<double>(tree.summary_bytes()) / static_cast<double>(tree.trees_written());
  state.SetBytesProcessed(static_cast<std::int64_t>(tree.summary_bytes()));
}

/// One pass's listener events, kept to be replayed into a tree_writer without running the model.
class capture final : public nanscope::scope_listener {
 public:
  struct event {
    int kind;  // 0 open, 1 tensor, 2 close
    std::size_t frame;
    bool outermost;
    nanscope::tensor_record rec;
  };
  std::vector<std::unique_ptr<nanscope::frame>> frames;
  std::vector<event> events;

  void scope_opened(const nanscope::frame& f, bool outermost) noexcept override {
    auto copy = std::make_unique<nanscope::frame>();
    copy->module_path = f.module_path;
    copy->class_name = f.class_name;
    copy->step = f.step;
    copy->where = f.where;
    index_.push_back({&f, frames.size()});
    frames.push_back(std::move(copy));
    events.push_back({0, frames.size() - 1, outermost, {}});
  }
  void tensor_recorded(const nanscope::frame& f, const nanscope::tensor_record& r) noexcept override {
    event e{1, find(f), false, r};
    e.rec.view.data = nullptr;  // the activations are gone by replay time; the SUMMARY file needs no values
    events.push_back(std::move(e));
  }
  void scope_closed(const nanscope::frame& f, bool outermost) noexcept override {
    events.push_back({2, find(f), outermost, {}});
  }
  void replay(nanscope::scope_listener& to) const {
    for (const auto& e : events) {
      const nanscope::frame& f = *frames[e.frame];
      if (e.kind == 0) to.scope_opened(f, e.outermost);
      else if (e.kind == 1) to.tensor_recorded(f, e.rec);
      else to.scope_closed(f, e.outermost);
    }
  }

 private:
  std::size_t find(const nanscope::frame& f) const {
    for (auto it = index_.rbegin(); it != index_.rend(); ++it)
      if (it->first == &f) return it->second;
    return 0;
  }
  std::vector<std::pair<const nanscope::frame*, std::size_t>> index_;
};

const capture& one_pass() {
  static const capture c = [] {
    capture cap;
    const block::weights w = block::make_weights();
    const block::Mat x = block::random_matrix(block::seq, block::d_model, 2.0f, 99);
    nanscope::scope_listener* previous = bench_recorder().set_listener(&cap);
    block::Mat y = encoder24::forward(x, w);
    benchmark::DoNotOptimize(y.data());
    bench_recorder().set_listener(previous);
    return cap;
  }();
  return c;
}

void tree_summary(benchmark::State& state, bool prune) {
  const capture& events = one_pass();
  nanscope::recorder idle;  // the writer attaches to a recorder; the events come from the replay
  nanscope::tree_writer tree(idle, summary_options(prune));
  for (auto _ : state) events.replay(tree);
  if (!tree.last_error().empty() || tree.trees_written() == 0) state.SkipWithError(("tree: " + tree.last_error()).c_str());
  state.counters["json_bytes_per_pass"] = static_cast<double>(tree.summary_bytes()) / static_cast<double>(tree.trees_written());
  state.counters["nodes"] = static_cast<double>(events.frames.size());
  state.SetBytesProcessed(static_cast<std::int64_t>(tree.summary_bytes()));
}
}  // namespace

BENCHMARK(forward24_checked)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward24_tree, pruned, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(forward24_tree, unpruned, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(tree_summary, pruned, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(tree_summary, unpruned, false)->Unit(benchmark::kMillisecond)->UseRealTime();
