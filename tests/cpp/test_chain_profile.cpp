// The heterogeneous planner: unit-model equivalence, exhaustive search with byte sizes and
// times, true-budget feasibility under coarse discretization, and its errors.
#include <gtest/gtest.h>

#include <map>
#include <queue>
#include <random>
#include <tuple>

#include "chain_exhaustive.hpp"
#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {
namespace {

constexpr std::size_t kPlannerCap = std::size_t{1} << 30;

TEST(ProfilePlanner, UnitProfileReproducesTheUnitOptimum) {
  for (std::int64_t n = 1; n <= 30; ++n) {
    for (std::int64_t memory = n == 1 ? 1 : 2; memory <= n; ++memory) {
      const ProfilePlan plan = plan_profile(ChainProfile::uniform(n), memory, memory, kPlannerCap);
      EXPECT_EQ(plan.unit_bytes, 1);
      EXPECT_LE(plan.simulation.memory_bytes, memory) << n << " " << memory;
      EXPECT_DOUBLE_EQ(plan.simulation.recompute_time,
                       static_cast<double>(*optimal_recompute(n, memory)))
          << "n " << n << " memory " << memory;
      EXPECT_DOUBLE_EQ(plan.predicted_recompute_time, plan.simulation.recompute_time);
    }
  }
}

ChainProfile random_profile(std::mt19937_64& rng, std::int64_t n, std::int64_t max_bytes) {
  ChainProfile p;
  std::uniform_int_distribution<std::int64_t> bytes(1, max_bytes);
  std::uniform_int_distribution<int> time(1, 9);
  p.activation_bytes.push_back(bytes(rng));
  p.forward_time.push_back(0);
  for (std::int64_t i = 1; i <= n; ++i) {
    p.activation_bytes.push_back(bytes(rng));
    p.forward_time.push_back(static_cast<double>(time(rng)));
  }
  return p;
}

TEST(ProfilePlanner, EqualsExhaustiveSearchWithBytesAndTimes) {
  std::mt19937_64 rng(11);
  int compared = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const std::int64_t n = 1 + trial % 7;
    const ChainProfile p = random_profile(rng, n, 4);
    std::int64_t total = 0;
    for (std::int64_t b : p.activation_bytes) total += b;
    std::uniform_int_distribution<std::int64_t> budget_draw(1, total);
    const std::int64_t budget = budget_draw(rng);
    const double brute = testing::exhaustive_min_time(p, budget);
    if (brute < 0) {
      EXPECT_THROW(plan_profile(p, budget, budget, kPlannerCap), InputError);
      continue;
    }
    const ProfilePlan plan = plan_profile(p, budget, budget, kPlannerCap);
    EXPECT_LE(plan.simulation.memory_bytes, budget);
    EXPECT_DOUBLE_EQ(plan.simulation.recompute_time, brute) << "trial " << trial;
    ++compared;
  }
  EXPECT_GT(compared, 200);
}

TEST(ProfilePlanner, CoarseSlotsStillFitTheTrueBudget) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const ChainProfile p = random_profile(rng, 20 + trial, 1 << 20);
    std::int64_t total = 0;
    for (std::int64_t b : p.activation_bytes) total += b;
    const std::int64_t budget = total / 3;
    try {
      const ProfilePlan coarse = plan_profile(p, budget, 64, kPlannerCap);
      EXPECT_LE(coarse.simulation.memory_bytes, budget);
      const ProfilePlan fine = plan_profile(p, budget, 512, kPlannerCap);
      EXPECT_LE(fine.simulation.memory_bytes, budget);
      EXPECT_NEAR(coarse.predicted_recompute_time, coarse.simulation.recompute_time, 1e-9);
    } catch (const InputError&) {
      // Too tight at this discretization: acceptable, as long as it says so.
    }
  }
}

TEST(ProfilePlanner, NeverWorseThanAnyFixedSegmentationThatFits) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 30; ++trial) {
    const ChainProfile p = random_profile(rng, 10 + trial, 6);
    for (std::int64_t s = 1; s <= p.layers(); ++s) {
      const Simulation fixed = simulate(p, Strategy::kEvery, s);
      const ProfilePlan best = plan_profile(p, fixed.memory_bytes, fixed.memory_bytes, kPlannerCap);
      EXPECT_LE(best.simulation.memory_bytes, fixed.memory_bytes);
      EXPECT_LE(best.simulation.recompute_time, fixed.recompute_time + 1e-9)
          << "trial " << trial << " every " << s;
    }
  }
}

TEST(ProfilePlanner, SizesWithACommonDivisorAreExactAtFewSlots) {
  ChainProfile p = ChainProfile::uniform(40);
  for (auto& b : p.activation_bytes) b *= std::int64_t{1} << 20;  // 1 MiB each
  const ProfilePlan plan = plan_profile(p, 9 << 20, 16, kPlannerCap);
  EXPECT_EQ(plan.unit_bytes, 1 << 20);
  EXPECT_DOUBLE_EQ(plan.simulation.recompute_time, static_cast<double>(*optimal_recompute(40, 9)));
}

TEST(ProfilePlanner, ErrorsAreClear) {
  ChainProfile p = ChainProfile::uniform(10);
  try {
    plan_profile(p, 1, 100, kPlannerCap);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "budget");
    EXPECT_NE(std::string(e.what()).find("at least 2 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_profile(ChainProfile::uniform(200), 100000, 100000, 1 << 20),
               PlannerMemoryError);
  p.activation_bytes[3] = -1;
  EXPECT_THROW(plan_profile(p, 10, 10, kPlannerCap), InputError);
}

// A budget of petabytes counted in single bytes: the planner's byte count wrapped past 2^64, and
// std::vector refused the allocation in place of the cap.
TEST(ProfilePlanner, CountsPlannerBytesPastTwoToTheSixtyFourAsOverTheCap) {
  ChainProfile p;
  p.activation_bytes = {3, 5, 7, 11};
  p.forward_time = {0, 1, 2, 3};
  for (std::int64_t budget : {std::int64_t{1} << 61, std::int64_t{1000000000000000000}}) {
    try {
      plan_profile(p, budget, budget, kPlannerCap);
      FAIL() << budget;
    } catch (const PlannerMemoryError& e) {
      EXPECT_NE(std::string(e.what()).find("more than 2^63 bytes"), std::string::npos) << e.what();
    }
  }
}

// The planners price runs of layers as differences of running sums: after a time of 1e17 a time
// of 1 counted as nothing, and the plan recomputed it for free (reported recompute 0, true 15).
TEST(ProfilePlanner, RefusesTimesTooSmallToCountBesideTheTotal) {
  ChainProfile p = ChainProfile::uniform(8);
  p.forward_time[1] = 1e17;
  try {
    plan_profile(p, 4, 4, kPlannerCap);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "layers");
    EXPECT_EQ(e.index(), std::optional<std::size_t>(1));
    EXPECT_NE(std::string(e.what()).find("forward_time 1 is too small"), std::string::npos)
        << e.what();
  }
  p.forward_time[1] = 1e6;  // an ordinary spread of times plans
  EXPECT_NO_THROW(plan_profile(p, 4, 4, kPlannerCap));
  p.forward_time = std::vector<double>(100001, 1.0);  // many equal times add up with no such loss
  p.activation_bytes = std::vector<std::int64_t>(100001, 1);
  EXPECT_NO_THROW(p.validate());
}

}  // namespace
}  // namespace remat::chain
