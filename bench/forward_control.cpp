// forward_control: the transformer block of transformer_block.hpp checked through the recorder (as forward_checked)
// with the runtime-control and early-warning layers attached: rows forward_gate_on (control.hpp's controller,
// every site on), forward_gate_off (controller, checking switched off at run time: compare with
// forward_disabled), forward_budget/200 and /20 (controller with a 2% and a 0.2% overhead budget, round-robin sampling) and
// forward_history (history.hpp fed by every checked output).
#include <nanscope/macros.hpp>
#include <nanscope/nanscope.hpp>
#include <nanscope/control.hpp>
#include <nanscope/history.hpp>
#include <nanscope/adapters/eigen.hpp>
#define BLOCK_SCOPE(name, cls) NANSCOPE_SCOPE(name, cls)
#define BLOCK_OUTPUT(x) NANSCOPE_OUTPUT(x)
#include "transformer_block.hpp"

#include <benchmark/benchmark.h>

#include <cstdio>

namespace {
void run_block(benchmark::State& state) {
  const block::weights w = block::make_weights();
  const block::Mat x = block::random_matrix(block::seq, block::d_model, 2.0f, 99);
  for (auto _ : state) {
    block::Mat y = block::forward(x, w);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * block::seq);  // tokens
}

nanscope::controller_options control_with(bool enabled, double budget) {
  nanscope::controller_options o;
  o.read_environment = false;  // the rows must not depend on the caller's NANSCOPE_* variables
  o.base.enabled = enabled;
  o.base.budget = budget;
  return o;
}

void forward_gate_on(benchmark::State& state) {
  nanscope::controller ctl(control_with(true, 0.0));
  ctl.attach(nanscope::default_recorder());
  run_block(state);
  ctl.detach();
}
void forward_gate_off(benchmark::State& state) {
  nanscope::controller ctl(control_with(false, 0.0));
  ctl.attach(nanscope::default_recorder());
  run_block(state);
  ctl.detach();
}
void forward_budget(benchmark::State& state) {
  nanscope::controller ctl(control_with(true, static_cast<double>(state.range(0)) / 10000.0));  // basis points
  ctl.attach(nanscope::default_recorder());
  run_block(state);
  const nanscope::control_report r = ctl.report();
  state.counters["checks_per_step"] = r.steps ? static_cast<double>(r.checks) / static_cast<double>(r.steps) : 0.0;
  state.counters["overhead_pct"] = r.overhead() * 100.0;
  state.counters["max_gap"] = static_cast<double>(r.max_gap);
  ctl.detach();
}
void forward_history(benchmark::State& state) {
  nanscope::history_options ho;
  ho.on_warning = [](const nanscope::early_warning&) {};
  nanscope::history hist(ho);
  hist.attach(nanscope::default_recorder());
  run_block(state);
  hist.detach();
}
}  // namespace
BENCHMARK(forward_gate_on)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(forward_gate_off)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(forward_budget)->Arg(200)->Arg(20)->Unit(benchmark::kMillisecond)->UseRealTime();  // 2%, 0.2%
BENCHMARK(forward_history)->Unit(benchmark::kMillisecond)->UseRealTime();
