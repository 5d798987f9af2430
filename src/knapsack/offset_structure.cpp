// Offset groups' structure (see offset_structure.hpp): the slope from the pairwise slopes of a few
// items of distinct weights, checked against every item in O(n), and the groups it leaves.
#include "knapsack/offset_structure.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace remat::detail::offset_groups {

namespace {

// The items' weights in units of a common divisor of them all.
struct UnitWeights {
  const ReducedProblem& p;
  std::int64_t unit;
  std::int64_t operator[](std::size_t i) const { return p.weight[i] / unit; }
};

Int128 scaled_offset(const ReducedProblem& p, const UnitWeights& w, std::size_t i,
                     const Slope& slope) {
  return static_cast<Int128>(slope.den) * static_cast<Int128>(p.value[i]) -
         static_cast<Int128>(slope.num) * static_cast<Int128>(w[i]);
}

// Whether every item's den v - num w is one of at most kMaxGroups values (the first ones found
// are kept in `offsets`).
bool fits_slope(const ReducedProblem& p, const UnitWeights& w, const Slope& slope,
                std::vector<Int128>& offsets) {
  offsets.clear();
  for (std::size_t i = 0; i < p.size(); ++i) {
    const Int128 b = scaled_offset(p, w, i, slope);
    if (std::find(offsets.begin(), offsets.end(), b) != offsets.end()) continue;
    if (offsets.size() == kMaxGroups) return false;
    offsets.push_back(b);
  }
  return true;
}

}  // namespace

std::optional<Structure> find_structure(const ReducedProblem& p, std::int64_t unit) {
  const UnitWeights weight{p, unit};
  double largest_value = 0, total_weight = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double v = p.value[i];
    if (!(v > 0 && v < 0x1p53) || v != std::floor(v)) return std::nullopt;
    largest_value = std::max(largest_value, v);
    total_weight += static_cast<double>(weight[i]);
  }
  std::vector<std::size_t> probes;
  for (std::size_t i = 0; i < p.size() && probes.size() <= kMaxGroups; ++i) {
    bool seen = false;
    for (std::size_t j : probes) seen = seen || weight[j] == weight[i];
    if (!seen) probes.push_back(i);
  }
  if (probes.size() < 2) return std::nullopt;  // one weight: bundling serves that
  std::vector<Int128> offsets;
  for (std::size_t a = 0; a < probes.size(); ++a) {
    for (std::size_t b = a + 1; b < probes.size(); ++b) {
      std::int64_t num = static_cast<std::int64_t>(p.value[probes[b]] - p.value[probes[a]]);
      std::int64_t den = weight[probes[b]] - weight[probes[a]];
      if (den < 0) num = -num, den = -den;
      if (num <= 0) continue;  // runtime not rising with weight: not this structure
      const std::int64_t g = std::gcd(num, den);
      const Slope slope{num / g, den / g};
      // Every sum below (den v and num W over all items) stays far inside 128 bits.
      const double scaled =
          static_cast<double>(slope.den) * largest_value * static_cast<double>(p.size()) +
          static_cast<double>(slope.num) * total_weight;
      if (!(scaled < 0x1p120)) continue;
      if (!fits_slope(p, weight, slope, offsets)) continue;
      Structure s;
      s.slope = slope;
      s.groups.resize(kMaxGroups);
      for (std::size_t k = 0; k < offsets.size(); ++k) s.groups[k].offset = offsets[k];
      for (std::size_t i = 0; i < p.size(); ++i) {
        const Int128 b = scaled_offset(p, weight, i, slope);
        const auto k = static_cast<std::size_t>(std::find(offsets.begin(), offsets.end(), b) -
                                                offsets.begin());
        s.groups[k].items.push_back(static_cast<std::uint32_t>(i));
      }
      for (Group& group : s.groups) {
        std::stable_sort(group.items.begin(), group.items.end(),
                         [&](std::uint32_t x, std::uint32_t y) { return weight[x] < weight[y]; });
        group.prefix.push_back(0);
        for (std::uint32_t i : group.items) {
          group.weight.push_back(weight[i]);
          group.prefix.push_back(group.prefix.back() + weight[i]);
        }
      }
      return s;
    }
  }
  return std::nullopt;
}

}  // namespace remat::detail::offset_groups
