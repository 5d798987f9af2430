#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "chain_exhaustive.hpp"
#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {
namespace {

Simulation every(std::int64_t n, std::int64_t s) {
  return simulate(n, Strategy::kEvery, s);
}

TEST(Textbook, SixteenLayers) {
  EXPECT_EQ(every(16, 4).memory, 7);
  EXPECT_EQ(every(16, 4).recompute, 12);
  EXPECT_EQ(every(16, 2).memory, 9);
  EXPECT_EQ(every(16, 8).memory, 9);
  const Simulation first = simulate(16, Strategy::kStoreFirst, 0);
  EXPECT_EQ(first.memory, 2);
  EXPECT_EQ(first.recompute, 120);
  const Simulation all = simulate(16, Strategy::kStoreAll, 0);
  EXPECT_EQ(all.memory, 16);
  EXPECT_EQ(all.recompute, 0);
}

TEST(Textbook, HundredAndTenThousandLayers) {
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected{
      {2, 51}, {5, 24}, {10, 19}, {20, 24}, {50, 51}};
  for (auto [s, memory] : expected) EXPECT_EQ(every(100, s).memory, memory) << "every " << s;
  EXPECT_EQ(every(10000, 100).memory, 199);
  EXPECT_EQ(every(10000, 100).recompute, 9900);
  EXPECT_EQ(every(32, 4).memory, 11);
  EXPECT_EQ(every(32, 4).recompute, 24);
  EXPECT_EQ(sqrt_segment(100), 10);
  EXPECT_EQ(sqrt_segment(10000), 100);
  EXPECT_EQ(simulate(10000, Strategy::kSqrt, 0).memory, 199);
}

TEST(Textbook, EstimateProblem12) {
  EstimateInput in{32, 32, 1024, 4096, 2, 1, std::nullopt};
  Estimate e = estimate(in);
  EXPECT_DOUBLE_EQ(e.tensor_gib, 0.25);
  EXPECT_DOUBLE_EQ(e.no_checkpoint_gib, 8.0);
  in.tensors_per_layer = 4;
  EXPECT_DOUBLE_EQ(estimate(in).no_checkpoint_gib, 32.0);
  in.tensors_per_layer = 10;
  EXPECT_DOUBLE_EQ(estimate(in).no_checkpoint_gib, 80.0);
  in.tensors_per_layer = 1;
  in.every = 4;
  e = estimate(in);
  EXPECT_DOUBLE_EQ(*e.checkpoint_gib, 2.75);
  EXPECT_EQ(*e.checkpoint_tensors, 11);
  EXPECT_EQ(*e.recompute_layers, 24);
  EXPECT_EQ(dtype_size("bf16"), 2);
  EXPECT_THROW(dtype_size("fp13"), InputError);
}

// The recursions the closed forms solve, by brute force over every split.
struct Recursions {
  static constexpr std::int64_t kInf = std::numeric_limits<std::int64_t>::max() / 4;
  explicit Recursions(int n) : r_(n + 1, std::vector<std::int64_t>(n + 2, kInf)), f_(r_) {
    for (int m = 1; m <= n; ++m) {
      for (int c = 1; c <= n + 1; ++c) {
        std::int64_t best = m == 1 ? 0 : kInf;
        if (m > 1 && c > 1) {
          for (int j = 1; j < m; ++j) best = std::min(best, j + r_[m - j][c - 1] + r_[j][c]);
        }
        r_[m][c] = best;
      }
    }
    for (int m = 1; m <= n; ++m) {
      for (int c = 1; c <= n + 1; ++c) {
        std::int64_t best = m <= c ? 0 : kInf;
        if (m > c && c > 1) {
          for (int j = 1; j < m; ++j) best = std::min(best, f_[m - j][c - 1] + r_[j][c]);
        }
        f_[m][c] = best;
      }
    }
  }
  std::vector<std::vector<std::int64_t>> r_, f_;
};

TEST(Optimal, ClosedFormEqualsTheRecursionForEveryNUpTo40AndEveryMemory) {
  const Recursions rec(40);
  for (int n = 1; n <= 40; ++n) {
    for (int c = 1; c <= n; ++c) {
      const auto closed = optimal_recompute(n, c);
      if (rec.f_[n][c] >= Recursions::kInf) {
        EXPECT_FALSE(closed) << n << " " << c;
      } else {
        ASSERT_TRUE(closed) << n << " " << c;
        EXPECT_EQ(*closed, rec.f_[n][c]) << "n " << n << " memory " << c;
      }
    }
  }
}

TEST(Optimal, SimulatedScheduleAchievesTheOptimumWithinMemory) {
  for (std::int64_t n = 1; n <= 70; ++n) {
    for (std::int64_t c = n == 1 ? 1 : 2; c <= n + 1; ++c) {
      const Simulation sim = simulate(n, Strategy::kOptimal, c);
      EXPECT_LE(sim.memory, c) << n << " " << c;
      EXPECT_EQ(sim.recompute, *optimal_recompute(n, c)) << n << " " << c;
    }
  }
  for (std::int64_t c : {2, 3, 5, 10, 31, 100, 999}) {
    const Simulation sim = simulate(1000, Strategy::kOptimal, c);
    EXPECT_LE(sim.memory, c);
    EXPECT_EQ(sim.recompute, *optimal_recompute(1000, c)) << c;
  }
}

TEST(Optimal, EqualsExhaustiveSearchOverAllSchedulesOnSmallChains) {
  for (int n = 1; n <= 10; ++n) {
    for (int c = 1; c <= n; ++c) {
      const double brute = testing::exhaustive_min_time(ChainProfile::uniform(n), c);
      const auto closed = optimal_recompute(n, c);
      if (brute < 0) {
        EXPECT_FALSE(closed) << n << " " << c;
      } else {
        ASSERT_TRUE(closed) << n << " " << c;
        EXPECT_EQ(static_cast<double>(*closed), brute) << "n " << n << " memory " << c;
      }
    }
  }
}

TEST(Optimal, NeverWorseThanEveryAtEqualMemory) {
  for (std::int64_t n : {16, 32, 100, 257, 1000}) {
    for (std::int64_t s = 1; s <= n; s += (s < 20 ? 1 : 7)) {
      const Simulation fixed = every(n, s);
      EXPECT_LE(*optimal_recompute(n, fixed.memory), fixed.recompute) << n << " every " << s;
    }
  }
}

TEST(Optimal, LeastMemoryForARecomputeBudget) {
  for (std::int64_t n : {16, 100, 1000}) {
    for (std::int64_t budget : std::vector<std::int64_t>{0, 1, 10, n, 3 * n, n * n}) {
      const std::int64_t m = optimal_memory(n, budget);
      EXPECT_LE(*optimal_recompute(n, m), budget);
      if (m > 2) {
        EXPECT_GT(*optimal_recompute(n, m - 1), budget);
      }
    }
  }
  EXPECT_EQ(optimal_memory(16, 0), 16);
  EXPECT_EQ(optimal_memory(16, 9), 7);
}

TEST(Optimal, RefusesMemoryBelowTwo) {
  EXPECT_FALSE(optimal_recompute(5, 1));
  EXPECT_THROW(simulate(5, Strategy::kOptimal, 1), InputError);
  EXPECT_EQ(*optimal_recompute(1, 1), 0);
}

TEST(Simulator, RejectsInvalidSchedulesNamingTheStep) {
  auto failing_step = [](std::int64_t n, const std::vector<Action>& actions) -> std::int64_t {
    Simulator sim(n);
    try {
      for (const Action& a : actions) sim.apply(a);
      sim.finish();
    } catch (const InvalidSchedule& e) {
      return e.step();
    }
    return -1;
  };
  // backward before the first pass finished
  EXPECT_EQ(failing_step(3, {Action::forward(1, 2), Action::backward(3)}), 2);
  // input not held
  EXPECT_EQ(failing_step(3, {Action::forward(1, 3, false), Action::forward(1, 1)}), 2);
  // wrong backward order
  EXPECT_EQ(failing_step(2, {Action::forward(1, 1), Action::forward(2, 2), Action::backward(1)}),
            3);
  // backward without its input
  EXPECT_EQ(failing_step(2, {Action::forward(1, 2), Action::backward(2)}), 2);
  // freeing what is not held
  EXPECT_EQ(failing_step(2, {Action::free(1)}), 1);
  // ends early
  EXPECT_EQ(failing_step(2, {Action::forward(1, 1), Action::forward(2, 2), Action::backward(2)}),
            3);
  EXPECT_EQ(failing_step(1, {Action::forward(1, 1), Action::backward(1)}), -1);
  // Found by fuzz_chain: a backward of layer 0 after the last one used to read a_{-1}.
  EXPECT_EQ(failing_step(1, {Action::forward(1, 1), Action::backward(1), Action::backward(0)}), 3);
  EXPECT_EQ(failing_step(2, {Action::forward(1, 2), Action::backward(7)}), 2);
}

TEST(Simulator, ForwardRangeCountsWorkingValueAndRecompute) {
  Simulator sim(4);
  sim.apply(Action::forward(1, 4));  // first pass: a_0 + working value
  sim.apply(Action::forward(1, 3));  // recompute 3
  sim.apply(Action::backward(4));
  sim.apply(Action::free(3));
  sim.apply(Action::forward(1, 2));
  sim.apply(Action::backward(3));
  sim.apply(Action::free(2));
  sim.apply(Action::forward(1, 1));
  sim.apply(Action::backward(2));
  sim.apply(Action::free(1));
  sim.apply(Action::backward(1));
  const Simulation s = sim.finish();
  EXPECT_EQ(s.memory, 2);
  EXPECT_EQ(s.recompute, 6);
}

}  // namespace
}  // namespace remat::chain
