// The knapsack problem as torch.compile's memory-budget partitioner states it, and its one
// validated, quantized form that every solver receives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace remat {

inline constexpr double kDefaultScale = 10000.0;
// More items than this are refused by quantize(): far beyond any graph torch partitions.
inline constexpr std::size_t kMaxItems = 100'000'000;

// What a user hands in: unquantized memory per candidate op, the runtime that saving it spares,
// and the budget. Same units and meaning as torch's solvers take.
struct KnapsackInput {
  std::vector<double> memory;
  std::vector<double> runtime;
  double max_memory = 0.0;
  double scale = kDefaultScale;
};

// Validated and quantized exactly as torch does: q = round_half_even(memory * scale).
struct KnapsackProblem {
  std::vector<std::int64_t> weight;  // quantized memory, >= 0
  std::vector<double> value;         // runtime, finite
  std::vector<double> memory;        // the unquantized memory, for reporting
  std::int64_t capacity = 0;         // quantized budget, >= 0
  double scale = kDefaultScale;

  std::size_t size() const { return weight.size(); }
};

// Python's round() on a double: round half to even. Exposed so tests can pin it.
double round_half_even(double x);

// The single place where input is checked. Throws InputError naming field and index for
// non-finite values, negative memory or budget, lengths that differ, a bad scale, and weights or
// weight sums that do not fit in int64 after scaling.
KnapsackProblem quantize(const KnapsackInput& input);

}  // namespace remat
