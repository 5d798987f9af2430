// Sliding-window DP with Hirschberg's divide and conquer, the algorithm of arXiv 2608.08740 and
// torch's dp_knapsack_sliding_hirschberg, done so that it is exact and never over budget.
//
// A subproblem is (items [lo, hi), capacity c). Its two halves each get one DP row (best value
// within every capacity up to c); the split a maximizing left[a] + right[c - a] is where the
// optimum divides the budget, and both halves are pushed on an explicit stack. Capacities of the
// two halves always add up to c, and a leaf saves its item only if it fits, so the plan cannot
// exceed the budget (torch's version widens the capacity by one quantum at each split, which is
// how it goes over budget: pytorch/pytorch issue 197871).
//
// Time O(n W) (the halves' work halves at each level), memory two rows of W+1 doubles plus
// O(n) for prefix sums: independent of n in the W term. W is the quantized budget; each row is
// further cut to the total weight of its half.
#include <algorithm>
#include <vector>

#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

namespace {

// dst[i] = max(dst[i], src[i] + v); the ranges never overlap, which lets the compiler vectorize.
void relax_chunk(double* __restrict dst, const double* __restrict src, std::size_t len, double v) {
  for (std::size_t i = 0; i < len; ++i) dst[i] = std::max(dst[i], src[i] + v);
}

// Adds one item of weight w to row[0..cap]. Walks down in chunks no longer than w so that every
// chunk reads only cells below it, which still hold the values without the item.
void add_item(double* row, std::size_t cap, std::size_t w, double v) {
  std::size_t hi = cap + 1;
  while (hi > w) {
    const std::size_t len = std::min(hi - w, w);
    relax_chunk(row + hi - len, row + hi - len - w, len, v);
    hi -= len;
  }
}

void fill_row(const ReducedProblem& p, std::size_t lo, std::size_t hi, std::size_t cap,
              double* row) {
  std::fill(row, row + cap + 1, 0.0);
  for (std::size_t k = lo; k < hi; ++k) {
    const auto w = static_cast<std::size_t>(p.weight[k]);
    if (w <= cap) add_item(row, cap, w, p.value[k]);
  }
}

struct Segment {
  std::size_t lo, hi;
  std::int64_t capacity;
};

}  // namespace

std::size_t sliding_hirschberg_bytes(const ReducedProblem& p) {
  const std::size_t width = static_cast<std::size_t>(p.capacity) + 1;
  return 2 * width * sizeof(double) + (p.size() + 1) * sizeof(std::int64_t) + 64 * sizeof(Segment);
}

ReducedSolution solve_sliding_hirschberg(const ReducedProblem& p, PlannerMemory& memory) {
  memory.reserve(sliding_hirschberg_bytes(p));
  std::vector<std::int64_t> prefix_weight(p.size() + 1, 0);
  for (std::size_t k = 0; k < p.size(); ++k) prefix_weight[k + 1] = prefix_weight[k] + p.weight[k];
  const std::size_t width = static_cast<std::size_t>(p.capacity) + 1;
  std::vector<double> left(width), right(width);

  ReducedSolution solution;
  solution.take.assign(p.size(), 0);
  std::vector<Segment> stack{{0, p.size(), p.capacity}};
  while (!stack.empty()) {
    const Segment s = stack.back();
    stack.pop_back();
    if (s.lo == s.hi || s.capacity == 0) continue;  // every reduced item weighs at least 1
    if (prefix_weight[s.hi] - prefix_weight[s.lo] <= s.capacity) {
      std::fill(solution.take.begin() + s.lo, solution.take.begin() + s.hi, 1);
      continue;
    }
    if (s.hi - s.lo == 1) {
      solution.take[s.lo] = p.weight[s.lo] <= s.capacity;
      continue;
    }
    const std::size_t mid = s.lo + (s.hi - s.lo) / 2;
    const auto cap_left =
        static_cast<std::size_t>(std::min(s.capacity, prefix_weight[mid] - prefix_weight[s.lo]));
    const auto cap_right =
        static_cast<std::size_t>(std::min(s.capacity, prefix_weight[s.hi] - prefix_weight[mid]));
    fill_row(p, s.lo, mid, cap_left, left.data());
    fill_row(p, mid, s.hi, cap_right, right.data());
    // Both rows are nondecreasing, so giving the right half everything the left does not use is
    // never worse; the first best split wins ties, which keeps the plan deterministic.
    const auto cap = static_cast<std::size_t>(s.capacity);
    std::size_t best_split = cap > cap_right ? cap - cap_right : 0;
    double best_value = -1;
    for (std::size_t a = best_split; a <= cap_left; ++a) {
      const double value = left[a] + right[std::min(cap - a, cap_right)];
      if (value > best_value) {
        best_value = value;
        best_split = a;
      }
    }
    const auto split = static_cast<std::int64_t>(best_split);
    stack.push_back({mid, s.hi, s.capacity - split});
    stack.push_back({s.lo, mid, split});
  }
  return solution;
}

}  // namespace remat::detail
