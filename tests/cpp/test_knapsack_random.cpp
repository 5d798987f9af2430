// Randomized cross-checks: brute force on thousands of small instances, the full-table DP on
// larger ones, generated families across all exact solvers.
#include <gtest/gtest.h>

#include <random>

#include "remat/generate.hpp"
#include "test_support.hpp"

namespace remat {
namespace {

using testing::solve_with;
using testing::tolerance;

TEST(RandomSmall, AllExactSolversEqualBruteForce) {
  std::mt19937_64 rng(20261130);
  for (int trial = 0; trial < 4000; ++trial) {
    const std::size_t n = 1 + trial % 12;
    const KnapsackProblem p = testing::random_small(rng, n, 1 + trial % 4);
    const double best = testing::brute_force_value(p);
    for (Solver s : {Solver::kExact, Solver::kSlidingHirschberg, Solver::kDp}) {
      const KnapsackResult r = solve_with(p, s);
      ASSERT_NEAR(r.max_runtime, best, tolerance(best)) << to_string(s) << " trial " << trial;
      ASSERT_EQ(r.status, SolveStatus::kOptimal);
    }
    const KnapsackResult g = solve_with(p, Solver::kGreedy);
    ASSERT_LE(g.max_runtime, best + tolerance(best));
    ASSERT_GE(g.upper_bound, best - tolerance(best));
  }
}

TEST(RandomSmall, RealValuedRuntimesAndMemory) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 1000; ++trial) {
    KnapsackInput in;
    const std::size_t n = 1 + trial % 14;
    for (std::size_t i = 0; i < n; ++i) {
      in.memory.push_back(unit(rng) < 0.1 ? 0.0 : unit(rng) * 0.01);
      in.runtime.push_back(unit(rng) < 0.1 ? -unit(rng) : unit(rng) * 1e6);
    }
    in.max_memory = unit(rng) * 0.01 * static_cast<double>(n) / 2;
    const KnapsackProblem p = quantize(in);
    const double best = testing::brute_force_value(p);
    for (Solver s : {Solver::kExact, Solver::kSlidingHirschberg, Solver::kDp}) {
      ASSERT_NEAR(solve_with(p, s).max_runtime, best, tolerance(best)) << to_string(s);
    }
  }
}

TEST(RandomLarger, ExactAndSlidingEqualFullTableDp) {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 60; ++trial) {
    const KnapsackProblem p = testing::random_small(rng, 50 + trial * 5, 40 + trial);
    const double reference = solve_with(p, Solver::kDp).max_runtime;
    EXPECT_NEAR(solve_with(p, Solver::kExact).max_runtime, reference, tolerance(reference));
    EXPECT_NEAR(solve_with(p, Solver::kSlidingHirschberg).max_runtime, reference,
                tolerance(reference));
  }
}

class FamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyTest, ExactSolversAgreeOnGeneratedInstances) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    GenerateOptions g;
    g.family = GetParam();
    g.n = 200;
    g.seed = seed;
    g.range = 300;
    g.budget_quanta = 20000;
    const KnapsackProblem p = quantize(generate(g).input);
    const double reference = solve_with(p, Solver::kDp).max_runtime;
    for (Solver s : {Solver::kExact, Solver::kSlidingHirschberg}) {
      EXPECT_NEAR(solve_with(p, s).max_runtime, reference, tolerance(reference))
          << to_string(s) << " seed " << seed;
    }
    EXPECT_LE(solve_with(p, Solver::kGreedy).max_runtime, reference + tolerance(reference));
  }
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, FamilyTest, ::testing::ValuesIn(generator_families()));

TEST(Determinism, SameInputSamePlan) {
  GenerateOptions g;
  g.family = "torch_like";
  g.n = 3000;
  const KnapsackProblem p = quantize(generate(g).input);
  for (Solver s : all_solvers()) {
    EXPECT_EQ(solve_with(p, s).saved, solve_with(p, s).saved) << to_string(s);
  }
}

}  // namespace
}  // namespace remat
