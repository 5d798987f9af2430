// Full-table dynamic programming: the textbook O(n W) recurrence, kept as the reference that
// every other exact solver is tested against.
//
// Time O(n W), memory O(n W) bits plus one row of W+1 doubles (W = quantized budget). torch's
// dp_knapsack keeps the whole (n+1) x (W+1) float32 table; storing only the take/skip decision
// bit per cell makes this 32 times smaller and keeps values in double. The table is accounted
// against the planner-memory cap before anything is allocated.
//
// Ties follow torch's dp_knapsack: a cell records "take" only when taking the item is strictly
// better than skipping it, and the backtrack runs from the last item to the first, as torch's
// saves item i - 1 only when dp[i][j] != dp[i - 1][j]. Among optimal plans that is the one with
// the lexicographically smallest (x[n-1], ..., x[0]): each item from the last one back is skipped
// whenever an optimal plan skips it, given the decisions on the items after it. torch's table is
// float32, so where its rounding makes or breaks a tie the two can differ (and torch saves items
// of zero memory and negative runtime, which is never optimal; remat does not).
#include <algorithm>
#include <cstdint>

#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

namespace {

std::size_t row_words(std::int64_t capacity) {
  return static_cast<std::size_t>(capacity) / 64 + 1;
}

}  // namespace

std::size_t full_table_bytes(const ReducedProblem& p) {
  const std::size_t cells = row_words(p.capacity) * p.size();
  return cells * sizeof(std::uint64_t) +
         (static_cast<std::size_t>(p.capacity) + 1) * sizeof(double);
}

ReducedSolution solve_full_table_dp(const ReducedProblem& p, PlannerMemory& memory,
                                    std::optional<Clock::time_point> deadline) {
  memory.reserve(full_table_bytes(p));
  const std::size_t width = static_cast<std::size_t>(p.capacity) + 1;
  const std::size_t words = row_words(p.capacity);
  std::vector<double> best(width, 0.0);  // best[c]: max value of items so far within weight c
  std::vector<std::uint64_t> took(words * p.size(), 0);
  for (std::size_t k = 0; k < p.size(); ++k) {
    const auto w = static_cast<std::size_t>(p.weight[k]);
    const double v = p.value[k];
    stop_at_deadline(deadline, "dp");
    std::uint64_t* row = took.data() + k * words;
    for (std::size_t c = width; c-- > w;) {
      const double with_item = best[c - w] + v;
      if (with_item > best[c]) {
        best[c] = with_item;
        row[c / 64] |= std::uint64_t{1} << (c % 64);
      }
    }
  }
  ReducedSolution solution;
  solution.take.assign(p.size(), 0);
  std::size_t c = width - 1;
  for (std::size_t k = p.size(); k-- > 0;) {
    if ((took[k * words + c / 64] >> (c % 64)) & 1) {
      solution.take[k] = 1;
      c -= static_cast<std::size_t>(p.weight[k]);
    }
  }
  return solution;
}

}  // namespace remat::detail
