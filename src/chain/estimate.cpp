// Activation memory of a transformer-like model, as the textbook's problem 12 computes it: one
// saved tensor is batch x seq x hidden x dtype bytes; without checkpointing every layer keeps
// tensors_per_layer of them; with a checkpoint every s layers, the layer outputs held at the peak
// come from the simulator running `every s`, and one layer's internal tensors are live only
// while that layer runs backward.
#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {

std::int64_t dtype_size(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "fp16" || dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "fp32" || dtype == "float32") return 4;
  if (dtype == "fp64" || dtype == "float64") return 8;
  if (dtype == "fp8" || dtype == "int8") return 1;
  throw InputError("dtype", std::nullopt,
                   "unknown dtype '" + dtype + "' (expected bf16, fp16, fp32, fp64, fp8 or int8)");
}

Estimate estimate(const EstimateInput& in) {
  auto positive = [](std::int64_t value, const char* field) {
    if (value < 1) throw InputError(field, std::nullopt, "must be at least 1");
  };
  positive(in.layers, "layers");
  positive(in.batch, "batch");
  positive(in.seq, "seq");
  positive(in.hidden, "hidden");
  positive(in.dtype_bytes, "dtype");
  positive(in.tensors_per_layer, "tensors_per_layer");
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  Estimate out;
  out.tensor_gib = static_cast<double>(in.batch) * static_cast<double>(in.seq) *
                   static_cast<double>(in.hidden) * static_cast<double>(in.dtype_bytes) / kGiB;
  out.no_checkpoint_gib =
      out.tensor_gib * static_cast<double>(in.layers) * static_cast<double>(in.tensors_per_layer);
  if (in.every) {
    positive(*in.every, "every");
    const Simulation sim = simulate(in.layers, Strategy::kEvery, *in.every);
    out.checkpoint_tensors = sim.memory;
    out.recompute_layers = sim.recompute;
    out.checkpoint_gib =
        out.tensor_gib * static_cast<double>(sim.memory + in.tensors_per_layer - 1);
  }
  return out;
}

}  // namespace remat::chain
