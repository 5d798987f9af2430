// The heterogeneous chain planner as it was before the band program: an O(n^3 C) dynamic
// program over every (segment, memory) state. For tests and the benchmark only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "remat/chain.hpp"

namespace remat::chain {

// Same contract as plan_profile; the same objective, found by filling the whole table.
ProfilePlan plan_profile_reference(const ChainProfile& profile, std::int64_t budget_bytes,
                                   std::int64_t slots, std::size_t max_planner_bytes,
                                   const ActionSink& also = nullptr);

}  // namespace remat::chain
