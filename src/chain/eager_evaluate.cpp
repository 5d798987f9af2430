// A plan of nested regions checked and evaluated: validate() checks a profile at the edge (every
// field named, with its layer), and evaluate() walks the regions as a tree (a region re-runs its
// forward in its backward, its own regions re-running again in theirs) for the peak of saved
// bytes and the recompute time, the quantities the planner optimizes. O(n + regions) after
// sorting the regions; it rejects overlapping regions, regions longer than max_region_layers and
// options where the model gives them none. Source: torch's non-reentrant checkpoint semantics
// (eager.hpp).
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

// The regions as a tree: children[i] lists the regions directly inside region i (the last
// entry, index regions.size(), stands for the whole chain).
std::vector<std::vector<std::size_t>> nest(const std::vector<Region>& regions,
                                           const Profile& profile) {
  const std::int64_t n = std::ssize(profile.layers);
  const std::int64_t max_region_layers = profile.max_region_layers;
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
    if (r.option != -1) {
      const std::string option = "option " + text::integer(r.option);
      const std::int64_t count = std::ssize(profile.layers[at(r.first)].options);
      if (r.option < 0 || r.option >= count) {
        throw InputError("regions", i,
                         option + " is not one of layer " + text::integer(r.first) + "'s " +
                             text::integer(count) + " options (-1: the whole layer re-runs)");
      }
      if (r.first != r.last) {
        throw InputError("regions", i,
                         option + " on a region of " + text::integer(r.last - r.first + 1) +
                             " layers; options apply to single-layer regions only");
      }
      if (open.back() != root) {
        throw InputError("regions", i,
                         option + " on a region inside region " + text::integer(open.back()) +
                             "; options apply only to regions outside every other region");
      }
      if (r.last == last) {
        throw InputError("regions", i,
                         option +
                             " on the chain's last layer (the end of its segment): its "
                             "re-run would come at once and save nothing");
      }
    }
    children[open.back()].push_back(i);
    open.push_back(i);
  }
  return children;
}

class Evaluator {
 public:
  Evaluator(const Profile& profile, const std::vector<Region>& regions)
      : chain_(profile, 1), regions_(regions), children_(nest(regions, profile)) {}

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
      const std::int64_t option = regions_[*piece->region].option;
      if (option >= 0) {  // a single-layer region (nest() checked): the cache is held throughout
        const std::int64_t held = chain_.held(piece->first, option);
        out.peak_bytes = std::max(out.peak_bytes + kept + held, rerun.peak_bytes + held);
        out.recompute_time += chain_.option_cost(piece->first, option);
        continue;
      }
      out.peak_bytes = std::max(out.peak_bytes + kept, rerun.peak_bytes);
      out.recompute_time += chain_.region_cost(piece->first, piece->last) + rerun.recompute_time;
    }
    return out;
  }

  Chain chain_;
  const std::vector<Region>& regions_;
  std::vector<std::vector<std::size_t>> children_;
};

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
  // A layer runs at most n + 1 times a step (nested regions): past this the predicted recompute
  // time would print as null.
  const double time_limit =
      std::numeric_limits<double>::max() / static_cast<double>(profile.layers.size() + 2);
  double time = 0;
  for (std::size_t i = 0; i < profile.layers.size(); ++i) {
    const Layer& layer = profile.layers[i];
    if (layer.saved_bytes < 0) throw InputError("saved_bytes", i, "must be >= 0");
    if (layer.output_bytes < 0) throw InputError("output_bytes", i, "must be >= 0");
    if (!std::isfinite(layer.forward_time) || layer.forward_time < 0) {
      throw InputError("forward_time", i, "must be finite and >= 0");
    }
    time += layer.forward_time;
    if (!(time <= time_limit)) {
      throw InputError("forward_time", i,
                       "the chain's times add up past what a step's total can hold in a double");
    }
    total += std::min(layer.saved_bytes, kLimit);
    if (total > kLimit) throw InputError("saved_bytes", i, "the chain's bytes add up past 2^60");
    total += std::min(layer.output_bytes, kLimit);
    if (total > kLimit) throw InputError("output_bytes", i, "the chain's bytes add up past 2^60");
    std::int64_t most_held = 0;
    double most_recompute = 0;
    for (std::size_t k = 0; k < layer.options.size(); ++k) {
      const Option& option = layer.options[k];
      const std::string name = "option " + text::integer(static_cast<std::int64_t>(k));
      if (option.held_bytes < 0) throw InputError("options", i, name + ": held_bytes must be >= 0");
      if (!std::isfinite(option.recompute_time) || option.recompute_time < 0) {
        throw InputError("options", i, name + ": recompute_time must be finite and >= 0");
      }
      most_recompute = std::max(most_recompute, option.recompute_time);
      most_held = std::max(most_held, std::min(option.held_bytes, kLimit));
    }
    total += most_held;
    if (total > kLimit) throw InputError("options", i, "the chain's bytes add up past 2^60");
    time += most_recompute;
    if (!(time <= time_limit)) {
      throw InputError("options", i,
                       "the chain's times add up past what a step's total can hold in a double");
    }
  }
}

Evaluation evaluate(const Profile& profile, const std::vector<Region>& regions) {
  validate(profile);
  return Evaluator(profile, regions).run();
}

}  // namespace remat::eager
