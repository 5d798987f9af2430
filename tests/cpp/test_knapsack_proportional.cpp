// proportional_search (the exact path for small near-proportional instances) against brute force:
// the search on its own from several incumbents, the exact solver end to end with the path
// forced early (ties, zero weights and non-positive runtimes included), and the time limit on an
// instance where the path runs at production thresholds.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "reduced_support.hpp"

namespace remat {
namespace {

using testing::fits_whole;
using testing::plan_totals;
using testing::reduced_optimum;
using testing::tolerance;

// Runtime equal to memory, real-valued, quantized at `scale`; every `dup`-th item repeats the
// previous one (ties).
KnapsackProblem proportional(std::mt19937_64& rng, std::size_t n, double scale, int dup) {
  KnapsackInput in;
  in.scale = scale;
  std::uniform_real_distribution<double> memory(0.01, 1.0);
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool repeat = dup > 0 && i > 0 && i % static_cast<std::size_t>(dup) == 0;
    in.memory.push_back(repeat ? in.memory.back() : memory(rng));
    in.runtime.push_back(in.memory.back());
    total += in.memory.back();
  }
  in.max_memory = total / 2;
  return quantize(in);
}

TEST(Proportional, SearchEqualsBruteForceFromAnyIncumbent) {
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 120; ++trial) {
    const std::size_t n = 4 + static_cast<std::size_t>(trial % 16);
    const double scale = trial % 3 == 0 ? 1e2 : (trial % 3 == 1 ? 1e5 : 1e8);
    const KnapsackProblem p = trial % 4 == 3 ? testing::random_small(rng, n, 1 + trial % 7)
                                             : proportional(rng, n, scale, trial % 5);
    const detail::ReducedProblem reduced = detail::reduce(p);
    if (reduced.size() == 0) continue;
    const double optimum = reduced_optimum(p, reduced);
    // From nothing, from half the optimum, and from the optimum itself (which it must prove).
    // Integral runtimes (random_small) also with their step of 1, from integral incumbents.
    const double step = trial % 8 == 3 ? 1.0 : 0.0;
    for (double incumbent : {0.0, std::floor(0.5 * optimum), optimum}) {
      detail::PlannerMemory memory(std::size_t{1} << 30, "exact");
      const detail::ProportionalOutcome o =
          detail::proportional_search(reduced, incumbent, step, memory, std::nullopt);
      const std::string what =
          "trial " + std::to_string(trial) + " incumbent " + std::to_string(incumbent);
      ASSERT_EQ(o.status, detail::ProportionalOutcome::kProven) << what;
      EXPECT_GE(o.upper_bound + tolerance(optimum), optimum) << what;
      if (o.take.empty()) {
        EXPECT_NEAR(incumbent, optimum, tolerance(optimum)) << what;
        continue;
      }
      const auto [w, v] = plan_totals(reduced, o.take);
      EXPECT_LE(w, reduced.capacity) << what;
      EXPECT_DOUBLE_EQ(v, o.best_value) << what;
      EXPECT_NEAR(v, optimum, tolerance(optimum)) << what;
      EXPECT_GT(v, incumbent) << what;
    }
  }
}

TEST(Proportional, ExactSolverThroughThePathEqualsBruteForce) {
  std::mt19937_64 rng(29);
  int ran = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t n = 6 + static_cast<std::size_t>(trial % 14);
    const KnapsackProblem p = trial % 3 == 2 ? testing::random_small(rng, n, 1 + trial % 5)
                                             : proportional(rng, n, 1e8, trial % 4);
    const detail::ReducedProblem reduced = detail::reduce(p);
    if (reduced.size() == 0) continue;
    if (fits_whole(reduced)) continue;
    const double optimum = reduced_optimum(p, reduced);
    detail::ExactTuning tuning;
    tuning.first_checkpoint = 1;
    tuning.min_proportional_items = 0;
    detail::PlannerMemory memory(std::size_t{1} << 30, "exact");
    const detail::ReducedSolution s = detail::solve_exact(reduced, memory, std::nullopt, tuning);
    EXPECT_EQ(s.status, SolveStatus::kOptimal) << trial;
    const auto [w, v] = plan_totals(reduced, s.take);
    EXPECT_NEAR(v, optimum, tolerance(optimum)) << trial << " " << s.path;
    EXPECT_LE(w, reduced.capacity) << trial;
    ran += s.path == "proportional_search";
  }
  EXPECT_GT(ran, 50);
}

// n = 60 at scale 1e8: the core's list passes its first checkpoint within milliseconds and the
// path runs for about 0.1 to 0.5 s; the limit stops it there with a valid bound.
TEST(Proportional, TimeLimitHonouredInThePath) {
  std::mt19937_64 rng(8);
  const KnapsackProblem p = proportional(rng, 64, 1e8, 0);
  SolveOptions unlimited;
  const KnapsackResult full = solve(p, unlimited);
  ASSERT_EQ(full.status, SolveStatus::kOptimal);
  EXPECT_EQ(full.path, "proportional_search");
  int in_path = 0;
  for (double limit : {0.01, 0.03, 0.1}) {
    SolveOptions options;
    options.time_limit_seconds = limit;
    // On a shared machine the scheduler alone can hold a thread past the limit: an overshoot
    // counts when a second run repeats it.
    KnapsackResult r = solve(p, options);
    const double allowed = std::max(1.1 * limit, limit + 0.05);
    if (r.seconds > allowed) r = solve(p, options);
    testing::expect_consistent_plan(p, r);
    EXPECT_LE(r.seconds, allowed) << r.path;
    EXPECT_GE(r.upper_bound + tolerance(full.max_runtime), full.max_runtime) << r.path;
    if (r.status == SolveStatus::kOptimal) {
      EXPECT_NEAR(r.max_runtime, full.max_runtime, tolerance(full.max_runtime));
    } else {
      EXPECT_EQ(r.status, SolveStatus::kTimeLimit);
    }
    in_path += r.path == "proportional_search";
  }
  EXPECT_GT(in_path, 0);  // the limit struck inside the path at least once
}

}  // namespace
}  // namespace remat
