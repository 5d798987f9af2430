// Cardinality split: the surrogate (Lagrangian) relaxation of a cardinality constraint, solved
// as a knapsack to optimality, after combo (Martello, Pisinger and Toth 1999, "Dynamic
// programming and strong bounds for the 0-1 knapsack problem", Management Science 45(3), which
// solves its surrogate-relaxed problem with the same DP); the per-cardinality LP bounds are
// Martello and Toth's (1997, "Upper bounds and algorithms for hard 0-1 knapsack problems",
// Operations Research 45(5)). Written from the papers' descriptions, not from their code.
//
// For a plan S of exactly k items and any mu, value(S) = value'(S) + mu k, where value' lowers
// every runtime by mu. So the best plan of k items is worth at most OPT'(mu) + mu k, OPT'(mu) the
// optimum of the knapsack with runtimes value - mu (items whose shifted runtime is <= 0 left
// out): a knapsack again, solved exactly by the expanding core (solve_exact, without this step).
// Its LP bound is min over mu of mu k + LP(value - mu), the LP bound with the cardinality
// constraint, which on Pisinger's almost strongly correlated class is far tighter than
// Dantzig's (runtime = weight + R/10 + noise rewards the number of items, and Dantzig's LP saves
// a fraction of one). On the circle class it is not (its bounds close about 2% of Dantzig's gap
// there), and the inner searches are as hard as the problem itself.
//
// Which k: LP(value) saves lp_items + a fraction of items. mu k + LP(value - mu) with mu >= 0
// bounds every plan of at most k items, and with mu <= 0 every plan of at least k items (the
// surrogate cardinality bound of cardinality_bound.cpp, at an inner k). Going down from
// lp_items - 1 and up from lp_items + 2 until those bounds cannot beat the incumbent leaves an
// interval of cardinalities (two to four on that class; the step gives up past 4 a side),
// and each of them whose bound can still beat the incumbent gets its shifted knapsack solved.
// Every inner plan is a plan of the problem (the budget is the same), so it may improve the
// incumbent; the incumbent is proven optimal when no cardinality's bound can beat it.
//
// Exactness: integral runtimes only (every sum exact below 2^52), mu integral (found by a
// golden-section search over the convex function of mu, evaluated at integers), and every LP
// bound carries a margin for the one rounded term (the break item's fraction). Time: about 40
// expected-O(n) LPs per cardinality examined plus the inner searches, which run under the
// caller's deadline and an inner deadline of their own. Memory: O(n) for the shifted problem and
// scratch, reserved against the planner-memory cap, plus the inner search's own (released when it
// ends).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "knapsack/golden_section.hpp"
#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

namespace {

constexpr int kMaxSideSteps = 4;

class Bounds {
 public:
  Bounds(const ReducedProblem& p, std::vector<ShiftedItem>& scratch)
      : p_(p), scratch_(scratch), value_max_(*std::max_element(p.value.begin(), p.value.end())) {}

  double value_max() const { return value_max_; }

  // mu k + LP(value - mu) for an integral mu, plus a margin covering the rounding of the break
  // item's fractional term and of the last additions (every other partial sum is an exact
  // integer).
  double at(double mu, double k) const {
    const double lp = shifted_lp(p_, mu, scratch_);
    const double scale = std::abs(lp) + std::abs(mu * k) + value_max_ + std::abs(mu) + 1.0;
    return mu * k + lp + 0x1.0p-48 * scale;
  }

  struct Minimum {
    double bound;
    double mu;
  };

  // The least bound over integral mu in [lo, hi] that the search visits (each one valid).
  Minimum minimize(double k, double lo, double hi,
                   std::optional<Clock::time_point> deadline) const {
    lo = std::ceil(lo);
    hi = std::floor(hi);
    Minimum best{std::numeric_limits<double>::infinity(), 0};
    auto eval = [&](double mu) {
      mu = std::clamp(std::nearbyint(mu), lo, hi);
      const double b = at(mu, k);
      if (b < best.bound) best = {b, mu};
      return b;
    };
    const GoldenBracket g = golden_section(eval, lo, hi, 2.0, 80, deadline);
    if (g.hi - g.lo <= 4) {  // not when the deadline cut the search
      for (double mu = std::floor(g.lo); mu <= std::ceil(g.hi); mu += 1) eval(mu);
    }
    return best;
  }

 private:
  const ReducedProblem& p_;
  std::vector<ShiftedItem>& scratch_;
  double value_max_;
};

}  // namespace

ReducedSolution search_shifted(const ReducedProblem& q, std::int64_t q_weight,
                               PlannerMemory& memory, std::optional<Clock::time_point> deadline,
                               std::optional<Clock::time_point>& inner_deadline,
                               std::optional<double> inner_seconds, const ExactTuning& tuning,
                               SplitOutcome& out) {
  ReducedSolution inner;
  if (q.size() == 0 || q_weight <= q.capacity) {
    inner.take.assign(q.size(), 1);
    inner.path = "all_fit";
    return inner;
  }
  out.attempted = true;
  const auto started = Clock::now();
  if (inner_seconds && !inner_deadline) {
    inner_deadline = started + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(*inner_seconds));
  }
  auto until = deadline;
  if (inner_deadline && (!until || *inner_deadline < *until)) until = inner_deadline;
  inner = solve_exact(q, memory, until, tuning);
  out.inner_seconds += std::chrono::duration<double>(Clock::now() - started).count();
  return inner;
}

SplitOutcome cardinality_split(const ReducedProblem& p, std::size_t lp_items, double incumbent,
                               double value_step, SplitCache& cache, PlannerMemory& memory,
                               std::optional<Clock::time_point> deadline,
                               std::optional<Clock::time_point> inner_deadline,
                               const ExactTuning& tuning) {
  SplitOutcome out;
  out.best_value = incumbent;
  const std::size_t n = p.size();
  if (n == 0) return out;
  double total = 0;
  for (double v : p.value) total += v;
  const double value_max = *std::max_element(p.value.begin(), p.value.end());
  // mu ranges over [-2 max, max]: shifted runtimes stay below 3 max, sums below 2^52.
  if (total + 3.0 * value_max * static_cast<double>(n) >= 0x1.0p52) return out;

  const std::size_t scratch_bytes = n * sizeof(ShiftedItem);
  memory.reserve(scratch_bytes);
  std::vector<ShiftedItem> scratch;
  scratch.reserve(n);
  struct Release {
    PlannerMemory& m;
    std::size_t bytes;
    ~Release() { m.release(bytes); }
  } release_scratch{memory, scratch_bytes};
  const Bounds bounds(p, scratch);
  // The bound for plans of at most (side -1) or at least (+1) k items; a search cut by the
  // deadline is not kept.
  auto lp_bound = [&](int side, std::size_t k) {
    for (const SplitCache::Entry& e : cache.entries) {
      if (e.side == side && e.k == k) return Bounds::Minimum{e.bound, e.mu};
    }
    const double lo = side < 0 ? 0 : -2 * value_max, hi = side > 0 ? 0 : value_max;
    const auto m = bounds.minimize(static_cast<double>(k), lo, hi, deadline);
    if (!deadline || Clock::now() < *deadline) cache.entries.push_back({side, k, m.bound, m.mu});
    return m;
  };
  auto beats = [&](double bound) { return bound >= out.best_value + value_step; };
  auto late = [&] { return deadline && Clock::now() >= *deadline; };

  // Plans that beat the incumbent have between `low` and `high` items.
  std::size_t low = lp_items;
  for (int steps = 0;; ++steps) {
    if (low == 0) break;
    if (steps == kMaxSideSteps || late()) return out;
    if (!beats(lp_bound(-1, low - 1).bound)) break;
    --low;
  }
  std::size_t high = std::min(lp_items + 1, n);
  for (int steps = 0;; ++steps) {
    if (high == n) break;
    if (steps == kMaxSideSteps || late()) return out;
    if (!beats(lp_bound(1, high + 1).bound)) {
      break;
    }
    ++high;
  }

  struct Candidate {
    std::size_t k;
    double bound, mu;
  };
  std::vector<Candidate> open;
  for (std::size_t k = low; k <= high; ++k) {
    if (late()) return out;
    // Exactly k items: the at-most-k bound below the LP's count and the at-least-k bound above it
    // (each valid for k items; by convexity, the best mu of either sign lies on that side).
    const auto m = lp_bound(k <= lp_items ? -1 : 1, k);
    if (beats(m.bound)) open.push_back({k, m.bound, m.mu});
  }
  // The most promising cardinality first: its plan raises the incumbent for the others.
  std::sort(open.begin(), open.end(),
            [](const Candidate& a, const Candidate& b) { return a.bound > b.bound; });

  ExactTuning inner_tuning = tuning;
  inner_tuning.shift = false;
  inner_tuning.band = false;
  double remaining = -std::numeric_limits<double>::infinity();  // over cardinalities left open
  for (const Candidate& c : open) {
    if (!beats(c.bound)) continue;  // the incumbent rose since
    if (late()) return out;
    // The shifted knapsack: runtimes lowered by mu, items left with <= 0 left out.
    ReducedProblem q;
    std::vector<std::uint32_t> item_of;
    const std::size_t q_bytes =
        n * (2 * sizeof(std::size_t) + sizeof(std::int64_t) + sizeof(double) + sizeof(char));
    memory.reserve(q_bytes);
    const std::size_t before = memory.current();
    q.capacity = p.capacity;
    item_of.reserve(n);  // exactly what was reserved above
    q.original_index.reserve(n);
    q.weight.reserve(n);
    q.value.reserve(n);
    std::int64_t q_weight = 0;
    for (std::uint32_t k = 0; k < n; ++k) {
      const double v = p.value[k] - c.mu;
      if (v <= 0) continue;
      item_of.push_back(k);
      q.original_index.push_back(k);
      q.weight.push_back(p.weight[k]);
      q.value.push_back(v);
      q_weight += p.weight[k];
    }
    q.original_size = q.size();
    // Only plans of k items that beat the incumbent matter: their shifted value is at least
    // z + step - mu k (exact: integers below 2^52).
    inner_tuning.target = out.best_value + value_step - c.mu * static_cast<double>(c.k);
    const ReducedSolution inner = search_shifted(q, q_weight, memory, deadline, inner_deadline,
                                                 std::nullopt, inner_tuning, out);
    memory.release(memory.current() - before);  // the inner search's memory is gone
    double shifted = 0, value = 0;
    std::vector<char> take(n, 0);
    for (std::size_t j = 0; j < q.size(); ++j) {
      if (!inner.take[j]) continue;
      take[item_of[j]] = 1;
      shifted += q.value[j];
      value += p.value[item_of[j]];
    }
    memory.release(q_bytes);
    if (value > out.best_value) {
      out.best_value = value;
      out.take = std::move(take);
    }
    if (inner.status != SolveStatus::kOptimal) return out;  // a limit stopped it: no proof
    // The best plan of k items, or (when it is below the target) a value that no plan of k items
    // beats the incumbent by: either way it bounds what k items can add.
    remaining = std::max(remaining, shifted + c.mu * static_cast<double>(c.k));
  }
  out.proven = !beats(remaining);
  out.upper_bound = std::max(remaining, out.best_value);
  return out;
}

}  // namespace remat::detail
