// Instance generators for tests, benchmarks and `remat generate`. Deterministic for a seed on
// every platform (own PRNG, no std:: distributions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "remat/problem.hpp"

namespace remat {

struct GenerateOptions {
  std::string family;
  std::size_t n = 100;
  std::uint64_t seed = 1;
  std::int64_t range = 1000;    // Pisinger classes: coefficients in [1, range]
  double capacity_ratio = 0.5;  // Pisinger classes: capacity as a share of total weight
  double budget = 0.3;          // torch-like: budget as a share of total (normalized) memory
  double budget_quanta = 1e9;   // paper-scale: quantized budget at scale 10^4
};

struct GeneratedInstance {
  KnapsackInput input;
  std::vector<std::string> names;  // optional per-item labels (torch-like family)
};

// Pisinger's classes: uncorrelated, weakly_correlated, strongly_correlated,
// inverse_strongly_correlated, almost_strongly_correlated, subset_sum, spanner,
// profit_ceiling, circle, multiple_strongly_correlated (mstr(3R/10, 2R/10, 6)); plus torch_like and
// paper_scale.
const std::vector<std::string>& generator_families();

// Throws InputError naming the field for an unknown family or out-of-range parameter.
GeneratedInstance generate(const GenerateOptions& options);

}  // namespace remat
