// Meet in the middle over the items nearest the break item (Horowitz and Sahni 1974, "Computing
// partitions with applications to the knapsack problem", JACM 21(2)), used two ways by `exact`:
//
// - when every item is in the enumerated core (n <= 2h), it is the exact solver itself;
// - otherwise it gives the expanding core a strong first incumbent. The break solution is kept
//   outside the core; inside, each plan is a set of flips (drop an item before the break, add
//   one from the break on). Subset-sum-like instances (runtime proportional to memory) then
//   usually start with a plan that fills the budget exactly, which the core's bound proves
//   optimal at once instead of enumerating every reachable weight.
//
// The 2h core items are split into two halves of h; each half's 2^h flip sums are listed and
// sorted by weight, the second half with running maxima of value, and every sum of the first
// half is paired with the best second-half sum that still fits (one merge pass).
// Time O(2^h h) for the sorts plus O(n) to pick the core; memory 2^(h+1) entries of 24 bytes,
// reserved against the planner-memory cap before allocation.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

namespace {

struct Sum {
  std::int64_t weight;
  double value;
  std::uint32_t mask;
};

struct Flip {
  std::uint32_t item;
  std::int64_t weight;  // signed change of the plan's weight
  double value;         // signed change of its value
};

// Every subset of `flips` (at most 31) as a flip sum, sorted by weight.
std::vector<Sum> subset_sums(const std::vector<Flip>& flips) {
  std::vector<Sum> sums(std::size_t{1} << flips.size());
  sums[0] = {0, 0.0, 0};
  for (std::size_t f = 0; f < flips.size(); ++f) {
    const std::size_t half = std::size_t{1} << f;
    for (std::size_t m = 0; m < half; ++m) {
      sums[half + m] = {sums[m].weight + flips[f].weight, sums[m].value + flips[f].value,
                        sums[m].mask | static_cast<std::uint32_t>(half)};
    }
  }
  std::sort(sums.begin(), sums.end(), [](const Sum& a, const Sum& b) {
    return a.weight < b.weight || (a.weight == b.weight && a.value > b.value);
  });
  return sums;
}

}  // namespace

std::optional<CoreEnumeration> enumerate_core(const ReducedProblem& p,
                                              const std::vector<std::uint32_t>& order,
                                              std::size_t break_pos, std::int64_t room,
                                              std::size_t half_items, PlannerMemory& memory) {
  const std::size_t m = order.size();
  half_items = std::min<std::size_t>(half_items, 20);
  // The 2h positions nearest the break item, alternating after and before it.
  std::vector<Flip> flips;
  std::size_t after = break_pos, before = break_pos;
  while (flips.size() < 2 * half_items && (after < m || before > 0)) {
    if (after < m) {
      const std::uint32_t k = order[after++];
      flips.push_back({k, p.weight[k], p.value[k]});
    }
    if (flips.size() < 2 * half_items && before > 0) {
      const std::uint32_t k = order[--before];
      flips.push_back({k, -p.weight[k], -p.value[k]});
    }
  }
  const std::size_t first_half = flips.size() / 2;
  const std::vector<Flip> a_flips(flips.begin(), flips.begin() + first_half);
  const std::vector<Flip> b_flips(flips.begin() + first_half, flips.end());
  const std::size_t bytes =
      ((std::size_t{1} << a_flips.size()) + (std::size_t{2} << b_flips.size())) * sizeof(Sum);
  memory.reserve(bytes);
  const std::vector<Sum> a = subset_sums(a_flips);
  std::vector<Sum> b = subset_sums(b_flips);
  // b[j] becomes the best-valued sum among b[0..j] (weights ascending).
  for (std::size_t j = 1; j < b.size(); ++j) {
    if (b[j - 1].value >= b[j].value) b[j] = {b[j].weight, b[j - 1].value, b[j - 1].mask};
  }
  double best = -std::numeric_limits<double>::infinity();
  std::uint32_t best_a = 0, best_b = 0;
  std::size_t j = b.size();
  for (const Sum& x : a) {  // a ascending in weight: the fitting prefix of b only shrinks
    while (j > 0 && x.weight + b[j - 1].weight > room) --j;
    if (j == 0) break;
    const double v = x.value + b[j - 1].value;
    if (v > best) {
      best = v;
      best_a = x.mask;
      best_b = b[j - 1].mask;
    }
  }
  memory.release(bytes);
  if (best == -std::numeric_limits<double>::infinity()) return std::nullopt;
  CoreEnumeration result;
  result.all_items = flips.size() == m;
  result.flipped_value = best;
  auto collect = [&](const std::vector<Flip>& half, std::uint32_t mask) {
    for (std::size_t f = 0; f < half.size(); ++f) {
      if (!(mask >> f & 1)) continue;
      result.flipped.push_back(half[f].item);
      result.flipped_weight += half[f].weight;
    }
  };
  collect(a_flips, best_a);
  collect(b_flips, best_b);
  return result;
}

}  // namespace remat::detail
