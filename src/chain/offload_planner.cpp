// Keep, recompute or offload each layer of a chain checkpointed one layer at a time, under a
// device budget and a host budget (the model: remat/offload.hpp).
//
// A plan's constraints are all of the form prefix(j) + local(j) <= budget, where prefix(j) is
// the input plus what layers before j hold while j runs, and local(j) is what j needs at its
// forward's end and at its backward. What layer j-1 did changes layer j's moments and what
// layers after j see: an offloaded j-1 adds its saved bytes q_{j-1} to j's moments (its copy
// out runs beside j's forward, its copy in beside j's backward); a j-1 whose input a_{j-2} moved
// gives a_{j-2} back to the prefix from layer j+1 on (its copies run beside j); and only some
// choices of j-1 let layer j's input move (see offload.hpp). So a dynamic program over layers,
// with the memory left for the rest and the previous layer's kind g as its state, is exact:
//
//   V(j, g, m) = min over choices c of layer j allowed after g, with
//                max(F_c, B_c) + extra_g <= m, of
//                cost_c + stall_g(c) + V(j+1, kind(c), m - hold_c + refund_g)
//
// with V(n, g, m) = 0, extra_g = q_{j-1} after an offload, refund_g = a_{j-2} after a moved
// input, and stall_g(c) the previous layer's copies' stall, which depends on c through layer
// j's forward and backward (re-run included) times. A host budget adds the host bytes used so
// far to the state. The least peak is the same program on peaks:
// G(j, g) = min_c max(max(F_c, B_c) + extra_g, hold_c - refund_g + G(j+1, kind(c))).
//
// Memory is counted in units u = ceil(budget / slots) (host: ceil(host_budget / host_slots)),
// every held size rounded up and every refund rounded down, so every plan found fits the true
// budgets. Time and memory O(n x 5 x (M + 1) x (H + 1) x (4 + K)) and
// O(n x 5 x (M + 1) x (H + 1)) for M device and H host units and K options a layer; the
// choices are kept as one int16 each for the rebuild.
// Source: the rotor-style program of eager_planner.cpp, restricted to single-layer regions and
// given the offload choices.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "chain/eager_chain.hpp"
#include "remat/errors.hpp"
#include "remat/offload.hpp"

namespace remat::eager {

namespace {

using chain_model::at;
using chain_model::kInf;
using chain_model::round_up;

// The previous layer's kind, as the program's state: what it lets and makes layer j do.
enum Kind : int { kKept = 0, kWhole = 1, kCached = 2, kMovedSaved = 3, kMovedInput = 4 };
constexpr int kKinds = 5;

Kind kind_of(const LayerChoice& c) {
  switch (c.action) {
    case Action::kKeep:
      return kKept;
    case Action::kRegion:
      return kWhole;
    case Action::kOption:
      return kCached;
    case Action::kOffload:
      return kMovedSaved;
    case Action::kOffloadInput:
      return kMovedInput;
  }
  return kKept;
}

// Whether layer j can follow a layer of kind g at all (layer 0 follows the chain's input; a
// moved input needs a layer before the one that moved it).
bool possible(std::int64_t j, int g) {
  return j == 0 ? g == kKept : (j > 1 || g != kMovedInput);
}

bool may_offload(const Profile& profile, const Transfer& transfer, std::int64_t j) {
  if (!(transfer.bandwidth > 0) || j + 1 >= std::ssize(profile.layers)) return false;
  return transfer.offloadable.empty() || transfer.offloadable[at(j)];
}

// Whether layer j may run as a region whose input (layer j-1's output) goes to host memory,
// after a layer j-1 of kind g: only where nothing else of j-1 holds that output on the device
// (a region or a moved input; a kept or offloaded layer that does not save its output; not an
// option, whose cached op outputs may be it).
bool may_offload_input(const Profile& profile, const Transfer& transfer, std::int64_t j, int g) {
  if (!(transfer.bandwidth > 0) || j < 1 || j + 1 >= std::ssize(profile.layers)) return false;
  if (!transfer.input_offloadable.empty() && !transfer.input_offloadable[at(j)]) return false;
  if (g == kWhole || g == kMovedInput) return true;
  return (g == kKept || g == kMovedSaved) && !profile.layers[at(j - 1)].saves_output;
}

// What choice c of a layer holds while the rest runs, needs at its forward's end and at its
// backward (eager.hpp's model for single-layer regions, and offload.hpp's for offloading).
struct Footprint {
  std::int64_t hold = 0, forward = 0, backward = 0;
};

// One profile in some unit: eager.hpp's chain (sizes and region costs), each layer's saved
// bytes (what an offload moves) and its output rounded down (what a moved input gives back).
class Model {
 public:
  Model(const Profile& profile, const Transfer& transfer, std::int64_t unit)
      : profile_(profile), transfer_(transfer), chain_(profile, unit) {
    for (const Layer& layer : profile.layers) {
      saved_.push_back(round_up(layer.saved_bytes, unit));
      output_down_.push_back(layer.output_bytes / unit);
    }
  }

  std::int64_t layers() const { return chain_.layers(); }
  std::int64_t input() const { return chain_.input(); }

  Footprint footprint(std::int64_t j, const LayerChoice& c) const {
    const std::int64_t output = chain_.boundary(j), last = chain_.kept(j, j);
    switch (c.action) {
      case Action::kKeep: {
        const std::int64_t kept = chain_.kept(j, layers() - 1);  // its last: `last`
        return {kept, kept, kept};
      }
      case Action::kRegion:
      case Action::kOffloadInput:
        return {output, output, last};
      case Action::kOption: {
        const std::int64_t h = chain_.held(j, c.option);
        return {output + h, output + h, last + h};
      }
      case Action::kOffload:
        return {output, chain_.kept(j, j + 1), last};
    }
    return {};
  }
  // What layer j's moments carry of layer j-1 (of kind g), and what leaves the prefix after j.
  std::int64_t extra(std::int64_t j, int g) const {
    return g == kMovedSaved ? saved_[at(j - 1)] : 0;
  }
  std::int64_t refund(std::int64_t j, int g) const {
    return g == kMovedInput ? output_down_[at(j - 2)] : 0;
  }

  double backward_time(std::int64_t j) const {
    return transfer_.backward_time.empty() ? 2 * profile_.layers[at(j)].forward_time
                                           : transfer_.backward_time[at(j)];
  }
  double rerun_cost(std::int64_t j, const LayerChoice& c) const {
    if (c.action == Action::kRegion || c.action == Action::kOffloadInput) {
      return chain_.region_cost(j, j);
    }
    if (c.action == Action::kOption) return chain_.option_cost(j, c.option);
    return 0;
  }
  // The true bytes layer j's choice c moves to the host (each way).
  std::int64_t moved(std::int64_t j, const LayerChoice& c) const {
    if (c.action == Action::kOffload) return profile_.layers[at(j)].saved_bytes;
    if (c.action == Action::kOffloadInput) return profile_.layers[at(j - 1)].output_bytes;
    return 0;
  }
  // The stall of layer j-1's copies (of kind g) when layer j makes choice c: they run beside
  // j's forward (out) and beside j's backward and re-run (in).
  double stall_before(std::int64_t j, int g, const LayerChoice& c) const {
    std::int64_t bytes = 0;
    if (g == kMovedSaved) bytes = profile_.layers[at(j - 1)].saved_bytes;
    if (g == kMovedInput) bytes = profile_.layers[at(j - 2)].output_bytes;
    if (bytes == 0) return 0.0;
    const double copy = static_cast<double>(bytes) / transfer_.bandwidth;
    const double out = std::max(0.0, copy - profile_.layers[at(j)].forward_time);
    const double in = std::max(0.0, copy - (backward_time(j) + rerun_cost(j, c)));
    return out + in;
  }

  // Every choice layer j may make after a layer of kind g, in a fixed order (ties keep the
  // first).
  std::vector<LayerChoice> choices(std::int64_t j, int g) const {
    std::vector<LayerChoice> out{{Action::kKeep, -1}};
    if (j + 1 == layers()) return out;
    out.push_back({Action::kRegion, -1});
    for (std::int64_t k = 0; k < std::ssize(profile_.layers[at(j)].options); ++k) {
      out.push_back({Action::kOption, k});
    }
    if (may_offload(profile_, transfer_, j)) out.push_back({Action::kOffload, -1});
    if (may_offload_input(profile_, transfer_, j, g)) out.push_back({Action::kOffloadInput, -1});
    return out;
  }

 private:
  const Profile& profile_;
  const Transfer& transfer_;
  chain_model::Chain chain_;
  std::vector<std::int64_t> saved_, output_down_;
};

void validate_mask(const Profile& profile, const std::vector<bool>& mask, const char* field) {
  if (!mask.empty() && mask.size() != profile.layers.size()) {
    throw InputError(field, std::nullopt, "must have one entry per layer, or none");
  }
}

void validate_transfer(const Profile& profile, const Transfer& transfer) {
  if (!std::isfinite(transfer.bandwidth) || transfer.bandwidth < 0) {
    throw InputError("bandwidth", std::nullopt, "must be finite and >= 0 (0: no offloading)");
  }
  const auto& backward = transfer.backward_time;
  if (!backward.empty() && backward.size() != profile.layers.size()) {
    throw InputError("backward_time", std::nullopt,
                     "must have one entry per layer, or none (twice the forward time)");
  }
  for (std::size_t j = 0; j < backward.size(); ++j) {
    if (!std::isfinite(backward[j]) || backward[j] < 0) {
      throw InputError("backward_time", j, "must be finite and >= 0");
    }
  }
  validate_mask(profile, transfer.offloadable, "offloadable");
  validate_mask(profile, transfer.input_offloadable, "input_offloadable");
}

void validate_choices(const Profile& profile, const Transfer& transfer,
                      const std::vector<LayerChoice>& choices) {
  const std::size_t n = profile.layers.size();
  if (choices.size() != n) {
    throw InputError("choices", std::nullopt,
                     "must have one entry per layer (" + std::to_string(n) + ")");
  }
  for (std::size_t j = 0; j < n; ++j) {
    const LayerChoice& c = choices[j];
    if (c.action == Action::kKeep) continue;
    if (j + 1 == n) throw InputError("choices", j, "the last layer is always kept");
    if (c.action == Action::kOption &&
        (c.option < 0 || c.option >= std::ssize(profile.layers[j].options))) {
      throw InputError("choices", j, "option " + std::to_string(c.option) + " is not the layer's");
    }
    if ((c.action == Action::kOffload || c.action == Action::kOffloadInput) &&
        !(transfer.bandwidth > 0)) {
      throw InputError("choices", j, "offloads with no bandwidth");
    }
    const auto i = static_cast<std::int64_t>(j);
    if (c.action == Action::kOffload && !may_offload(profile, transfer, i)) {
      throw InputError("choices", j, "offloads a layer that is not offloadable");
    }
    if (c.action == Action::kOffloadInput &&
        !may_offload_input(profile, transfer, i, j == 0 ? kKept : kind_of(choices[j - 1]))) {
      throw InputError("choices", j,
                       "moves an input that the layer before holds on the device (or that is "
                       "not movable)");
    }
  }
}

// The least peak (true bytes) of a plan whose moved bytes fit `host` host units (each choice
// taking host_need(j, c) of them), and a plan reaching it.
template <typename HostNeed>
std::pair<std::int64_t, std::vector<LayerChoice>> least_peak(const Model& model, std::int64_t host,
                                                             const HostNeed& host_need) {
  const std::int64_t n = model.layers();
  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max() / 4;
  const std::size_t depth = at(host + 1), cells = kKinds * depth;
  auto cell = [&](int g, std::int64_t h) { return at(g) * depth + at(h); };
  // need[j][g, h]: the least memory layers j.. need above what earlier layers hold, after a
  // layer of kind g, with h host units used.
  std::vector<std::vector<std::int64_t>> need(at(n) + 1, std::vector<std::int64_t>(cells, kNone));
  std::fill(need[at(n)].begin(), need[at(n)].end(), 0);
  std::vector<std::vector<LayerChoice>> best(at(n), std::vector<LayerChoice>(cells));
  for (std::int64_t j = n - 1; j >= 0; --j) {
    for (int g = 0; g < kKinds; ++g) {
      if (!possible(j, g)) continue;
      for (std::int64_t h = 0; h <= host; ++h) {
        std::int64_t& found = need[at(j)][cell(g, h)];
        for (const LayerChoice& c : model.choices(j, g)) {
          const std::int64_t used = h + host_need(j, c);
          if (used > host) continue;
          const std::int64_t after = need[at(j + 1)][cell(kind_of(c), used)];
          if (after >= kNone) continue;
          const Footprint f = model.footprint(j, c);
          const std::int64_t value = std::max(std::max(f.forward, f.backward) + model.extra(j, g),
                                              f.hold - model.refund(j, g) + after);
          if (value < found) found = value, best[at(j)][cell(g, h)] = c;
        }
      }
    }
  }
  std::vector<LayerChoice> plan;
  int g = kKept;
  std::int64_t h = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    plan.push_back(best[at(j)][cell(g, h)]);
    h += host_need(j, plan.back());
    g = kind_of(plan.back());
  }
  return {model.input() + need[0][cell(kKept, 0)], plan};
}

}  // namespace

OffloadEvaluation evaluate_offload(const Profile& profile, const Transfer& transfer,
                                   const std::vector<LayerChoice>& choices) {
  validate(profile);
  validate_transfer(profile, transfer);
  validate_choices(profile, transfer, choices);
  const Model model(profile, transfer, 1);
  const std::int64_t n = model.layers();
  OffloadEvaluation e;
  std::int64_t prefix = model.input();
  e.peak_bytes = prefix;
  int g = kKept;
  for (std::int64_t j = 0; j < n; ++j) {
    const LayerChoice& c = choices[at(j)];
    const Footprint f = model.footprint(j, c);
    e.peak_bytes =
        std::max(e.peak_bytes, prefix + std::max(f.forward, f.backward) + model.extra(j, g));
    prefix += f.hold - model.refund(j, g);
    e.recompute_time += model.rerun_cost(j, c);
    e.stall_time += model.stall_before(j, g, c);
    const std::int64_t moved = model.moved(j, c);
    if (moved > 0) e.copy_time += 2 * static_cast<double>(moved) / transfer.bandwidth;
    e.host_bytes += moved;
    g = kind_of(c);
  }
  return e;
}

OffloadPlan plan_offload(const Profile& profile, const Transfer& transfer,
                         std::int64_t budget_bytes, std::int64_t slots, std::int64_t host_slots) {
  validate(profile);
  validate_transfer(profile, transfer);
  if (profile.max_region_layers != 1) {
    throw InputError("max_region_layers", std::nullopt,
                     "offload plans checkpoint one layer at a time: must be 1");
  }
  if (profile.layers.empty()) throw InputError("layers", std::nullopt, "the chain has no layers");
  if (slots < 1) throw InputError("slots", std::nullopt, "must be >= 1");
  if (host_slots < 1) throw InputError("host_slots", std::nullopt, "must be >= 1");
  const Model exact(profile, transfer, 1);
  const std::int64_t n = exact.layers();
  // The host dimension, only when moving everything movable could exceed the host budget.
  std::int64_t movable_bytes = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    if (may_offload(profile, transfer, j)) movable_bytes += profile.layers[at(j)].saved_bytes;
    if (j > 0 && may_offload_input(profile, transfer, j, kWhole)) {
      movable_bytes += profile.layers[at(j - 1)].output_bytes;
    }
  }
  const bool bounded_host = transfer.host_budget >= 0 && movable_bytes > transfer.host_budget;
  const std::int64_t host_unit =
      bounded_host ? std::max<std::int64_t>(1, round_up(transfer.host_budget, host_slots)) : 1;
  const std::int64_t host = bounded_host ? transfer.host_budget / host_unit : 0;
  auto host_need = [&](std::int64_t j, const LayerChoice& c) -> std::int64_t {
    return bounded_host ? round_up(exact.moved(j, c), host_unit) : 0;
  };
  const auto [least, least_plan] = least_peak(exact, host, host_need);
  if (budget_bytes < least) {
    throw InputError("memory_budget", std::nullopt,
                     "below the least peak any plan reaches" +
                         std::string(bounded_host ? " within the host budget, " : ", ") +
                         std::to_string(least) + " bytes");
  }
  const std::int64_t unit = std::max<std::int64_t>(1, round_up(budget_bytes, slots));
  const Model model(profile, transfer, unit);
  const std::int64_t memory = budget_bytes / unit - model.input();
  OffloadPlan out;
  out.minimum_budget = least;
  out.unit_bytes = unit;
  if (memory >= 0) {
    const std::size_t width = at(memory + 1), depth = at(host + 1);
    const std::size_t layer_cells = kKinds * depth * width;
    auto cell = [&](int g, std::int64_t h, std::int64_t m) {
      return (at(g) * depth + at(h)) * width + at(m);
    };
    const std::size_t plane = depth * width;
    std::vector<double> next(layer_cells, 0.0), current(layer_cells, kInf);
    std::vector<std::int16_t> choice(at(n) * layer_cells, -1);
    // Relaxes options[first..] of layer j into kind g's plane, after a layer of kind g.
    auto relax = [&](std::int64_t j, int g, const std::vector<LayerChoice>& options,
                     std::size_t first) {
      const std::int64_t extra = model.extra(j, g), refund = model.refund(j, g);
      for (std::size_t k = first; k < options.size(); ++k) {
        const LayerChoice& c = options[k];
        const Footprint f = model.footprint(j, c);
        const std::int64_t need = std::max(f.forward, f.backward) + extra;
        const int q = kind_of(c);
        const std::int64_t host_used = host_need(j, c);
        const double cost = model.rerun_cost(j, c) + model.stall_before(j, g, c);
        // Memory left for the rest: m + shift, capped at `memory` (a refund past the hold
        // cannot leave more than the budget); m starts at `need`, which covers the hold.
        const std::int64_t shift = refund - f.hold;
        const std::int64_t capped_from =
            shift > 0 ? std::max(need, memory - shift + 1) : memory + 1;
        for (std::int64_t h = 0; h + host_used <= host; ++h) {
          const double* rest = &next[cell(q, h + host_used, 0)];
          double* slot = &current[cell(g, h, 0)];
          std::int16_t* made = &choice[at(j) * layer_cells + cell(g, h, 0)];
          const auto index = static_cast<std::int16_t>(k);
          for (std::int64_t m = need; m < capped_from; ++m) {
            const double value = cost + rest[m + shift];
            if (value < slot[m]) slot[m] = value, made[m] = index;
          }
          for (std::int64_t m = std::max(need, capped_from); m <= memory; ++m) {
            const double value = cost + rest[memory];
            if (value < slot[m]) slot[m] = value, made[m] = index;
          }
        }
      }
    };
    for (std::int64_t j = n - 1; j >= 0; --j) {
      std::fill(current.begin(), current.end(), kInf);
      // After a kept layer, a whole region or an option, layer j's moments carry nothing of
      // the layer before, so their planes share one pass over the choices but the moved input,
      // which only some of them allow (it comes last in choices()).
      const auto shared = model.choices(j, kCached);
      int first = -1;
      for (int g : {kKept, kWhole, kCached}) {
        if (!possible(j, g)) continue;
        if (first < 0) {
          relax(j, g, shared, 0);
          first = g;
          continue;
        }
        const auto from = at(first) * plane, to = at(g) * plane, made = at(j) * layer_cells;
        std::copy_n(current.begin() + from, plane, current.begin() + to);
        std::copy_n(choice.begin() + made + from, plane, choice.begin() + made + to);
      }
      for (int g : {kKept, kWhole, kCached}) {
        if (possible(j, g) && may_offload_input(profile, transfer, j, g)) {
          relax(j, g, model.choices(j, g), shared.size());
        }
      }
      for (int g : {kMovedSaved, kMovedInput}) {
        if (possible(j, g)) relax(j, g, model.choices(j, g), 0);
      }
      std::swap(next, current);
    }
    if (next[cell(kKept, 0, memory)] < kInf) {
      int g = kKept;
      std::int64_t h = 0, m = memory;
      for (std::int64_t j = 0; j < n; ++j) {
        const auto k = choice[at(j) * layer_cells + cell(g, h, m)];
        const LayerChoice c = model.choices(j, g)[at(k)];
        out.layers.push_back(c);
        h += host_need(j, c);
        m = std::min(memory, m - model.footprint(j, c).hold + model.refund(j, g));
        g = kind_of(c);
      }
    }
  }
  if (out.layers.empty()) out.layers = least_plan;  // rounding left none; this one fits both
  out.evaluation = evaluate_offload(profile, transfer, out.layers);
  return out;
}

}  // namespace remat::eager
