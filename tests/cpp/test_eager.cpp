// The eager (torch.utils.checkpoint) planner: hand-checked peaks, exhaustive search over every
// nesting of regions, feasibility under coarse discretization, and its errors.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>

#include "remat/eager.hpp"
#include "remat/errors.hpp"

namespace remat::eager {
namespace {

constexpr std::size_t kPlannerCap = std::size_t{1} << 30;

// n blocks of Linear + ReLU: each saves its input (the previous block's output) and its output.
Profile linear_relu_stack(std::int64_t n) {
  Profile p;
  p.input_bytes = 1;
  for (std::int64_t i = 0; i < n; ++i) p.layers.push_back({0, 1, true, 1.0});
  return p;
}

TEST(EagerEvaluate, MatchesHandCountedPeaks) {
  const Profile p = linear_relu_stack(8);
  // No checkpoint: the input and the eight block outputs.
  EXPECT_EQ(evaluate(p, {}).peak_bytes, 9);
  EXPECT_EQ(evaluate(p, {}).recompute_time, 0);
  // torch's checkpoint_sequential with 2 segments: the first is a region, the second runs
  // plainly. End of forward: input, a_3, outputs 4..7 = 6.
  const Evaluation two = evaluate(p, {{0, 3, 0}});
  EXPECT_EQ(two.peak_bytes, 6);
  EXPECT_EQ(two.recompute_time, 4);
  // Both halves as regions: the second half's re-run holds input, a_3 and its four outputs.
  EXPECT_EQ(evaluate(p, {{0, 3, 0}, {4, 7, 0}}).peak_bytes, 6);
  // Nested: regions inside a region re-run again.
  const Evaluation nested = evaluate(p, {{0, 3, 0}, {0, 1, 1}, {2, 3, 1}});
  EXPECT_EQ(nested.recompute_time, 4 + 2 + 2);
  EXPECT_EQ(nested.peak_bytes, 6);
  Profile costly = p;
  costly.region_overhead = 0.5;
  EXPECT_DOUBLE_EQ(evaluate(costly, {{0, 3, 0}, {0, 1, 1}, {2, 3, 1}}).recompute_time, 8 + 3 * 0.5);
}

TEST(EagerPlanner, RegionOverheadPrefersFewerRegions) {
  // Six equal layers under a budget that two regions of three or three regions of two both
  // meet: without overhead the cheaper re-run wins, with a large one the fewer regions do.
  Profile p = linear_relu_stack(6);
  const Plan free = plan(p, 5, 5, kPlannerCap);
  p.region_overhead = 10;
  const Plan costly = plan(p, 5, 5, kPlannerCap);
  EXPECT_LE(costly.regions.size(), free.regions.size());
  EXPECT_LE(costly.evaluation.recompute_time, evaluate(p, free.regions).recompute_time);
}

TEST(EagerEvaluate, RejectsRegionsThatDoNotNest) {
  const Profile p = linear_relu_stack(6);
  auto field_index = [&](const std::vector<Region>& regions) {
    try {
      evaluate(p, regions);
    } catch (const InputError& e) {
      return std::pair{e.field(), e.index().value_or(99)};
    }
    return std::pair{std::string("none"), std::size_t{99}};
  };
  EXPECT_EQ(field_index({{0, 2, 0}, {1, 3, 0}}), std::pair(std::string("regions"), std::size_t{1}));
  EXPECT_EQ(field_index({{0, 5, 0}}), std::pair(std::string("regions"), std::size_t{0}));
  EXPECT_EQ(field_index({{1, 3, 0}, {1, 3, 1}}).first, "regions");
  EXPECT_EQ(field_index({{4, 6, 0}}), std::pair(std::string("regions"), std::size_t{0}));
  EXPECT_EQ(field_index({{3, 2, 0}}), std::pair(std::string("regions"), std::size_t{0}));
  EXPECT_EQ(field_index({{0, 1, 0}, {2, 4, 0}, {2, 3, 1}}).first, "none");
}

// Every plan of segment s..t: each piece is a plain layer or a region (not the segment itself)
// with any plan inside it.
void all_plans(std::int64_t s, std::int64_t t, std::int64_t seg_s, std::int64_t seg_t,
               std::int64_t depth, std::vector<Region>& current,
               std::vector<std::vector<Region>>& out, const std::function<void()>& done) {
  if (s > t) {
    done();
    return;
  }
  all_plans(s + 1, t, seg_s, seg_t, depth, current, out, done);
  for (std::int64_t d = s; d <= t; ++d) {
    if (s == seg_s && d == seg_t) continue;
    current.push_back({s, d, depth});
    all_plans(s, d, s, d, depth + 1, current, out,
              [&, d] { all_plans(d + 1, t, seg_s, seg_t, depth, current, out, done); });
    current.pop_back();
  }
}

std::vector<std::vector<Region>> every_plan(std::int64_t n) {
  std::vector<std::vector<Region>> out;
  std::vector<Region> current;
  all_plans(0, n - 1, 0, n - 1, 0, current, out, [&] { out.push_back(current); });
  return out;
}

Profile random_profile(std::mt19937_64& rng, std::int64_t n) {
  std::uniform_int_distribution<std::int64_t> bytes(0, 9);
  std::uniform_int_distribution<int> time(1, 9), coin(0, 1);
  Profile p;
  p.input_bytes = bytes(rng);
  for (std::int64_t i = 0; i < n; ++i) {
    p.layers.push_back({bytes(rng), bytes(rng), coin(rng) == 1, static_cast<double>(time(rng))});
  }
  return p;
}

TEST(EagerPlanner, EnumerationCountsEveryNesting) {
  // 1 layer: plain only. 2 layers: plain, [0], [1], [0][1]: 4.
  EXPECT_EQ(every_plan(1).size(), 1u);
  EXPECT_EQ(every_plan(2).size(), 4u);
  for (const auto& regions : every_plan(5))
    EXPECT_NO_THROW(evaluate(linear_relu_stack(5), regions));
}

TEST(EagerPlanner, EqualsExhaustiveSearch) {
  std::mt19937_64 rng(5);
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t n = 1 + trial % 6;
    Profile p = random_profile(rng, n);
    p.region_overhead = trial % 3;  // 0, 1 or 2 per region
    std::vector<Evaluation> plans;
    for (const auto& regions : every_plan(n)) plans.push_back(evaluate(p, regions));
    std::int64_t least = std::numeric_limits<std::int64_t>::max();
    for (const Evaluation& e : plans) least = std::min(least, e.peak_bytes);
    const Plan lowest = minimum_memory_plan(p);
    ASSERT_EQ(lowest.minimum_budget, least) << "trial " << trial;
    EXPECT_EQ(lowest.evaluation.peak_bytes, least);
    for (std::int64_t budget = least; budget <= least + 12; ++budget) {
      double best = std::numeric_limits<double>::infinity();
      for (const Evaluation& e : plans) {
        if (e.peak_bytes <= budget) best = std::min(best, e.recompute_time);
      }
      const Plan found = plan(p, budget, budget, kPlannerCap);  // one byte a unit: exact
      EXPECT_EQ(found.unit_bytes, 1);
      EXPECT_LE(found.evaluation.peak_bytes, budget);
      EXPECT_DOUBLE_EQ(found.evaluation.recompute_time, best)
          << "trial " << trial << " n " << n << " budget " << budget;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 300 * 13);
}

TEST(EagerPlanner, RegionLengthLimitEqualsExhaustiveSearchOverShortRegions) {
  std::mt19937_64 rng(11);
  int compared = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const std::int64_t n = 1 + trial % 6;
    Profile p = random_profile(rng, n);
    p.region_overhead = trial % 2;
    p.max_region_layers = 1 + (trial / 6) % 3;  // 1 (per layer), 2 or 3
    std::vector<Evaluation> plans;
    for (const auto& regions : every_plan(n)) {
      bool short_enough = true;
      for (const Region& r : regions) short_enough &= r.last - r.first < p.max_region_layers;
      if (short_enough) plans.push_back(evaluate(p, regions));
    }
    std::int64_t least = std::numeric_limits<std::int64_t>::max();
    for (const Evaluation& e : plans) least = std::min(least, e.peak_bytes);
    ASSERT_EQ(minimum_memory_plan(p).minimum_budget, least) << "trial " << trial;
    for (std::int64_t budget = least; budget <= least + 10; ++budget) {
      double best = std::numeric_limits<double>::infinity();
      for (const Evaluation& e : plans) {
        if (e.peak_bytes <= budget) best = std::min(best, e.recompute_time);
      }
      const Plan found = plan(p, budget, budget, kPlannerCap);
      for (const Region& r : found.regions) EXPECT_LT(r.last - r.first, p.max_region_layers);
      EXPECT_DOUBLE_EQ(found.evaluation.recompute_time, best) << "trial " << trial;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 240 * 11);
  Profile p = linear_relu_stack(4);
  p.max_region_layers = 1;
  EXPECT_THROW(evaluate(p, {{0, 1, 0}}), InputError);
  p.max_region_layers = -1;
  EXPECT_THROW(evaluate(p, {}), InputError);
}

TEST(EagerPlanner, CoarseUnitsStillFitTheTrueBudget) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    Profile p;
    std::uniform_int_distribution<std::int64_t> bytes(1, 1 << 20);
    std::uniform_real_distribution<double> time(0.1, 3.0);
    p.input_bytes = bytes(rng);
    const std::int64_t n = 2 + trial % 40;
    for (std::int64_t i = 0; i < n; ++i)
      p.layers.push_back({bytes(rng), bytes(rng), i % 3 == 0, time(rng)});
    const std::int64_t least = minimum_memory_plan(p).minimum_budget;
    const std::int64_t all = evaluate(p, {}).peak_bytes;
    EXPECT_EQ(minimum_memory_plan(p).no_checkpoint_bytes, all);
    for (double f : {0.0, 0.1, 0.5, 1.0}) {
      const auto budget = least + static_cast<std::int64_t>(f * static_cast<double>(all - least));
      const Plan found = plan(p, budget, 16, kPlannerCap);
      EXPECT_LE(found.evaluation.peak_bytes, budget) << trial;
      EXPECT_EQ(found.no_checkpoint_bytes, all);
      if (f == 1.0) {
        EXPECT_EQ(found.evaluation.recompute_time, 0);  // everything fits: no checkpoint at all
      }
    }
  }
}

TEST(EagerPlanner, StatesTheMinimumBudgetAndRefusesBigTables) {
  const Profile p = linear_relu_stack(8);
  const std::int64_t least = minimum_memory_plan(p).minimum_budget;
  try {
    plan(p, least - 1, 100, kPlannerCap);
    FAIL() << "no error below the minimum";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "memory_budget");
    EXPECT_NE(std::string(e.what()).find(std::to_string(least) + " bytes"), std::string::npos)
        << e.what();
  }
  Profile big = p;
  for (Layer& layer : big.layers) layer.output_bytes = 1 << 20;
  const std::int64_t big_least = minimum_memory_plan(big).minimum_budget;
  EXPECT_THROW(plan(big, big_least, 1000000, 1024), PlannerMemoryError);
  EXPECT_NO_THROW(plan(big, big_least, 1000000, kPlannerCap));
  Profile bad = p;
  bad.layers[3].forward_time = std::nan("");
  try {
    plan(bad, 100, 10, kPlannerCap);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "forward_time");
    EXPECT_EQ(e.index(), 3u);
  }
  bad = p;
  bad.layers[5].saved_bytes = -1;
  EXPECT_THROW(evaluate(bad, {}), InputError);
}

TEST(EagerPlanner, MoreBudgetNeverCostsMoreTime) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 50; ++trial) {
    const Profile p = random_profile(rng, 12);
    const std::int64_t least = minimum_memory_plan(p).minimum_budget;
    double previous = std::numeric_limits<double>::infinity();
    for (std::int64_t budget = least; budget <= least + 60; budget += 3) {
      const Plan found = plan(p, budget, budget, kPlannerCap);
      EXPECT_LE(found.evaluation.recompute_time, previous);
      previous = found.evaluation.recompute_time;
    }
  }
}

}  // namespace
}  // namespace remat::eager
