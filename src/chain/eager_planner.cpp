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
// Memory is counted in units u = ceil(budget / slots), every size rounded up, so every plan found
// fits the true budget. Time O(n^3 C / 6) for C = budget / u, memory n (n + 1) / 2 rows of C + 1
// doubles, accounted before the allocation; plans are rebuilt by re-evaluating the minimizations.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/text.hpp"
#include "remat/eager.hpp"
#include "remat/errors.hpp"

namespace remat::eager {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::size_t at(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// Sizes and prefix sums of one profile, in bytes or in rounded units.
class Chain {
 public:
  Chain(const Profile& profile, std::int64_t unit) : n_(std::ssize(profile.layers)) {
    time_prefix_.assign(at(n_) + 1, 0.0);
    for (std::int64_t i = 0; i < n_; ++i) {
      const Layer& layer = profile.layers[at(i)];
      boundary_.push_back(round_up(layer.output_bytes, unit));
      inner_.push_back(round_up(layer.saved_bytes + layer.output_bytes, unit));
      last_.push_back(
          round_up(layer.saved_bytes + (layer.saves_output ? layer.output_bytes : 0), unit));
      time_prefix_[at(i) + 1] = time_prefix_[at(i)] + layer.forward_time;
    }
    input_ = round_up(profile.input_bytes, unit);
    overhead_ = profile.region_overhead;
    max_region_layers_ = profile.max_region_layers;
  }

  std::int64_t layers() const { return n_; }
  std::int64_t input() const { return input_; }
  // What plain layer j keeps inside segment ..t: its saved bytes and, unless it ends the
  // segment without saving it, its output.
  std::int64_t kept(std::int64_t j, std::int64_t t) const {
    return j < t ? inner_[at(j)] : last_[at(j)];
  }
  std::int64_t boundary(std::int64_t j) const { return boundary_[at(j)]; }
  // The last layer a region starting at s may end on, inside a segment ending at t (a region
  // never covers its whole segment).
  std::int64_t last_region_end(std::int64_t s, std::int64_t t) const {
    return max_region_layers_ > 0 ? std::min(t - 1, s + max_region_layers_ - 1) : t - 1;
  }
  std::int64_t max_region_layers() const { return max_region_layers_; }
  // What region first..last costs besides its nested regions: its re-run and its overhead.
  double region_cost(std::int64_t first, std::int64_t last) const {
    return time_prefix_[at(last) + 1] - time_prefix_[at(first)] + overhead_;
  }

 private:
  static std::int64_t round_up(std::int64_t bytes, std::int64_t unit) {
    return bytes / unit + (bytes % unit != 0 ? 1 : 0);
  }

  std::int64_t n_;
  std::int64_t input_ = 0;
  double overhead_ = 0;
  std::int64_t max_region_layers_ = 0;
  std::vector<std::int64_t> boundary_, inner_, last_;
  std::vector<double> time_prefix_;
};

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
  }

  // The choice fill() made at (s, t, m), recomputed with the same arithmetic: -1 is plain.
  std::int64_t choice(std::int64_t s, std::int64_t t, std::int64_t m) const {
    const double target = cost(s, t)[m];
    const std::int64_t kept = chain_.kept(s, t);
    if (s == t || (m >= kept && cost(s + 1, t)[m - kept] <= target)) return -1;
    for (std::int64_t d = s; d <= chain_.last_region_end(s, t); ++d) {
      const std::int64_t boundary = chain_.boundary(d);
      if (m < boundary) continue;
      if (chain_.region_cost(s, d) + cost(s, d)[m] + cost(d + 1, t)[m - boundary] <= target)
        return d;
    }
    throw std::logic_error("eager planner: no choice reproduces the table");
  }

  void emit(std::int64_t s, std::int64_t t, std::int64_t m, std::int64_t depth,
            std::vector<Region>& out) const {
    while (s <= t) {
      const std::int64_t d = choice(s, t, m);
      if (d < 0) {
        m -= chain_.kept(s, t);
        ++s;
        continue;
      }
      out.push_back({s, d, depth});
      emit(s, d, m, depth + 1, out);
      m -= chain_.boundary(d);
      s = d + 1;
    }
  }

  Chain chain_;
  std::int64_t n_;
  std::int64_t capacity_ = 0;
  std::vector<double> cost_;
};

// The regions as a tree: children[i] lists the regions directly inside region i (the last
// entry, index regions.size(), stands for the whole chain).
std::vector<std::vector<std::size_t>> nest(const std::vector<Region>& regions, std::int64_t n,
                                           std::int64_t max_region_layers) {
  std::vector<std::size_t> order(regions.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const Region& x = regions[a];
    const Region& y = regions[b];
    return x.first != y.first ? x.first < y.first : x.last > y.last;
  });
  const std::size_t root = regions.size();
  std::vector<std::vector<std::size_t>> children(regions.size() + 1);
  std::vector<std::size_t> open{root};  // the chain of enclosing regions
  auto bounds = [&](std::size_t i) {
    return i == root ? std::pair<std::int64_t, std::int64_t>{0, n - 1}
                     : std::pair{regions[i].first, regions[i].last};
  };
  for (std::size_t i : order) {
    const Region& r = regions[i];
    if (r.first < 0 || r.last >= n || r.first > r.last) {
      throw InputError("regions", i,
                       "layers " + text::integer(r.first) + ".." + text::integer(r.last) +
                           " are not inside the chain of " + text::integer(n) + " layers");
    }
    if (max_region_layers > 0 && r.last - r.first + 1 > max_region_layers) {
      throw InputError("regions", i,
                       "spans " + text::integer(r.last - r.first + 1) +
                           " layers; max_region_layers allows " + text::integer(max_region_layers));
    }
    while (bounds(open.back()).second < r.first) open.pop_back();
    const auto [first, last] = bounds(open.back());
    if (r.last > last) {
      throw InputError("regions", i, "overlaps another region without nesting in it");
    }
    if (r.first == first && r.last == last) {
      throw InputError("regions", i,
                       open.back() == root ? "covers the whole chain (it saves nothing)"
                                           : "repeats the layers of the region around it");
    }
    children[open.back()].push_back(i);
    open.push_back(i);
  }
  return children;
}

class Evaluator {
 public:
  Evaluator(const Profile& profile, const std::vector<Region>& regions)
      : chain_(profile, 1),
        regions_(regions),
        children_(nest(regions, chain_.layers(), chain_.max_region_layers())) {}

  Evaluation run() const {
    if (chain_.layers() == 0) return {chain_.input(), 0.0};
    Evaluation e = segment(0, chain_.layers() - 1, children_.back());
    e.peak_bytes += chain_.input();
    return e;
  }

 private:
  // Pieces are evaluated from the last one back: each adds what it keeps to the peak of what
  // follows it, and a region's re-run happens once everything after it is done.
  Evaluation segment(std::int64_t s, std::int64_t t, const std::vector<std::size_t>& inner) const {
    std::map<std::int64_t, std::size_t> starts;
    for (std::size_t i : inner) starts[regions_[i].first] = i;
    struct Piece {
      std::int64_t first, last;
      std::optional<std::size_t> region;
    };
    std::vector<Piece> pieces;
    for (std::int64_t j = s; j <= t;) {
      const auto found = starts.find(j);
      if (found == starts.end()) {
        pieces.push_back({j, j, std::nullopt});
        ++j;
      } else {
        pieces.push_back({j, regions_[found->second].last, found->second});
        j = regions_[found->second].last + 1;
      }
    }
    Evaluation out;
    for (auto piece = pieces.rbegin(); piece != pieces.rend(); ++piece) {
      if (!piece->region) {
        out.peak_bytes += chain_.kept(piece->first, t);
        continue;
      }
      const Evaluation rerun = segment(piece->first, piece->last, children_[*piece->region]);
      const std::int64_t kept = piece->last < t ? chain_.boundary(piece->last) : 0;
      out.peak_bytes = std::max(out.peak_bytes + kept, rerun.peak_bytes);
      out.recompute_time += chain_.region_cost(piece->first, piece->last) + rerun.recompute_time;
    }
    return out;
  }

  Chain chain_;
  const std::vector<Region>& regions_;
  std::vector<std::vector<std::size_t>> children_;
};

std::string bytes_text(std::int64_t bytes) {
  std::string out = text::integer(bytes) + " bytes";
  if (bytes >= (1 << 20)) {
    out += " (" + text::fixed(static_cast<double>(bytes) / (1 << 20), 2) + " MiB)";
  }
  return out;
}

}  // namespace

void validate(const Profile& profile) {
  if (profile.input_bytes < 0) throw InputError("input_bytes", std::nullopt, "must be >= 0");
  if (!std::isfinite(profile.region_overhead) || profile.region_overhead < 0) {
    throw InputError("region_overhead", std::nullopt, "must be finite and >= 0");
  }
  if (profile.max_region_layers < 0) {
    throw InputError("max_region_layers", std::nullopt, "must be >= 0 (0: any length)");
  }
  std::int64_t total = profile.input_bytes;
  constexpr std::int64_t kLimit = std::int64_t{1} << 60;
  for (std::size_t i = 0; i < profile.layers.size(); ++i) {
    const Layer& layer = profile.layers[i];
    if (layer.saved_bytes < 0) throw InputError("saved_bytes", i, "must be >= 0");
    if (layer.output_bytes < 0) throw InputError("output_bytes", i, "must be >= 0");
    if (!std::isfinite(layer.forward_time) || layer.forward_time < 0) {
      throw InputError("forward_time", i, "must be finite and >= 0");
    }
    total += std::min(layer.saved_bytes, kLimit) + std::min(layer.output_bytes, kLimit);
    if (total > kLimit) throw InputError("saved_bytes", i, "the chain's bytes add up past 2^60");
  }
}

Evaluation evaluate(const Profile& profile, const std::vector<Region>& regions) {
  validate(profile);
  return Evaluator(profile, regions).run();
}

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
  const std::int64_t unit =
      std::max<std::int64_t>(1, budget_bytes / slots + (budget_bytes % slots != 0 ? 1 : 0));
  TimeProgram program(profile, unit, budget_bytes);
  if (program.table_bytes() > max_planner_bytes) {
    throw PlannerMemoryError("eager planner: the table needs " +
                             text::integer(program.table_bytes()) + " bytes, over the cap of " +
                             text::integer(max_planner_bytes) + "; lower {slots}");
  }
  program.solve();
  if (!program.feasible()) return least;  // rounding lost the few plans that fit
  out.regions = program.plan();
  out.evaluation = evaluate(profile, out.regions);
  out.unit_bytes = unit;
  return out;
}

}  // namespace remat::eager
