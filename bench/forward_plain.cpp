// forward_plain: the transformer block of transformer_block.hpp, with no checks at all.
#define BLOCK_SCOPE(name, cls) static_cast<void>(0)
#define BLOCK_OUTPUT(x) static_cast<void>(0)
#include "transformer_block.hpp"

#include <benchmark/benchmark.h>

namespace {
void forward_plain(benchmark::State& state) {
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
BENCHMARK(forward_plain)->Unit(benchmark::kMillisecond)->UseRealTime();
