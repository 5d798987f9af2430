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
// a ternary search finds its minimum. On strongly correlated instances (value = weight + c) the
// best mu makes every shifted value proportional to weight, and the bound becomes the budget
// plus k_max * c: met exactly by a plan that fills the budget with k_max items.
//
// Time O(I n log n) for I search steps (each sorts by shifted efficiency); memory O(n).
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

namespace {

// Dantzig's bound with every value shifted by -mu; `order` is scratch space.
struct Ranked {
  double efficiency;
  std::uint32_t item;
};

double shifted_lp(const ReducedProblem& p, double mu, std::vector<Ranked>& order) {
  order.clear();
  for (std::uint32_t k = 0; k < p.size(); ++k) {
    if (p.value[k] - mu > 0)
      order.push_back({(p.value[k] - mu) / static_cast<double>(p.weight[k]), k});
  }
  std::sort(order.begin(), order.end(),
            [](const Ranked& a, const Ranked& b) { return a.efficiency > b.efficiency; });
  double bound = 0;
  std::int64_t room = p.capacity;
  for (const auto& [efficiency, k] : order) {
    const double v = p.value[k] - mu;
    if (p.weight[k] <= room) {
      room -= p.weight[k];
      bound += v;
    } else {
      bound += v * (static_cast<double>(room) / static_cast<double>(p.weight[k]));
      break;
    }
  }
  return bound;
}

}  // namespace

double cardinality_bound(const ReducedProblem& p, double incumbent, bool integral,
                         PlannerMemory& memory) {
  const std::size_t n = p.size();
  const std::size_t bytes = n * (sizeof(std::int64_t) + sizeof(double) + sizeof(Ranked));
  memory.reserve(bytes);
  std::vector<std::int64_t> weights(p.weight);
  std::sort(weights.begin(), weights.end());
  std::size_t k_max = 0;
  std::int64_t used = 0;
  while (k_max < n && used + weights[k_max] <= p.capacity) used += weights[k_max++];
  std::vector<double> values(p.value);
  std::sort(values.begin(), values.end(), std::greater<>());
  const double target = integral ? incumbent + 1 : incumbent;
  std::size_t k_min = 0;
  double top = 0;
  while (k_min < n && (integral ? top < target - 0.5 : top <= target)) top += values[k_min++];
  std::vector<Ranked> order;
  order.reserve(n);
  auto u = [&](double mu) {
    const double k = static_cast<double>(mu >= 0 ? k_max : k_min);
    return mu * k + shifted_lp(p, mu, order);
  };
  double lo = -values.front(), hi = values.front();
  for (int step = 0; step < 60 && hi - lo > 1e-12 * std::max(1.0, hi); ++step) {
    const double a = lo + (hi - lo) / 3, b = hi - (hi - lo) / 3;
    if (u(a) <= u(b)) {
      hi = b;
    } else {
      lo = a;
    }
  }
  // Every U(mu) is a valid bound; take the best of the search's end points and the plain LP.
  const double best = std::min({u(lo), u(hi), u(0.5 * (lo + hi)), u(0.0)});
  memory.release(bytes);
  return best;
}

}  // namespace remat::detail
