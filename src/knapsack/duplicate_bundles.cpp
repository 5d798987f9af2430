// Identical items bundled by binary splitting (the classical reduction of a bounded knapsack to
// a 0/1 one; Martello and Toth 1990, "Knapsack Problems", section 3.2). Items with the same
// quantized weight and the same runtime are interchangeable, so a plan only needs how many of
// them it saves. m copies become bundles of 1, 2, 4, ..., 2^(j-1) copies and one of the rest
// (j = floor(log2(m + 1))): every count 0..m is the size of some set of bundles, and a set of
// bundles is a count, so the bundled problem has exactly the same plan values. Bundles heavier
// than the budget are left out (no count that fits needs them). A solution maps back by saving
// that many copies of each item, lowest index first.
//
// `exact` bundles when its list grows past its first checkpoint (so easy instances never pay
// for the sort) and bundling at least halves the items: Pisinger's spanner class (twenty
// distinct items) shrinks to O(d log(n/d)) items for d distinct ones.
//
// Time O(n log n) (one sort); memory O(n), reserved against the planner-memory cap.
#include <algorithm>
#include <numeric>

#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

std::optional<Bundling> bundle_duplicates(const ReducedProblem& p, PlannerMemory& memory,
                                          bool only_if_halved) {
  const std::size_t n = p.size();
  const std::size_t bytes =
      n * (2 * sizeof(std::uint32_t) + sizeof(std::int64_t) + sizeof(double) + sizeof(std::size_t));
  memory.reserve(bytes);
  std::vector<std::uint32_t> by_item(n);
  std::iota(by_item.begin(), by_item.end(), 0u);
  std::sort(by_item.begin(), by_item.end(), [&](std::uint32_t a, std::uint32_t b) {
    if (p.weight[a] != p.weight[b]) return p.weight[a] < p.weight[b];
    if (p.value[a] != p.value[b]) return p.value[a] < p.value[b];
    return a < b;
  });
  Bundling b;
  b.problem.capacity = p.capacity;
  b.problem.original_size = p.original_size;
  std::size_t groups = 0;
  for (std::size_t start = 0; start < n;) {
    std::size_t end = start + 1;
    while (end < n && p.weight[by_item[end]] == p.weight[by_item[start]] &&
           p.value[by_item[end]] == p.value[by_item[start]]) {
      ++end;
    }
    const std::uint32_t first = by_item[start];
    std::size_t left = end - start;
    for (std::size_t count = 1; left > 0; count *= 2) {
      const std::size_t c = std::min(count, left);
      left -= c;
      const std::int64_t w = p.weight[first] * static_cast<std::int64_t>(c);
      if (w > p.capacity) break;  // and every later bundle of this item is heavier still
      b.problem.original_index.push_back(first);
      b.problem.weight.push_back(w);
      b.problem.value.push_back(p.value[first] * static_cast<double>(c));
      b.bundle_group.push_back(static_cast<std::uint32_t>(groups));
      b.bundle_count.push_back(c);
    }
    b.group_start.push_back(start);
    ++groups;
    start = end;
  }
  b.group_start.push_back(n);
  b.members = std::move(by_item);
  if (only_if_halved && 2 * b.problem.size() > n) {
    memory.release(bytes);
    return std::nullopt;  // not worth it
  }
  b.bytes = bytes;
  return b;
}

std::vector<char> unbundle(const Bundling& b, const std::vector<char>& bundle_take,
                           std::size_t items) {
  std::vector<std::size_t> saved(b.group_start.size(), 0);
  for (std::size_t k = 0; k < bundle_take.size(); ++k) {
    if (bundle_take[k]) saved[b.bundle_group[k]] += b.bundle_count[k];
  }
  std::vector<char> take(items, 0);
  for (std::size_t g = 0; g + 1 < b.group_start.size(); ++g) {
    // members of a group are sorted by index: save the lowest-indexed copies
    for (std::size_t i = 0; i < saved[g]; ++i) take[b.members[b.group_start[g] + i]] = 1;
  }
  return take;
}

}  // namespace remat::detail
