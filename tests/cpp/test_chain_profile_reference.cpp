// The band planner (plan_profile) against the full-table program it replaced
// (plan_profile_reference): the same objective to the last bit and the same plan, on random
// profiles with ties, tiny and huge budgets, coarse and fine slots; every plan is checked by the
// simulator, which plan_profile runs. Also the full table's density counts. The certificate's
// bounds against the whole table are in test_chain_profile_band_bounds.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "chain/profile_planner.hpp"
#include "chain/profile_reference.hpp"
#include "chain_profile_random.hpp"
#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {
namespace {

using testing::random_profile;

constexpr std::size_t kPlannerCap = std::size_t{1} << 30;

struct Outcome {
  bool fits = false;
  std::string error;
  ProfilePlan plan;
  std::vector<std::string> actions;
};

template <typename Planner>
Outcome run(Planner planner, const ChainProfile& p, std::int64_t budget, std::int64_t slots) {
  Outcome out;
  try {
    out.plan = planner(p, budget, slots, kPlannerCap,
                       [&](const Action& a) { out.actions.push_back(to_string(a)); });
    out.fits = true;
  } catch (const InputError& e) {
    out.error = e.what();
  }
  return out;
}

// How many comparisons certified their first band, and how many had to widen it.
int first_band = 0, widened = 0;

// `planner` against the full program; `band` is what the planner gave.
template <typename Planner>
void expect_same_as_full(Planner planner, const ChainProfile& p, std::int64_t budget,
                         std::int64_t slots, const std::string& where, Outcome& band) {
  band = run(planner, p, budget, slots);
  const Outcome full = run(plan_profile_reference, p, budget, slots);
  ASSERT_EQ(band.fits, full.fits) << where << ": " << band.error << " | " << full.error;
  if (!band.fits) {
    EXPECT_EQ(band.error, full.error) << where;
    return;
  }
  (band.plan.bands == 1 ? first_band : widened) += 1;
  EXPECT_GE(band.plan.bands, 1) << where;
  // Bit for bit, not approximately.
  EXPECT_EQ(band.plan.predicted_recompute_time, full.plan.predicted_recompute_time) << where;
  EXPECT_EQ(band.actions, full.actions) << where;
  EXPECT_EQ(band.plan.simulation.recompute_time, full.plan.simulation.recompute_time) << where;
  EXPECT_EQ(band.plan.simulation.memory_bytes, full.plan.simulation.memory_bytes) << where;
  EXPECT_LE(band.plan.simulation.memory_bytes, budget) << where;
  EXPECT_EQ(band.plan.unit_bytes, full.plan.unit_bytes) << where;
  EXPECT_EQ(band.plan.slots, full.plan.slots) << where;
  EXPECT_EQ(band.plan.exact, full.plan.exact) << where;
}

void expect_same(const ChainProfile& p, std::int64_t budget, std::int64_t slots,
                 const std::string& where) {
  Outcome band;
  expect_same_as_full(plan_profile, p, budget, slots, where, band);
}

std::int64_t total_bytes(const ChainProfile& p) {
  std::int64_t total = 0;
  for (std::size_t i = 0; i + 1 < p.activation_bytes.size(); ++i) total += p.activation_bytes[i];
  return total;
}

TEST(ProfilePlannerReference, SameObjectiveAndPlanOnRandomProfiles) {
  std::mt19937_64 rng(16);
  int compared = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const int kind = trial % 4;
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 48);
    const ChainProfile p = random_profile(rng, n, kind);
    const std::int64_t total = total_bytes(p);
    std::int64_t least = p.activation_bytes[0];
    for (std::size_t i = 1; i < p.activation_bytes.size(); ++i) {
      least = std::max(least, p.activation_bytes[i - 1] + p.activation_bytes[i]);
    }
    // Tiny (around the least feasible), tight, medium and more than everything.
    const std::vector<std::int64_t> budgets = {least, least + total / 50 + 1, total / 5 + least,
                                               total / 2 + 1, 2 * total + 10};
    const std::vector<std::int64_t> slot_counts = {1, 7, 64, 476};
    const std::int64_t budget = budgets[rng() % budgets.size()];
    const std::int64_t slots = slot_counts[rng() % slot_counts.size()];
    expect_same(p, budget, slots,
                "trial " + std::to_string(trial) + " kind " + std::to_string(kind) + " n " +
                    std::to_string(n) + " budget " + std::to_string(budget) + " slots " +
                    std::to_string(slots));
    ++compared;
  }
  EXPECT_EQ(compared, 240);
}

// Long enough for the band (n^3 C / 6 above 2e7), with budgets from tight to loose: some
// certify the first band and some widen it.
TEST(ProfilePlannerReference, SameWhetherTheFirstBandHoldsOrWidens) {
  std::mt19937_64 rng(2016);
  first_band = widened = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const std::int64_t n = 90 + 5 * trial;
    const ChainProfile p = random_profile(rng, n, 1 + trial % 3);
    const std::int64_t total = total_bytes(p);
    for (const double fraction : {0.015, 0.05, 0.2}) {
      const auto budget = static_cast<std::int64_t>(static_cast<double>(total) * fraction);
      expect_same(p, budget, 476,
                  "trial " + std::to_string(trial) + " n " + std::to_string(n) + " fraction " +
                      std::to_string(fraction));
    }
  }
  EXPECT_GT(first_band, 0);
  EXPECT_GT(widened, 0);
}

TEST(ProfilePlannerReference, SameOnLongerChainsAtManySlots) {
  std::mt19937_64 rng(1016);
  for (int trial = 0; trial < 12; ++trial) {
    const std::int64_t n = 60 + 10 * trial;
    const ChainProfile p = random_profile(rng, n, 1 + trial % 3);
    const std::int64_t total = total_bytes(p);
    for (const double fraction : {0.03, 0.1, 0.3}) {
      const auto budget = static_cast<std::int64_t>(static_cast<double>(total) * fraction);
      expect_same(p, budget, 300,
                  "trial " + std::to_string(trial) + " n " + std::to_string(n) + " fraction " +
                      std::to_string(fraction));
    }
  }
}

// Small chains through every path of the band program: a first band of 1 to 4 layers, far
// first-pass segments priced together from 0 to 3 layers past it, no full program up front. So
// bands hold no schedule and widen unfilled, certificates fail and bands widen with the last
// band's rows copied, on profiles of every kind and budgets from the least to loose, the rows
// filled by one to three threads, splits checked against 1 to 40 entries of a row at once.
TEST(ProfilePlannerReference, SameOnEveryPathOfTheBandProgram) {
  std::mt19937_64 rng(3016);
  int several = 0, trials = 0;
  for (int trial = 0; trial < 160; ++trial) {
    const int kind = trial % 4;
    const std::int64_t n = 2 + static_cast<std::int64_t>(rng() % 40);
    const ChainProfile p = random_profile(rng, n, kind);
    const std::int64_t total = total_bytes(p);
    const std::int64_t least = least_profile_budget(p);
    const std::vector<std::int64_t> budgets = {least,
                                               least + total / 50 + 1,
                                               least + total / 10,
                                               total / 3 + least,
                                               total / 2 + least,
                                               2 * total + 10};
    detail::BandTuning tuning;
    tuning.first_max_length = 1 + static_cast<std::int64_t>(rng() % 4);
    tuning.tail_gap = static_cast<std::int64_t>(rng() % 4);
    tuning.skip_block = 1 + static_cast<std::int64_t>(rng() % 40);
    tuning.small_work = 0;
    tuning.threads = 1 + trial % 3;  // the rows filled by one, two or three threads
    tuning.threads_from = 0;
    const std::int64_t budget = budgets[rng() % budgets.size()];
    const std::int64_t slots = std::vector<std::int64_t>{7, 64, 200}[rng() % 3];
    const auto tuned = [&](const ChainProfile& q, std::int64_t b, std::int64_t k, std::size_t cap,
                           const ActionSink& sink) {
      return detail::plan_profile_tuned(q, b, k, cap, tuning, sink);
    };
    const std::string where = "trial " + std::to_string(trial) + " n " + std::to_string(n) +
                              " budget " + std::to_string(budget) + " slots " +
                              std::to_string(slots);
    Outcome band;
    expect_same_as_full(tuned, p, budget, slots, where, band);
    if (!band.fits) continue;
    ++trials;
    several += band.plan.bands > 1 ? 1 : 0;
  }
  EXPECT_GT(trials, 120);
  EXPECT_GT(several, 20);  // bands widened with the last one's rows copied
}

// Chains shaped like the benchmark's (bench/make_chain_profile.py): blocks of a normalization, a
// projection three times as wide, an attention-like mixer, a projection, a 4x hidden layer and its
// activation and a down projection, with noise, the width halving or doubling between stages;
// forward times follow each kind's intensity.
ChainProfile block_profile(std::mt19937_64& rng, std::int64_t n) {
  constexpr double kRelative[] = {1.0, 3.0, 1.0, 1.0, 4.0, 4.0, 1.0};
  constexpr double kIntensity[] = {0.004, 0.020, 0.060, 0.025, 0.030, 0.003, 0.030};
  std::uniform_real_distribution<double> noise(0.75, 1.3);
  ChainProfile p;
  double width = 64;
  p.activation_bytes.push_back(4096 * 64);
  p.forward_time.push_back(0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto kind = static_cast<std::size_t>(i % 7);
    if (kind == 0 && i > 0 && i % 42 == 0)
      width = std::max(8.0, width * (rng() % 3 == 0 ? 2 : 0.5));
    const double size = width * kRelative[kind] * noise(rng);
    p.activation_bytes.push_back(4096 * std::max<std::int64_t>(1, static_cast<std::int64_t>(size)));
    p.forward_time.push_back(kIntensity[kind] * size * noise(rng));
  }
  return p;
}

// Of the plans compared with one feature of the tuning off and on: how often it filled fewer
// bands, and how often more.
struct BandChanges {
  int fewer = 0, more = 0;
};
// Plans on 120 slots with the feature off, then on (set_feature), each run checked against the
// full program, and counts whether the feature filled fewer or more bands.
template <class SetFeature>
void compare_bands(const ChainProfile& p, std::int64_t budget, const std::string& where,
                   detail::BandTuning tuning, const SetFeature& set_feature, BandChanges& changes) {
  std::int64_t bands[2] = {0, 0};
  for (const bool on : {false, true}) {
    set_feature(tuning, on);
    const auto tuned = [&](const ChainProfile& q, std::int64_t b, std::int64_t k, std::size_t cap,
                           const ActionSink& sink) {
      return detail::plan_profile_tuned(q, b, k, cap, tuning, sink);
    };
    Outcome band;
    expect_same_as_full(tuned, p, budget, 120, where, band);
    bands[on ? 1 : 0] = band.plan.bands;
  }
  changes.fewer += bands[1] < bands[0] ? 1 : 0;
  changes.more += bands[1] > bands[0] ? 1 : 0;
}

// At budgets of a few activations, optimal first-pass segments are long: the bounds of (b) alone
// stay far under the optimum and the band widens towards the full table, while the splitting
// lemma certifies narrower bands. Both give the full program's plan.
TEST(ProfilePlannerReference, TheSplittingLemmaCertifiesNarrowerBands) {
  std::mt19937_64 rng(5017);
  BandChanges changes;
  for (int trial = 0; trial < 4; ++trial) {
    const std::int64_t n = 180 + 30 * trial;
    const ChainProfile p = block_profile(rng, n);
    const std::int64_t total = total_bytes(p);
    for (const double fraction : {0.03, 0.04}) {
      const auto budget = static_cast<std::int64_t>(static_cast<double>(total) * fraction);
      const std::string where = "trial " + std::to_string(trial) + " n " + std::to_string(n) +
                                " fraction " + std::to_string(fraction);
      detail::BandTuning tuning;
      tuning.small_work = 0;
      tuning.threads = 2;
      compare_bands(
          p, budget, where, tuning, [](detail::BandTuning& t, bool on) { t.split_lemma = on; },
          changes);
    }
  }
  EXPECT_GT(changes.fewer, 0);
  EXPECT_EQ(changes.more, 0);
}

// a_0 of one unit, the outputs of 6 to 12 units but a fifth of one unit, none of those from n/8
// to 3n/4.
ChainProfile sparse_light_profile(std::mt19937_64& rng, std::int64_t n) {
  std::uniform_int_distribution<std::int64_t> heavy(6, 12);
  std::uniform_real_distribution<double> time(0.5, 2.0), coin(0.0, 1.0);
  ChainProfile p;
  p.activation_bytes.push_back(4096);
  p.forward_time.push_back(0.0);
  for (std::int64_t i = 1; i <= n; ++i) {
    const bool gap = i > n / 8 && i < (3 * n) / 4;
    const bool light = !gap && coin(rng) < 0.2;
    p.activation_bytes.push_back(4096 * (light ? 1 : heavy(rng)));
    p.forward_time.push_back(time(rng));
  }
  return p;
}

// At budgets of one or two activations the bound on a too long first segment from the chain's
// start can stay far under the optimum until the band reaches an output no larger than a_0, the
// only splits the lemma takes there. Reaching it at once (and growing short segments fourfold
// when very far under) fills fewer bands; both ways, and the full program, give the same plan.
TEST(ProfilePlannerReference, FarUnderStartPointsReachTheNextLemmaSplit) {
  std::mt19937_64 rng(6017);
  BandChanges changes;
  int compared = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const std::int64_t n = 120 + 10 * trial;
    const ChainProfile p = sparse_light_profile(rng, n);
    const std::int64_t least = least_profile_budget(p);
    for (const double factor : {1.0, 1.5, 2.0, 3.0}) {
      const auto budget = static_cast<std::int64_t>(static_cast<double>(least) * factor);
      const std::string where = "trial " + std::to_string(trial) + " n " + std::to_string(n) +
                                " factor " + std::to_string(factor);
      detail::BandTuning tuning;
      tuning.first_max_length = 8;
      tuning.small_work = 0;
      tuning.threads = 2;
      compare_bands(
          p, budget, where, tuning, [](detail::BandTuning& t, bool on) { t.far_under_growth = on; },
          changes);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 48);
  EXPECT_GT(changes.fewer, 0);  // 2 of 48 (n = 180 at 2x and 3x the least budget)
  EXPECT_EQ(changes.more, 0);
}

// A block of rows that cannot be allocated, whether on this thread or on a helper, reaches the
// caller as std::bad_alloc (the Python package's MemoryError). Thrown on a helper thread, or on
// this one while a helper ran, it ended the process. The planner is whole afterwards.
TEST(ProfilePlannerReference, AFailedAllocationOnAnyThreadReachesTheCaller) {
  std::mt19937_64 rng(404);
  const std::int64_t n = 60;
  const ChainProfile p = random_profile(rng, n, 1);
  const std::int64_t budget = total_bytes(p) / 4;
  detail::BandTuning tuning;
  tuning.threads = 2;
  tuning.threads_from = 0;  // two threads however small the band
  tuning.small_work = 0;
  // Start point 0 is set up by this thread, the last one by the helper.
  for (const std::int64_t block : {std::int64_t{0}, n / 2, n - 1}) {
    tuning.fail_block = block;
    EXPECT_THROW(detail::plan_profile_tuned(p, budget, 64, kPlannerCap, tuning), std::bad_alloc)
        << "block " << block;
  }
  tuning.fail_block = -1;
  const auto tuned = [&](const ChainProfile& q, std::int64_t b, std::int64_t k, std::size_t cap,
                         const ActionSink& sink) {
    return detail::plan_profile_tuned(q, b, k, cap, tuning, sink);
  };
  Outcome band;
  expect_same_as_full(tuned, p, budget, 64, "after the failures", band);
}

TEST(ProfilePlannerReference, SameOnTheUnitModel) {
  for (std::int64_t n = 1; n <= 40; n += 3) {
    for (std::int64_t memory = n == 1 ? 1 : 2; memory <= n + 1; memory += 2) {
      expect_same(ChainProfile::uniform(n), memory, memory,
                  "n " + std::to_string(n) + " memory " + std::to_string(memory));
    }
  }
}

// The benchmark's density counts (reference_table_density): a two-layer chain counted by hand,
// and the orders every table obeys.
TEST(ProfilePlannerReference, DensityCountsATwoLayerChainByHand) {
  ChainProfile p;
  p.activation_bytes = {1, 1, 1};
  p.forward_time = {0, 1, 1};
  // Only (0, 2), with split 1 and m from w_0 = 1 to W = 2: infinite at m = 1 (the split needs
  // a_0 and a_1), then 1 (layer 1 runs again); the split alone makes the row.
  const TableDensity d = reference_table_density(p, 2, 2, kPlannerCap, 1);
  EXPECT_EQ(d.rows, 1);
  EXPECT_EQ(d.entries, 2);
  EXPECT_EQ(d.finite_entries, 1);
  EXPECT_EQ(d.distinct_values, 1);
  EXPECT_EQ(d.splits, 1);
  EXPECT_EQ(d.minimizing_splits, 1);
  EXPECT_EQ(d.sole_minimizers, 1);
  for (std::int64_t unresolved : d.unresolved_by_samples) EXPECT_EQ(unresolved, 0);
}

TEST(ProfilePlannerReference, DensityCountsAreOrdered) {
  std::mt19937_64 rng(5017);
  int with_minimizers = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::int64_t n = 2 + trial % 12;
    const ChainProfile p = random_profile(rng, n, 1 + trial % 3);
    const std::int64_t budget = total_bytes(p) / (1 + trial % 4) + 1;
    const TableDensity d = reference_table_density(p, budget, 1 + trial % 37, kPlannerCap, 1);
    const std::string where = "trial " + std::to_string(trial);
    EXPECT_EQ(d.rows, n * (n - 1) / 2) << where;
    EXPECT_LE(d.distinct_values, d.finite_entries) << where;
    EXPECT_LE(d.finite_entries, d.entries) << where;
    EXPECT_LE(d.sole_minimizers, d.minimizing_splits) << where;
    EXPECT_LE(d.minimizing_splits, d.splits) << where;
    // Blocks of 2 units lie in blocks of 8, and those in blocks of 32: a coarser bound is lower.
    EXPECT_LE(d.unresolved_by_samples[0], d.unresolved_by_samples[1]) << where;
    EXPECT_LE(d.unresolved_by_samples[1], d.unresolved_by_samples[2]) << where;
    EXPECT_LE(d.unresolved_by_samples[2], d.splits) << where;
    with_minimizers += d.minimizing_splits > 0;
    if (d.finite_entries > 0) {
      EXPECT_GT(d.minimizing_splits, 0) << where;
    }
  }
  EXPECT_GT(with_minimizers, 20);
  EXPECT_THROW(reference_table_density(ChainProfile::uniform(3), 3, 3, kPlannerCap, 0), InputError);
}

}  // namespace
}  // namespace remat::chain
