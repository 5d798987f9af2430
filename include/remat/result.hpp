// What every knapsack solver returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace remat {

enum class SolveStatus {
  kOptimal,    // proven optimal
  kHeuristic,  // feasible, no optimality claim (greedy)
  kTimeLimit,  // feasible, best found before the time limit; upper_bound says how far off it can be
};

std::string to_string(SolveStatus status);

struct KnapsackResult {
  std::string solver;
  SolveStatus status = SolveStatus::kOptimal;
  double max_runtime = 0.0;             // sum of runtime over saved, in index order
  std::vector<std::size_t> saved;       // ascending
  std::vector<std::size_t> recomputed;  // ascending; saved and recomputed partition 0..n-1
  double memory_used = 0.0;             // sum of unquantized memory over saved
  std::int64_t quantized_memory_used = 0;
  std::int64_t capacity = 0;           // quantized budget
  double upper_bound = 0.0;            // no feasible plan saves more runtime than this
  double seconds = 0.0;                // wall time of the solver, quantization excluded
  std::size_t planner_peak_bytes = 0;  // the solver's own peak working memory
};

}  // namespace remat
