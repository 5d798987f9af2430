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
  kMemoryLimit,  // feasible, best found before the planner-memory cap; upper_bound as above
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
  // Which algorithm decided: "all_fit", "expanding_core", "meet_in_the_middle", "table",
  // "greedy", or parts joined by '+': where the plan came from ("expanding_core",
  // "core_enumeration", "state_pairing", "greedy"), "cardinality_bound" when that bound proved
  // it, and a leading "duplicates_bundled" when identical items were bundled
  // (docs/design/knapsack.md).
  std::string path;
};

// Every reported field of a result, in one place, for the edges that serialize it (JSON in the
// CLI, dicts in Python): visit(name, value) for each, in the order the CLI prints them.
template <typename Visitor>
void visit_fields(const KnapsackResult& r, Visitor&& visit) {
  visit("solver", r.solver);
  visit("status", to_string(r.status));
  visit("max_runtime", r.max_runtime);
  visit("upper_bound", r.upper_bound);
  visit("saved", r.saved);
  visit("recomputed", r.recomputed);
  visit("memory_used", r.memory_used);
  visit("quantized_memory_used", r.quantized_memory_used);
  visit("quantized_max_memory", r.capacity);
  visit("seconds", r.seconds);
  visit("planner_peak_bytes", r.planner_peak_bytes);
  visit("path", r.path);
}

}  // namespace remat
