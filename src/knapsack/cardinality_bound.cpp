// Surrogate-relaxed cardinality bounds (Martello and Toth 1997, "Upper bounds and algorithms
// for hard 0-1 knapsack problems", Operations Research 45(5); used by Martello, Pisinger and
// Toth's combo, 1999). Written from the papers' description.
//
// Every plan saves at most k_max items (the most of the lightest items that fit), and every plan
// that beats the incumbent z saves at least k_min items (the fewest of the most valuable items
// whose runtime can exceed z). Adding mu * (cardinality constraint) to the objective gives, for
// every mu, an upper bound on every plan that beats z:
//   mu >= 0:  U(mu) = mu * k_max + LP(value - mu)    (Sum x <= k_max)
//   mu <  0:  U(mu) = mu * k_min + LP(value - mu)    (Sum x >= k_min)
// where LP is Dantzig's bound (items whose shifted value is <= 0 left out). U is convex in mu;
// a golden-section search finds its minimum. On strongly correlated instances (value = weight + c)
// the best mu makes every shifted value proportional to weight, and the bound becomes the budget
// plus k_max * c: met exactly by a plan that fills the budget with k_max items; on inverse
// strongly correlated ones (value = weight - c) the bound at mu = -c is the budget minus
// k_min * c.
//
// Each LP is found without sorting, by selecting the break item (Balas and Zemel 1980,
// "An algorithm for large zero-one knapsack problems", Operations Research 28(5)): expected
// O(n). The bound returned includes a margin for its own rounding. Time O(I n) for I search steps
// (about 40 with integral runtimes, at most ~95), O(n log n) once for k_max and the sorted
// runtimes; bounds are cached per k_min, since only k_min depends on the incumbent. Memory O(n),
// reserved against the planner-memory cap.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "knapsack/golden_section.hpp"
#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

// Dantzig's bound with every value shifted by -mu, by repeated selection of the median
// efficiency; `items` is scratch space.
double shifted_lp(const ReducedProblem& p, double mu, std::vector<ShiftedItem>& items) {
  items.clear();
  for (std::uint32_t k = 0; k < p.size(); ++k) {
    const double v = p.value[k] - mu;
    if (v > 0) items.push_back({v / static_cast<double>(p.weight[k]), v, p.weight[k]});
  }
  double bound = 0;
  std::int64_t room = p.capacity;
  std::size_t lo = 0, hi = items.size();
  auto more_efficient = [](const ShiftedItem& a, const ShiftedItem& b) {
    return a.efficiency > b.efficiency;
  };
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    std::nth_element(items.begin() + static_cast<std::ptrdiff_t>(lo),
                     items.begin() + static_cast<std::ptrdiff_t>(mid),
                     items.begin() + static_cast<std::ptrdiff_t>(hi), more_efficient);
    // Items [lo, mid) are at least as efficient as items[mid], items (mid, hi) at most.
    std::int64_t w = 0;
    double v = 0;
    for (std::size_t k = lo; k < mid; ++k) {
      w += items[k].weight;
      v += items[k].value;
    }
    if (w > room) {
      hi = mid;
      continue;
    }
    room -= w;
    bound += v;
    const ShiftedItem& m = items[mid];
    if (m.weight > room) {
      return bound + m.value * (static_cast<double>(room) / static_cast<double>(m.weight));
    }
    room -= m.weight;
    bound += m.value;
    lo = mid + 1;
  }
  return bound;
}

CardinalityBounds::CardinalityBounds(const ReducedProblem& p, bool integral, PlannerMemory& memory)
    : p_(p), integral_(integral), memory_(memory) {
  const std::size_t n = p.size();
  bytes_ = n * (sizeof(std::int64_t) + 2 * sizeof(double) + sizeof(ShiftedItem));
  memory_.reserve(bytes_);
  std::vector<std::int64_t> weights(p.weight);
  std::sort(weights.begin(), weights.end());
  std::int64_t used = 0;
  while (k_max_ < n && used + weights[k_max_] <= p.capacity) used += weights[k_max_++];
  values_ = p.value;
  std::sort(values_.begin(), values_.end(), std::greater<>());
  top_sums_.resize(n);
  double sum = 0;
  for (std::size_t k = 0; k < n; ++k) top_sums_[k] = sum += values_[k];
  scratch_.reserve(n);
}

std::size_t CardinalityBounds::min_items(double incumbent) const {
  // The fewest of the largest runtimes whose sum can beat the incumbent: a binary search over
  // their prefix sums.
  const double target = integral_ ? std::floor(incumbent) + 0.5 : incumbent;
  const auto it = std::upper_bound(top_sums_.begin(), top_sums_.end(), target);
  return std::min<std::size_t>(static_cast<std::size_t>(it - top_sums_.begin()) + 1, p_.size());
}

CardinalityBounds::~CardinalityBounds() {
  memory_.release(bytes_);
}

double CardinalityBounds::bound(double incumbent, std::optional<Clock::time_point> deadline) {
  const std::size_t n = p_.size();
  if (n == 0) return 0.0;
  const std::size_t k_min = min_items(incumbent);
  if (cached_k_min_ == k_min) return cached_bound_;
  // U(mu) plus a margin covering its rounding: every partial sum is exact when the runtimes
  // are integers (below 2^45) and mu is one, leaving the break item's fraction and two
  // additions; otherwise each of the n terms may round.
  const double n_terms = static_cast<double>(n + 8);
  auto u = [&](double mu) {
    const double k = static_cast<double>(mu >= 0 ? k_max_ : k_min);
    const double lp = shifted_lp(p_, mu, scratch_);
    const double scale = std::abs(lp) + std::abs(mu * k) + std::abs(values_.front()) + 1.0;
    const bool exact_terms = integral_ && mu == std::floor(mu);
    return mu * k + lp + (exact_terms ? 0x1.0p-49 : n_terms * 0x1.0p-50) * scale;
  };
  // Golden-section search; with integral runtimes the integers next to the minimum are tried
  // below, so it stops once the bracket is narrower than 1.
  const double tolerance = integral_ ? 0.5 : 1e-12 * std::max(1.0, values_.front());
  const GoldenBracket g =
      golden_section(u, -values_.front(), values_.front(), tolerance, 90, deadline);
  if (g.cut) return std::numeric_limits<double>::infinity();
  const double lo = g.lo, hi = g.hi, ua = g.fa, ub = g.fb;
  // Every U(mu) is a valid bound; take the best of the search's end points, the plain LP and,
  // with integral runtimes, the integers next to the minimum (exact sums: the tightest margin).
  const double mid = 0.5 * (lo + hi);
  double best = std::min({ua, ub, u(mid), u(0.0)});
  if (integral_) best = std::min({best, u(std::floor(mid)), u(std::ceil(mid))});
  cached_bound_ = best;
  cached_k_min_ = k_min;
  return cached_bound_;
}

double cardinality_bound(const ReducedProblem& p, double incumbent, bool integral,
                         PlannerMemory& memory) {
  return CardinalityBounds(p, integral, memory).bound(incumbent);
}

}  // namespace remat::detail
