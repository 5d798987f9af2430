// The eager (torch.utils.checkpoint) planner: hand-checked peaks, exhaustive search over every
// nesting of regions (and every selective checkpoint option of its single-layer regions),
// feasibility under coarse discretization, planning time with many options, and its errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
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

// The gcd of every size the planner rounds (0 where all are 0).
std::int64_t size_gcd(const Profile& p) {
  std::int64_t g = p.input_bytes;
  for (const Layer& layer : p.layers) {
    g = std::gcd(g, std::gcd(layer.saved_bytes, layer.output_bytes));
    for (const Option& option : layer.options) g = std::gcd(g, option.held_bytes);
  }
  return g;
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
      // Or a unit that divides every size (random sizes may all be even): exact too.
      EXPECT_EQ(size_gcd(p) % found.unit_bytes, 0) << "trial " << trial;
      EXPECT_LE(found.evaluation.peak_bytes, budget);
      EXPECT_DOUBLE_EQ(found.evaluation.recompute_time, best)
          << "trial " << trial << " n " << n << " budget " << budget;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 300 * 13);
}

TEST(EagerPlanner, UnitsThatDivideEverySizeAreUsedWithoutRefining) {
  // Ten blocks of 8 MiB (saved and passed on) at a budget equal to the least peak: the default
  // 4096 slots round 96 MiB / 4096 up and lose the only plan, and refining them 4x three times
  // built a table of 115 MB (measured as the first step's memory). 8 MiB divides every size.
  constexpr std::int64_t kMiB8 = 8 << 20;
  Profile p;
  p.input_bytes = kMiB8;
  for (int i = 0; i < 10; ++i) p.layers.push_back({kMiB8, kMiB8, false, 1.0});
  p.max_region_layers = 1;
  const std::int64_t least = minimum_memory_plan(p).minimum_budget;
  for (std::int64_t budget : {least, least + 1, least + kMiB8, least + 3 * kMiB8}) {
    const Plan found = plan(p, budget, 4096, kPlannerCap);
    EXPECT_EQ(found.unit_bytes, kMiB8) << budget;
    EXPECT_LE(found.evaluation.peak_bytes, budget);
    const Plan bytes = plan(p, budget, budget, kPlannerCap);  // one byte a unit
    EXPECT_DOUBLE_EQ(found.evaluation.recompute_time, bytes.evaluation.recompute_time) << budget;
  }
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

// Selective checkpointing: options on single-layer regions outside every other region.

// Every way to give options to `regions`: each single-layer region at depth 0 that does not end
// the chain takes any of its layer's options or none.
std::vector<std::vector<Region>> with_options(const Profile& p,
                                              const std::vector<Region>& regions) {
  std::vector<std::vector<Region>> out{regions};
  const auto n = static_cast<std::int64_t>(p.layers.size());
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    if (r.first != r.last || r.depth != 0 || r.last == n - 1) continue;
    const auto count =
        static_cast<std::int64_t>(p.layers[static_cast<std::size_t>(r.first)].options.size());
    std::vector<std::vector<Region>> more;
    for (const auto& plan : out) {
      for (std::int64_t k = -1; k < count; ++k) {
        more.push_back(plan);
        more.back()[i].option = k;
      }
    }
    out = std::move(more);
  }
  return out;
}

// A random profile whose layers have 0 to 3 options, cheaper to re-run than the layer or not.
Profile random_profile_with_options(std::mt19937_64& rng, std::int64_t n) {
  Profile p = random_profile(rng, n);
  std::uniform_int_distribution<int> count(0, 3), held(0, 9), time(0, 9);
  for (Layer& layer : p.layers) {
    const int options = count(rng);
    for (int k = 0; k < options; ++k)
      layer.options.push_back({held(rng), static_cast<double>(time(rng))});
  }
  return p;
}

TEST(EagerOptions, EvaluateMatchesHandCountedPeaks) {
  // Layer 1 saves 10 bytes; layer 2 saves 20. Outputs are 1 byte, each saved by its layer.
  Profile p;
  p.input_bytes = 1;
  p.region_overhead = 0.125;
  p.layers = {{0, 1, true, 1.0}, {10, 1, true, 2.0}, {20, 1, true, 1.0}, {0, 1, true, 1.0}};
  p.layers[1].options = {{4, 0.5}, {0, 1.5}};
  // No checkpoint: input 1, layers 1 + 11 + 21 + 1.
  EXPECT_EQ(evaluate(p, {}).peak_bytes, 35);
  // Layer 1 re-run whole: while layers 2..3 run it holds its output (1); its re-run needs 11.
  // Backwards: layer 3 1, layer 2 21, region max(22 + 1, 11) = 23, layer 0 24, input 25.
  const Evaluation full = evaluate(p, {{1, 1, 0}});
  EXPECT_EQ(full.peak_bytes, 25);
  EXPECT_DOUBLE_EQ(full.recompute_time, 2.125);
  // Option 0 holds 4 more bytes: max(22 + 1 + 4, 11 + 4) = 27, then 28 and 29; re-runs in 0.5.
  const Evaluation cached = evaluate(p, {{1, 1, 0, 0}});
  EXPECT_EQ(cached.peak_bytes, 29);
  EXPECT_DOUBLE_EQ(cached.recompute_time, 0.625);
  // Option 1 holds nothing more and re-runs in 1.5: the full region's peak, less time.
  const Evaluation light = evaluate(p, {{1, 1, 0, 1}});
  EXPECT_EQ(light.peak_bytes, 25);
  EXPECT_DOUBLE_EQ(light.recompute_time, 1.625);
  // The re-run can set the peak: with layer 2 saving nothing, a 20-byte cache counts on top of
  // the re-run's 11.
  Profile light_rest = p;
  light_rest.layers[2].saved_bytes = 0;
  light_rest.layers[1].options = {{20, 0.5}};
  // Layer 3 1, layer 2 2, region max(2 + 1 + 20, 11 + 20) = 31, layer 0 32, input 33.
  EXPECT_EQ(evaluate(light_rest, {{1, 1, 0, 0}}).peak_bytes, 33);
  // Next to another region: both top-level, each accounted on its own.
  const Evaluation two = evaluate(p, {{1, 1, 0, 1}, {2, 2, 0}});
  // Layer 3 1, region 2: max(1 + 1, 21) = 21, region 1: max(21 + 1, 11) = 22, 23, 24.
  EXPECT_EQ(two.peak_bytes, 24);
  EXPECT_DOUBLE_EQ(two.recompute_time, 1.625 + 1.125);
  // The planner finds the cheap option when the budget allows its peak.
  const Plan at_29 = plan(p, 29, 29, kPlannerCap);
  EXPECT_LE(at_29.evaluation.recompute_time, 0.625);
  EXPECT_LE(at_29.evaluation.peak_bytes, 29);
  const Plan at_25 = plan(p, 25, 25, kPlannerCap);
  EXPECT_LE(at_25.evaluation.recompute_time, 1.625);
  EXPECT_EQ(minimum_memory_plan(p).evaluation.peak_bytes, minimum_memory_plan(p).minimum_budget);
}

TEST(EagerOptions, EvaluateRejectsMisplacedOptions) {
  Profile p = linear_relu_stack(6);
  p.layers[1].options = {{1, 0.5}, {0, 0.75}};
  p.layers[2].options = {{1, 0.5}};
  p.layers[5].options = {{1, 0.5}};
  auto error = [&](const std::vector<Region>& regions) {
    try {
      evaluate(p, regions);
    } catch (const InputError& e) {
      return std::pair{e.field(), e.index().value_or(99)};
    }
    return std::pair{std::string("none"), std::size_t{99}};
  };
  const auto regions = [](std::size_t i) { return std::pair{std::string("regions"), i}; };
  EXPECT_EQ(error({{1, 1, 0, 1}}).first, "none");
  EXPECT_EQ(error({{0, 0, 0}, {1, 1, 0, 2}}), regions(1));  // layer 1 has 2 options
  EXPECT_EQ(error({{1, 1, 0, -2}}), regions(0));            // below -1
  EXPECT_EQ(error({{0, 0, 0, 0}}), regions(0));             // layer 0 has none
  EXPECT_EQ(error({{1, 2, 0, 0}}), regions(0));             // a two-layer region
  EXPECT_EQ(error({{0, 3, 0}, {1, 1, 1, 0}}), regions(1));  // inside a multi-layer region
  EXPECT_EQ(error({{5, 5, 0, 0}}), regions(0));             // ends the chain
  EXPECT_EQ(error({{5, 5, 0}}).first, "none");              // as a whole region it may
  try {
    evaluate(p, {{1, 1, 0, 7}});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("option 7"), std::string::npos) << e.what();
  }
  Profile bad = p;
  bad.layers[2].options[0].held_bytes = -1;
  try {
    validate(bad);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "options");
    EXPECT_EQ(e.index(), 2u);
    EXPECT_NE(std::string(e.what()).find("held_bytes"), std::string::npos) << e.what();
  }
  bad = p;
  bad.layers[1].options[1].recompute_time = std::nan("");
  try {
    plan(bad, 100, 10, kPlannerCap);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "options");
    EXPECT_EQ(e.index(), 1u);
    EXPECT_NE(std::string(e.what()).find("recompute_time"), std::string::npos) << e.what();
  }
  bad.layers[1].options[1].recompute_time = -1;
  EXPECT_THROW(minimum_memory_plan(bad), InputError);
  bad.layers[1].options[1] = {std::int64_t{1} << 61, 1.0};
  EXPECT_THROW(evaluate(bad, {}), InputError);
}

// The planner against every plan with every option choice, at every budget from the least up.
void expect_exhaustive_optimum(std::uint64_t seed, int trials, std::int64_t max_region_layers) {
  std::mt19937_64 rng(seed);
  int compared = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const std::int64_t n = 1 + trial % 6;
    Profile p = random_profile_with_options(rng, n);
    p.region_overhead = trial % 3;
    p.max_region_layers = max_region_layers;
    std::vector<Evaluation> plans;
    for (const auto& regions : every_plan(n)) {
      bool short_enough = true;
      for (const Region& r : regions)
        short_enough &= max_region_layers == 0 || r.last - r.first < max_region_layers;
      if (!short_enough) continue;
      for (const auto& chosen : with_options(p, regions)) plans.push_back(evaluate(p, chosen));
    }
    std::int64_t least = std::numeric_limits<std::int64_t>::max();
    std::int64_t most = 0;
    for (const Evaluation& e : plans) {
      least = std::min(least, e.peak_bytes);
      most = std::max(most, e.peak_bytes);
    }
    const Plan lowest = minimum_memory_plan(p);
    ASSERT_EQ(lowest.minimum_budget, least) << "trial " << trial;  // options never lower it
    for (std::int64_t budget = least; budget <= most; ++budget) {
      double best = std::numeric_limits<double>::infinity();
      for (const Evaluation& e : plans) {
        if (e.peak_bytes <= budget) best = std::min(best, e.recompute_time);
      }
      const Plan found = plan(p, budget, std::max<std::int64_t>(budget, 1), kPlannerCap);  // exact
      EXPECT_LE(found.evaluation.peak_bytes, budget);
      EXPECT_DOUBLE_EQ(found.evaluation.recompute_time, best)
          << "trial " << trial << " n " << n << " budget " << budget;
      for (const Region& r : found.regions) {
        if (max_region_layers > 0) {
          EXPECT_LT(r.last - r.first, max_region_layers);
        }
        if (r.option >= 0) {
          EXPECT_EQ(r.depth, 0);
        }
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, trials * 5);
}

TEST(EagerOptions, EqualsExhaustiveSearchWithNestedRegions) {
  expect_exhaustive_optimum(31, 300, 0);
}

TEST(EagerOptions, EqualsExhaustiveSearchWithSingleLayerRegions) {
  expect_exhaustive_optimum(37, 300, 1);
}

TEST(EagerOptions, EqualsExhaustiveSearchWithTwoLayerRegions) {
  expect_exhaustive_optimum(41, 120, 2);
}

TEST(EagerOptions, OptionsAreUsedAndFitUnderCoarseUnits) {
  std::mt19937_64 rng(43);
  int with_option = 0;
  for (int trial = 0; trial < 100; ++trial) {
    Profile p;
    std::uniform_int_distribution<std::int64_t> bytes(1, 1 << 20);
    std::uniform_real_distribution<double> time(0.1, 3.0), share(0.0, 1.0);
    p.input_bytes = bytes(rng);
    p.max_region_layers = trial % 2;
    const std::int64_t n = 2 + trial % 30;
    for (std::int64_t i = 0; i < n; ++i) {
      Layer layer{bytes(rng), bytes(rng), i % 3 == 0, time(rng)};
      for (int k = 0; k < 3; ++k) {
        const double f = share(rng);
        layer.options.push_back(
            {static_cast<std::int64_t>(f * static_cast<double>(layer.saved_bytes)),
             (1 - f) * layer.forward_time});
      }
      p.layers.push_back(layer);
    }
    const std::int64_t least = minimum_memory_plan(p).minimum_budget;
    const std::int64_t all = evaluate(p, {}).peak_bytes;
    for (double f : {0.0, 0.2, 0.5, 0.9}) {
      const auto budget = least + static_cast<std::int64_t>(f * static_cast<double>(all - least));
      const Plan found = plan(p, budget, 16, kPlannerCap);
      EXPECT_LE(found.evaluation.peak_bytes, budget) << trial;
      for (const Region& r : found.regions) with_option += r.option >= 0;
    }
  }
  EXPECT_GT(with_option, 0);
}

// 200 layers with 20 options each at default slots: reported, and bounded loosely (the bound
// is for a loaded machine; the planner takes well under a second).
TEST(EagerOptions, PlansManyOptionsQuickly) {
  std::mt19937_64 rng(47);
  std::uniform_int_distribution<std::int64_t> bytes(1 << 10, 1 << 24);
  std::uniform_real_distribution<double> time(1e-4, 1e-2), share(0.0, 1.0);
  Profile p;
  p.input_bytes = bytes(rng);
  p.region_overhead = 1e-5;
  for (int i = 0; i < 200; ++i) {
    Layer layer{bytes(rng), bytes(rng), i % 2 == 0, time(rng)};
    for (int k = 0; k < 20; ++k) {
      const double f = share(rng);
      layer.options.push_back(
          {static_cast<std::int64_t>(f * static_cast<double>(layer.saved_bytes)),
           (1 - f) * (1 - f) * layer.forward_time});
    }
    p.layers.push_back(layer);
  }
  const std::int64_t default_count = default_slots(p.layers.size());
  // Default slots for nested and per-layer regions; per-layer regions also at 1024 slots (the
  // default's 225 units, each rounding 200 outputs up, leave the per-layer program no plan at
  // this budget, and it falls back to the least-peak plan).
  for (const auto& [max_region_layers, slots] :
       {std::pair<std::int64_t, std::int64_t>{1, default_count}, {1, 1024}, {0, default_count}}) {
    p.max_region_layers = max_region_layers;
    const Plan least = minimum_memory_plan(p);
    const std::int64_t all = evaluate(p, {}).peak_bytes;
    const std::int64_t budget = least.minimum_budget + (all - least.minimum_budget) / 3;
    const auto start = std::chrono::steady_clock::now();
    const Plan found = plan(p, budget, slots, kPlannerCap);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::int64_t options = 0;
    for (const Region& r : found.regions) options += r.option >= 0;
    std::printf(
        "[ timing   ] 200 layers x 20 options, max_region_layers %lld, %lld slots: %.3f s "
        "(%zu regions, %lld with an option, recompute %.4f, %s)\n",
        static_cast<long long>(max_region_layers), static_cast<long long>(slots), seconds,
        found.regions.size(), static_cast<long long>(options), found.evaluation.recompute_time,
        found.regions == least.regions ? "the least-peak plan" : "planned");
    EXPECT_LE(found.evaluation.peak_bytes, budget);
    // Coarse units that lose every fitting plan are refined rather than falling back to the
    // least-peak plan (which re-runs every layer).
    EXPECT_NE(found.regions, least.regions);
    EXPECT_GT(options, 0);
    EXPECT_LT(seconds, 5.0);
  }
}

}  // namespace
}  // namespace remat::eager
