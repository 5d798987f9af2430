// solve(): reduce, check planner memory, dispatch to one algorithm, and assemble the result the
// same way for every solver.
#include <algorithm>
#include <chrono>

#include "common/text.hpp"
#include "knapsack/reduced_problem.hpp"
#include "remat/errors.hpp"
#include "remat/knapsack.hpp"

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

namespace remat {

namespace {

using detail::Clock;

KnapsackResult assemble(const KnapsackProblem& problem, const detail::ReducedProblem& reduced,
                        const detail::ReducedSolution& solution) {
  std::vector<char> saved(problem.size(), 0);
  for (std::size_t i : reduced.forced_saved) saved[i] = 1;
  double forced_value = 0;
  for (std::size_t i : reduced.forced_saved) forced_value += problem.value[i];
  for (std::size_t k = 0; k < reduced.size(); ++k) {
    if (solution.take[k]) saved[reduced.original_index[k]] = 1;
  }
  KnapsackResult result;
  result.status = solution.status;
  result.capacity = problem.capacity;
  const auto saved_count = static_cast<std::size_t>(std::count(saved.begin(), saved.end(), 1));
  result.saved.reserve(saved_count);
  result.recomputed.reserve(problem.size() - saved_count);
  for (std::size_t i = 0; i < problem.size(); ++i) {
    if (saved[i]) {
      result.saved.push_back(i);
      result.max_runtime += problem.value[i];
      result.memory_used += problem.memory[i];
      result.quantized_memory_used += problem.weight[i];
    } else {
      result.recomputed.push_back(i);
    }
  }
  result.upper_bound = solution.status == SolveStatus::kOptimal
                           ? result.max_runtime
                           : std::max(result.max_runtime, forced_value + solution.upper_bound);
  return result;
}

std::int64_t total_weight(const detail::ReducedProblem& reduced) {
  std::int64_t sum = 0;
  for (std::int64_t w : reduced.weight) sum += w;  // cannot overflow: quantize() checked
  return sum;
}

detail::ReducedSolution dispatch(const detail::ReducedProblem& reduced, const SolveOptions& options,
                                 detail::PlannerMemory& memory,
                                 std::optional<Clock::time_point> deadline, bool everything_fits) {
  if (everything_fits) {
    // Everything fits: the plan saves every item and is optimal for every solver.
    return {std::vector<char>(reduced.size(), 1), SolveStatus::kOptimal, 0.0, {}, {}};
  }
  switch (options.solver) {
    case Solver::kExact: {
      detail::ReducedSolution solution = detail::solve_exact(reduced, memory, deadline);
      if (solution.status == SolveStatus::kMemoryLimit &&
          options.on_memory_limit == OnMemoryLimit::kRefuse) {
        // The caller prefers a refusal: say whether the O(W) table solver would fit instead.
        const bool table_fits = detail::sliding_hirschberg_bytes(reduced) <= memory.cap();
        throw PlannerMemoryError(solution.limit_note +
                                 (table_fits ? "; use {solver=sliding_hirschberg}, which fits"
                                             : "; raise {max_planner_bytes}"));
      }
      return solution;
    }
    case Solver::kSlidingHirschberg:
      return detail::solve_sliding_hirschberg(reduced, memory, deadline);
    case Solver::kDp:
      return detail::solve_full_table_dp(reduced, memory, deadline);
    case Solver::kGreedy:
      return detail::solve_greedy(reduced, memory);
  }
  throw InputError("solver", std::nullopt, "unknown solver");
}

// A table solver's need is known up front; refuse it before anything is allocated, and say
// which solver would fit instead.
void check_table_solver_fits(const detail::ReducedProblem& reduced, Solver solver,
                             std::size_t cap) {
  std::size_t need = 0;
  if (solver == Solver::kDp) need = detail::full_table_bytes(reduced);
  if (solver == Solver::kSlidingHirschberg) need = detail::sliding_hirschberg_bytes(reduced);
  if (need <= cap) return;
  std::string alternative = "{solver=exact}";
  if (solver == Solver::kDp && detail::sliding_hirschberg_bytes(reduced) <= cap) {
    alternative = "{solver=sliding_hirschberg} or {solver=exact}";
  }
  throw PlannerMemoryError(to_string(solver) + " needs " + text::bytes(need) +
                           " of planner memory, over the cap of " + text::bytes(cap) + "; use " +
                           alternative + " (or raise {max_planner_bytes})");
}

// The table solvers' work is n x W cells, known before they start: refuse what the time limit
// cannot cover rather than run past it. The sliding solver does about twice the cells a pass, and
// up to two passes (the second only where torch's widened split would go over budget).
void check_table_solver_time(const detail::ReducedProblem& reduced, const SolveOptions& options) {
  if (!options.time_limit_seconds) return;
  if (options.solver != Solver::kDp && options.solver != Solver::kSlidingHirschberg) return;
  const double cells = static_cast<double>(reduced.size()) *
                       (static_cast<double>(reduced.capacity) + 1) *
                       (options.solver == Solver::kSlidingHirschberg ? 4.0 : 1.0);
  const double seconds = cells / kTableCellsPerSecond;
  if (seconds > *options.time_limit_seconds) {
    throw WorkLimitError(to_string(options.solver) + " needs about " + text::fixed(seconds, 3) +
                         " s for " + text::integer(static_cast<long long>(cells)) +
                         " table cells, over the time limit of " +
                         text::number(*options.time_limit_seconds) + " s; use {solver=exact}");
  }
}

}  // namespace

std::string to_string(SolveStatus status) {
  switch (status) {
    case SolveStatus::kOptimal:
      return "optimal";
    case SolveStatus::kHeuristic:
      return "heuristic";
    case SolveStatus::kTimeLimit:
      return "time_limit";
    case SolveStatus::kMemoryLimit:
      return "memory_limit";
  }
  return "unknown";
}

std::string to_string(Solver solver) {
  switch (solver) {
    case Solver::kExact:
      return "exact";
    case Solver::kSlidingHirschberg:
      return "sliding_hirschberg";
    case Solver::kDp:
      return "dp";
    case Solver::kGreedy:
      return "greedy";
  }
  return "unknown";
}

const std::vector<Solver>& all_solvers() {
  static const std::vector<Solver> solvers{Solver::kExact, Solver::kSlidingHirschberg, Solver::kDp,
                                           Solver::kGreedy};
  return solvers;
}

Solver parse_solver(const std::string& name) {
  for (Solver s : all_solvers()) {
    if (to_string(s) == name) return s;
  }
  throw InputError(
      "solver", std::nullopt,
      "unknown solver '" + name + "' (expected exact, sliding_hirschberg, dp or greedy)");
}

namespace {

std::size_t half_of_physical_memory() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {
    return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page_size) / 2;
  }
#endif
  return std::size_t{4} << 30;
}

}  // namespace

std::size_t default_max_planner_bytes() {
  // Read once: sysconf(_SC_PHYS_PAGES) is a sysinfo system call, about a fifth of a whole solve
  // of a ten-item instance, and every solve without an explicit cap asks for it.
  static const std::size_t bytes = half_of_physical_memory();
  return bytes;
}

std::size_t dp_planner_bytes(const KnapsackProblem& problem) {
  return detail::full_table_bytes(detail::reduce(problem));
}

std::size_t sliding_hirschberg_planner_bytes(const KnapsackProblem& problem) {
  return detail::sliding_hirschberg_bytes(detail::reduce(problem));
}

KnapsackResult solve(const KnapsackProblem& problem, const SolveOptions& options) {
  const auto start = Clock::now();
  // Validates the limit before any work.
  const std::optional<Clock::time_point> deadline =
      detail::deadline_after(start, options.time_limit_seconds);
  const std::size_t cap =
      options.max_planner_bytes ? options.max_planner_bytes : default_max_planner_bytes();
  const detail::ReducedProblem reduced = detail::reduce(problem);
  detail::PlannerMemory memory(cap, to_string(options.solver).c_str());
  const bool everything_fits = total_weight(reduced) <= reduced.capacity;
  if (!everything_fits) {
    check_table_solver_fits(reduced, options.solver, cap);
    check_table_solver_time(reduced, options);
  }
  const detail::ReducedSolution solution =
      dispatch(reduced, options, memory, deadline, everything_fits);
  KnapsackResult result = assemble(problem, reduced, solution);
  result.solver = to_string(options.solver);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.planner_peak_bytes = memory.peak();
  result.path = solution.path.empty() ? (everything_fits ? "all_fit" : "table") : solution.path;
  return result;
}

}  // namespace remat
