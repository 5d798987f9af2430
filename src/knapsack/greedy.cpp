// Ratio greedy, as torch's greedy_knapsack: items by runtime per unit of memory, best first
// (stable), each saved if it still fits. Run on quantized weights so that "fits" means the same
// as for every other solver; zero-weight items were already saved by reduce() instead of being
// divided by zero.
//
// Time O(n log n), memory O(n). Heuristic: no optimality claim; the reported upper bound is
// Dantzig's LP bound.
#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

ReducedSolution solve_greedy(const ReducedProblem& p, PlannerMemory& memory) {
  memory.reserve(p.size() * (sizeof(std::uint32_t) + sizeof(double) + sizeof(char)));
  ReducedSolution solution;
  solution.take.assign(p.size(), 0);
  std::int64_t room = p.capacity;
  double bound = 0;
  bool bound_done = false;
  for (std::uint32_t k : order_by_efficiency(p)) {
    if (p.weight[k] <= room) {
      room -= p.weight[k];
      solution.take[k] = 1;
    }
    if (bound_done) continue;
    // The LP bound follows the same order until the first item that does not fit whole.
    if (!solution.take[k]) {
      bound += p.value[k] * (static_cast<double>(room) / static_cast<double>(p.weight[k]));
      bound_done = true;
    } else {
      bound += p.value[k];
    }
  }
  solution.status = SolveStatus::kHeuristic;
  solution.path = "greedy";
  solution.upper_bound = bound;
  return solution;
}

}  // namespace remat::detail
