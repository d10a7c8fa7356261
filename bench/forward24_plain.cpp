// forward24_plain: the 24-layer encoder of encoder24.hpp with no checks (the yardstick of the tree rows).
#include <string_view>
#define BLOCK_ROOT_SCOPE(name, cls) static_cast<void>(0)
#define BLOCK_SCOPE(name, cls) static_cast<void>(0)
#define BLOCK_OUTPUT(x) static_cast<void>(0)
#include "encoder24.hpp"

#include <benchmark/benchmark.h>

namespace {
void forward24_plain(benchmark::State& state) {
  const block::weights w = block::make_weights();
  const block::Mat x = block::random_matrix(block::seq, block::d_model, 2.0f, 99);
  for (auto _ : state) {
    block::Mat y = encoder24::forward(x, w);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}
}  // namespace
BENCHMARK(forward24_plain)->Unit(benchmark::kMillisecond)->UseRealTime();
