// Keep, recompute or offload each layer of a chain checkpointed one layer at a time, under a
// device budget and a host budget (the model: remat/offload.hpp).
//
// A plan's constraints are all of the form prefix(j) + local(j) <= budget, where prefix(j) is
// the input plus what layers before j hold while j runs, and local(j) is what j needs at its
// forward's end and at its backward, plus the previous layer's saved bytes when that layer is
// offloaded (its copy out runs beside j's forward, its copy in beside j's backward). So a dynamic
// program over layers, with the memory left for the rest and whether the previous layer is
// offloaded as its state, is exact:
//
//   V(j, p, m) = min over choices c of layer j, with max(F_c, B_c) + p q_{j-1} <= m, of
//                cost_c + p stall_{j-1}(c) + V(j+1, [c = offload], m - hold_c)
//
// with V(n, p, m) = 0, q_{j-1} the previous layer's saved bytes and stall_{j-1}(c) its copies'
// stall, which depends on c through layer j's forward and backward (re-run included) times. A
// host budget adds the host bytes used so far to the state. The least peak is the same program
// on peaks: G(j, p) = min_c max(max(F_c, B_c) + p q_{j-1}, hold_c + G(j+1, [c = offload])).
//
// Memory is counted in units u = ceil(budget / slots) (host: ceil(host_budget / host_slots)),
// every size rounded up, so every plan found fits the true budgets. Time and memory
// O(n x 2 x (M + 1) x (H + 1) x (3 + K)) and O(n x 2 x (M + 1) x (H + 1)) for M device and H
// host units and K options a layer; the choices are kept as one int16 each for the rebuild.
// Source: the rotor-style program of eager_planner.cpp, restricted to single-layer regions and
// given the offload choice.
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

bool may_offload(const Profile& profile, const Transfer& transfer, std::int64_t j) {
  if (!(transfer.bandwidth > 0) || j + 1 >= std::ssize(profile.layers)) return false;
  return transfer.offloadable.empty() || transfer.offloadable[at(j)];
}

// What choice c of a layer holds while the rest runs, needs at its forward's end and at its
// backward (eager.hpp's model for single-layer regions, and offload.hpp's for offloading).
struct Footprint {
  std::int64_t hold = 0, forward = 0, backward = 0;
};

// One profile in some unit: eager.hpp's chain (sizes and region costs) and each layer's saved
// bytes, the part an offload moves.
class Model {
 public:
  Model(const Profile& profile, const Transfer& transfer, std::int64_t unit)
      : profile_(profile), transfer_(transfer), chain_(profile, unit) {
    for (const Layer& layer : profile.layers) saved_.push_back(round_up(layer.saved_bytes, unit));
  }

  std::int64_t layers() const { return chain_.layers(); }
  std::int64_t input() const { return chain_.input(); }
  std::int64_t saved(std::int64_t j) const { return saved_[at(j)]; }

  Footprint footprint(std::int64_t j, const LayerChoice& c) const {
    const std::int64_t output = chain_.boundary(j), last = chain_.kept(j, j);
    switch (c.action) {
      case Action::kKeep: {
        const std::int64_t kept = chain_.kept(j, layers() - 1);  // its last: `last`
        return {kept, kept, kept};
      }
      case Action::kRegion:
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

  double backward_time(std::int64_t j) const {
    return transfer_.backward_time.empty() ? 2 * profile_.layers[at(j)].forward_time
                                           : transfer_.backward_time[at(j)];
  }
  double rerun_cost(std::int64_t j, const LayerChoice& c) const {
    if (c.action == Action::kRegion) return chain_.region_cost(j, j);
    if (c.action == Action::kOption) return chain_.option_cost(j, c.option);
    return 0;
  }
  double copy_time(std::int64_t j) const {
    return static_cast<double>(profile_.layers[at(j)].saved_bytes) / transfer_.bandwidth;
  }
  // The stall of layer j-1's copies (it is offloaded) when layer j makes choice c.
  double stall_before(std::int64_t j, const LayerChoice& c) const {
    const double copy = copy_time(j - 1);
    const double out = std::max(0.0, copy - profile_.layers[at(j)].forward_time);
    const double in = std::max(0.0, copy - (backward_time(j) + rerun_cost(j, c)));
    return out + in;
  }

  // Every choice layer j may make, in a fixed order (ties keep the first).
  std::vector<LayerChoice> choices(std::int64_t j) const {
    std::vector<LayerChoice> out{{Action::kKeep, -1}};
    if (j + 1 == layers()) return out;
    out.push_back({Action::kRegion, -1});
    for (std::int64_t k = 0; k < std::ssize(profile_.layers[at(j)].options); ++k) {
      out.push_back({Action::kOption, k});
    }
    if (may_offload(profile_, transfer_, j)) out.push_back({Action::kOffload, -1});
    return out;
  }

 private:
  const Profile& profile_;
  const Transfer& transfer_;
  chain_model::Chain chain_;
  std::vector<std::int64_t> saved_;
};

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
  if (!transfer.offloadable.empty() && transfer.offloadable.size() != profile.layers.size()) {
    throw InputError("offloadable", std::nullopt, "must have one entry per layer, or none");
  }
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
    if (c.action == Action::kOffload && !(transfer.bandwidth > 0)) {
      throw InputError("choices", j, "offloads with no bandwidth");
    }
    if (c.action == Action::kOffload &&
        !may_offload(profile, transfer, static_cast<std::int64_t>(j))) {
      throw InputError("choices", j, "offloads a layer that is not offloadable");
    }
  }
}

// The least peak (true bytes) and a plan reaching it, host budget aside.
std::pair<std::int64_t, std::vector<LayerChoice>> least_peak(const Model& model) {
  const std::int64_t n = model.layers();
  // need[j][p]: the least memory layers j.. need, above what earlier layers hold.
  std::vector<std::array<std::int64_t, 2>> need(at(n) + 1, {0, 0});
  std::vector<std::array<LayerChoice, 2>> best(at(n));
  for (std::int64_t j = n - 1; j >= 0; --j) {
    for (int p = 0; p < 2; ++p) {
      if (p == 1 && j == 0) continue;
      const std::int64_t extra = p ? model.saved(j - 1) : 0;
      std::int64_t found = std::numeric_limits<std::int64_t>::max();
      for (const LayerChoice& c : model.choices(j)) {
        const Footprint f = model.footprint(j, c);
        const int next = c.action == Action::kOffload ? 1 : 0;
        const std::int64_t value =
            std::max(std::max(f.forward, f.backward) + extra, f.hold + need[at(j + 1)][at(next)]);
        if (value < found) found = value, best[at(j)][at(p)] = c;
      }
      need[at(j)][at(p)] = found;
    }
  }
  std::vector<LayerChoice> plan;
  int p = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    plan.push_back(best[at(j)][at(p)]);
    p = plan.back().action == Action::kOffload ? 1 : 0;
  }
  return {model.input() + need[0][0], plan};
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
  for (std::int64_t j = 0; j < n; ++j) {
    const LayerChoice& c = choices[at(j)];
    const Footprint f = model.footprint(j, c);
    const bool after_offload = j > 0 && choices[at(j - 1)].action == Action::kOffload;
    const std::int64_t extra = after_offload ? model.saved(j - 1) : 0;
    e.peak_bytes = std::max(e.peak_bytes, prefix + std::max(f.forward, f.backward) + extra);
    prefix += f.hold;
    e.recompute_time += model.rerun_cost(j, c);
    if (after_offload) e.stall_time += model.stall_before(j, c);
    if (c.action == Action::kOffload) {
      e.copy_time += 2 * model.copy_time(j);
      e.host_bytes += profile.layers[at(j)].saved_bytes;
    }
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
  const auto [least, least_plan] = least_peak(exact);
  if (budget_bytes < least) {
    throw InputError("memory_budget", std::nullopt,
                     "below the least peak any plan reaches, " + std::to_string(least) + " bytes");
  }
  const std::int64_t n = exact.layers();
  const std::int64_t unit = std::max<std::int64_t>(1, round_up(budget_bytes, slots));
  const Model model(profile, transfer, unit);
  const std::int64_t memory = budget_bytes / unit - model.input();
  // The host dimension, only when offloading everything could exceed the host budget.
  std::int64_t offloadable_bytes = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    if (may_offload(profile, transfer, j)) offloadable_bytes += profile.layers[at(j)].saved_bytes;
  }
  const bool bounded_host = transfer.host_budget >= 0 && offloadable_bytes > transfer.host_budget;
  const std::int64_t host_unit =
      bounded_host ? std::max<std::int64_t>(1, round_up(transfer.host_budget, host_slots)) : 1;
  const std::int64_t host = bounded_host ? transfer.host_budget / host_unit : 0;
  OffloadPlan out;
  out.minimum_budget = least;
  out.unit_bytes = unit;
  if (memory >= 0) {
    const std::size_t width = at(memory + 1), depth = at(host + 1);
    const std::size_t layer_cells = 2 * depth * width;
    auto cell = [&](int p, std::int64_t h, std::int64_t m) {
      return (at(p) * depth + at(h)) * width + at(m);
    };
    std::vector<double> next(layer_cells, 0.0), current(layer_cells, kInf);
    std::vector<std::int16_t> choice(at(n) * layer_cells, -1);
    for (std::int64_t j = n - 1; j >= 0; --j) {
      const auto options = model.choices(j);
      std::fill(current.begin(), current.end(), kInf);
      for (int p = 0; p < 2; ++p) {
        if (p == 1 && j == 0) continue;
        const std::int64_t extra = p ? model.saved(j - 1) : 0;
        for (std::size_t k = 0; k < options.size(); ++k) {
          const LayerChoice& c = options[k];
          const Footprint f = model.footprint(j, c);
          const std::int64_t need = std::max(f.forward, f.backward) + extra;
          const int q = c.action == Action::kOffload ? 1 : 0;
          const std::int64_t host_need =
              (bounded_host && q) ? round_up(profile.layers[at(j)].saved_bytes, host_unit) : 0;
          const double cost = model.rerun_cost(j, c) + (p ? model.stall_before(j, c) : 0.0);
          for (std::int64_t h = 0; h <= host; ++h) {
            if (h + host_need > host) break;
            for (std::int64_t m = std::max(need, f.hold); m <= memory; ++m) {
              const double rest = next[cell(q, h + host_need, m - f.hold)];
              if (rest == kInf) continue;
              const double value = cost + rest;
              double& slot = current[cell(p, h, m)];
              if (value < slot) {
                slot = value;
                choice[at(j) * layer_cells + cell(p, h, m)] = static_cast<std::int16_t>(k);
              }
            }
          }
        }
      }
      std::swap(next, current);
    }
    if (next[cell(0, 0, memory)] < kInf) {
      int p = 0;
      std::int64_t h = 0, m = memory;
      for (std::int64_t j = 0; j < n; ++j) {
        const auto k = choice[at(j) * layer_cells + cell(p, h, m)];
        const LayerChoice c = model.choices(j)[at(k)];
        out.layers.push_back(c);
        const bool offloaded = c.action == Action::kOffload;
        if (bounded_host && offloaded) {
          h += round_up(profile.layers[at(j)].saved_bytes, host_unit);
        }
        m -= model.footprint(j, c).hold;
        p = offloaded ? 1 : 0;
      }
    }
  }
  if (out.layers.empty()) {
    // Rounding left no plan although the least peak fits: that plan, if the host takes it.
    const OffloadEvaluation e = evaluate_offload(profile, transfer, least_plan);
    if (transfer.host_budget >= 0 && e.host_bytes > transfer.host_budget) {
      throw InputError("host_budget", std::nullopt,
                       "no plan fits both the device budget and the host budget");
    }
    out.layers = least_plan;
  }
  out.evaluation = evaluate_offload(profile, transfer, out.layers);
  return out;
}

}  // namespace remat::eager
