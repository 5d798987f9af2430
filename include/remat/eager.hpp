// Checkpoint plans for eager PyTorch: a chain of layers run through non-reentrant
// torch.utils.checkpoint, nested regions included, under a budget on saved-for-backward bytes.
// A single-layer region outside any other region may instead be checkpointed selectively
// (torch's create_selective_checkpoint_contexts): one of the layer's options keeps some ops'
// outputs as a cache and re-runs only the rest.
//
// The model is torch's, not the textbook's (see chain.hpp for that one). A plain layer keeps
// what autograd saves inside it until its backward runs. A checkpoint region keeps only its
// input; its backward first re-runs the region's forward (which may itself contain regions) and
// then back-propagates through it. Activations that two neighbouring layers save (a layer's
// output is often the next layer's saved input) are one tensor and are counted once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace remat::eager {

// One way to checkpoint a layer selectively, as a single-layer region: the region holds its output
// and `held_bytes` (the ops' outputs the policy keeps) until its re-run, which costs
// `recompute_time` instead of the layer's forward time (plus region_overhead), and peaks at what a
// full single-layer region's re-run needs plus `held_bytes` (the cache, counted as held
// throughout).
struct Option {
  std::int64_t held_bytes = 0;
  double recompute_time = 0;
  bool operator==(const Option&) const = default;
};

struct Layer {
  // Bytes autograd saves inside the layer, not counting its input or output (which the planner
  // counts once, as activations between layers).
  std::int64_t saved_bytes = 0;
  std::int64_t output_bytes = 0;  // its output, the next layer's input
  bool saves_output = false;      // whether its saved tensors include its own output
  double forward_time = 0;        // seconds (any unit: the planner only adds them)
  // Selective checkpoint options, for a single-layer region on this layer outside every other
  // region; empty: the layer re-runs whole when checkpointed.
  std::vector<Option> options = {};
};

struct Profile {
  std::int64_t input_bytes = 0;  // the chain's input, counted as held for the whole step
  std::vector<Layer> layers;
  // Fixed time a region costs besides re-running its layers (torch saves and restores RNG
  // state, builds a frame, runs hooks); it makes the planner prefer fewer, longer regions
  // when layers are cheap.
  double region_overhead = 0;
  // The most layers one region may span; 0: any. 1 is per-layer checkpointing, for layers that
  // are not proven to form a chain (auto_checkpoint wraps each block of an arbitrary model on its
  // own, with the model's own code between blocks, so a region cannot span two of them).
  std::int64_t max_region_layers = 0;
};

// A checkpoint region: layers first..last (0-based, inclusive) at a nesting depth (0: outermost),
// run with option `option` of its layer (an index into Layer::options) or re-run whole (-1).
struct Region {
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::int64_t depth = 0;
  std::int64_t option = -1;
  bool operator==(const Region&) const = default;
};

struct Evaluation {
  std::int64_t peak_bytes = 0;  // peak saved-for-backward bytes over forward and backward
  double recompute_time = 0;    // forward time spent again in backward, nested re-runs included,
                                // plus region_overhead per region
};

struct Plan {
  std::vector<Region> regions;      // pre-order: by first layer, outer regions before inner ones
  Evaluation evaluation;            // of `regions`, in true bytes and times
  std::int64_t minimum_budget = 0;  // the least peak any plan reaches
  std::int64_t no_checkpoint_bytes = 0;  // the peak with no region at all
  std::int64_t unit_bytes = 0;           // the memory discretization the search used
};

// Throws InputError naming the field and index (negative bytes, non-finite or negative time;
// "options" with the layer's index for a bad option).
void validate(const Profile& profile);

// Peak bytes and recompute time of a set of regions. Regions must nest (laminar), lie inside
// the chain, not repeat a parent's layers exactly (or cover the whole chain), and span at most
// max_region_layers layers; an option (>= 0) must be one of its layer's, on a single-layer region
// that lies in no other region and does not end the chain (re-run at once, it would save
// nothing); otherwise InputError("regions", index).
Evaluation evaluate(const Profile& profile, const std::vector<Region>& regions);

// The least peak over all plans, and a plan that reaches it (with no option: an option never
// lowers a peak). O(n^3) time, O(n^2) memory.
Plan minimum_memory_plan(const Profile& profile);

// The least recompute time whose peak fits `budget_bytes`, options included: a dynamic program
// over (segment, memory in units of ceil(budget / slots) bytes) with every size rounded up, so the
// plan always fits. Below minimum_budget throws InputError("memory_budget") stating that minimum;
// when rounding leaves no plan although one fits, returns the minimum-memory plan. Throws
// PlannerMemoryError when the table would exceed max_planner_bytes.
Plan plan(const Profile& profile, std::int64_t budget_bytes, std::int64_t slots,
          std::size_t max_planner_bytes);

// Slots that keep the program's n^3 / 6 x slots steps near 3 x 10^8 (about 0.1 s), 64 to 4096.
std::int64_t default_slots(std::size_t layers);

// --- The whole training step's peak (memory_budget) -------------------------------------------
//
// A training step holds more than the layers' saved activations: parameters, gradients,
// optimizer state, the code around the chain, the backward's working set. A step measured with
// every layer its own region gives, per part of the step, its peak beyond the step's start and
// beyond that plan's activations there ("beside" bytes). A plan's step peak is predicted by
// adding its own activations in each part to those figures.

// Where a part of the step lies: before the chain's forward (pre), in layer `call`'s forward,
// after it (after; the last layer's: the code after the chain, up to the backward), in its
// backward, between its backward and the previous layer's (before), and after the chain's
// backward (done).
enum class StepPartKind { pre, forward, after, backward, before, done };

// Whether a part of this kind belongs to one layer (its `call`): all but pre and done.
constexpr bool has_call(StepPartKind kind) {
  return kind != StepPartKind::pre && kind != StepPartKind::done;
}

struct StepPart {
  StepPartKind kind = StepPartKind::pre;
  std::int64_t call = 0;          // the layer (unused for pre and done)
  std::int64_t beside_bytes = 0;  // the part's measured peak beyond the start and activations
  // A forward part's peak as a region that lets its saves go, beyond the start and what the step
  // held before the call; -1 where not measured (on CUDA). A layer whose forward runs in a region
  // that re-runs whole is predicted by the lower of the two.
  std::int64_t region_beside_bytes = -1;
  bool operator==(const StepPart&) const = default;
};

struct StepFigures {
  std::int64_t start_bytes = 0;    // what the planned step holds as it begins
  std::int64_t outside_bytes = 0;  // the peak of the parts no plan changes (optimizer step)
  std::int64_t margin_bytes = 0;   // measured excess added to every part
  std::vector<StepPart> parts;
};

enum class StepPeakAt {
  outside,  // before or after the chain, or the optimizer step: no plan lowers it
  head,     // the code after the chain, beside the layers' held activations
  blocks,   // a layer's forward or backward
};

struct StepPeak {
  std::int64_t peak_bytes = 0;
  StepPeakAt at = StepPeakAt::outside;
};

// Throws InputError("step.parts", index) for a part whose call lies outside the profile's layers,
// and InputError("step.<field>") for a byte count past 2^60.
void validate(const Profile& profile, const StepFigures& figures);

// The predicted step peak of `regions` (no selective option is finer than this model: an
// option's cache is counted as held from its forward on).
StepPeak predict_step(const Profile& profile, const std::vector<Region>& regions,
                      const StepFigures& figures);

struct StepPlan {
  Plan plan;       // the least-recompute plan whose predicted step peak fits
  StepPeak step;   // its predicted step peak
  StepPeak least;  // the least predicted step peak of any plan
};

// The floor of plan_step: the least-activation plan, or every layer its own region (the measured
// step's plan) where that predicts a lower step; `step` and `least` are its predicted peak.
StepPlan least_step_plan(const Profile& profile, const StepFigures& figures, std::int64_t slots,
                         std::size_t max_planner_bytes);

// The least-recompute plan whose predicted step peak fits `step_budget`: a bisection over the
// activation budgets of plan() (the step peak grows with them, though not strictly). Below the
// least step peak throws InputError("memory_budget") stating it and what sets it.
StepPlan plan_step(const Profile& profile, const StepFigures& figures, std::int64_t step_budget,
                   std::int64_t slots, std::size_t max_planner_bytes);

}  // namespace remat::eager
