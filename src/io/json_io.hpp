// JSON at the edge: instances in, results out. The core library never sees JSON.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "remat/chain.hpp"
#include "remat/eager.hpp"
#include "remat/generate.hpp"
#include "remat/knapsack.hpp"
#include "remat/problem.hpp"

namespace remat::io {

struct Instance {
  KnapsackInput input;
  std::vector<std::string> names;  // from an optional "names" array; empty when absent or unusable
};

// Parses {"memory": [...], "runtime": [...], "max_memory": x}; other keys are ignored.
// Throws InputError naming the field and index of the first problem.
Instance read_instance(std::string_view text);

// Parses {"input_bytes": b0, "layers": [{"name": ..., "activation_bytes": b, "forward_time": t}]};
// input_bytes defaults to the first layer's activation_bytes. Throws InputError naming
// layers[i].field.
chain::ChainProfile read_profile(std::string_view text);

// Parses an eager profile, as remat.torch.Profile.to_json() writes it: {"input_bytes": b,
// "region_overhead": s, "layers": [{"name", "saved_bytes", "output_bytes", "saves_output",
// "forward_time"}]}. region_overhead and saves_output are optional (0, false).
eager::Profile read_eager_profile(std::string_view text);

// An eager profile with the figures of a measured training step, when it has them ("step":
// {"start_bytes", "outside_bytes", "margin_bytes", "parts": [{"part", "call", "beside_bytes",
// "region_beside_bytes"}]},
// as remat.torch's Measurement.to_json() writes it): what plans to the step's peak.
struct EagerInput {
  eager::Profile profile;
  std::optional<eager::StepFigures> step;
};
EagerInput read_eager_input(std::string_view text);

std::string instance_json(const GeneratedInstance& instance);
std::string result_json(const KnapsackResult& result);
std::string pareto_json(const KnapsackProblem& problem, const std::vector<ParetoPoint>& points);

}  // namespace remat::io
