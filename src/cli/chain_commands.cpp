// `remat chain` and `remat estimate`. Every reported figure comes from the schedule simulator.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "common/text.hpp"
#include "io/json_io.hpp"
#include "remat/chain.hpp"
#include "remat/errors.hpp"
#include "remat/knapsack.hpp"

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
  std::string profile;
  std::optional<std::string> budget;
  std::optional<std::int64_t> slots;
  std::optional<std::string> max_planner_bytes;
  std::int64_t layers = 0;
  std::string strategy;
  std::int64_t every = 0;
  std::optional<std::int64_t> memory;
  std::optional<std::int64_t> max_recompute;
  bool schedule = false;
};

// Auto slots: 8 to 512 memory units, as many as keep the planner's table under 256 MiB (and a
// quarter of the cap) and its O(n^3 C / 6) work near 10^10 steps (about 10 s at 1000 layers).
std::int64_t auto_slots(std::int64_t layers, std::int64_t budget, std::size_t cap) {
  const double n = static_cast<double>(layers);
  const double rows = n * (n + 1) / 2 + n;
  const double table_limit = std::min(256.0 * (1 << 20), static_cast<double>(cap) / 4);
  const double by_memory = table_limit / (rows * sizeof(double)) - 1;
  const double by_time = 6e10 / (n * n * n);
  const auto slots =
      static_cast<std::int64_t>(std::clamp(std::min(by_memory, by_time), 8.0, 512.0));
  return std::max<std::int64_t>(1, std::min(slots, budget));
}

void print_chain(json out, const chain::Simulation& sim, double seconds, json actions,
                 bool schedule) {
  out["memory"] = sim.memory;
  out["recompute"] = sim.recompute;
  out["actions"] = sim.actions;
  out["seconds"] = seconds;
  if (schedule) out["schedule"] = std::move(actions);
  std::cout << out.dump() << "\n";
}

// Why the planner counts a number of units other than the --slots asked for.
std::string slots_note(std::int64_t requested, std::int64_t budget,
                       const chain::ProfilePlan& plan) {
  const std::string asked = std::to_string(requested) + " slots requested; ";
  const std::string unit = text::bytes(plan.unit_bytes);
  if (plan.slots < requested) {
    return asked + std::to_string(plan.slots) + " units of " + unit +
           ", the sizes' greatest common divisor, already plan exactly in bytes, and more units "
           "would not change the plan";
  }
  return asked + "units of floor(" + std::to_string(budget) + " / " + std::to_string(requested) +
         ") = " + unit + ", of which the budget holds " + std::to_string(plan.slots);
}

void run_profile(const ChainOptions& o) {
  const std::optional<std::int64_t> budget = option_bytes(o.budget, "budget");
  const std::size_t cap = planner_cap(o.max_planner_bytes).value_or(default_max_planner_bytes());
  const chain::ChainProfile profile = io::read_profile(read_input(o.profile));
  profile.validate();
  json actions = json::array();
  const auto collect = [&](const chain::Action& a) { actions.push_back(action_json(a)); };
  const auto start = std::chrono::steady_clock::now();
  json out{{"layers", profile.layers()}};
  chain::Simulation sim;
  if (budget) {
    if (!o.strategy.empty() || o.every != 0 || o.memory || o.max_recompute) {
      throw InputError("budget", std::nullopt,
                       "--budget plans the optimal schedule; drop --strategy, --every, --memory");
    }
    const std::int64_t slots = o.slots ? *o.slots : auto_slots(profile.layers(), *budget, cap);
    const chain::ProfilePlan plan = chain::plan_profile(
        profile, *budget, slots, cap, o.schedule ? chain::ActionSink(collect) : nullptr);
    sim = plan.simulation;
    out["strategy"] = "optimal";
    out["budget"] = *budget;
    out["unit_bytes"] = plan.unit_bytes;
    out["slots"] = plan.slots;
    out["exact"] = plan.exact;
    if (o.slots && plan.slots != *o.slots) out["slots_note"] = slots_note(*o.slots, *budget, plan);
    out["predicted_recompute_time"] = plan.predicted_recompute_time;
  } else {
    if (o.slots) throw InputError("slots", std::nullopt, "applies to --budget");
    chain::Strategy strategy = chain::Strategy::kEvery;
    std::int64_t parameter = o.every;
    if (o.every == 0) {
      if (o.strategy.empty())
        throw InputError("budget", std::nullopt, "give --budget BYTES, --strategy or --every S");
      strategy = chain::parse_strategy(o.strategy);
      if (strategy == chain::Strategy::kOptimal) {
        throw InputError("budget", std::nullopt,
                         "with --profile, the optimal plan takes --budget BYTES");
      }
    }
    sim = chain::simulate(profile, strategy, parameter,
                          o.schedule ? chain::ActionSink(collect) : nullptr);
    out["strategy"] = chain::to_string(strategy);
    if (strategy == chain::Strategy::kEvery) out["every"] = parameter;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out["memory_bytes"] = sim.memory_bytes;
  out["recompute_time"] = sim.recompute_time;
  print_chain(std::move(out), sim, seconds, std::move(actions), o.schedule);
}

}  // namespace

Command add_chain(CLI::App& app) {
  auto* sub = app.add_subcommand("chain", "Plan and simulate checkpointing on a chain of layers");
  auto o = std::make_shared<ChainOptions>();
  auto* layers = sub->add_option("--layers", o->layers, "Number of layers n (unit costs)");
  auto* profile = sub->add_option("--profile", o->profile,
                                  "Heterogeneous chain: JSON with input_bytes and layers[]");
  profile->excludes(layers);
  sub->add_option("--budget", o->budget,
                  "With --profile: memory budget in bytes, e.g. 2GiB or 1.5GB (optimal plan)");
  sub->add_option("--slots", o->slots,
                  "With --profile: memory units of floor(budget / slots) bytes, or the sizes' "
                  "common divisor when that is larger (default: up to 512, as the planner-memory "
                  "cap allows)");
  sub->add_option("--max-planner-bytes", o->max_planner_bytes,
                  "Cap on the planner's table, e.g. 8GiB (default: half of physical RAM)");
  auto* strategy =
      sub->add_option("--strategy", o->strategy, "store-all | store-first | sqrt | optimal");
  auto* every = sub->add_option("--every", o->every, "A checkpoint every S layers");
  strategy->excludes(every);
  sub->add_option("--memory", o->memory, "optimal: activations that may be held at once");
  sub->add_option("--max-recompute", o->max_recompute,
                  "optimal: least memory whose recompute is at most this");
  sub->add_flag("--schedule", o->schedule, "Also print the action list");
  return [=] {
    if (!o->profile.empty()) return run_profile(*o);
    if (o->budget || o->slots || o->max_planner_bytes) {
      throw InputError("budget", std::nullopt,
                       "--budget, --slots and --max-planner-bytes apply to --profile");
    }
    if (o->layers < 1)
      throw InputError("layers", std::nullopt, "must be at least 1 (give --layers or --profile)");
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
    json out{{"layers", o->layers}, {"strategy", chain::to_string(strategy)}};
    if (strategy == chain::Strategy::kEvery) out["every"] = parameter;
    if (strategy == chain::Strategy::kSqrt) out["every"] = chain::sqrt_segment(o->layers);
    if (strategy == chain::Strategy::kOptimal) out["memory_limit"] = parameter;
    print_chain(std::move(out), sim, seconds, std::move(actions), o->schedule);
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
