// Google Benchmark microbenchmarks of each solver's core loop, without Python or JSON in the way.
//   build/bench_solvers --benchmark_filter=exact
#include <benchmark/benchmark.h>

#include <map>
#include <string>

#include "remat/chain.hpp"
#include "remat/generate.hpp"
#include "remat/knapsack.hpp"

namespace {

remat::KnapsackProblem instance(const std::string& family, std::size_t n, std::int64_t range = 1000,
                                double budget_quanta = 1e9) {
  remat::GenerateOptions g;
  g.family = family;
  g.n = n;
  g.range = range;
  g.budget = 0.5;
  g.budget_quanta = budget_quanta;
  return remat::quantize(remat::generate(g).input);
}

void run(benchmark::State& state, const remat::KnapsackProblem& p, remat::Solver solver) {
  remat::SolveOptions options;
  options.solver = solver;
  for (auto _ : state) benchmark::DoNotOptimize(remat::solve(p, options).max_runtime);
  state.SetComplexityN(static_cast<std::int64_t>(p.size()));
}

void TorchLike(benchmark::State& state, remat::Solver solver) {
  static std::map<std::int64_t, remat::KnapsackProblem> cache;
  auto it = cache.find(state.range(0));
  if (it == cache.end())
    it = cache.emplace(state.range(0), instance("torch_like", state.range(0))).first;
  run(state, it->second, solver);
}

void PaperScale(benchmark::State& state) {
  static const remat::KnapsackProblem p = instance("paper_scale", 2000);
  run(state, p, remat::Solver::kExact);
}

void Pisinger(benchmark::State& state, const char* family) {
  static std::map<std::string, remat::KnapsackProblem> cache;
  auto it = cache.find(family);
  if (it == cache.end()) it = cache.emplace(family, instance(family, 10000, 1000)).first;
  run(state, it->second, remat::Solver::kExact);
}

void ChainOptimal(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        remat::chain::simulate(state.range(0), remat::chain::Strategy::kOptimal, 10).recompute);
  }
}

}  // namespace

BENCHMARK_CAPTURE(TorchLike, exact, remat::Solver::kExact)->RangeMultiplier(10)->Range(100, 100000);
BENCHMARK_CAPTURE(TorchLike, sliding_hirschberg, remat::Solver::kSlidingHirschberg)
    ->RangeMultiplier(10)
    ->Range(100, 10000);
BENCHMARK_CAPTURE(TorchLike, dp, remat::Solver::kDp)->RangeMultiplier(10)->Range(100, 10000);
BENCHMARK_CAPTURE(TorchLike, greedy, remat::Solver::kGreedy)
    ->RangeMultiplier(10)
    ->Range(100, 100000);
BENCHMARK(PaperScale);
BENCHMARK_CAPTURE(Pisinger, uncorrelated, "uncorrelated");
BENCHMARK_CAPTURE(Pisinger, weakly_correlated, "weakly_correlated");
BENCHMARK_CAPTURE(Pisinger, strongly_correlated, "strongly_correlated");
BENCHMARK_CAPTURE(Pisinger, subset_sum, "subset_sum");
BENCHMARK(ChainOptimal)->Arg(1000)->Arg(100000);

BENCHMARK_MAIN();
