// Helpers for the tests of the exact solver's internal paths, which work on the reduced problem
// (knapsack/reduced_problem.hpp): its optimum by brute force, whether it fits whole, and a plan's
// totals.
#pragma once

#include <cstdint>
#include <vector>

#include "knapsack/reduced_problem.hpp"
#include "test_support.hpp"

namespace remat::testing {

// The reduced problem's optimum: the original's by brute force, less the items reduce() settled
// as saved.
inline double reduced_optimum(const KnapsackProblem& p, const detail::ReducedProblem& reduced) {
  double forced = 0;
  for (std::size_t i : reduced.forced_saved) forced += p.value[i];
  return brute_force_value(p) - forced;
}

// Whether every item fits at once (solve() settles that case before any solver runs).
inline bool fits_whole(const detail::ReducedProblem& reduced) {
  std::int64_t total = 0;
  for (std::int64_t w : reduced.weight) total += w;
  return total <= reduced.capacity;
}

struct PlanTotals {
  std::int64_t weight = 0;
  double value = 0;
};

// The weight and value of the items `take` marks, in the reduced problem's units.
inline PlanTotals plan_totals(const detail::ReducedProblem& reduced,
                              const std::vector<char>& take) {
  PlanTotals t;
  for (std::size_t k = 0; k < take.size(); ++k) {
    if (!take[k]) continue;
    t.weight += reduced.weight[k];
    t.value += reduced.value[k];
  }
  return t;
}

}  // namespace remat::testing
