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
#include <optional>
#include <vector>

#include "knapsack/band_bounds.hpp"
#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

namespace band_split_steps {
namespace {

constexpr int kMaxSideSteps = 6;
constexpr std::size_t kMaxVectors = 256;
constexpr std::size_t kMaxBands = 4;
constexpr int kDualRounds = 6;

// A count vector whose bound B(k) can beat the incumbent, with B's multiplier.
struct Candidate {
  std::vector<std::size_t> count;
  double bound, lambda;
};

// One try of the band split, step by step (see the header comment): Dantzig's bound and the
// reduced-cost fixing that leaves the core; the bands; the count ranges of the plans that could
// beat the incumbent; the candidate vectors; and each vector's shifted knapsack, with its own
// fixing and subgradient rounds. Each step returns false where the try ends without a proof.
class BandSplit {
 public:
  BandSplit(const ReducedProblem& p, const std::vector<std::uint32_t>& order, std::size_t break_pos,
            double incumbent, double value_step, PlannerMemory& memory,
            std::optional<Clock::time_point> deadline, std::optional<double> inner_seconds,
            BandCache& cache, const ExactTuning& tuning)
      : p_(p),
        order_(order),
        break_pos_(break_pos),
        incumbent_(incumbent),
        value_step_(value_step),
        memory_(memory),
        deadline_(deadline),
        inner_seconds_(inner_seconds),
        cache_(cache),
        tuning_(tuning) {
    out_.best_value = incumbent;
  }

  BandSplit(const BandSplit&) = delete;
  BandSplit& operator=(const BandSplit&) = delete;
  ~BandSplit() { memory_.release(scratch_bytes_); }

  SplitOutcome run() {
    if (break_pos_ >= p_.size()) return out_;  // everything fits: the break solution is optimal
    if (!dantzig_gap()) return out_;
    if (gap_ < 0) {
      out_.proven = true;
      out_.upper_bound = std::max(dantzig_, incumbent_);
      return out_;
    }
    fix_core();
    if (!make_bands()) return out_;
    std::vector<Candidate> open;
    if (!candidate_vectors(open) || !worth_searching(open)) return out_;
    double remaining = -std::numeric_limits<double>::infinity();  // over vectors left open, core
    for (const Candidate& c : open) {
      if (!beats(c.bound)) continue;  // the incumbent rose since
      double bound = 0;
      if (!search_vector(c, bound)) return out_;
      remaining = std::max(remaining, bound);
    }
    out_.proven = !beats(remaining);
    out_.upper_bound = std::max(remaining + fixed_value_, out_.best_value);
    return out_;
  }

 private:
  // Dantzig's bound U at the break item's efficiency rho, and the gap U - (z + step) (with a
  // margin) that reduced-cost fixing compares |r_i| with. False when the shifted runtimes' sums
  // could leave the exact range of doubles.
  bool dantzig_gap() {
    double total = 0;
    for (double v : p_.value) {
      total += v;
      value_max_ = std::max(value_max_, v);
    }
    // Shifted runtimes stay within a few times the largest: sums below 2^52 stay exact.
    if (total + 4.0 * value_max_ * static_cast<double>(p_.size()) >= 0x1.0p52) return false;
    break_item_ = order_[break_pos_];
    rho_ = p_.value[break_item_] / static_cast<double>(p_.weight[break_item_]);
    std::int64_t room = p_.capacity;
    for (std::size_t j = 0; j < break_pos_; ++j) {
      room -= p_.weight[order_[j]];
      dantzig_ += p_.value[order_[j]];
    }
    dantzig_ += rho_ * static_cast<double>(room);
    // U and each r_i are rounded once or twice (the other sums are exact integers): a margin of
    // a few units in the last place of the largest keeps the fixing on the safe side.
    const double margin = 0x1.0p-40 * (std::abs(dantzig_) + value_max_ + 1.0);
    gap_ = dantzig_ - (incumbent_ + value_step_) + margin;
    return true;
  }

  // Reduced-cost fixing: the items whose |r_i| is within the gap (and the break item) form the
  // core; the others keep their break decision, the saved ones' weight and value set aside.
  void fix_core() {
    const std::size_t n = p_.size();
    // Scratch: before (the break solution saves the item), item_of, band_of and the bands' terms
    // and sorted weights.
    const std::size_t scratch =
        n * (sizeof(char) + sizeof(std::uint32_t) + sizeof(int) + 3 * sizeof(std::int64_t)) +
        n * (sizeof(std::size_t) + sizeof(std::int64_t) + sizeof(double));
    memory_.reserve(scratch);
    scratch_bytes_ = scratch;
    before_.assign(n, 0);
    for (std::size_t j = 0; j < break_pos_; ++j) before_[order_[j]] = 1;
    item_of_.reserve(n);
    core_.original_index.reserve(n);
    core_.weight.reserve(n);
    core_.value.reserve(n);
    core_.capacity = p_.capacity;
    for (std::uint32_t k = 0; k < n; ++k) {
      const double r = p_.value[k] - rho_ * static_cast<double>(p_.weight[k]);
      if (std::abs(r) <= gap_ || k == break_item_) {
        item_of_.push_back(k);
        core_.original_index.push_back(k);
        core_.weight.push_back(p_.weight[k]);
        core_.value.push_back(p_.value[k]);
      } else if (before_[k]) {
        core_.capacity -= p_.weight[k];
        fixed_value_ += p_.value[k];
      }
    }
    core_.original_size = core_.size();
  }

  // The bands of the core (at most kMaxBands), how many items of each the LP's plan saves, and
  // the bounds over them; the cache is reset when the core is another one.
  bool make_bands() {
    const std::int64_t wb = p_.weight[break_item_];
    // Sparse weights (small instances) have gaps everywhere: then the fixed edges alone.
    std::vector<int> band_of = bands_of(core_, wb, true, bands_);
    if (bands_ > kMaxBands) band_of = bands_of(core_, wb, false, bands_);
    if (bands_ == 0 || bands_ > kMaxBands) return false;
    out_.bands = bands_;
    lp_count_.assign(bands_, 0);
    for (std::size_t k = 0; k < core_.size(); ++k) {
      if (band_of[k] >= 0 && before_[item_of_[k]]) {
        ++lp_count_[static_cast<std::size_t>(band_of[k])];
      }
    }
    break_band_ = band_of[static_cast<std::size_t>(
        std::find(item_of_.begin(), item_of_.end(), break_item_) - item_of_.begin())];
    bounds_.emplace(core_, std::move(band_of), bands_);
    // The LP bounds depend on the core alone: a later try on the same core reads them back.
    const BandCache::Core key{core_.size(), core_.capacity, fixed_value_};
    if (!(cache_.core == key)) {
      cache_.core = key;
      cache_.bounds.clear();
      cache_.entries.clear();
    }
    return true;
  }

  bool beats(double bound) const { return bound >= out_.best_value - fixed_value_ + value_step_; }
  bool late() const { return deadline_ && Clock::now() >= *deadline_; }

  BandBounds::Minimum minimize(const std::vector<Constraint>& c) {
    for (const BandCache::Bound& e : cache_.bounds) {
      if (e.constraints == c) return BandBounds::Minimum{e.bound, e.lambda};
    }
    const BandBounds::Minimum m = bounds_->minimize(c, deadline_);
    if (!late()) cache_.bounds.push_back({c, m.bound, m.lambda});  // not one the deadline cut
    return m;
  }

  // The counts of `mask` a better plan can have, given the rest: walks down from `from_low`
  // while "at most c - 1" (with `down(c - 1)` added) can beat the incumbent, and up from
  // `from_high` while "at least c + 1" (with `up(c + 1)` added) can. False when the walk went
  // past kMaxSideSteps or the deadline.
  template <class Down, class Up>
  bool walk(unsigned mask, std::size_t from_low, std::size_t from_high, const Down& down,
            const Up& up, std::size_t& low, std::size_t& high) {
    const std::size_t size = bounds_->size_of(mask);
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
  }

  // Every better plan saves between low_all and high_all items of all bands together; for each
  // such total, each band's count is walked with the other bands together holding the rest (at
  // least the rest when the band holds at most c, at most when it holds at least c), and the
  // vectors of those ranges that add up to the total whose B(k) can beat the incumbent are the
  // candidates.
  bool candidate_vectors(std::vector<Candidate>& open) {
    const auto none = [](std::size_t) { return std::vector<Constraint>{}; };
    const unsigned all = (1u << bands_) - 1;
    std::size_t lp_all = 0;
    for (std::size_t c : lp_count_) lp_all += c;
    std::size_t low_all = 0, high_all = 0;
    if (!walk(all, lp_all, lp_all + (break_band_ >= 0 ? 1 : 0), none, none, low_all, high_all)) {
      return false;
    }
    std::size_t examined = 0;
    for (std::size_t total = low_all; total <= high_all; ++total) {
      std::vector<std::size_t> low(bands_, total), high(bands_, total);
      if (bands_ > 1 && !band_ranges(all, total, low, high)) return false;
      std::vector<std::size_t> count(low);
      for (bool more = true; more;) {
        std::size_t sum = 0;
        for (std::size_t c : count) sum += c;
        if (sum == total) {
          if (++examined > kMaxVectors || late()) return false;
          std::vector<Constraint> exact;
          for (std::size_t j = 0; j < bands_; ++j) {
            exact.push_back({1u << j, Sense::kExactly, count[j]});
          }
          const auto m = minimize(exact);
          if (beats(m.bound)) open.push_back({count, m.bound, m.lambda});
        }
        more = false;
        for (std::size_t j = 0; j < bands_; ++j) {  // the next vector of the ranges
          if (count[j] < high[j]) {
            ++count[j];
            more = true;
            break;
          }
          count[j] = low[j];
        }
      }
    }
    return true;
  }

  // For one total over all bands: each band's range of counts, walked from the LP's split of
  // that total with the other bands together holding the rest.
  bool band_ranges(unsigned all, std::size_t total, std::vector<std::size_t>& low,
                   std::vector<std::size_t>& high) {
    const auto centre =
        bounds_->top_counts(minimize({{all, Sense::kExactly, total}}).lambda, all, total);
    for (std::size_t j = 0; j < bands_; ++j) {
      const unsigned rest = all & ~(1u << j);
      const auto rest_at_least = [&](std::size_t c) {
        return std::vector<Constraint>{{rest, Sense::kAtLeast, total - std::min(c, total)}};
      };
      const auto rest_at_most = [&](std::size_t c) {
        return std::vector<Constraint>{{rest, Sense::kAtMost, c > total ? 0 : total - c}};
      };
      if (!walk(1u << j, centre[j], centre[j], rest_at_least, rest_at_most, low[j], high[j])) {
        return false;
      }
    }
    return true;
  }

  // The bands are worth their inner searches only where their bounds close most of Dantzig's
  // gap (circle: to 0.03% and 0.9% of it; ExactTuning::band_max_gap_share, 5%); elsewhere the
  // other tools prove faster, and the step reports that it did not try (so it is not tried
  // again). Sorts the vectors most promising first: its plan raises the incumbent for the
  // others.
  bool worth_searching(std::vector<Candidate>& open) const {
    double widest = -std::numeric_limits<double>::infinity();
    for (const Candidate& c : open) widest = std::max(widest, c.bound + fixed_value_ - incumbent_);
    if (!open.empty() && widest > tuning_.band_max_gap_share * (dantzig_ - incumbent_)) {
      return false;
    }
    std::sort(open.begin(), open.end(),
              [](const Candidate& a, const Candidate& c) { return a.bound > c.bound; });
    return true;
  }

  // One vector: its multipliers (the cache's, or the LP's rounded to integers), reduced-cost
  // fixing at them, then up to kDualRounds shifted searches with a Polyak subgradient step on
  // mu (towards the incumbent) between them, while the shifted optimum has other counts than
  // the vector's. `bound` gets the least bound found; false when a limit stopped a search.
  bool search_vector(const Candidate& c, double& bound_out) {
    // Any mu gives a valid bound; when the shifted problem's best plan has other counts than
    // the vector's, the bound it gives can exceed the vector's best.
    const std::vector<double> mu_lp = bounds_->multipliers(c.lambda, c.count);
    BandCache::Entry* cached = nullptr;
    for (BandCache::Entry& e : cache_.entries) {
      if (e.count == c.count) cached = &e;
    }
    if (!cached) {  // the searches' multipliers: the LP's, rounded to integers (runtimes stay so)
      std::vector<double> mu(mu_lp);
      for (double& x : mu) x = std::nearbyint(x);
      cache_.entries.push_back({c.count, std::move(mu)});
      cached = &cache_.entries.back();
    }
    std::vector<double>& mu = cached->mu;  // a later try goes on from the last step's
    double best_bound = c.bound;
    const std::vector<char> settled = settle(c, mu_lp);
    for (int round = 0; round < kDualRounds && beats(best_bound); ++round) {
      if (late()) return false;
      double bound = 0;
      std::vector<std::size_t> got;
      if (round > 0) ++out_.dual_rounds;
      if (!solve_shifted(mu, c.count, settled, bound, got)) return false;
      best_bound = std::min(best_bound, bound);
      double norm = 0;
      for (std::size_t j = 0; j < bands_; ++j) {
        const double d = static_cast<double>(c.count[j]) - static_cast<double>(got[j]);
        norm += d * d;
      }
      if (norm == 0) break;  // its best plan has these counts: the bound is that plan's value
      const double step = (bound - (out_.best_value - fixed_value_ + value_step_)) / norm;
      for (std::size_t j = 0; j < bands_; ++j) {
        const double d = static_cast<double>(c.count[j]) - static_cast<double>(got[j]);
        const double move = std::nearbyint(step * d);
        mu[j] -= move != 0 ? move : (d > 0 ? 1.0 : (d < 0 ? -1.0 : 0.0));
      }
    }
    bound_out = best_bound;
    return true;
  }

  // Reduced-cost fixing for one vector: at B's lambda and with each band's multiplier between
  // its k-th and k+1-th term, a plan with these counts is worth at most B(k) less |r_i| for
  // every item where it differs from the LP's choice (r_i its term less the band's multiplier;
  // a free item's term). settled[k]: 0 when core item k is free for this vector, 1 when every
  // plan with its counts that beats the incumbent saves it, 2 when none does.
  std::vector<char> settle(const Candidate& c, const std::vector<double>& mu_lp) const {
    std::vector<char> settled(core_.size(), 0);
    const double gap_k = c.bound - (out_.best_value - fixed_value_ + value_step_) +
                         0x1.0p-40 * (std::abs(c.bound) + value_max_ + 1.0);
    for (std::size_t k = 0; k < core_.size(); ++k) {
      const int j = bounds_->band(k);
      const double t = core_.value[k] - c.lambda * static_cast<double>(core_.weight[k]);
      const double r = j >= 0 ? t - mu_lp[static_cast<std::size_t>(j)] : t;
      if (std::abs(r) > gap_k) settled[k] = r > 0 ? 1 : 2;
    }
    return settled;
  }

  // One vector's shifted knapsack: runtimes of band j lowered by mu_j, the settled items taken
  // or left, the rest searched exactly with the target the incumbent sets. `bound` gets what
  // plans with counts `count` can be worth, `got` the counts of its best plan; false when a
  // limit stopped the search (no proof). A better plan of p found on the way is kept.
  bool solve_shifted(const std::vector<double>& mu, const std::vector<std::size_t>& count,
                     const std::vector<char>& settled, double& bound,
                     std::vector<std::size_t>& got) {
    const std::size_t m = core_.size();
    double mu_k = 0;
    for (std::size_t j = 0; j < bands_; ++j) mu_k += mu[j] * static_cast<double>(count[j]);
    double settled_shifted = 0, settled_value = 0;
    std::int64_t settled_weight = 0;
    got.assign(bands_, 0);
    for (std::size_t k = 0; k < m; ++k) {
      if (settled[k] != 1) continue;
      const int j = bounds_->band(k);
      settled_weight += core_.weight[k];
      settled_value += core_.value[k];
      settled_shifted += j >= 0 ? core_.value[k] - mu[static_cast<std::size_t>(j)] : core_.value[k];
      if (j >= 0) ++got[static_cast<std::size_t>(j)];
    }
    if (settled_weight > core_.capacity) {
      // The settled items alone are over the budget: no plan has these counts and beats z.
      bound = -std::numeric_limits<double>::infinity();
      return true;
    }
    ReducedProblem q;
    std::vector<std::uint32_t> q_of;
    const std::size_t q_bytes = m * (2 * sizeof(std::size_t) + sizeof(std::int64_t) +
                                     sizeof(double) + sizeof(std::uint32_t) + sizeof(char));
    memory_.reserve(q_bytes);
    const std::size_t before_inner = memory_.current();
    q.capacity = core_.capacity - settled_weight;
    q_of.reserve(m);
    q.original_index.reserve(m);
    q.weight.reserve(m);
    q.value.reserve(m);
    std::int64_t q_weight = 0;
    for (std::uint32_t k = 0; k < m; ++k) {
      const int j = bounds_->band(k);
      const double v = j >= 0 ? core_.value[k] - mu[static_cast<std::size_t>(j)] : core_.value[k];
      if (v <= 0 || settled[k] != 0 || core_.weight[k] > q.capacity) continue;
      q_of.push_back(k);
      q.original_index.push_back(k);
      q.weight.push_back(core_.weight[k]);
      q.value.push_back(v);
      q_weight += core_.weight[k];
    }
    q.original_size = q.size();
    inner_tuning_.target = out_.best_value - fixed_value_ + value_step_ - mu_k - settled_shifted;
    // The inner searches' share of time counts from the first of them, not from the bounds.
    const ReducedSolution inner = search_shifted(q, q_weight, memory_, deadline_, inner_deadline_,
                                                 inner_seconds_, inner_tuning_, out_);
    memory_.release(memory_.current() - before_inner);
    double shifted = settled_shifted, value = settled_value;
    for (std::size_t j = 0; j < q.size(); ++j) {
      if (!inner.take[j]) continue;
      shifted += q.value[j];
      value += core_.value[q_of[j]];
      if (bounds_->band(q_of[j]) >= 0) ++got[static_cast<std::size_t>(bounds_->band(q_of[j]))];
    }
    if (value + fixed_value_ > out_.best_value) {  // a plan of p: fixed, settled and searched items
      out_.best_value = value + fixed_value_;
      out_.take = before_;
      for (std::size_t k = 0; k < m; ++k) out_.take[item_of_[k]] = settled[k] == 1;
      for (std::size_t j = 0; j < q.size(); ++j) {
        if (inner.take[j]) out_.take[item_of_[q_of[j]]] = 1;
      }
    }
    memory_.release(q_bytes);
    if (inner.status != SolveStatus::kOptimal) return false;
    // The best plan of the shifted problem, or (below the target) a value no plan with these
    // counts beats the incumbent by: either way it bounds what they can be worth.
    bound = shifted + mu_k;
    return true;
  }

  const ReducedProblem& p_;
  const std::vector<std::uint32_t>& order_;
  std::size_t break_pos_;
  double incumbent_, value_step_;
  PlannerMemory& memory_;
  std::optional<Clock::time_point> deadline_;
  std::optional<double> inner_seconds_;
  BandCache& cache_;
  const ExactTuning& tuning_;
  ExactTuning inner_tuning_ = [this] {
    ExactTuning inner = tuning_;
    inner.shift = false;
    inner.band = false;
    return inner;
  }();
  std::optional<Clock::time_point> inner_deadline_;  // set by the first inner search
  SplitOutcome out_;
  std::size_t scratch_bytes_ = 0;  // reserved against the cap, released at the end
  double value_max_ = 0, dantzig_ = 0, gap_ = 0, rho_ = 0;
  std::uint32_t break_item_ = 0;
  std::vector<char> before_;  // per item of p: whether the break solution saves it
  ReducedProblem core_;
  std::vector<std::uint32_t> item_of_;  // per core item: its index in p
  double fixed_value_ = 0;              // of the fixed items the break solution saves
  std::size_t bands_ = 0;
  std::vector<std::size_t> lp_count_;  // per band: items the break solution saves
  int break_band_ = -1;
  std::optional<BandBounds> bounds_;
};

}  // namespace
}  // namespace band_split_steps

double band_count_bound(const ReducedProblem& p, const std::vector<int>& band_of, std::size_t bands,
                        const std::vector<BandCount>& counts) {
  return band_split_steps::BandBounds(p, band_of, bands).minimize(counts, std::nullopt).bound;
}

SplitOutcome band_split(const ReducedProblem& p, const std::vector<std::uint32_t>& order,
                        std::size_t break_pos, double incumbent, double value_step,
                        PlannerMemory& memory, std::optional<Clock::time_point> deadline,
                        std::optional<double> inner_seconds, BandCache& cache,
                        const ExactTuning& tuning) {
  return band_split_steps::BandSplit(p, order, break_pos, incumbent, value_step, memory, deadline,
                                     inner_seconds, cache, tuning)
      .run();
}

}  // namespace remat::detail
