// The exact solver's extra paths against brute force: meet in the middle over the core (exact
// when it holds every item, an incumbent otherwise), the surrogate cardinality bound (valid for
// every plan), and subset-sum-like instances end to end, with the path the result reports.
#include <gtest/gtest.h>

#include <random>

#include "reduced_support.hpp"

namespace remat {
namespace {

using testing::brute_force_value;
using testing::tolerance;

// Runtime proportional to memory at a fine scale: the core cannot prune until a plan fills the
// budget exactly, so it lists many states and switches to the enumeration.
KnapsackProblem proportional(std::mt19937_64& rng, std::size_t n, bool exact_ratio) {
  KnapsackInput in;
  in.scale = 1e8;
  std::uniform_real_distribution<double> memory(0.01, 1.0);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    in.memory.push_back(memory(rng));
    in.runtime.push_back(exact_ratio ? std::nearbyint(in.memory.back() * 1e8) : in.memory.back());
    total += in.memory.back();
  }
  in.max_memory = total / 2;
  return quantize(in);
}

TEST(Paths, SubsetSumLikeInstancesEqualBruteForce) {
  std::mt19937_64 rng(16);
  int enumerated = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const std::size_t n = 14 + static_cast<std::size_t>(trial % 6);
    const KnapsackProblem p = proportional(rng, n, trial % 2 == 0);
    const KnapsackResult r = testing::solve_with(p, Solver::kExact);
    const double optimum = brute_force_value(p);
    EXPECT_EQ(r.status, SolveStatus::kOptimal);
    EXPECT_NEAR(r.max_runtime, optimum, tolerance(optimum)) << "trial " << trial << " " << r.path;
    enumerated += r.path != "expanding_core";
  }
  EXPECT_GT(enumerated, 0);  // the new paths ran
}

TEST(Paths, CoreEnumerationOverEveryItemIsExact) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const KnapsackProblem p = testing::random_small(rng, 4 + trial % 14, 50);
    const detail::ReducedProblem reduced = detail::reduce(p);
    if (reduced.size() == 0) continue;
    const std::vector<std::uint32_t> order = detail::order_by_efficiency(reduced);
    std::size_t b = 0;
    std::int64_t w = 0;
    double v = 0;
    while (b < order.size() && w + reduced.weight[order[b]] <= reduced.capacity) {
      w += reduced.weight[order[b]];
      v += reduced.value[order[b]];
      ++b;
    }
    detail::PlannerMemory memory(std::size_t{1} << 30, "exact");
    const auto found = detail::enumerate_core(reduced, order, b, reduced.capacity - w, 10, memory);
    ASSERT_TRUE(found.has_value());
    ASSERT_TRUE(found->all_items);
    double forced = 0;
    for (std::size_t i : reduced.forced_saved) forced += p.value[i];
    const double optimum = brute_force_value(p);
    EXPECT_NEAR(forced + v + found->flipped_value, optimum, tolerance(optimum)) << trial;
    EXPECT_LE(w + found->flipped_weight, reduced.capacity);
  }
}

TEST(Paths, CardinalityBoundIsValid) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const KnapsackProblem p = testing::random_small(rng, 3 + trial % 14, 30);
    const detail::ReducedProblem reduced = detail::reduce(p);
    if (reduced.size() == 0) continue;
    const double optimum = testing::reduced_optimum(p, reduced);
    detail::PlannerMemory memory(std::size_t{1} << 30, "exact");
    // Any incumbent below the optimum: the bound must still cover the optimum.
    for (double z : {0.0, optimum - 1, optimum - 0.5}) {
      if (z < 0) continue;
      const double u = detail::cardinality_bound(reduced, z, true, memory);
      EXPECT_GE(std::max(u, z) + tolerance(optimum), optimum) << "trial " << trial;
    }
  }
}

TEST(Paths, ResultNamesThePath) {
  EXPECT_EQ(testing::solve_with(quantize({{1, 2}, {1, 1}, 10, 1}), Solver::kExact).path, "all_fit");
  EXPECT_EQ(testing::solve_with(quantize({{3, 4, 5}, {1, 2, 3}, 8, 1}), Solver::kExact).path,
            "expanding_core");
  EXPECT_EQ(testing::solve_with(quantize({{3, 4, 5}, {1, 2, 3}, 8, 1}), Solver::kDp).path, "table");
  EXPECT_EQ(testing::solve_with(quantize({{3, 4, 5}, {1, 2, 3}, 8, 1}), Solver::kGreedy).path,
            "greedy");
}

}  // namespace
}  // namespace remat
