// The whole training step's peak for eager plans: hand-counted predictions, the plan that fits a
// step budget (the least-recompute one over every nesting on small chains), and the errors.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "remat/eager.hpp"
#include "remat/errors.hpp"

namespace remat::eager {
namespace {

constexpr std::size_t kPlannerCap = std::size_t{1} << 30;

// Three layers, each saving 10 bytes besides its input and passing on 4; the chain's input is 2.
Profile three_layers() {
  Profile p;
  p.input_bytes = 2;
  for (int i = 0; i < 3; ++i) p.layers.push_back({10, 4, false, 1.0});
  return p;
}

// A step that holds 100 bytes as it begins, and 5 bytes beside the activations in every part.
StepFigures five_beside(std::int64_t layers) {
  StepFigures f;
  f.start_bytes = 100;
  f.outside_bytes = 120;  // the optimizer step
  f.parts.push_back({StepPartKind::pre, 0, 5});
  for (std::int64_t i = 0; i < layers; ++i) {
    f.parts.push_back({StepPartKind::forward, i, 5});
    f.parts.push_back({StepPartKind::after, i, 5});
  }
  for (std::int64_t i = layers - 1; i >= 0; --i) {
    f.parts.push_back({StepPartKind::backward, i, 5});
    f.parts.push_back({StepPartKind::before, i, 5});
  }
  f.parts.push_back({StepPartKind::done, 0, 5});
  return f;
}

TEST(EagerStep, MatchesHandCountedPeaks) {
  const Profile p = three_layers();
  const StepFigures f = five_beside(3);
  // No region: the last layer's forward holds the input, two layers' 14 bytes and its own
  // saved bytes and output (the model's upper bound: the output of a chain's last layer is
  // counted while it runs): 2 + 14 + 14 + 14 = 44, so 100 + 5 + 44 = 149, in a block.
  const StepPeak plain = predict_step(p, {}, f);
  EXPECT_EQ(plain.peak_bytes, 149);
  EXPECT_EQ(plain.at, StepPeakAt::blocks);
  // Every layer a region: after the forward the input and two outputs (2 + 4 + 4 = 10); the last
  // layer's backward re-runs it beside them: 10 + 14 = 24, so 100 + 5 + 24 = 129.
  const StepPeak each = predict_step(p, {{0, 0, 0}, {1, 1, 0}, {2, 2, 0}}, f);
  EXPECT_EQ(each.peak_bytes, 129);
  EXPECT_EQ(each.at, StepPeakAt::blocks);
  // The optimizer step sets the peak when it is the largest part; the margin adds to the rest.
  StepFigures heavy = f;
  heavy.outside_bytes = 200;
  EXPECT_EQ(predict_step(p, {}, heavy).peak_bytes, 200);
  EXPECT_EQ(predict_step(p, {}, heavy).at, StepPeakAt::outside);
  heavy.margin_bytes = 60;
  EXPECT_EQ(predict_step(p, {}, heavy).peak_bytes, 209);
}

TEST(EagerStep, PlanFitsTheStepAndStatesTheLeast) {
  const Profile p = three_layers();
  const StepFigures f = five_beside(3);
  const StepPlan all = plan_step(p, f, 149, 64, kPlannerCap);
  EXPECT_TRUE(all.plan.regions.empty());
  EXPECT_EQ(all.step.peak_bytes, 149);
  const StepPlan less = plan_step(p, f, 148, 64, kPlannerCap);
  EXPECT_FALSE(less.plan.regions.empty());
  EXPECT_LE(less.step.peak_bytes, 148);
  // The least-activation plan's step is 135 (its two-layer region re-runs both layers at once);
  // every layer its own region predicts 129 (above), which is the floor.
  EXPECT_EQ(all.least.peak_bytes, 129);
  EXPECT_EQ(all.least.at, StepPeakAt::blocks);
  const StepPlan least = plan_step(p, f, 129, 64, kPlannerCap);
  EXPECT_EQ(least.step.peak_bytes, 129);
  try {
    plan_step(p, f, 128, 64, kPlannerCap);
    FAIL() << "a budget below the least step peak was accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.field(), "memory_budget");
    EXPECT_NE(std::string(error.what()).find("the least peak of this training step"),
              std::string::npos);
  }
}

TEST(EagerStep, EveryBudgetFitsAndMoreBudgetNeverRecomputesMore) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    Profile p;
    p.input_bytes = static_cast<std::int64_t>(rng() % 50);
    const auto n = static_cast<std::int64_t>(2 + rng() % 5);
    for (std::int64_t i = 0; i < n; ++i) {
      p.layers.push_back({static_cast<std::int64_t>(rng() % 100),
                          static_cast<std::int64_t>(rng() % 40), rng() % 3 == 0,
                          1.0 + static_cast<double>(rng() % 10)});
    }
    StepFigures f = five_beside(n);
    for (StepPart& part : f.parts) part.beside_bytes = static_cast<std::int64_t>(rng() % 200);
    const std::int64_t least =
        plan_step(p, f, std::int64_t{1} << 40, 64, kPlannerCap).least.peak_bytes;
    double previous = std::numeric_limits<double>::infinity();
    for (std::int64_t budget = least; budget < least + 600; budget += 37) {
      const StepPlan found = plan_step(p, f, budget, 64, kPlannerCap);
      EXPECT_LE(found.step.peak_bytes, budget);
      EXPECT_EQ(found.step.peak_bytes, predict_step(p, found.plan.regions, f).peak_bytes);
      EXPECT_LE(found.plan.evaluation.recompute_time, previous + 1e-9);
      previous = found.plan.evaluation.recompute_time;
    }
  }
}

TEST(EagerStep, RejectsPartsOutsideTheChain) {
  const Profile p = three_layers();
  StepFigures f = five_beside(3);
  f.parts.push_back({StepPartKind::backward, 3, 0});
  try {
    validate(p, f);
    FAIL() << "a part of layer 3 of 3 was accepted";
  } catch (const InputError& error) {
    EXPECT_EQ(error.field(), "step.parts");
    EXPECT_EQ(error.index(), f.parts.size() - 1);
  }
  f.parts.pop_back();
  f.start_bytes = -1;
  EXPECT_THROW(validate(p, f), InputError);
}

}  // namespace
}  // namespace remat::eager
