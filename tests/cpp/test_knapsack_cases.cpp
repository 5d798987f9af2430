// PyTorch's own knapsack cases (test/functorch/test_ac_knapsack.py), the issue-197871 shapes,
// and the solver options: time limit, planner-memory cap, unknown names.
#include <gtest/gtest.h>

#include <chrono>

#include "remat/errors.hpp"
#include "remat/generate.hpp"
#include "test_support.hpp"

namespace remat {
namespace {

using testing::solve_with;

const std::vector<Solver> kExactSolvers{Solver::kExact, Solver::kSlidingHirschberg, Solver::kDp};

// The 13 cases of TestActivationCheckpointingKnapsack.setUp in PyTorch's
// test/functorch/test_ac_knapsack.py (pytorch/pytorch at 19a3e8fe32c9a39a576003292219092630529cf6),
// in its order, with the saved indices it expects (sorted). Cases 4 and 8 tie: another plan
// reaches the same runtime, and the one expected is the one torch's rule picks.
struct TorchCase {
  std::vector<double> memory, runtime;
  double max_memory;
  double expected;
  std::vector<std::size_t> saved;
};

const std::vector<TorchCase> kTorchCases{
    {{2, 3, 2, 4, 1}, {1, 2, 1, 3, 2}, 5, 5.0, {3, 4}},
    {{1, 1, 1}, {1, 2, 3}, 3, 6.0, {0, 1, 2}},
    {{10, 20, 30}, {1, 2, 3}, 5, 0.0, {}},
    {{1, 2, 3}, {10, 20, 30}, 1, 10.0, {0}},
    {{1, 1, 1}, {2, 2, 2}, 2, 4.0, {0, 1}},
    {{0, 2, 3}, {5, 2, 3}, 5, 10.0, {0, 1, 2}},
    {{1, 2, 3}, {0, 2, 3}, 3, 3.0, {2}},
    {{100, 200, 300}, {1000, 2000, 3000}, 500, 5000.0, {1, 2}},
    {{0.5, 1.5, 2.0}, {1.0, 2.0, 3.0}, 2.0, 3.0, {0, 1}},
    {{}, {}, 10, 0.0, {}},
    {{1, 2, 3}, {1, 2, 3}, 0, 0.0, {}},
    {{0, 0, 0}, {1, 2, 3}, 0, 6.0, {0, 1, 2}},
    {{1, 2, 3}, {0, 0, 0}, 6, 0.0, {}},
};

TEST(TorchCases, EveryExactSolverGivesTorchsPlan) {
  ASSERT_EQ(kTorchCases.size(), 13u);
  for (std::size_t c = 0; c < kTorchCases.size(); ++c) {
    const TorchCase& tc = kTorchCases[c];
    const KnapsackProblem p = quantize({tc.memory, tc.runtime, tc.max_memory, kDefaultScale});
    for (Solver s : kExactSolvers) {
      SCOPED_TRACE("case " + std::to_string(c) + " solver " + to_string(s));
      const KnapsackResult r = solve_with(p, s);
      EXPECT_EQ(r.status, SolveStatus::kOptimal);
      EXPECT_EQ(r.max_runtime, tc.expected);
      EXPECT_EQ(r.upper_bound, tc.expected);
      EXPECT_EQ(r.saved, tc.saved);
    }
  }
}

TEST(TorchCases, GreedyIsFeasibleAndMarkedHeuristic) {
  for (const TorchCase& tc : kTorchCases) {
    const KnapsackProblem p = quantize({tc.memory, tc.runtime, tc.max_memory, kDefaultScale});
    const KnapsackResult r = solve_with(p, Solver::kGreedy);
    EXPECT_LE(r.max_runtime, tc.expected + 1e-12);
    if (r.max_runtime < tc.expected) {
      EXPECT_EQ(r.status, SolveStatus::kHeuristic);
    }
    EXPECT_GE(r.upper_bound, tc.expected - 1e-9);
  }
}

// pytorch/pytorch issue 197871: torch's sliding_hirschberg saves two of three 1-quantum items
// under a 1-quantum budget. Every solver here must stay within the budget, including with one
// spare quantum and at every small size.
TEST(Issue197871, NoSolverGoesOverBudget) {
  for (int items = 1; items <= 9; ++items) {
    for (int budget = 0; budget <= items + 1; ++budget) {
      for (int spare : {0, 1}) {
        const KnapsackProblem p =
            quantize({std::vector<double>(items, 1e-4), std::vector<double>(items, 1.0),
                      (budget + spare) * 1e-4, kDefaultScale});
        for (Solver s : all_solvers()) {
          const KnapsackResult r = solve_with(p, s);
          EXPECT_EQ(r.saved.size(), static_cast<std::size_t>(std::min(items, budget + spare)))
              << to_string(s) << " items " << items << " budget " << budget + spare;
        }
      }
    }
  }
}

TEST(Issue197871, ExactShapeFromTheReport) {
  const KnapsackProblem p = quantize({{1e-4, 1e-4, 1e-4}, {1, 1, 1}, 1e-4, kDefaultScale});
  ASSERT_EQ(p.capacity, 1);
  for (Solver s : all_solvers()) EXPECT_EQ(solve_with(p, s).saved.size(), 1u) << to_string(s);
}

// Ties in dp follow torch's backtrack (an item is saved only if saving it is strictly better);
// in sliding_hirschberg they follow torch's splits. The plans expected were checked against
// torch 2.13's dp_knapsack and dp_knapsack_sliding_hirschberg (weights in quanta, scale 1).
std::vector<std::size_t> saved_by(Solver s, std::vector<double> weight, std::vector<double> value,
                                  double capacity) {
  return solve_with(quantize({std::move(weight), std::move(value), capacity, 1}), s).saved;
}

TEST(TorchTies, DpAndSlidingHirschbergBreakTiesDifferently) {
  // {0, 1} and {0, 2} both reach 5: dp skips the last item; the split gives the later half
  // {1, 2} the least capacity that reaches the optimum, 1, which item 2 fills.
  EXPECT_EQ(saved_by(Solver::kDp, {1, 2, 1}, {3, 2, 2}, 3), (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(saved_by(Solver::kSlidingHirschberg, {1, 2, 1}, {3, 2, 2}, 3),
            (std::vector<std::size_t>{0, 2}));
}

TEST(TorchTies, SlidingHirschbergSplitsCountSettledItems) {
  // Item 0 (runtime 0) is never saved, but torch splits at 3 / 2 = 1 with it counted: {2}, not
  // the {1} that splitting the two live items would give.
  EXPECT_EQ(saved_by(Solver::kSlidingHirschberg, {1, 2, 1}, {0, 2, 2}, 2),
            (std::vector<std::size_t>{2}));
  EXPECT_EQ(saved_by(Solver::kDp, {1, 2, 1}, {0, 2, 2}, 2), (std::vector<std::size_t>{1}));
}

TEST(TorchTies, SlidingHirschbergKeepsTorchsWidenedSplitWhenItFits) {
  // torch's extra quantum for the earlier half changes which of two optimal plans (value 10) it
  // finds, and its plan (weight 11) is within the budget: that plan, not the one of the exact
  // split ({0, 1, 2, 4, 5, 6}, weight 10).
  EXPECT_EQ(saved_by(Solver::kSlidingHirschberg, {2, 3, 2, 2, 1, 1, 1}, {1, 1, 2, 1, 1, 2, 3}, 11),
            (std::vector<std::size_t>{0, 1, 2, 3, 5, 6}));
}

TEST(TorchTies, SlidingHirschbergUsesTheExactSplitWhereTorchGoesOver) {
  // Issue 197871's shape: torch saves {0, 1} in a budget of one item; the exact split saves {0}.
  EXPECT_EQ(saved_by(Solver::kSlidingHirschberg, {1, 1, 1}, {1, 1, 1}, 1),
            (std::vector<std::size_t>{0}));
}

TEST(Greedy, FollowsTorchRatioOrderOnQuantizedWeights) {
  // Ratios 3, 2, 1.5: greedy saves items 0 and 1 (weight 2 + 3 = 5) and misses the optimum {0, 2}.
  const KnapsackProblem p = quantize({{2, 3, 4}, {6, 6, 6}, 6, 1});
  const KnapsackResult greedy = solve_with(p, Solver::kGreedy);
  EXPECT_EQ(greedy.saved, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(greedy.status, SolveStatus::kHeuristic);
  EXPECT_DOUBLE_EQ(solve_with(p, Solver::kExact).max_runtime, 12.0);
}

TEST(PlannerMemory, DpRefusesBeforeAllocatingAndNamesAnAlternative) {
  // 100 items at a quantized budget of 10^9, the paper's failing setup: ~12 GB of bits.
  GenerateOptions g;
  g.family = "paper_scale";
  g.n = 100;
  const KnapsackProblem p = quantize(generate(g).input);
  SolveOptions options;
  options.solver = Solver::kDp;
  options.max_planner_bytes = std::size_t{1} << 30;
  try {
    solve(p, options);
    FAIL() << "dp should refuse";
  } catch (const PlannerMemoryError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("dp needs"), std::string::npos) << message;
    EXPECT_NE(message.find("exact"), std::string::npos) << message;
  }
  options.solver = Solver::kExact;
  const KnapsackResult r = solve(p, options);
  testing::expect_consistent_plan(p, r);
  EXPECT_EQ(r.status, SolveStatus::kOptimal);
  EXPECT_LT(r.planner_peak_bytes, std::size_t{1} << 30);
}

TEST(PlannerMemory, SlidingRefusesWhenRowsDoNotFit) {
  const KnapsackProblem p = quantize({{3, 4, 5}, {1, 1, 1}, 10, 1e6});
  SolveOptions options;
  options.solver = Solver::kSlidingHirschberg;
  options.max_planner_bytes = 1 << 20;
  EXPECT_THROW(solve(p, options), PlannerMemoryError);
  options.max_planner_bytes = std::size_t{1} << 30;
  EXPECT_NO_THROW(solve(p, options));
}

TEST(PlannerMemory, ExactRefusesWhenItsListOutgrowsTheCapIfAskedTo) {
  GenerateOptions g;
  g.family = "strongly_correlated";
  g.n = 2000;
  g.range = 1000000;
  const KnapsackProblem p = quantize(generate(g).input);
  SolveOptions options;
  options.max_planner_bytes = 20000;
  options.on_memory_limit = OnMemoryLimit::kRefuse;
  EXPECT_THROW(solve(p, options), PlannerMemoryError);
}

TEST(TimeLimit, ExactReturnsAFeasiblePlanAndAValidBound) {
  GenerateOptions g;
  g.family = "circle";
  g.n = 3000;
  g.range = 10000000;
  const KnapsackProblem p = quantize(generate(g).input);
  SolveOptions options;
  options.time_limit_seconds = 1e-6;
  const KnapsackResult limited = solve(p, options);
  testing::expect_consistent_plan(p, limited);
  options.time_limit_seconds.reset();
  const KnapsackResult optimal = solve(p, options);
  EXPECT_EQ(optimal.status, SolveStatus::kOptimal);
  EXPECT_LE(limited.max_runtime, optimal.max_runtime);
  EXPECT_GE(limited.upper_bound, optimal.max_runtime);
  if (limited.status == SolveStatus::kOptimal) {
    EXPECT_DOUBLE_EQ(limited.max_runtime, optimal.max_runtime);
  } else {
    EXPECT_EQ(limited.status, SolveStatus::kTimeLimit);
  }
}

TEST(TimeLimit, TableSolversRefuseWorkTheyCannotFinishInTime) {
  GenerateOptions g;
  g.family = "paper_scale";
  g.n = 2000;
  g.budget_quanta = 1e8;  // 2000 x 10^8 cells: far beyond a millisecond
  const KnapsackProblem p = quantize(generate(g).input);
  for (Solver s : {Solver::kDp, Solver::kSlidingHirschberg}) {
    SolveOptions options;
    options.solver = s;
    options.time_limit_seconds = 1e-3;
    options.max_planner_bytes = std::size_t{1} << 40;
    try {
      solve(p, options);
      FAIL() << to_string(s) << " should refuse";
    } catch (const WorkLimitError& e) {
      // The core names options neutrally; each edge words them (word_options).
      EXPECT_NE(std::string(e.what()).find("use {solver=exact}"), std::string::npos) << e.what();
    }
  }
  SolveOptions options;
  options.time_limit_seconds = 1e-3;
  EXPECT_NO_THROW(solve(p, options));  // exact honours the limit itself
}

TEST(TimeLimit, RejectsNonPositive) {
  SolveOptions options;
  options.time_limit_seconds = 0;
  EXPECT_THROW(solve(quantize({{1}, {1}, 1, 1}), options), InputError);
}

TEST(SolverNames, RoundTripAndUnknownIsAnInputError) {
  for (Solver s : all_solvers()) EXPECT_EQ(parse_solver(to_string(s)), s);
  try {
    parse_solver("ilp");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "solver");
  }
}

}  // namespace
}  // namespace remat
