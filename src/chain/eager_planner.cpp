// Optimal nested checkpoint regions for a chain run by eager PyTorch (non-reentrant
// torch.utils.checkpoint), under a budget on saved-for-backward bytes. A dynamic program in the
// style of rotor (Beaumont et al., "Optimal checkpointing for heterogeneous chains", 2019),
// written for torch's semantics (eager.hpp): a region keeps its input, and its backward re-runs
// its forward, whose own regions re-run again in their backward.
//
// A segment s..t runs with its input held outside it. Its first piece is either layer s run
// plainly, which keeps p(s) = saved_s + a_s (a_s the boundary activation, or at the chain's end
// only if the layer saves it), or a region s..d (d < t) that keeps nothing but its output a_d
// while the rest runs, then re-runs with the rest done:
//
//   C(s, t, m) = min( C(s+1, t, m - p(s)),
//                     min_{d<t} T(s..d) + C(s, d, m) + C(d+1, t, m - a_d) )
//
// with C(s, s, m) = 0 when layer s fits. The peak recursion is the same with (+, max) in place
// of the costs, so minimum_memory_plan is the O(n^3) program on peaks alone:
//   M(s, t) = min( p(s) + M(s+1, t), min_{d<t} max(M(s, d), a_d + M(d+1, t)) ).
//
// A region's cost T(s..d) is its layers' forward time plus a fixed overhead per region.
//
// With max_region_layers = L, only regions of at most L layers are candidates (d < s + L), in the
// peak and the time programs alike, and evaluate() rejects longer ones.
//
// Selective checkpointing: layer s may list options k, each holding h_k bytes (the ops' outputs a
// policy keeps) and re-running in r_k. Run as region s..s with option k, the layer holds a_s + h_k
// while the rest of its segment runs and peaks at kept(s, s) + h_k during its re-run, which costs
// r_k + overhead. Options apply only to single-layer regions outside every other region (a
// multi-layer region and what nests in it keep the whole re-run): in the program, only in the
// segments that end the chain (t = n - 1), which are exactly the top level's suffixes, since a
// region's segment s..d ends before its parent's. There, for s < t, each option adds
//
//   r_k + overhead + C(s+1, t, m - a_s - h_k),  feasible when kept(s, s) + h_k <= m,
//
// O(n K C) in all for K options a layer, next to the O(n^3 C / 6) of the regions. An option at
// the chain's last layer would re-run at once and save nothing; evaluate() rejects it.
// The peak program ignores options, and its minimum is still the least peak over every plan:
// an option holds a_s + h_k >= a_s while the rest runs and kept(s, s) + h_k >= kept(s, s) in its
// re-run, where the whole region s..s holds a_s and kept(s, s), and a plan's peak only grows
// with what its pieces hold (sums and maxima), so replacing each option by the whole region never
// raises a plan's peak. minimum_memory_plan returns such a plan, with no option.
//
// Memory is counted in units u = ceil(budget / slots), every size rounded up (h_k too), so every
// plan found fits the true budget. Time O(n^3 C / 6 + n K C) for C = budget / u, memory
// n (n + 1) / 2 rows of C + 1 doubles, accounted before the allocation; plans are rebuilt by
// re-evaluating the minimizations.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "chain/eager_chain.hpp"
#include "common/text.hpp"
#include "remat/eager.hpp"
#include "remat/errors.hpp"
namespace remat::eager {

namespace {

using chain_model::at;
using chain_model::Chain;
using chain_model::kInf;

// Index of segment (s, t), s <= t, in a packed upper triangle.
std::size_t pair_index(std::int64_t n, std::int64_t s, std::int64_t t) {
  return at(s * n - s * (s - 1) / 2 + (t - s));
}

class PeakProgram {
 public:
  explicit PeakProgram(const Profile& profile) : chain_(profile, 1) {
    const std::int64_t n = chain_.layers();
    peak_.assign(at(n * (n + 1) / 2), 0);
    time_.assign(peak_.size(), 0.0);
    for (std::int64_t length = 1; length <= n; ++length) {
      for (std::int64_t s = 0; s + length <= n; ++s) fill(s, s + length - 1);
    }
  }

  Plan plan() const {
    Plan out;
    if (chain_.layers() > 0) emit(0, chain_.layers() - 1, 0, out.regions);
    return out;
  }
  std::int64_t minimum() const {
    return chain_.input() + (chain_.layers() > 0 ? peak(0, chain_.layers() - 1) : 0);
  }

 private:
  std::int64_t peak(std::int64_t s, std::int64_t t) const {
    return peak_[pair_index(chain_.layers(), s, t)];
  }
  double time(std::int64_t s, std::int64_t t) const {
    return time_[pair_index(chain_.layers(), s, t)];
  }

  // Candidates in a fixed order: d = -1 is "layer s plain", d >= s is "region s..d".
  std::pair<std::int64_t, double> candidate(std::int64_t s, std::int64_t t, std::int64_t d) const {
    if (d < 0) {
      if (s == t) return {chain_.kept(s, t), 0.0};
      return {chain_.kept(s, t) + peak(s + 1, t), time(s + 1, t)};
    }
    return {std::max(peak(s, d), chain_.boundary(d) + peak(d + 1, t)),
            chain_.region_cost(s, d) + time(s, d) + time(d + 1, t)};
  }

  // The lexicographic least (peak, time); the first in candidate order among ties.
  std::int64_t best_choice(std::int64_t s, std::int64_t t) const {
    std::int64_t best = -1;
    auto best_value = candidate(s, t, -1);
    for (std::int64_t d = s; d <= chain_.last_region_end(s, t); ++d) {
      const auto value = candidate(s, t, d);
      if (value < best_value) best_value = value, best = d;
    }
    return best;
  }

  void fill(std::int64_t s, std::int64_t t) {
    const auto value = candidate(s, t, best_choice(s, t));
    peak_[pair_index(chain_.layers(), s, t)] = value.first;
    time_[pair_index(chain_.layers(), s, t)] = value.second;
  }

  void emit(std::int64_t s, std::int64_t t, std::int64_t depth, std::vector<Region>& out) const {
    while (s <= t) {
      const std::int64_t d = best_choice(s, t);
      if (d < 0) {
        ++s;
        continue;
      }
      out.push_back({s, d, depth});
      emit(s, d, depth + 1, out);
      s = d + 1;
    }
  }

  Chain chain_;
  std::vector<std::int64_t> peak_;
  std::vector<double> time_;
};

class TimeProgram {
 public:
  TimeProgram(const Profile& profile, std::int64_t unit, std::int64_t budget)
      : chain_(profile, unit), n_(chain_.layers()) {
    capacity_ = budget / unit - chain_.input();
  }

  std::size_t table_bytes() const { return at(n_ * (n_ + 1) / 2) * row_size() * sizeof(double); }

  bool feasible() const { return capacity_ >= 0 && n_ > 0 && cost(0, n_ - 1)[capacity_] < kInf; }

  void solve() {
    cost_.assign(at(n_ * (n_ + 1) / 2) * row_size(), kInf);
    for (std::int64_t length = 1; length <= n_; ++length) {
      for (std::int64_t s = 0; s + length <= n_; ++s) fill(s, s + length - 1);
    }
  }

  std::vector<Region> plan() const {
    std::vector<Region> out;
    emit(0, n_ - 1, capacity_, 0, out);
    return out;
  }

 private:
  std::size_t row_size() const { return at(std::max<std::int64_t>(capacity_, 0)) + 1; }
  double* cost(std::int64_t s, std::int64_t t) {
    return cost_.data() + pair_index(n_, s, t) * row_size();
  }
  const double* cost(std::int64_t s, std::int64_t t) const {
    return cost_.data() + pair_index(n_, s, t) * row_size();
  }

  void fill(std::int64_t s, std::int64_t t) {
    double* row = cost(s, t);
    const std::int64_t kept = chain_.kept(s, t);
    if (s == t) {
      for (std::int64_t m = kept; m <= capacity_; ++m) row[m] = 0;
      return;
    }
    const double* rest = cost(s + 1, t);
    for (std::int64_t m = kept; m <= capacity_; ++m) row[m] = rest[m - kept];
    for (std::int64_t d = s; d <= chain_.last_region_end(s, t); ++d) {
      const double* region = cost(s, d);
      const double* after = cost(d + 1, t);
      const double region_time = chain_.region_cost(s, d);
      const std::int64_t boundary = chain_.boundary(d);
      for (std::int64_t m = boundary; m <= capacity_; ++m) {
        row[m] = std::min(row[m], region_time + region[m] + after[m - boundary]);
      }
    }
    if (!top_level(t)) return;
    const std::int64_t boundary = chain_.boundary(s);
    for (std::int64_t k = 0; k < chain_.options(s); ++k) {
      const double option_time = chain_.option_cost(s, k);
      const std::int64_t held = chain_.held(s, k);
      for (std::int64_t m = option_floor(s, k); m <= capacity_; ++m) {
        row[m] = std::min(row[m], option_time + rest[m - boundary - held]);
      }
    }
  }

  // Segments that end the chain are the top level's suffixes (a region's segment ends before the
  // chain does): only there may a single-layer region take an option.
  bool top_level(std::int64_t t) const { return t == n_ - 1; }
  // The least memory for layer s run as a region with option k: it holds its output and the
  // cache while the rest runs, and the cache on top of the layer's re-run.
  std::int64_t option_floor(std::int64_t s, std::int64_t k) const {
    return std::max(chain_.boundary(s), chain_.kept(s, s)) + chain_.held(s, k);
  }

  // What fill() chose at (s, t, m): layer s plain (last < 0), region s..last re-run whole
  // (option -1) or region s..s with an option.
  struct Choice {
    std::int64_t last = -1;
    std::int64_t option = -1;
  };

  // The choice fill() made at (s, t, m), recomputed with the same arithmetic.
  Choice choice(std::int64_t s, std::int64_t t, std::int64_t m) const {
    const double target = cost(s, t)[m];
    const std::int64_t kept = chain_.kept(s, t);
    if (s == t || (m >= kept && cost(s + 1, t)[m - kept] <= target)) return {};
    for (std::int64_t d = s; d <= chain_.last_region_end(s, t); ++d) {
      const std::int64_t boundary = chain_.boundary(d);
      if (m < boundary) continue;
      if (chain_.region_cost(s, d) + cost(s, d)[m] + cost(d + 1, t)[m - boundary] <= target)
        return {d, -1};
    }
    if (top_level(t)) {
      const double* rest = cost(s + 1, t);
      for (std::int64_t k = 0; k < chain_.options(s); ++k) {
        if (m < option_floor(s, k)) continue;
        if (chain_.option_cost(s, k) + rest[m - chain_.boundary(s) - chain_.held(s, k)] <= target)
          return {s, k};
      }
    }
    throw std::logic_error("eager planner: no choice reproduces the table");
  }

  void emit(std::int64_t s, std::int64_t t, std::int64_t m, std::int64_t depth,
            std::vector<Region>& out) const {
    while (s <= t) {
      const Choice c = choice(s, t, m);
      if (c.last < 0) {
        m -= chain_.kept(s, t);
        ++s;
      } else if (c.option >= 0) {
        out.push_back({s, s, depth, c.option});
        m -= chain_.boundary(s) + chain_.held(s, c.option);
        ++s;
      } else {
        out.push_back({s, c.last, depth});
        emit(s, c.last, m, depth + 1, out);
        m -= chain_.boundary(c.last);
        s = c.last + 1;
      }
    }
  }

  Chain chain_;
  std::int64_t n_;
  std::int64_t capacity_ = 0;
  std::vector<double> cost_;
};

std::string bytes_text(std::int64_t bytes) {
  std::string out = text::bytes(bytes);
  if (bytes >= (1 << 20)) {
    out += " (" + text::fixed(static_cast<double>(bytes) / (1 << 20), 2) + " MiB)";
  }
  return out;
}

}  // namespace

Plan minimum_memory_plan(const Profile& profile) {
  validate(profile);
  const PeakProgram program(profile);
  Plan out = program.plan();
  out.minimum_budget = program.minimum();
  out.no_checkpoint_bytes = evaluate(profile, {}).peak_bytes;
  out.unit_bytes = 1;
  out.evaluation = evaluate(profile, out.regions);
  return out;
}

// The largest unit every size of the profile is a multiple of (their gcd): counted in it, no
// size is rounded, so the program is exact in bytes and loses no plan that fits.
std::int64_t exact_unit(const Profile& profile) {
  std::int64_t unit = profile.input_bytes;
  for (const Layer& layer : profile.layers) {
    unit = std::gcd(unit, std::gcd(layer.saved_bytes, layer.output_bytes));
    for (const Option& option : layer.options) unit = std::gcd(unit, option.held_bytes);
  }
  return std::max<std::int64_t>(1, unit);
}

std::int64_t default_slots(std::size_t layers) {
  const double n = static_cast<double>(layers);
  return static_cast<std::int64_t>(std::clamp(3e8 / std::max(1.0, n * n * n / 6), 64.0, 4096.0));
}

Plan plan(const Profile& profile, std::int64_t budget_bytes, std::int64_t slots,
          std::size_t max_planner_bytes) {
  validate(profile);
  if (slots < 1) throw InputError("slots", std::nullopt, "must be >= 1");
  const Plan least = minimum_memory_plan(profile);
  if (budget_bytes < least.minimum_budget) {
    throw InputError("memory_budget", std::nullopt,
                     bytes_text(budget_bytes) + " is below the least peak any plan reaches, " +
                         bytes_text(least.minimum_budget));
  }
  Plan out;
  out.minimum_budget = least.minimum_budget;
  out.no_checkpoint_bytes = least.no_checkpoint_bytes;
  out.evaluation = {least.no_checkpoint_bytes, 0.0};  // no region: nothing re-runs
  out.unit_bytes = 1;
  if (out.evaluation.peak_bytes <= budget_bytes) return out;  // everything fits, whatever units
  // Every size is rounded up to a unit, so coarse units can lose every plan that fits (each of n
  // layers may lose up to a unit). Then the units are refined, 4x at a time, at most 3 times (64x
  // the slots asked for), while the table stays within the cap; only then the least-memory plan.
  // Units that divide every size round nothing: when they are at least as coarse as the slots ask,
  // they are used from the start (a smaller table, the exact optimum), and a refinement stops at
  // them, since no finer unit finds more. At a budget equal to the least peak, layers of 8 MiB
  // each were refined to 4096 x 64 slots (115 MB of table) where 12 units of 8 MiB are exact.
  const std::int64_t exact = exact_unit(profile);
  std::int64_t unit =
      std::max<std::int64_t>(exact, budget_bytes / slots + (budget_bytes % slots != 0 ? 1 : 0));
  std::optional<TimeProgram> solved;
  for (int refinement = 0; refinement <= 3; ++refinement) {
    const bool first = refinement == 0;
    TimeProgram program(profile, unit, budget_bytes);
    if (program.table_bytes() > max_planner_bytes) {
      if (!first) break;
      throw PlannerMemoryError("eager planner: the table needs " +
                               text::integer(program.table_bytes()) + " bytes, over the cap of " +
                               text::integer(max_planner_bytes) + "; lower {slots}");
    }
    program.solve();
    if (program.feasible()) {
      solved.emplace(std::move(program));
      break;
    }
    if (unit == exact) break;  // exact units: no finer one fits more
    unit = std::max<std::int64_t>(exact, unit / 4);
  }
  if (!solved) return least;  // no units fine enough within the cap
  const TimeProgram& program = *solved;
  out.regions = program.plan();
  out.evaluation = evaluate(profile, out.regions);
  out.unit_bytes = unit;
  return out;
}

}  // namespace remat::eager
