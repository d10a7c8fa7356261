// forward_checked: the transformer block of transformer_block.hpp, with every layer output checked (STATS) through the recorder.
#include <nanscope/macros.hpp>
#include <nanscope/nanscope.hpp>
#include <nanscope/adapters/eigen.hpp>
#define BLOCK_SCOPE(name, cls) NANSCOPE_SCOPE(name, cls)
#define BLOCK_OUTPUT(x) NANSCOPE_OUTPUT(x)
#include "transformer_block.hpp"

#include <benchmark/benchmark.h>

namespace {
void forward_checked(benchmark::State& state) {
  const block::weights w = block::make_weights();
  const block::Mat x = block::random_matrix(block::seq, block::d_model, 2.0f, 99);
  for (auto _ : state) {
    block::Mat y = block::forward(x, w);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * block::seq);  // tokens
}
}  // namespace
BENCHMARK(forward_checked)->Unit(benchmark::kMillisecond)->UseRealTime();
