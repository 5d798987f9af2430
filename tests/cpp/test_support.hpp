// Helpers shared by the C++ tests: brute force, feasibility checks, random instances.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "remat/knapsack.hpp"

namespace remat::testing {

// Best value over all 2^n subsets (n <= 20), of a KnapsackProblem or a reduced one (anything with
// size(), weight, value and capacity).
template <class Problem>
double brute_force_value(const Problem& p) {
  const std::size_t n = p.size();
  double best = 0;
  for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
    std::int64_t w = 0;
    double v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (mask >> i & 1) {
        w += p.weight[i];
        v += p.value[i];
      }
    }
    if (w <= p.capacity && v > best) best = v;
  }
  return best;
}

inline double tolerance(double x) {
  return 1e-9 * std::max(1.0, std::abs(x));
}

// Checks every field of a result that must hold for any solver: a partition of the items, sums
// that match the plan, the budget respected, the semantics of forced items.
inline void expect_consistent_plan(const KnapsackProblem& p, const KnapsackResult& r) {
  std::vector<int> seen(p.size(), 0);
  for (std::size_t k = 0; k < r.saved.size(); ++k) {
    ASSERT_LT(r.saved[k], p.size());
    if (k > 0) {
      EXPECT_LT(r.saved[k - 1], r.saved[k]);
    }
    seen[r.saved[k]] += 1;
  }
  for (std::size_t k = 0; k < r.recomputed.size(); ++k) {
    ASSERT_LT(r.recomputed[k], p.size());
    if (k > 0) {
      EXPECT_LT(r.recomputed[k - 1], r.recomputed[k]);
    }
    seen[r.recomputed[k]] += 1;
  }
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(seen[i], 1) << "item " << i;
  std::int64_t w = 0;
  double v = 0;
  for (std::size_t i : r.saved) {
    w += p.weight[i];
    v += p.value[i];
    EXPECT_GT(p.value[i], 0) << "item " << i << " with runtime <= 0 was saved";
  }
  for (std::size_t i : r.recomputed) {
    EXPECT_FALSE(p.weight[i] == 0 && p.value[i] > 0) << "free item " << i << " was not saved";
  }
  EXPECT_LE(w, p.capacity) << r.solver << " is over budget";
  EXPECT_EQ(w, r.quantized_memory_used);
  EXPECT_DOUBLE_EQ(v, r.max_runtime);
  EXPECT_GE(r.upper_bound + tolerance(r.upper_bound), r.max_runtime);
}

inline KnapsackResult solve_with(const KnapsackProblem& p, Solver solver) {
  SolveOptions options;
  options.solver = solver;
  KnapsackResult r = solve(p, options);
  expect_consistent_plan(p, r);
  return r;
}

// Small random integer instance: weights 0..max_weight quanta, runtimes with ties, zeros and
// negatives.
inline KnapsackProblem random_small(std::mt19937_64& rng, std::size_t n, std::int64_t max_weight) {
  KnapsackInput in;
  in.scale = 1;
  std::uniform_int_distribution<std::int64_t> weight(0, max_weight);
  std::uniform_int_distribution<int> value(-2, 8);
  for (std::size_t i = 0; i < n; ++i) {
    in.memory.push_back(static_cast<double>(weight(rng)));
    in.runtime.push_back(static_cast<double>(value(rng)));
  }
  std::uniform_int_distribution<std::int64_t> cap(
      0, max_weight * static_cast<std::int64_t>(n) / 2 + 1);
  in.max_memory = static_cast<double>(cap(rng));
  return quantize(in);
}

}  // namespace remat::testing
