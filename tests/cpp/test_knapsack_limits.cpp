// Every limit that stops `exact` (planner-memory cap, time limit) returns a feasible plan and a
// valid bound, checked against brute force on instances small enough to enumerate; the table
// solvers keep refusing up front; OnMemoryLimit::kRefuse keeps the old refusal.
#include <gtest/gtest.h>

#include <random>

#include "remat/errors.hpp"
#include "remat/generate.hpp"
#include "test_support.hpp"

namespace remat {
namespace {

using testing::brute_force_value;
using testing::expect_consistent_plan;
using testing::tolerance;

// A limited result must be feasible, never claim more than the optimum, bound it from above, and
// be optimal only when it is.
void expect_valid_limited(const KnapsackProblem& p, const KnapsackResult& r, double optimum,
                          SolveStatus limit) {
  expect_consistent_plan(p, r);
  EXPECT_LE(r.max_runtime, optimum + tolerance(optimum));
  EXPECT_GE(r.upper_bound + tolerance(r.upper_bound), optimum);
  if (r.status == SolveStatus::kOptimal) {
    EXPECT_NEAR(r.max_runtime, optimum, tolerance(optimum));
  } else {
    EXPECT_EQ(r.status, limit);
  }
}

KnapsackProblem random_real(std::mt19937_64& rng, std::size_t n) {
  KnapsackInput in;
  in.scale = 1000;
  std::uniform_real_distribution<double> memory(0.0, 1.0), runtime(0.01, 1.0);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    in.memory.push_back(memory(rng));
    in.runtime.push_back(runtime(rng));
    total += in.memory.back();
  }
  in.max_memory = total * std::uniform_real_distribution<double>(0.2, 0.7)(rng);
  return quantize(in);
}

TEST(MemoryLimit, EveryCapGivesAFeasiblePlanAndAValidBound) {
  std::mt19937_64 rng(17);
  int limited = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 4 + static_cast<std::size_t>(trial % 13);
    const KnapsackProblem p = trial % 2 ? testing::random_small(rng, n, 40) : random_real(rng, n);
    const double optimum = brute_force_value(p);
    for (std::size_t cap : {1, 64, 200, 400, 700, 1000, 1500, 3000, 100000}) {
      SolveOptions options;
      options.max_planner_bytes = cap;
      const KnapsackResult r = solve(p, options);
      expect_valid_limited(p, r, optimum, SolveStatus::kMemoryLimit);
      limited += r.status == SolveStatus::kMemoryLimit;
    }
  }
  EXPECT_GT(limited, 100);  // the caps did stop the search, on many paths
}

TEST(MemoryLimit, RefuseKeepsThePlannerMemoryError) {
  std::mt19937_64 rng(3);
  const KnapsackProblem p = random_real(rng, 14);
  SolveOptions options;
  options.max_planner_bytes = 300;
  EXPECT_EQ(solve(p, options).status, SolveStatus::kMemoryLimit);
  options.on_memory_limit = OnMemoryLimit::kRefuse;
  try {
    solve(p, options);
    FAIL() << "refuse should throw";
  } catch (const PlannerMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("exact needs more than 300 bytes"), std::string::npos)
        << e.what();
  }
}

TEST(MemoryLimit, StronglyCorrelatedStopsWithItsBestPlan) {
  GenerateOptions g;
  g.family = "strongly_correlated";
  g.n = 2000;
  g.range = 1000000;
  const KnapsackProblem p = quantize(generate(g).input);
  SolveOptions options;
  options.max_planner_bytes = 200000;
  const KnapsackResult r = solve(p, options);
  expect_consistent_plan(p, r);
  if (r.status != SolveStatus::kOptimal) {
    EXPECT_EQ(r.status, SolveStatus::kMemoryLimit);
    EXPECT_GT(r.upper_bound, r.max_runtime);
  }
  EXPECT_LE(r.planner_peak_bytes, options.max_planner_bytes);
  const KnapsackResult greedy = testing::solve_with(p, Solver::kGreedy);
  EXPECT_GE(r.max_runtime, greedy.max_runtime);
}

TEST(MemoryLimit, TableSolversStillRefuseUpFront) {
  const KnapsackProblem p = quantize({{3, 4, 5}, {1, 1, 1}, 10, 1e6});
  for (Solver s : {Solver::kDp, Solver::kSlidingHirschberg}) {
    SolveOptions options;
    options.solver = s;
    options.max_planner_bytes = 1 << 16;
    EXPECT_THROW(solve(p, options), PlannerMemoryError) << to_string(s);
  }
}

TEST(TimeLimit, TinyLimitsGiveAFeasiblePlanAndAValidBound) {
  std::mt19937_64 rng(29);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 4 + static_cast<std::size_t>(trial % 13);
    const KnapsackProblem p = trial % 2 ? testing::random_small(rng, n, 40) : random_real(rng, n);
    const double optimum = brute_force_value(p);
    for (double limit : {1e-12, 1e-7, 1e-6}) {
      SolveOptions options;
      options.time_limit_seconds = limit;
      expect_valid_limited(p, solve(p, options), optimum, SolveStatus::kTimeLimit);
    }
  }
}

TEST(Limits, StatusNames) {
  EXPECT_EQ(to_string(SolveStatus::kMemoryLimit), "memory_limit");
  EXPECT_EQ(to_string(SolveStatus::kTimeLimit), "time_limit");
}

}  // namespace
}  // namespace remat
