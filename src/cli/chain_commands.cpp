// `remat chain` and `remat estimate`. Every reported figure comes from the schedule simulator.
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::cli {

namespace {

using nlohmann::json;

// A printed schedule is built in memory before it is written; longer ones are refused after a
// first, cheap simulation has counted them.
constexpr std::int64_t kMaxPrintedActions = 1'000'000;

json action_json(const chain::Action& a) {
  switch (a.kind) {
    case chain::Action::Kind::kForward:
      return {{"op", "forward"}, {"layers", {a.first, a.last}}, {"keep_input", a.keep_input}};
    case chain::Action::Kind::kBackward:
      return {{"op", "backward"}, {"layer", a.first}};
    case chain::Action::Kind::kFree:
      return {{"op", "free"}, {"activation", a.first}};
  }
  return {};
}

struct ChainOptions {
  std::int64_t layers = 0;
  std::string strategy;
  std::int64_t every = 0;
  std::optional<std::int64_t> memory;
  std::optional<std::int64_t> max_recompute;
  bool schedule = false;
};

}  // namespace

Command add_chain(CLI::App& app) {
  auto* sub = app.add_subcommand("chain", "Plan and simulate checkpointing on a chain of layers");
  auto o = std::make_shared<ChainOptions>();
  sub->add_option("--layers", o->layers, "Number of layers n")->required();
  auto* strategy =
      sub->add_option("--strategy", o->strategy, "store-all | store-first | sqrt | optimal");
  auto* every = sub->add_option("--every", o->every, "A checkpoint every S layers");
  strategy->excludes(every);
  sub->add_option("--memory", o->memory, "optimal: activations that may be held at once");
  sub->add_option("--max-recompute", o->max_recompute,
                  "optimal: least memory whose recompute is at most this");
  sub->add_flag("--schedule", o->schedule, "Also print the action list");
  return [=] {
    if (o->layers < 1) throw InputError("layers", std::nullopt, "must be at least 1");
    if (o->layers > 1'000'000'000) throw InputError("layers", std::nullopt, "must be at most 10^9");
    chain::Strategy strategy;
    std::int64_t parameter = 0;
    if (o->every != 0 || o->strategy.empty()) {
      if (o->every < 1)
        throw InputError("strategy", std::nullopt, "give --strategy or --every S (S >= 1)");
      strategy = chain::Strategy::kEvery;
      parameter = o->every;
    } else {
      strategy = chain::parse_strategy(o->strategy);
    }
    if ((o->memory || o->max_recompute) && strategy != chain::Strategy::kOptimal) {
      throw InputError("memory", std::nullopt,
                       "--memory and --max-recompute apply to --strategy optimal");
    }
    if (strategy == chain::Strategy::kOptimal) {
      if (o->memory.has_value() == o->max_recompute.has_value()) {
        throw InputError("memory", std::nullopt,
                         "--strategy optimal needs exactly one of --memory and --max-recompute");
      }
      parameter = o->memory ? *o->memory : chain::optimal_memory(o->layers, *o->max_recompute);
      if (parameter < 1) throw InputError("memory", std::nullopt, "must be at least 1");
    }
    const auto start = std::chrono::steady_clock::now();
    const chain::Simulation sim = chain::simulate(o->layers, strategy, parameter);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    json actions = json::array();
    if (o->schedule) {
      if (sim.actions > kMaxPrintedActions) {
        throw InputError("schedule", std::nullopt,
                         std::to_string(sim.actions) + " actions are more than the " +
                             std::to_string(kMaxPrintedActions) + " that --schedule prints");
      }
      chain::simulate(o->layers, strategy, parameter,
                      [&](const chain::Action& a) { actions.push_back(action_json(a)); });
    }
    json out{{"layers", o->layers},    {"strategy", chain::to_string(strategy)},
             {"memory", sim.memory},   {"recompute", sim.recompute},
             {"actions", sim.actions}, {"seconds", seconds}};
    if (strategy == chain::Strategy::kEvery) out["every"] = parameter;
    if (strategy == chain::Strategy::kSqrt) out["every"] = chain::sqrt_segment(o->layers);
    if (strategy == chain::Strategy::kOptimal) out["memory_limit"] = parameter;
    if (o->schedule) out["schedule"] = std::move(actions);
    std::cout << out.dump() << "\n";
  };
}

Command add_estimate(CLI::App& app) {
  auto* sub =
      app.add_subcommand("estimate", "Activation memory of a transformer-like model, in GiB");
  auto in = std::make_shared<chain::EstimateInput>();
  auto dtype = std::make_shared<std::string>("bf16");
  sub->add_option("--layers", in->layers, "Layers")->required();
  sub->add_option("--batch", in->batch, "Batch size")->required();
  sub->add_option("--seq", in->seq, "Sequence length")->required();
  sub->add_option("--hidden", in->hidden, "Hidden width")->required();
  sub->add_option("--dtype", *dtype, "bf16 | fp16 | fp32 | fp64 | fp8 | int8 (default bf16)");
  sub->add_option("--tensors-per-layer", in->tensors_per_layer,
                  "Saved tensors per layer (default 1)");
  sub->add_option("--every", in->every, "Checkpoint layer outputs every S layers");
  return [=] {
    chain::EstimateInput input = *in;
    input.dtype_bytes = chain::dtype_size(*dtype);
    const chain::Estimate e = chain::estimate(input);
    json out{{"tensor_gib", e.tensor_gib},
             {"no_checkpoint_gib", e.no_checkpoint_gib},
             {"layers", input.layers},
             {"tensors_per_layer", input.tensors_per_layer},
             {"dtype_bytes", input.dtype_bytes}};
    if (e.checkpoint_gib) {
      out["every"] = *input.every;
      out["checkpoint_gib"] = *e.checkpoint_gib;
      out["checkpoint_layer_outputs"] = *e.checkpoint_tensors;
      out["recompute_layers"] = *e.recompute_layers;
    }
    std::cout << out.dump() << "\n";
  };
}

}  // namespace remat::cli
