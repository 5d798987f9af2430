// Offset groups' structure: whether every runtime is one affine function of weight up to at most
// two intercepts (den v - num w takes at most kMaxGroups values), and the groups of items of each
// intercept, lightest first. Found from the pairwise slopes of kMaxGroups + 1 items of distinct
// weights, O(n) per slope tried. The search over count vectors is in offset_groups.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "knapsack/reduced_problem.hpp"

namespace remat::detail::offset_groups {

__extension__ using Int128 = __int128;

inline constexpr std::size_t kMaxGroups = 2;

struct Slope {
  std::int64_t num = 0, den = 1;
};

// The items of one intercept, lightest first (ties by index).
struct Group {
  Int128 offset = 0;  // den v - num w of each of its items
  std::vector<std::uint32_t> items;
  std::vector<std::int64_t> weight;
  std::vector<std::int64_t> prefix;  // prefix[k]: the k lightest together

  std::size_t size() const { return items.size(); }
  std::int64_t lightest(std::size_t k) const { return prefix[k]; }
  std::int64_t heaviest(std::size_t k) const { return prefix.back() - prefix[size() - k]; }
};

struct Structure {
  Slope slope;
  std::vector<Group> groups;  // exactly kMaxGroups; an unused one is empty
};

// The slope and groups, when there are any, with weights in units of `unit` (a common divisor of
// them all): among kMaxGroups + 1 items of distinct weights two share a group, so one of their
// pairwise slopes is the slope (any slope that fits will do).
std::optional<Structure> find_structure(const ReducedProblem& p, std::int64_t unit);

}  // namespace remat::detail::offset_groups
