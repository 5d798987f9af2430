#include <gtest/gtest.h>

#include <random>

#include "remat/errors.hpp"
#include "remat/generate.hpp"
#include "test_support.hpp"

namespace remat {
namespace {

TEST(Pareto, EveryBudgetMatchesASeparateSolve) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const KnapsackProblem p = testing::random_small(rng, 1 + trial % 12, 1 + trial % 5);
    const std::vector<ParetoPoint> front = pareto_front(p);
    ASSERT_FALSE(front.empty());
    EXPECT_EQ(front.front().budget_quanta, 0);
    for (std::size_t k = 1; k < front.size(); ++k) {
      EXPECT_LT(front[k - 1].budget_quanta, front[k].budget_quanta);
      EXPECT_LT(front[k - 1].max_runtime, front[k].max_runtime);
    }
    EXPECT_LE(front.back().budget_quanta, p.capacity);
    for (std::int64_t budget = 0; budget <= p.capacity; ++budget) {
      KnapsackProblem at = p;
      at.capacity = budget;
      const double best = testing::brute_force_value(at);
      ASSERT_NEAR(pareto_value_at(front, budget), best, testing::tolerance(best))
          << "trial " << trial << " budget " << budget;
    }
  }
}

TEST(Generate, DeterministicForASeedAndDifferentAcrossSeeds) {
  for (const std::string& family : generator_families()) {
    GenerateOptions g;
    g.family = family;
    g.n = 50;
    const GeneratedInstance a = generate(g), b = generate(g);
    EXPECT_EQ(a.input.memory, b.input.memory) << family;
    EXPECT_EQ(a.input.runtime, b.input.runtime) << family;
    g.seed = 2;
    EXPECT_NE(generate(g).input.memory, a.input.memory) << family;
    EXPECT_EQ(a.input.memory.size(), 50u);
    EXPECT_NO_THROW(quantize(a.input)) << family;
  }
}

TEST(Generate, PisingerWeightsQuantizeBackToIntegers) {
  GenerateOptions g;
  g.family = "strongly_correlated";
  g.n = 1000;
  g.range = 10000000;
  const GeneratedInstance instance = generate(g);
  const KnapsackProblem p = quantize(instance.input);
  for (std::size_t i = 0; i < p.size(); ++i) {
    // Strongly correlated profits are weight + range/10 exactly, so the quantized weight must
    // come back as the generator's integer weight.
    ASSERT_EQ(static_cast<double>(p.weight[i]) + static_cast<double>(g.range / 10), p.value[i]);
    ASSERT_GE(p.weight[i], 1);
    ASSERT_LE(p.weight[i], g.range);
  }
}

TEST(Generate, PaperScaleHasTheRequestedBudget) {
  GenerateOptions g;
  g.family = "paper_scale";
  g.n = 2000;
  g.budget_quanta = 1e9;
  const KnapsackProblem p = quantize(generate(g).input);
  EXPECT_EQ(p.capacity, 1000000000);
}

TEST(Generate, RejectsUnknownFamilyAndBadParameters) {
  GenerateOptions g;
  g.family = "nope";
  EXPECT_THROW(generate(g), InputError);
  g.family = "uncorrelated";
  g.capacity_ratio = 1.5;
  EXPECT_THROW(generate(g), InputError);
}

}  // namespace
}  // namespace remat
