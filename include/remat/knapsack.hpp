// Knapsack solvers for the activation memory budget. All take a quantized problem (see
// problem.hpp) and return a feasible plan; `exact`, `sliding_hirschberg` and `dp` are exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "remat/problem.hpp"
#include "remat/result.hpp"

namespace remat {

enum class Solver { kExact, kSlidingHirschberg, kDp, kGreedy };

// What `exact` does when its search reaches the planner-memory cap: return its best plan and a
// bound (status memory_limit, the default), or refuse with PlannerMemoryError as before.
enum class OnMemoryLimit { kBest, kRefuse };

std::string to_string(Solver solver);
// Throws InputError(field "solver") on an unknown name.
Solver parse_solver(const std::string& name);
const std::vector<Solver>& all_solvers();

struct SolveOptions {
  Solver solver = Solver::kExact;
  // `exact` stops at the limit with its best plan and bound; `dp` and `sliding_hirschberg`
  // refuse up front (WorkLimitError) when their n x W cells cannot be done in time.
  std::optional<double> time_limit_seconds;
  std::size_t max_planner_bytes = 0;  // 0 means default_max_planner_bytes()
  OnMemoryLimit on_memory_limit = OnMemoryLimit::kBest;
};

// Half of physical memory, or 4 GiB where that cannot be read.
std::size_t default_max_planner_bytes();

// Working memory (bytes) a table solver would need on this problem, before it allocates.
std::size_t dp_planner_bytes(const KnapsackProblem& problem);
std::size_t sliding_hirschberg_planner_bytes(const KnapsackProblem& problem);

// A table solver refuses a time limit up front only when even this rate (cells, items x quanta,
// per second; faster than any machine runs them) cannot meet it; otherwise it starts and stops
// with WorkLimitError if the limit passes before its table is done (it has no plan until then).
inline constexpr double kTableCellsPerSecond = 4e9;

// Throws PlannerMemoryError (naming a solver that would fit) when a table solver cannot stay
// under max_planner_bytes (or `exact` reaches it under OnMemoryLimit::kRefuse), and
// WorkLimitError when a table solver cannot meet the time limit. A plan whose value meets its
// proven bound is reported optimal, whichever limit stopped the search.
KnapsackResult solve(const KnapsackProblem& problem, const SolveOptions& options = {});

// One point of the exact budget/runtime trade-off curve.
struct ParetoPoint {
  std::int64_t budget_quanta = 0;
  double max_runtime = 0.0;
};

// Asked now and then during a long computation (about every 50 ms); returning true ends it with
// Interrupted. The Python binding asks Python whether a signal (Ctrl-C) is pending.
using StopRequest = std::function<bool()>;

// Every breakpoint of best-saved-runtime as a function of the quantized budget, for budgets 0 to
// problem.capacity, in one Nemhauser-Ullmann pass. Points ascend in both coordinates; the value
// at any budget is the last point at or below it. A front is exact only once every item is in, so
// a time limit that passes first throws WorkLimitError, and `stop` throws Interrupted.
std::vector<ParetoPoint> pareto_front(const KnapsackProblem& problem,
                                      std::size_t max_planner_bytes = 0,
                                      std::optional<double> time_limit_seconds = std::nullopt,
                                      const StopRequest& stop = nullptr);

// Best saved runtime at a quantized budget, read off a front from pareto_front().
double pareto_value_at(const std::vector<ParetoPoint>& front, std::int64_t budget_quanta);

}  // namespace remat
