// The whole training step's peak for a plan of eager checkpoint regions, and the plan that fits a
// step budget (remat.torch's memory_budget; eager.hpp has the model).
//
// A step measured with every layer its own region gives each part's peak beyond the step's start
// and that plan's activations there. For another plan, each part holds the start, those bytes,
// the plan's own activations in the part, and the margin:
//   forward i:   the input and the layers before i as the plan holds them, plus layer i working
//                (its saved bytes and output); inside a region that re-runs whole, where the
//                part was measured as a region, at most what the layers before the region hold
//                and i's input when the region made it, plus that figure;
//   after i:     what the layers up to i hold once their forward is done;
//   backward i:  the layers before i's outermost region as held, plus every layer of that region
//                from its first to i working (re-run, or kept);
//   before i:    between i's backward and i-1's: the same region's layers up to i-1 working when
//                i-1 is in it, else what the layers before i hold.
// The prediction is the largest over the parts and the parts no plan changes (the optimizer
// step). The floor is the lower of the least-activation plan's step and that of every layer its
// own region (the measured plan). plan_step bisects plan()'s activation budget for the largest
// whose plan's step fits: O(log(no_checkpoint - minimum) x plan()) time, O(n) memory beyond plan().
// Source: remat's Python planner (remat/eager/planning/step_budget.py), which this reproduces for
// the CLI.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "common/text.hpp"
#include "remat/eager.hpp"
#include "remat/errors.hpp"

namespace remat::eager {

namespace {

constexpr std::int64_t kLimit = std::int64_t{1} << 60;

// Bytes each layer holds once the forward is done, under `regions` (Plan.held_after_forward in
// the Python package, offloading aside).
std::vector<std::int64_t> held_after_forward(const Profile& profile,
                                             const std::vector<Region>& regions) {
  const auto n = static_cast<std::int64_t>(profile.layers.size());
  std::vector<std::int64_t> region_last(profile.layers.size(), -1);  // of its outermost region
  std::vector<std::int64_t> cache(profile.layers.size(), 0);
  for (const Region& r : regions) {
    if (r.depth == 0) {
      for (std::int64_t i = r.first; i <= r.last; ++i)
        region_last[static_cast<std::size_t>(i)] = r.last;
    }
    if (r.option >= 0) {
      const Layer& layer = profile.layers[static_cast<std::size_t>(r.first)];
      cache[static_cast<std::size_t>(r.first)] =
          layer.options[static_cast<std::size_t>(r.option)].held_bytes;
    }
  }
  std::vector<std::int64_t> held;
  for (std::int64_t i = 0; i < n; ++i) {
    const Layer& layer = profile.layers[static_cast<std::size_t>(i)];
    const std::int64_t last = region_last[static_cast<std::size_t>(i)];
    if (last >= 0) {
      const std::int64_t output = i == last && i < n - 1 ? layer.output_bytes : 0;
      held.push_back(output + cache[static_cast<std::size_t>(i)]);
    } else if (i < n - 1 || layer.saves_output) {
      held.push_back(layer.saved_bytes + layer.output_bytes);
    } else {
      held.push_back(layer.saved_bytes);
    }
  }
  return held;
}

// A plan's layers' activations in each part of the step.
class Activations {
 public:
  Activations(const Profile& profile, const std::vector<Region>& regions)
      : layers_(profile.layers), first_(profile.layers.size()), whole_(profile.layers.size()) {
    before_.push_back(profile.input_bytes);
    for (const std::int64_t bytes : held_after_forward(profile, regions)) {
      before_.push_back(before_.back() + bytes);
    }
    for (std::size_t i = 0; i < first_.size(); ++i) first_[i] = static_cast<std::int64_t>(i);
    for (const Region& r : regions) {
      if (r.depth != 0) continue;
      for (std::int64_t i = r.first; i <= r.last; ++i) {
        first_[static_cast<std::size_t>(i)] = r.first;
        whole_[static_cast<std::size_t>(i)] = true;
      }
    }
    // A selective region holds ops of its layer's.
    for (const Region& r : regions) {
      if (r.option >= 0) whole_[static_cast<std::size_t>(r.first)] = false;
    }
  }

  // Layer `call`'s activations in its forward inside a region that re-runs whole: what the layers
  // before the region hold, and its input when a layer of the region made it. None: not in one.
  std::optional<std::int64_t> region_forward(std::int64_t call) const {
    const auto i = static_cast<std::size_t>(call);
    if (!whole_[i]) return std::nullopt;
    const std::int64_t first = first_[i];
    const std::int64_t made_inside = call > first ? layers_[i - 1].output_bytes : 0;
    return before_[static_cast<std::size_t>(first)] + made_inside;
  }

  std::int64_t operator()(const StepPart& part) const {
    const auto call = static_cast<std::size_t>(part.call);
    switch (part.kind) {
      case StepPartKind::pre:
      case StepPartKind::done:
        return 0;
      case StepPartKind::forward:
        return working(part.call, part.call);
      case StepPartKind::after:
        return before_[call + 1];
      case StepPartKind::backward:
        return working(first_[call], part.call);
      case StepPartKind::before:
        if (call > 0 && first_[call] == first_[call - 1])
          return working(first_[call], part.call - 1);
        return before_[call];
    }
    return 0;
  }

 private:
  // Layers first..last with their saved bytes and outputs, after what the layers before hold.
  std::int64_t working(std::int64_t first, std::int64_t last) const {
    std::int64_t bytes = before_[static_cast<std::size_t>(first)];
    for (std::int64_t i = first; i <= last; ++i) {
      const Layer& layer = layers_[static_cast<std::size_t>(i)];
      bytes += layer.saved_bytes + layer.output_bytes;
    }
    return bytes;
  }

  const std::vector<Layer>& layers_;
  std::vector<std::int64_t> before_;  // [i]: the input and what layers < i hold
  std::vector<std::int64_t> first_;   // [i]: the first layer of i's outermost region (or i)
  std::vector<bool> whole_;           // [i]: i runs in a region that re-runs whole
};

StepPeakAt where(const StepPart& part, std::int64_t head_call) {
  if (part.kind == StepPartKind::pre || part.kind == StepPartKind::done ||
      (part.kind == StepPartKind::before && part.call == 0)) {
    return StepPeakAt::outside;
  }
  return part.kind == StepPartKind::after && part.call == head_call ? StepPeakAt::head
                                                                    : StepPeakAt::blocks;
}

std::string what_sets(StepPeakAt at) {
  switch (at) {
    case StepPeakAt::outside:
      return "the step outside the blocks (before them, after their backward or at the optimizer "
             "step): parameters, gradients and optimizer state";
    case StepPeakAt::head:
      return "the code after the blocks (the head's logits and the loss) beside the blocks' least "
             "held activations";
    case StepPeakAt::blocks:
      return "the blocks' least activations beside what the step holds while they run "
             "(parameters, gradients, optimizer state, the backward's working set)";
  }
  return "";
}

// Every layer its own region, re-run whole: the plan of the step that measured the figures (and
// HF's checkpointing). A last layer that saves, passes on and takes nothing (the code after the
// chain, as the Python package appends it) gets none. Empty where the rules refuse it.
std::optional<Plan> each_layer_its_region(const Profile& profile, const Plan& least) {
  std::size_t n = profile.layers.size();
  const Layer& last = profile.layers.back();
  if (n > 1 && last.saved_bytes == 0 && last.output_bytes == 0 && last.forward_time == 0 &&
      last.options.empty()) {
    --n;
  }
  Plan out = least;
  out.regions.clear();
  for (std::size_t i = 0; i < n; ++i) {
    out.regions.push_back({static_cast<std::int64_t>(i), static_cast<std::int64_t>(i), 0, -1});
  }
  try {
    out.evaluation = evaluate(profile, out.regions);
  } catch (const InputError&) {
    return std::nullopt;
  }
  return out;
}

}  // namespace

void validate(const Profile& profile, const StepFigures& figures) {
  validate(profile);
  const auto bytes = [](std::int64_t value, const std::string& field,
                        std::optional<std::size_t> index) {
    if (value < 0 || value > kLimit) throw InputError(field, index, "must be 0 to 2^60 bytes");
  };
  bytes(figures.start_bytes, "step.start_bytes", std::nullopt);
  bytes(figures.outside_bytes, "step.outside_bytes", std::nullopt);
  bytes(figures.margin_bytes, "step.margin_bytes", std::nullopt);
  const auto layers = static_cast<std::int64_t>(profile.layers.size());
  for (std::size_t i = 0; i < figures.parts.size(); ++i) {
    const StepPart& part = figures.parts[i];
    bytes(part.beside_bytes, "step.parts", i);
    if (part.region_beside_bytes != -1) {
      bytes(part.region_beside_bytes, "step.parts", i);
      if (part.kind != StepPartKind::forward) {
        throw InputError("step.parts", i, "region_beside_bytes is for forward parts only");
      }
    }
    if (has_call(part.kind) && (part.call < 0 || part.call >= layers)) {
      throw InputError("step.parts", i,
                       "call " + text::integer(part.call) +
                           " is not a layer of the profile (0 to " + text::integer(layers - 1) +
                           ")");
    }
  }
}

StepPeak predict_step(const Profile& profile, const std::vector<Region>& regions,
                      const StepFigures& figures) {
  const Activations activations(profile, regions);
  std::int64_t head_call = -1;  // the last layer's "after": the code after the chain
  for (const StepPart& part : figures.parts) {
    if (part.kind == StepPartKind::after) head_call = std::max(head_call, part.call);
  }
  StepPeak peak{std::max(figures.outside_bytes, figures.start_bytes), StepPeakAt::outside};
  for (const StepPart& part : figures.parts) {
    std::int64_t held =
        figures.start_bytes + part.beside_bytes + activations(part) + figures.margin_bytes;
    if (part.region_beside_bytes >= 0) {
      if (const auto in_region = activations.region_forward(part.call)) {
        // Both bound it: the region lets go of what it saves.
        held = std::min(held, figures.start_bytes + part.region_beside_bytes + *in_region +
                                  figures.margin_bytes);
      }
    }
    if (held > peak.peak_bytes) peak = {held, where(part, head_call)};
  }
  return peak;
}

StepPlan least_step_plan(const Profile& profile, const StepFigures& figures, std::int64_t slots,
                         std::size_t max_planner_bytes) {
  validate(profile, figures);
  const Plan least = plan(profile, plan(profile, kLimit, slots, max_planner_bytes).minimum_budget,
                          slots, max_planner_bytes);
  StepPlan out{least, predict_step(profile, least.regions, figures), {}};
  // Every layer its own region where that predicts a lower step (the step model counts a
  // region's re-run whole, so fewer activations need not mean a lower step).
  if (auto each = each_layer_its_region(profile, least)) {
    const StepPeak peak = predict_step(profile, each->regions, figures);
    if (peak.peak_bytes < out.step.peak_bytes) out = {std::move(*each), peak, {}};
  }
  out.least = out.step;
  return out;
}

StepPlan plan_step(const Profile& profile, const StepFigures& figures, std::int64_t step_budget,
                   std::int64_t slots, std::size_t max_planner_bytes) {
  StepPlan out = least_step_plan(profile, figures, slots, max_planner_bytes);
  if (out.least.peak_bytes > step_budget) {
    throw InputError("memory_budget", std::nullopt,
                     text::bytes(step_budget) + " is below the least peak of this training step, " +
                         text::bytes(out.least.peak_bytes) + ", set by " + what_sets(out.least.at) +
                         " (the step begins holding " + text::bytes(figures.start_bytes) + ")");
  }
  const auto make = [&](std::int64_t activation_budget) {
    return plan(profile, activation_budget, slots, max_planner_bytes);
  };
  const auto fits = [&](const Plan& candidate) {
    return predict_step(profile, candidate.regions, figures).peak_bytes <= step_budget;
  };
  std::int64_t low = out.plan.minimum_budget;
  std::int64_t high = out.plan.no_checkpoint_bytes;
  if (Plan candidate = make(high); fits(candidate)) {
    out.plan = std::move(candidate);
    low = high;
  }
  while (low < high) {
    const std::int64_t middle = low + (high - low + 1) / 2;
    if (Plan candidate = make(middle); fits(candidate)) {
      out.plan = std::move(candidate);
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  out.step = predict_step(profile, out.plan.regions, figures);
  return out;
}

}  // namespace remat::eager
