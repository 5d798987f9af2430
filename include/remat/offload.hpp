// Keep, recompute or offload: plans for a chain whose layers are checkpointed one at a time
// (auto_checkpoint's blocks, with the model's own code between them), where a layer's saved
// activations, or a region's input, may also be copied to host memory after its forward and
// copied back before its backward.
//
// The model extends eager.hpp's for single-layer regions. Per layer j (saved s_j, output a_j,
// inner = s_j + a_j, last = s_j + a_j if it saves its output else s_j):
//   keep     holds inner (the last layer: last) from its forward to its backward;
//   region   holds a_j while the rest runs; its re-run peaks at last and costs f_j + overhead;
//   option k holds a_j + h_k; its re-run peaks at last + h_k and costs r_k + overhead;
//   offload  holds a_j while the rest runs; s_j is still on the device during layer j+1's
//            forward (the copy out runs beside it; the forward waits for it at that layer's end)
//            and is back from the start of layer j+1's backward (the copy in is prefetched one
//            layer ahead) through its own backward, which peaks at last;
//   offload input (a region whose input moves): a region, and its input a_{j-1}, which only
//            its checkpoint still holds, leaves the device at the end of layer j+1's forward
//            (copied out beside it) and is back from the start of layer j+1's backward, in time
//            for j's re-run. Allowed where nothing else of layer j-1 holds a_{j-1}: after a
//            region or another moved input, or after a kept or offloaded layer that does not save
//            its output (an option's cached op outputs may be it). Below full checkpointing's
//            peak, only this choice goes.
// A copy of B_j bytes (s_j, or a_{j-1}) takes T_j = B_j / bandwidth each way, on one copy stream
// per direction, and hides behind the compute it runs beside: the stall is max(0, T_j -
// f_{j+1}) out plus max(0, T_j - W_{j+1}) in, W_{j+1} being layer j+1's backward time plus its
// re-run (a region's or an option's). A layer moves one of the two at most, so the copies of
// consecutive layers fall in disjoint windows and never queue. The last layer is always kept
// (its backward comes first: nothing to hide a copy behind, nothing to free). Host memory holds
// every moved B_j at the end of the forward: their sum must fit host_budget. The peak is the
// input plus the most bytes in use at any layer's forward end or backward; with nothing moved it
// is eager::evaluate's for the same single-layer regions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "remat/eager.hpp"

namespace remat::eager {

struct Transfer {
  double bandwidth = 0;           // bytes per second, each way (> 0 to offload at all)
  std::int64_t host_budget = -1;  // bytes of host memory for offloaded activations; < 0: any
  // Per layer: its backward's compute time; empty: twice its forward time.
  std::vector<double> backward_time = {};
  // Per layer: whether it may be offloaded; empty: every layer but the last. A layer whose
  // saved bytes include storage that stays on the device (auto_checkpoint: an output it saves
  // that the next layer does not take) cannot free them by offloading, so it is not offered.
  std::vector<bool> offloadable = {};
  // Per layer: whether its input may move (kOffloadInput); empty: wherever the model allows.
  // auto_checkpoint allows it where the previous layer's output is all the layer takes.
  std::vector<bool> input_offloadable = {};
};

enum class Action : std::int8_t {
  kKeep = 0,
  kRegion = 1,
  kOption = 2,
  kOffload = 3,
  kOffloadInput = 4,  // a region whose input (the previous layer's output) goes to the host
};

struct LayerChoice {
  Action action = Action::kKeep;
  std::int64_t option = -1;  // with kOption: an index into the layer's options
  bool operator==(const LayerChoice&) const = default;
};

struct OffloadEvaluation {
  std::int64_t peak_bytes = 0;
  double recompute_time = 0;  // re-runs and their region overhead
  double stall_time = 0;      // copy time not hidden behind compute
  double copy_time = 0;       // all copies, out and in
  std::int64_t host_bytes = 0;
  double time() const { return recompute_time + stall_time; }
};

struct OffloadPlan {
  std::vector<LayerChoice> layers;
  OffloadEvaluation evaluation;     // in true bytes and times
  std::int64_t minimum_budget = 0;  // the least peak any plan reaches (every earlier layer
                                    // offloaded or a region, whichever holds less)
  std::int64_t unit_bytes = 0;
};

// Checks `choices` (one per layer; the last kept; options and offload as the model allows;
// InputError("choices", index) otherwise) and returns its peak, times and host bytes.
OffloadEvaluation evaluate_offload(const Profile& profile, const Transfer& transfer,
                                   const std::vector<LayerChoice>& choices);

// The least recompute + stall time whose peak fits budget_bytes and whose host bytes fit the host
// budget: a dynamic program over (layer, device memory in units of ceil(budget / slots), whether
// the previous layer is offloaded[, host memory in units of ceil(host_budget / host_slots)]),
// every size rounded up, so the plan always fits. Below the least peak throws
// InputError("memory_budget") stating it. Requires profile.max_region_layers == 1.
OffloadPlan plan_offload(const Profile& profile, const Transfer& transfer,
                         std::int64_t budget_bytes, std::int64_t slots, std::int64_t host_slots);

}  // namespace remat::eager
