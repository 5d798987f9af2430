// Fuzzes the chain simulator and planners. Arbitrary action sequences must be accepted or
// rejected with InvalidSchedule, never crash; every planner's schedule must simulate cleanly,
// within its memory, at its predicted cost; the eager planner's plans fit and region sets are
// evaluated or rejected cleanly.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "remat/chain.hpp"
#include "remat/eager.hpp"
#include "remat/errors.hpp"

namespace {

void check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using remat::chain::Action;
  if (size < 3) return 0;
  const std::int64_t n = 1 + data[0] % 24;
  // 1. Arbitrary schedules.
  remat::chain::Simulator simulator(n);
  try {
    for (std::size_t k = 3; k + 2 < size; k += 3) {
      const std::int64_t a = data[k + 1] % (n + 2), b = data[k + 2] % (n + 2);
      switch (data[k] % 4) {
        case 0:
          simulator.apply(Action::forward(a, b, true));
          break;
        case 1:
          simulator.apply(Action::forward(a, b, false));
          break;
        case 2:
          simulator.apply(Action::backward(a));
          break;
        default:
          simulator.apply(Action::free(a));
          break;
      }
    }
    const remat::chain::Simulation s = simulator.finish();
    check(s.memory >= 1 && s.recompute >= 0);
  } catch (const remat::chain::InvalidSchedule&) {
  }
  // 2. The uniform optimal planner at the fuzzer's memory.
  const std::int64_t memory = 1 + data[1] % (n + 1);
  if (const auto best = remat::chain::optimal_recompute(n, memory)) {
    const auto s = remat::chain::simulate(n, remat::chain::Strategy::kOptimal, memory);
    check(s.memory <= memory && s.recompute == *best);
  }
  // 3. The profile planner on sizes and times from the bytes, budget from data[2].
  remat::chain::ChainProfile profile;
  profile.activation_bytes.push_back(1 + data[2] % 7);
  profile.forward_time.push_back(0);
  for (std::int64_t i = 1; i <= n && static_cast<std::size_t>(2 + i) < size; ++i) {
    profile.activation_bytes.push_back(1 + data[2 + i] % 7);
    profile.forward_time.push_back(1 + data[2 + i] / 32);
  }
  const std::int64_t budget = 1 + data[2] % 40;
  try {
    const auto plan =
        remat::chain::plan_profile(profile, budget, 1 + data[1] % 50, std::size_t{1} << 26);
    check(plan.simulation.memory_bytes <= budget);
    check(std::abs(plan.simulation.recompute_time - plan.predicted_recompute_time) < 1e-6);
  } catch (const remat::InputError&) {
  }
  // 4. The eager planner: its plan fits, never beats the least peak, and arbitrary region sets
  // are evaluated or rejected with InputError.
  remat::eager::Profile eager;
  eager.input_bytes = data[2] % 5;
  eager.region_overhead = data[1] % 3;
  for (std::int64_t i = 0; i < n && static_cast<std::size_t>(3 + i) < size; ++i) {
    const std::uint8_t b = data[3 + i];
    eager.layers.push_back({b % 5, (b / 5) % 7, (b & 128) != 0, 1.0 + b % 3});
  }
  if (!eager.layers.empty()) {
    const auto least = remat::eager::minimum_memory_plan(eager);
    check(least.evaluation.peak_bytes == least.minimum_budget);
    const std::int64_t eager_budget = least.minimum_budget + data[1] % 30;
    const auto found =
        remat::eager::plan(eager, eager_budget, 1 + data[2] % 64, std::size_t{1} << 26);
    check(found.evaluation.peak_bytes <= eager_budget);
    check(found.evaluation.peak_bytes >= least.minimum_budget);
    std::vector<remat::eager::Region> regions;
    const auto layers = static_cast<std::int64_t>(eager.layers.size());
    for (std::size_t k = 3; k + 1 < size && regions.size() < 12; k += 2) {
      regions.push_back({data[k] % (layers + 1), data[k + 1] % (layers + 1), 0});
    }
    try {
      const auto e = remat::eager::evaluate(eager, regions);
      check(e.peak_bytes >= least.minimum_budget && e.recompute_time >= 0);
    } catch (const remat::InputError&) {
    }
  }
  return 0;
}
