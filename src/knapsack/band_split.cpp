// Band split: reduced-cost fixing against the incumbent, then the plans that could beat it split
// by how many items they save in each of a few bands of weight around the break item's, and the
// Lagrangian-shifted knapsack of each count vector left open solved exactly. Reduced-cost fixing
// is Dembo and Hammer's (1980, "A reduction algorithm for knapsack problems", Methods of
// Operations Research 36); counting items under a Lagrangian shift is combo's (Martello,
// Pisinger and Toth 1999, "Dynamic programming and strong bounds for the 0-1 knapsack problem",
// Management Science 45(3)), where one count covers every item (cardinality_split.cpp). Counting
// bands of weight separately is this file's own step, written for Pisinger's circle class
// (profit a concave function of weight: Pisinger 2005, "Where are the hard knapsack problems?",
// Computers & Operations Research 32(9)).
//
// Why: with rho the break item's efficiency, every plan S within the budget C is worth at most
// U - sum of |r_i| over the items where S differs from the break solution, r_i = value_i -
// rho weight_i and U Dantzig's bound. An item whose |r_i| exceeds U - (z + step) has its break
// decision in every plan that beats the incumbent z: it is fixed. On the circle class what is
// left is a core of items of weight near the break item's plus a few tiny ones (f(0) = 0, so
// their r_i is small too), and Dantzig's bound saves a fraction of the break item. Among items of
// nearly equal weight the number a plan saves decides most of its value, so the LP bound with
// those numbers fixed is far tighter: on circle n = 1e4, R = 1e5, seed 1, Dantzig's gap over
// the optimum is 4956, the LP bound with the count of every item fixed 4836 above it (the tiny
// items let the LP trade count for nothing) and with the count of the band [w_b / 2, 2 w_b)
// fixed 1.4 above it. When the budget left by the break solution is large (seed 2: 52000 of the
// break item's 70329), fixing settles nothing and one band is not enough (16407 of Dantzig's
// 29349 stays); bands [w_b / 4, w_b / 2) and [w_b / 2, 2 w_b] counted separately leave 262.
//
// The bands: [w_b / 4, w_b / 2) and [w_b / 2, 2 w_b], each cut again at any gap in the core's
// sorted weights wider than w_b / 16 (fixing leaves clusters); empty bands are dropped, items
// outside them are free.
//
// The bound for count vector k (k_j items from band j, the other items free): for every
// lambda >= 0, value(S) <= lambda C + sum over S of (value_i - lambda weight_i), so
//   B(k) = min over lambda of  lambda C + sum_j top_kj(band j) + sum_free max(0, .)
// where top_kj sums the k_j largest value_i - lambda weight_i of band j: a convex function of one
// multiplier (golden-section search, O(core) expected per evaluation), equal to the LP bound with
// those counts fixed. The same holds for a count on a group of bands, and for "at most k" (only
// the positive terms among the top k) and "at least k" (the top k and every positive term after
// them), which bound every plan on one side of k. Which vectors: the total over all bands is
// walked down and up from the LP's until those one-sided bounds cannot beat the incumbent; for
// each total t, each band's count c is walked the same way with the other bands together held to
// at least (at most) t - c; the vectors of those ranges that add up to t are bounded by B(k).
// For each vector whose B(k) can beat the incumbent, the knapsack with band j's runtimes lowered
// by mu_j (at first between the k_j-th and the k_j + 1-th largest term at B's lambda, rounded to
// an integer) is solved exactly by the expanding core with a target: a plan with counts k is
// worth its shifted value plus sum_j mu_j k_j, so the shifted optimum bounds them. Before it,
// reduced-cost fixing at B's multipliers settles every item whose flip alone would take a plan
// with those counts below the incumbent (seed 2: 301 of 10000 items stay free). When that
// optimum has other counts (a duality gap), a Polyak subgradient step on mu and another search
// follow, up to kDualRounds; on seed 2 above the bound goes 67, 23, 5, 1, 0 over the optimum.
// The multipliers reached are kept (BandCache) for a later try.
//
// Exactness: integral runtimes only (sums exact below 2^52); any mu gives a valid bound, and mu
// stays integral; fixing keeps a margin; every LP bound carries a margin for its rounded terms.
// Time: O(n log n) for the fixing and the bands, about 80 expected-O(core) evaluations per LP
// bound (a few per band and total walked), at most kMaxVectors vectors, and the inner searches
// under the caller's deadline and time share. Memory: O(n), reserved against the planner-memory
// cap, plus the inner search's own (released when it ends).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "knapsack/golden_section.hpp"
#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

namespace {

constexpr int kMaxSideSteps = 6;
constexpr std::size_t kMaxVectors = 256;
constexpr std::size_t kMaxBands = 4;
constexpr int kDualRounds = 6;

using Sense = BandCount::Sense;
using Constraint = BandCount;

// The core after fixing: its items, the bands they fall in (-1: free) and the terms' scratch.
class BandBounds {
 public:
  BandBounds(const ReducedProblem& core, std::vector<int> band_of, std::size_t bands)
      : core_(core), band_of_(std::move(band_of)), members_(bands) {
    for (std::size_t k = 0; k < core.size(); ++k) {
      if (band_of_[k] >= 0) members_[static_cast<std::size_t>(band_of_[k])].push_back(k);
      lambda_max_ = std::max(lambda_max_, core.value[k] / static_cast<double>(core.weight[k]));
    }
  }

  std::size_t bands() const { return members_.size(); }
  int band(std::size_t k) const { return band_of_[k]; }
  std::size_t size_of(unsigned mask) const {
    std::size_t size = 0;
    for (std::size_t j = 0; j < members_.size(); ++j)
      size += (mask >> j & 1u) ? members_[j].size() : 0;
    return size;
  }

  // The bound at one lambda under disjoint constraints (items of bands no constraint names are
  // free), with a margin for its rounded terms; -infinity when a group cannot hold its count.
  double at(double lambda, const std::vector<Constraint>& constraints) const {
    unsigned covered = 0;
    for (const Constraint& c : constraints) covered |= c.mask;
    double sum = lambda * static_cast<double>(core_.capacity), magnitude = std::abs(sum);
    for (std::size_t k = 0; k < core_.size(); ++k) {
      if (band_of_[k] >= 0 && (covered >> band_of_[k] & 1u)) continue;
      const double t = core_.value[k] - lambda * static_cast<double>(core_.weight[k]);
      if (t > 0) sum += t;
      magnitude += std::abs(t);
    }
    for (const Constraint& c : constraints) {
      gather(lambda, c.mask);
      if (c.count > terms_.size() && c.sense != Sense::kAtMost) {
        return -std::numeric_limits<double>::infinity();  // no plan has that many
      }
      const std::size_t top = std::min(c.count, terms_.size());
      std::nth_element(terms_.begin(), terms_.begin() + static_cast<std::ptrdiff_t>(top),
                       terms_.end(), std::greater<>());
      // Exactly: the top k; at most: their positive terms; at least: the top k and every
      // positive term after them.
      for (std::size_t i = 0; i < terms_.size(); ++i) {
        const double t = terms_[i].first;
        magnitude += std::abs(t);
        const bool taken =
            i < top ? (c.sense != Sense::kAtMost || t > 0) : (c.sense == Sense::kAtLeast && t > 0);
        if (taken) sum += t;
      }
    }
    const double n = static_cast<double>(core_.size() + 2);
    return sum + n * 0x1.0p-51 * (magnitude + 1.0);
  }

  struct Minimum {
    double bound, lambda;
  };

  // The least bound the search visits over lambda in [0, lambda_max] (each one valid).
  Minimum minimize(const std::vector<Constraint>& constraints,
                   std::optional<Clock::time_point> deadline) const {
    Minimum best{std::numeric_limits<double>::infinity(), 0};
    auto eval = [&](double lambda) {
      const double b = at(lambda, constraints);
      if (b < best.bound) best = {b, lambda};
      return b;
    };
    // B is piecewise linear in lambda: a bracket of 1e-10 of the range costs a few units at most
    // where its slope (the budget left) is large, and each point visited is a valid bound.
    const double width = 1e-10 * std::max(1.0, lambda_max_);
    golden_section(eval, 0.0, lambda_max_, width, 80, deadline);
    eval(0.0);
    return best;
  }

  // How many of the `count` largest terms of the group at lambda fall in each band.
  std::vector<std::size_t> top_counts(double lambda, unsigned mask, std::size_t count) const {
    gather(lambda, mask);
    const std::size_t top = std::min(count, terms_.size());
    std::nth_element(terms_.begin(), terms_.begin() + static_cast<std::ptrdiff_t>(top),
                     terms_.end(), std::greater<>());
    std::vector<std::size_t> counts(members_.size(), 0);
    for (std::size_t i = 0; i < top; ++i) ++counts[terms_[i].second];
    return counts;
  }

  // mu_j for exact counts at lambda: midway between the k_j-th and the (k_j + 1)-th largest term
  // of band j, the LP's multiplier for that count.
  std::vector<double> multipliers(double lambda, const std::vector<std::size_t>& count) const {
    std::vector<double> mu(members_.size(), 0.0);
    for (std::size_t j = 0; j < members_.size(); ++j) {
      gather(lambda, 1u << j);
      std::sort(terms_.begin(), terms_.end(), std::greater<>());
      const std::size_t k = count[j];
      const double upper = k > 0 ? terms_[k - 1].first : terms_.front().first + 1.0;
      const double lower = k < terms_.size() ? terms_[k].first : terms_.back().first - 1.0;
      mu[j] = 0.5 * (upper + lower);
    }
    return mu;
  }

 private:
  void gather(double lambda, unsigned mask) const {
    terms_.clear();
    for (std::size_t j = 0; j < members_.size(); ++j) {
      if (!(mask >> j & 1u)) continue;
      for (std::size_t i : members_[j]) {
        terms_.push_back({core_.value[i] - lambda * static_cast<double>(core_.weight[i]), j});
      }
    }
  }

  const ReducedProblem& core_;
  std::vector<int> band_of_;
  std::vector<std::vector<std::size_t>> members_;
  double lambda_max_ = 0;
  mutable std::vector<std::pair<double, std::size_t>> terms_;
};

// Band edges (see the header): w_b / 4, w_b / 2 and just above 2 w_b, and with `at_gaps` any gap
// in the core's sorted weights wider than w_b / 16 between them.
std::vector<int> bands_of(const ReducedProblem& core, std::int64_t wb, bool at_gaps,
                          std::size_t& bands) {
  std::vector<std::int64_t> edges;
  for (std::int64_t e : {(wb + 3) / 4, (wb + 1) / 2, 2 * wb + 1}) edges.push_back(e);
  std::vector<std::int64_t> sorted(core.weight);
  std::sort(sorted.begin(), sorted.end());
  const std::int64_t wide = std::max<std::int64_t>(1, wb / 16);
  for (std::size_t i = 1; at_gaps && i < sorted.size(); ++i) {
    if (sorted[i] - sorted[i - 1] > wide && sorted[i] > edges.front() &&
        sorted[i - 1] < edges.back()) {
      edges.push_back(sorted[i]);
    }
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  // Band j holds weights in [edges[j], edges[j + 1]); only non-empty bands are kept.
  std::vector<int> raw(core.size(), -1);
  std::vector<std::size_t> used(edges.size(), 0);
  for (std::size_t k = 0; k < core.size(); ++k) {
    const auto it = std::upper_bound(edges.begin(), edges.end(), core.weight[k]);
    if (it == edges.begin() || it == edges.end()) continue;
    const auto j = static_cast<std::size_t>(it - edges.begin() - 1);
    raw[k] = static_cast<int>(j);
    ++used[j];
  }
  std::vector<int> renumber(edges.size(), -1);
  bands = 0;
  for (std::size_t j = 0; j < edges.size(); ++j) {
    if (used[j] > 0) renumber[j] = static_cast<int>(bands++);
  }
  for (int& j : raw) {
    if (j >= 0) j = renumber[static_cast<std::size_t>(j)];
  }
  return raw;
}

}  // namespace

double band_count_bound(const ReducedProblem& p, const std::vector<int>& band_of, std::size_t bands,
                        const std::vector<BandCount>& counts) {
  return BandBounds(p, band_of, bands).minimize(counts, std::nullopt).bound;
}

SplitOutcome band_split(const ReducedProblem& p, const std::vector<std::uint32_t>& order,
                        std::size_t break_pos, double incumbent, double value_step,
                        PlannerMemory& memory, std::optional<Clock::time_point> deadline,
                        std::optional<double> inner_seconds, BandCache& cache,
                        const ExactTuning& tuning) {
  SplitOutcome out;
  out.best_value = incumbent;
  const std::size_t n = p.size();
  if (break_pos >= n) return out;  // everything fits: the break solution is optimal
  double total = 0, value_max = 0;
  for (double v : p.value) {
    total += v;
    value_max = std::max(value_max, v);
  }
  // Shifted runtimes stay within a few times the largest: sums below 2^52 stay exact.
  if (total + 4.0 * value_max * static_cast<double>(n) >= 0x1.0p52) return out;
  const std::uint32_t b = order[break_pos];
  const double rho = p.value[b] / static_cast<double>(p.weight[b]);
  std::int64_t room = p.capacity;
  double dantzig = 0;
  for (std::size_t j = 0; j < break_pos; ++j) {
    room -= p.weight[order[j]];
    dantzig += p.value[order[j]];
  }
  dantzig += rho * static_cast<double>(room);
  // U and each r_i are rounded once or twice (the other sums are exact integers): a margin of a
  // few units in the last place of the largest keeps the fixing on the safe side.
  const double margin = 0x1.0p-40 * (std::abs(dantzig) + value_max + 1.0);
  const double gap = dantzig - (incumbent + value_step) + margin;
  if (gap < 0) {
    out.proven = true;
    out.upper_bound = std::max(dantzig, incumbent);
    return out;
  }

  // Scratch: before (the break solution saves the item), item_of, band_of and the bands' terms
  // and sorted weights.
  const std::size_t scratch_bytes =
      n * (sizeof(char) + sizeof(std::uint32_t) + sizeof(int) + 3 * sizeof(std::int64_t)) +
      n * (sizeof(std::size_t) + sizeof(std::int64_t) + sizeof(double));
  memory.reserve(scratch_bytes);
  struct Release {
    PlannerMemory& m;
    std::size_t bytes;
    ~Release() { m.release(bytes); }
  } release_scratch{memory, scratch_bytes};
  std::vector<char> before(n, 0);
  for (std::size_t j = 0; j < break_pos; ++j) before[order[j]] = 1;

  ReducedProblem core;
  std::vector<std::uint32_t> item_of;
  item_of.reserve(n);
  core.original_index.reserve(n);
  core.weight.reserve(n);
  core.value.reserve(n);
  core.capacity = p.capacity;
  double fixed_value = 0;
  for (std::uint32_t k = 0; k < n; ++k) {
    const double r = p.value[k] - rho * static_cast<double>(p.weight[k]);
    if (std::abs(r) <= gap || k == b) {
      item_of.push_back(k);
      core.original_index.push_back(k);
      core.weight.push_back(p.weight[k]);
      core.value.push_back(p.value[k]);
    } else if (before[k]) {
      core.capacity -= p.weight[k];
      fixed_value += p.value[k];
    }
  }
  core.original_size = core.size();
  std::size_t bands = 0;
  // Sparse weights (small instances) have gaps everywhere: then the fixed edges alone.
  std::vector<int> band_of = bands_of(core, p.weight[b], true, bands);
  if (bands > kMaxBands) band_of = bands_of(core, p.weight[b], false, bands);
  if (bands == 0 || bands > kMaxBands) return out;
  out.bands = bands;
  std::vector<std::size_t> lp_count(bands, 0);
  for (std::size_t k = 0; k < core.size(); ++k) {
    if (band_of[k] >= 0 && before[item_of[k]]) ++lp_count[static_cast<std::size_t>(band_of[k])];
  }
  const int break_band = band_of[static_cast<std::size_t>(
      std::find(item_of.begin(), item_of.end(), b) - item_of.begin())];
  const BandBounds bounds(core, std::move(band_of), bands);
  auto beats = [&](double bound) { return bound >= out.best_value - fixed_value + value_step; };
  auto late = [&] { return deadline && Clock::now() >= *deadline; };
  // The LP bounds depend on the core alone: a later try on the same core reads them back.
  const BandCache::Core key{core.size(), core.capacity, fixed_value};
  if (!(cache.core == key)) {
    cache.core = key;
    cache.bounds.clear();
    cache.entries.clear();
  }
  auto minimize = [&](const std::vector<Constraint>& c) {
    for (const BandCache::Bound& e : cache.bounds) {
      if (e.constraints == c) return BandBounds::Minimum{e.bound, e.lambda};
    }
    const BandBounds::Minimum m = bounds.minimize(c, deadline);
    if (!late()) cache.bounds.push_back({c, m.bound, m.lambda});  // not one the deadline cut
    return m;
  };
  // The counts of `mask` a better plan can have, given the rest: walks down from `from` while
  // "at most c - 1" (with `down` added) can beat the incumbent, and up while "at least c + 1"
  // (with `up` added) can. `down(c)` / `up(c)` give the constraints on the other bands that go
  // with c. False when the walk went past kMaxSideSteps or the deadline.
  auto walk = [&](unsigned mask, std::size_t from_low, std::size_t from_high, auto&& down,
                  auto&& up, std::size_t& low, std::size_t& high) {
    const std::size_t size = bounds.size_of(mask);
    low = std::min(from_low, size);
    for (int steps = 0; low > 0; ++steps) {
      if (steps == kMaxSideSteps || late()) return false;
      std::vector<Constraint> c = down(low - 1);
      c.push_back({mask, Sense::kAtMost, low - 1});
      if (!beats(minimize(c).bound)) break;
      --low;
    }
    high = std::max(low, std::min(from_high, size));
    for (int steps = 0; high < size; ++steps) {
      if (steps == kMaxSideSteps || late()) return false;
      std::vector<Constraint> c = up(high + 1);
      c.push_back({mask, Sense::kAtLeast, high + 1});
      if (!beats(minimize(c).bound)) break;
      ++high;
    }
    return true;
  };
  auto none = [](std::size_t) { return std::vector<Constraint>{}; };

  // Every better plan saves between low_all and high_all items of all bands together; for each
  // such total, each band's count is walked with the other bands together holding the rest
  // (at least the rest when the band holds at most c, at most when it holds at least c), and
  // the vectors of those ranges that add up to the total are the candidates.
  const unsigned all = (1u << bands) - 1;
  std::size_t lp_all = 0;
  for (std::size_t c : lp_count) lp_all += c;
  std::size_t low_all = 0, high_all = 0;
  if (!walk(all, lp_all, lp_all + (break_band >= 0 ? 1 : 0), none, none, low_all, high_all)) {
    return out;
  }
  struct Candidate {
    std::vector<std::size_t> count;
    double bound, lambda;
  };
  std::vector<Candidate> open;
  std::size_t examined = 0;
  for (std::size_t total = low_all; total <= high_all; ++total) {
    std::vector<std::size_t> low(bands, total), high(bands, total);
    if (bands > 1) {
      const auto centre =
          bounds.top_counts(minimize({{all, Sense::kExactly, total}}).lambda, all, total);
      for (std::size_t j = 0; j < bands; ++j) {
        const unsigned rest = all & ~(1u << j);
        auto rest_at_least = [&](std::size_t c) {
          return std::vector<Constraint>{{rest, Sense::kAtLeast, total - std::min(c, total)}};
        };
        auto rest_at_most = [&](std::size_t c) {
          return std::vector<Constraint>{{rest, Sense::kAtMost, c > total ? 0 : total - c}};
        };
        if (!walk(1u << j, centre[j], centre[j], rest_at_least, rest_at_most, low[j], high[j])) {
          return out;
        }
      }
    }
    std::vector<std::size_t> count(low);
    for (bool more = true; more;) {
      std::size_t sum = 0;
      for (std::size_t c : count) sum += c;
      if (sum == total) {
        if (++examined > kMaxVectors || late()) return out;
        std::vector<Constraint> exact;
        for (std::size_t j = 0; j < bands; ++j)
          exact.push_back({1u << j, Sense::kExactly, count[j]});
        const auto m = minimize(exact);
        if (beats(m.bound)) open.push_back({count, m.bound, m.lambda});
      }
      more = false;
      for (std::size_t j = 0; j < bands; ++j) {  // the next vector of the ranges
        if (count[j] < high[j]) {
          ++count[j];
          more = true;
          break;
        }
        count[j] = low[j];
      }
    }
  }
  // The bands are worth their inner searches only where their bounds close most of Dantzig's
  // gap (circle: to 0.03% and 0.9% of it, above; ExactTuning::band_max_gap_share, 5%);
  // elsewhere the other tools prove faster, and the step reports that it did not try (so it is
  // not tried again).
  double widest = -std::numeric_limits<double>::infinity();
  for (const Candidate& c : open) widest = std::max(widest, c.bound + fixed_value - incumbent);
  if (!open.empty() && widest > tuning.band_max_gap_share * (dantzig - incumbent)) return out;
  // The most promising vector first: its plan raises the incumbent for the others.
  std::sort(open.begin(), open.end(),
            [](const Candidate& a, const Candidate& c) { return a.bound > c.bound; });

  ExactTuning inner_tuning = tuning;
  inner_tuning.shift = false;
  inner_tuning.band = false;
  double remaining = -std::numeric_limits<double>::infinity();  // over vectors left open, core
  const std::size_t m = core.size();
  std::optional<Clock::time_point> inner_deadline;
  // One vector's shifted knapsack: returns false when a limit stopped it (no proof). `bound`
  // gets what plans with counts `count` can be worth, `got` the counts of its best plan.
  // `settled[k]`: 0 when core item k is free for this vector, 1 when every plan with its counts
  // that beats the incumbent saves it, 2 when none does.
  auto solve_shifted = [&](const std::vector<double>& mu, const std::vector<std::size_t>& count,
                           const std::vector<char>& settled, double& bound,
                           std::vector<std::size_t>& got) {
    double mu_k = 0;
    for (std::size_t j = 0; j < bands; ++j) mu_k += mu[j] * static_cast<double>(count[j]);
    double settled_shifted = 0, settled_value = 0;
    std::int64_t settled_weight = 0;
    got.assign(bands, 0);
    for (std::size_t k = 0; k < m; ++k) {
      if (settled[k] != 1) continue;
      const int j = bounds.band(k);
      settled_weight += core.weight[k];
      settled_value += core.value[k];
      settled_shifted += j >= 0 ? core.value[k] - mu[static_cast<std::size_t>(j)] : core.value[k];
      if (j >= 0) ++got[static_cast<std::size_t>(j)];
    }
    if (settled_weight > core.capacity) {
      // The settled items alone are over the budget: no plan has these counts and beats z.
      bound = -std::numeric_limits<double>::infinity();
      return true;
    }
    ReducedProblem q;
    std::vector<std::uint32_t> q_of;
    const std::size_t q_bytes = m * (2 * sizeof(std::size_t) + sizeof(std::int64_t) +
                                     sizeof(double) + sizeof(std::uint32_t) + sizeof(char));
    memory.reserve(q_bytes);
    const std::size_t before_inner = memory.current();
    q.capacity = core.capacity - settled_weight;
    q_of.reserve(m);
    q.original_index.reserve(m);
    q.weight.reserve(m);
    q.value.reserve(m);
    std::int64_t q_weight = 0;
    for (std::uint32_t k = 0; k < m; ++k) {
      const int j = bounds.band(k);
      const double v = j >= 0 ? core.value[k] - mu[static_cast<std::size_t>(j)] : core.value[k];
      if (v <= 0 || settled[k] != 0 || core.weight[k] > q.capacity) continue;
      q_of.push_back(k);
      q.original_index.push_back(k);
      q.weight.push_back(core.weight[k]);
      q.value.push_back(v);
      q_weight += core.weight[k];
    }
    q.original_size = q.size();
    inner_tuning.target = out.best_value - fixed_value + value_step - mu_k - settled_shifted;
    // The inner searches' share of time counts from the first of them, not from the bounds.
    const ReducedSolution inner = search_shifted(q, q_weight, memory, deadline, inner_deadline,
                                                 inner_seconds, inner_tuning, out);
    memory.release(memory.current() - before_inner);
    double shifted = settled_shifted, value = settled_value;
    for (std::size_t j = 0; j < q.size(); ++j) {
      if (!inner.take[j]) continue;
      shifted += q.value[j];
      value += core.value[q_of[j]];
      if (bounds.band(q_of[j]) >= 0) ++got[static_cast<std::size_t>(bounds.band(q_of[j]))];
    }
    if (value + fixed_value > out.best_value) {  // a plan of p: fixed, settled and searched items
      out.best_value = value + fixed_value;
      out.take = before;
      for (std::size_t k = 0; k < m; ++k) out.take[item_of[k]] = settled[k] == 1;
      for (std::size_t j = 0; j < q.size(); ++j) {
        if (inner.take[j]) out.take[item_of[q_of[j]]] = 1;
      }
    }
    memory.release(q_bytes);
    if (inner.status != SolveStatus::kOptimal) return false;
    // The best plan of the shifted problem, or (below the target) a value no plan with these
    // counts beats the incumbent by: either way it bounds what they can be worth.
    bound = shifted + mu_k;
    return true;
  };

  for (const Candidate& c : open) {
    if (!beats(c.bound)) continue;  // the incumbent rose since
    // Any mu gives a valid bound; when the shifted problem's best plan has other counts than the
    // vector's, the bound it gives can exceed the vector's best, and a subgradient step on mu
    // (Polyak's, towards the incumbent) tries again, up to kDualRounds times.
    const std::vector<double> mu_lp = bounds.multipliers(c.lambda, c.count);
    BandCache::Entry* cached = nullptr;
    for (BandCache::Entry& e : cache.entries) {
      if (e.count == c.count) cached = &e;
    }
    if (!cached) {  // the searches' multipliers: the LP's, rounded to integers (runtimes stay so)
      std::vector<double> mu(mu_lp);
      for (double& x : mu) x = std::nearbyint(x);
      cache.entries.push_back({c.count, std::move(mu)});
      cached = &cache.entries.back();
    }
    std::vector<double>& mu = cached->mu;  // a later try goes on from the last step's
    double best_bound = c.bound;
    // Reduced-cost fixing for this vector: at B's lambda and with each band's multiplier between
    // its k-th and k+1-th term, a plan with these counts is worth at most B(k) less |r_i| for
    // every item where it differs from the LP's choice (r_i its term less the band's multiplier;
    // a free item's term).
    std::vector<char> settled(m, 0);
    {
      const double gap_k = c.bound - (out.best_value - fixed_value + value_step) +
                           0x1.0p-40 * (std::abs(c.bound) + value_max + 1.0);
      for (std::size_t k = 0; k < m; ++k) {
        const int j = bounds.band(k);
        const double t = core.value[k] - c.lambda * static_cast<double>(core.weight[k]);
        const double r = j >= 0 ? t - mu_lp[static_cast<std::size_t>(j)] : t;
        if (std::abs(r) > gap_k) settled[k] = r > 0 ? 1 : 2;
      }
    }
    for (int round = 0; round < kDualRounds && beats(best_bound); ++round) {
      if (late()) return out;
      double bound = 0;
      std::vector<std::size_t> got;
      if (round > 0) ++out.dual_rounds;
      if (!solve_shifted(mu, c.count, settled, bound, got)) return out;  // a limit stopped it
      best_bound = std::min(best_bound, bound);
      double norm = 0;
      for (std::size_t j = 0; j < bands; ++j) {
        const double d = static_cast<double>(c.count[j]) - static_cast<double>(got[j]);
        norm += d * d;
      }
      if (norm == 0) break;  // its best plan has these counts: the bound is that plan's value
      const double step = (bound - (out.best_value - fixed_value + value_step)) / norm;
      for (std::size_t j = 0; j < bands; ++j) {
        const double d = static_cast<double>(c.count[j]) - static_cast<double>(got[j]);
        const double move = std::nearbyint(step * d);
        mu[j] -= move != 0 ? move : (d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0));
      }
    }
    remaining = std::max(remaining, best_bound);
  }
  out.proven = !beats(remaining);
  out.upper_bound = std::max(remaining + fixed_value, out.best_value);
  return out;
}

}  // namespace remat::detail
