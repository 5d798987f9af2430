// The heterogeneous chain planner as it was before the band program: an O(n^3 C) dynamic
// program over every (segment, memory) state. For tests and the benchmark only.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "remat/chain.hpp"

namespace remat::chain {

// Same contract as plan_profile; the same objective, found by filling the whole table.
ProfilePlan plan_profile_reference(const ChainProfile& profile, std::int64_t budget_bytes,
                                   std::int64_t slots, std::size_t max_planner_bytes,
                                   const ActionSink& also = nullptr);

// How dense the full table is: what any exact fill of it must produce and read. Rows of the start
// points s = 0, start_stride, 2 start_stride, ... (every segment from each) are examined; the
// table is filled for all of them. For the benchmark: it bounds from below what any program that
// computes this table exactly does, however it orders or prunes its splits.
struct TableDensity {
  std::int64_t rows = 0;               // segments (s, t), t >= s + 2, examined
  std::int64_t entries = 0;            // their states (s, t, m), w_s <= m <= min(C, W(s, t))
  std::int64_t finite_entries = 0;     // ... with a schedule (R finite)
  std::int64_t distinct_values = 0;    // ... where R differs from R at m - 1 (a new value)
  std::int64_t splits = 0;             // splits (s, t, j) finite at some m
  std::int64_t minimizing_splits = 0;  // ... that reach the row's value at some m
  std::int64_t sole_minimizers = 0;  // ... that alone reach it at some m: any exact fill reads them
  // Splits that a coarse-to-fine fill could not set aside even knowing the final row: those whose
  // lower bound on some block of kSampleStrides[k] units, formed from samples of both parts every
  // kSampleStrides[k] units (the rows only fall with m), is below the row at the block's start.
  static constexpr std::array<std::int64_t, 3> kSampleStrides = {2, 8, 32};
  std::array<std::int64_t, 3> unresolved_by_samples{};
  std::int64_t capacity = 0;  // C, in units
};
TableDensity reference_table_density(const ChainProfile& profile, std::int64_t budget_bytes,
                                     std::int64_t slots, std::size_t max_planner_bytes,
                                     std::int64_t start_stride);

}  // namespace remat::chain
