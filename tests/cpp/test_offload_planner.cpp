// The offload planner against exhaustive search: on random small chains, every sequence of
// choices (keep, region, option, offload) is evaluated, and the plan's time must be the least
// among those within the device and host budgets, its peak the least any reaches. With no
// layer offloaded the evaluation must be eager::evaluate's for the same single-layer regions.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "remat/eager.hpp"
#include "remat/errors.hpp"
#include "remat/offload.hpp"

namespace remat::eager {
namespace {

constexpr double kBestUnset = 1e300;

Profile random_profile(std::mt19937& rng, std::int64_t n) {
  Profile p;
  p.input_bytes = rng() % 4;
  p.region_overhead = (rng() % 3) * 0.25;
  p.max_region_layers = 1;
  for (std::int64_t j = 0; j < n; ++j) {
    Layer layer;
    layer.saved_bytes = rng() % 9;
    layer.output_bytes = 1 + rng() % 4;
    layer.saves_output = rng() % 2;
    layer.forward_time = 0.5 + (rng() % 6) * 0.5;
    for (std::uint32_t k = 0; k < rng() % 3; ++k) {
      layer.options.push_back({static_cast<std::int64_t>(rng() % 5), 0.25 + (rng() % 4) * 0.5});
    }
    p.layers.push_back(layer);
  }
  return p;
}

// Every sequence of choices the model allows (offloading only with `transfer`'s bandwidth),
// the invalid ones (a moved input the layer before holds) dropped by evaluate_offload itself.
std::vector<std::vector<LayerChoice>> every_plan(const Profile& p, const Transfer& transfer) {
  std::vector<std::vector<LayerChoice>> plans{{}};
  const std::int64_t n = std::ssize(p.layers);
  const bool offload = transfer.bandwidth > 0;
  for (std::int64_t j = 0; j < n; ++j) {
    std::vector<LayerChoice> here{{Action::kKeep, -1}};
    if (j + 1 < n) {
      here.push_back({Action::kRegion, -1});
      for (std::int64_t k = 0; k < std::ssize(p.layers[j].options); ++k) {
        here.push_back({Action::kOption, k});
      }
      if (offload && (transfer.offloadable.empty() || transfer.offloadable[j])) {
        here.push_back({Action::kOffload, -1});
      }
      if (offload && j > 0) here.push_back({Action::kOffloadInput, -1});
    }
    std::vector<std::vector<LayerChoice>> longer;
    for (const auto& plan : plans) {
      for (const LayerChoice& c : here) {
        longer.push_back(plan);
        longer.back().push_back(c);
      }
    }
    plans = std::move(longer);
  }
  std::vector<std::vector<LayerChoice>> valid;
  for (auto& plan : plans) {
    try {
      evaluate_offload(p, transfer, plan);
      valid.push_back(std::move(plan));
    } catch (const InputError&) {
    }
  }
  return valid;
}

TEST(OffloadPlanner, WithoutOffloadItIsEagerEvaluate) {
  std::mt19937 rng(5);
  const Transfer none;
  for (int trial = 0; trial < 300; ++trial) {
    const Profile p = random_profile(rng, 1 + rng() % 5);
    for (const auto& plan : every_plan(p, none)) {
      std::vector<Region> regions;
      for (std::int64_t j = 0; j < std::ssize(plan); ++j) {
        if (plan[j].action != Action::kKeep) regions.push_back({j, j, 0, plan[j].option});
      }
      const Evaluation want = evaluate(p, regions);
      const OffloadEvaluation got = evaluate_offload(p, none, plan);
      ASSERT_EQ(got.peak_bytes, want.peak_bytes) << "trial " << trial;
      ASSERT_NEAR(got.recompute_time, want.recompute_time, 1e-12);
      ASSERT_EQ(got.stall_time, 0.0);
    }
  }
}

TEST(OffloadPlanner, EqualsExhaustiveSearch) {
  std::mt19937 rng(17);
  int compared = 0, offloading = 0, moving_inputs = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const Profile p = random_profile(rng, 1 + rng() % 5);
    Transfer transfer;
    transfer.bandwidth = 1.0 + rng() % 8;
    if (rng() % 2) {
      for (std::size_t j = 0; j < p.layers.size(); ++j) {
        transfer.backward_time.push_back((rng() % 5) * 0.5);
      }
    }
    transfer.host_budget = rng() % 3 == 0 ? static_cast<std::int64_t>(rng() % 12) : -1;
    if (rng() % 3 == 0) {  // some layers may not be offloaded, some inputs may not move
      for (std::size_t j = 0; j < p.layers.size(); ++j) {
        transfer.offloadable.push_back(rng() % 2);
        transfer.input_offloadable.push_back(rng() % 2);
      }
    }
    const auto plans = every_plan(p, transfer);
    std::int64_t least = INT64_MAX;  // within the host budget
    for (const auto& plan : plans) {
      const OffloadEvaluation e = evaluate_offload(p, transfer, plan);
      if (transfer.host_budget < 0 || e.host_bytes <= transfer.host_budget) {
        least = std::min(least, e.peak_bytes);
      }
    }
    for (std::int64_t budget = least; budget <= least + 6; budget += 2) {
      double best = kBestUnset;
      for (const auto& plan : plans) {
        const OffloadEvaluation e = evaluate_offload(p, transfer, plan);
        const bool host_fits = transfer.host_budget < 0 || e.host_bytes <= transfer.host_budget;
        if (e.peak_bytes <= budget && host_fits) best = std::min(best, e.time());
      }
      // Unit 1 on both sides: the program is exact.
      const std::int64_t host_slots = std::max<std::int64_t>(1, transfer.host_budget);
      if (best == kBestUnset) {
        EXPECT_THROW(
            plan_offload(p, transfer, budget, std::max<std::int64_t>(1, budget), host_slots),
            InputError);
        continue;
      }
      const OffloadPlan got =
          plan_offload(p, transfer, budget, std::max<std::int64_t>(1, budget), host_slots);
      ASSERT_EQ(got.minimum_budget, least) << "trial " << trial;
      ASSERT_LE(got.evaluation.peak_bytes, budget);
      ASSERT_NEAR(got.evaluation.time(), best, 1e-9) << "trial " << trial << " budget " << budget;
      ++compared;
      for (std::size_t j = 0; j < got.layers.size(); ++j) {
        const bool offloaded = got.layers[j].action == Action::kOffload;
        offloading += offloaded;
        moving_inputs += got.layers[j].action == Action::kOffloadInput;
        if (!transfer.input_offloadable.empty() && !transfer.input_offloadable[j]) {
          ASSERT_NE(got.layers[j].action, Action::kOffloadInput);
        }
        if (!transfer.offloadable.empty()) {
          ASSERT_TRUE(!offloaded || transfer.offloadable[j]);
        }
      }
    }
  }
  EXPECT_GT(compared, 500);
  EXPECT_GT(offloading, 100);    // the comparisons include plans that offload
  EXPECT_GT(moving_inputs, 50);  // and plans that move a region's input
}

TEST(OffloadPlanner, MovingInputsGoesBelowTheLeastPeakOfKeepAndRecompute) {
  std::mt19937 rng(23);
  int lower = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const Profile p = random_profile(rng, 3 + rng() % 6);
    Transfer none, fast;
    fast.bandwidth = 1e9;
    const std::int64_t without = plan_offload(p, none, 1000, 1000, 1).minimum_budget;
    const OffloadPlan with = plan_offload(p, fast, 1000, 1000, 1);
    ASSERT_LE(with.minimum_budget, without);
    lower += with.minimum_budget < without;
    const OffloadPlan floor = plan_offload(p, fast, with.minimum_budget, 1000, 1);
    ASSERT_LE(floor.evaluation.peak_bytes, with.minimum_budget);
  }
  EXPECT_GT(lower, 100);
}

TEST(OffloadPlanner, RoundedPlansFitAndLongChainsPlan) {
  std::mt19937 rng(3);
  Profile p = random_profile(rng, 200);
  Transfer transfer;
  transfer.bandwidth = 4;
  transfer.host_budget = 300;
  const OffloadPlan floor = plan_offload(p, transfer, 1 << 20, 64, 16);
  const std::int64_t budget = floor.minimum_budget + 40;
  const OffloadPlan plan = plan_offload(p, transfer, budget, 512, 16);
  EXPECT_LE(plan.evaluation.peak_bytes, budget);
  EXPECT_LE(plan.evaluation.host_bytes, 300);
}

TEST(OffloadPlanner, ErrorsNameTheField) {
  std::mt19937 rng(9);
  Profile p = random_profile(rng, 3);
  Transfer transfer;
  transfer.bandwidth = 2;
  const OffloadPlan plan = plan_offload(p, transfer, 1 << 20, 64, 16);
  try {
    plan_offload(p, transfer, plan.minimum_budget - 1, 64, 16);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "memory_budget");
  }
  std::vector<LayerChoice> choices(3);
  choices[2] = {Action::kOffload, -1};
  try {
    evaluate_offload(p, transfer, choices);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "choices");
    EXPECT_EQ(e.index(), 2u);
  }
  choices[2] = {};
  choices[0] = {Action::kOffload, -1};
  transfer.offloadable = {false, true, true};
  try {
    evaluate_offload(p, transfer, choices);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "choices");
    EXPECT_EQ(e.index(), 0u);
  }
  transfer.offloadable = {true};
  try {
    plan_offload(p, transfer, 1 << 20, 64, 16);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "offloadable");
  }
  transfer.offloadable = {};
  p.max_region_layers = 0;
  EXPECT_THROW(plan_offload(p, transfer, 1 << 20, 64, 16), InputError);
  p.max_region_layers = 1;
  transfer.backward_time = {1.0};
  EXPECT_THROW(plan_offload(p, transfer, 1 << 20, 64, 16), InputError);
}

}  // namespace
}  // namespace remat::eager
