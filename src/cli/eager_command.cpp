// `remat eager`: the eager (torch.utils.checkpoint) planner on a measured profile, as
// remat.torch's Measurement.to_json() (or Profile.to_json()) writes it. --budget bounds the
// whole training step's peak, which needs the profile's step figures; --activation-budget the
// layers' saved activations. Prints the plan as JSON.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.hpp"
#include "io/json_io.hpp"
#include "remat/eager.hpp"
#include "remat/errors.hpp"
#include "remat/knapsack.hpp"

namespace remat::cli {

namespace {

using nlohmann::json;

struct EagerOptions {
  std::string profile;
  std::optional<std::string> budget;             // the step's peak
  std::optional<std::string> activation_budget;  // the layers' saved activations
  std::optional<std::int64_t> slots;
  std::optional<std::string> max_planner_bytes;
};

// The core names the Python argument (memory_budget); here it is the option given.
template <typename Planner>
auto named(const char* option, Planner planner) {
  try {
    return planner();
  } catch (const InputError& error) {
    if (error.field() != "memory_budget") throw;
    const std::string said = error.what();
    throw InputError(option, error.index(), said.substr(said.find(": ") + 2));
  }
}

const char* peak_at_name(eager::StepPeakAt at) {
  switch (at) {
    case eager::StepPeakAt::outside:
      return "outside";
    case eager::StepPeakAt::head:
      return "head";
    case eager::StepPeakAt::blocks:
      return "blocks";
  }
  return "";
}

void run(const EagerOptions& o) {
  const std::optional<std::int64_t> budget = option_bytes(o.budget, "budget");
  const std::optional<std::int64_t> activation_budget =
      option_bytes(o.activation_budget, "activation-budget");
  if (budget && activation_budget) {
    throw InputError("budget", std::nullopt,
                     "give --budget (the step's peak) or --activation-budget, not both");
  }
  const std::size_t cap = planner_cap(o.max_planner_bytes).value_or(default_max_planner_bytes());
  if (o.slots && *o.slots < 1) throw InputError("slots", std::nullopt, "must be >= 1");
  const io::EagerInput input = io::read_eager_input(read_input(o.profile));
  const eager::Profile& profile = input.profile;
  if (budget && !input.step) {
    throw InputError("budget", std::nullopt,
                     "the profile has no step figures, so the step's peak cannot be predicted: "
                     "write it with remat.torch.measure(model, ..., optimizer=...).to_json(), or "
                     "give --activation-budget (the layers' saved activations)");
  }
  const std::int64_t slots = o.slots ? *o.slots : eager::default_slots(profile.layers.size());
  const auto start = std::chrono::steady_clock::now();
  std::optional<eager::StepPlan> step_plan;
  const eager::Plan plan = [&] {
    if (budget) {
      step_plan = named(
          "budget", [&] { return eager::plan_step(profile, *input.step, *budget, slots, cap); });
      return step_plan->plan;
    }
    if (!activation_budget) return eager::minimum_memory_plan(profile);
    return named("activation-budget",
                 [&] { return eager::plan(profile, *activation_budget, slots, cap); });
  }();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  json regions = json::array();
  json options = json::array();  // per region: the layer option it runs with, -1 for a whole re-run
  std::vector<std::int64_t> runs(profile.layers.size(), 1);
  for (const auto& r : plan.regions) {
    regions.push_back({r.first, r.last, r.depth});
    options.push_back(r.option);
    for (std::int64_t i = r.first; i <= r.last; ++i) ++runs[static_cast<std::size_t>(i)];
  }
  json out{{"layers", profile.layers.size()},
           {"minimum_budget", plan.minimum_budget},
           {"no_checkpoint_bytes", plan.no_checkpoint_bytes},
           {"peak_bytes", plan.evaluation.peak_bytes},
           {"recompute_time", plan.evaluation.recompute_time},
           {"regions", regions},
           {"options", options},
           {"runs", runs},
           {"unit_bytes", plan.unit_bytes},
           {"seconds", seconds}};
  if (budget) out["budget"] = *budget;
  if (activation_budget) out["activation_budget"] = *activation_budget;
  if (input.step) {
    const eager::StepPeak peak =
        step_plan ? step_plan->step : eager::predict_step(profile, plan.regions, *input.step);
    const eager::StepPeak least =
        step_plan ? step_plan->least
                  : eager::least_step_plan(profile, *input.step, slots, cap).least;
    out["step_peak_bytes"] = peak.peak_bytes;
    out["step_peak_at"] = peak_at_name(peak.at);
    out["least_step_bytes"] = least.peak_bytes;
  }
  std::cout << out.dump() << "\n";
}

}  // namespace

Command add_eager(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "eager", "Plan nested torch.utils.checkpoint regions for a measured eager profile");
  auto o = std::make_shared<EagerOptions>();
  sub->add_option("profile", o->profile,
                  "JSON from remat.torch.Profile.to_json() (FILE, or - for standard input)");
  sub->add_option("--budget", o->budget,
                  "The training step's peak in bytes, e.g. 24GiB: the least recompute whose "
                  "predicted step fits (needs the profile's step figures)");
  sub->add_option("--activation-budget", o->activation_budget,
                  "The layers' saved activations in bytes, e.g. 30MB: the least recompute that "
                  "fits (with neither budget: the least-memory plan)");
  sub->add_option("--slots", o->slots, "Memory units of the planner (default: by chain length)");
  sub->add_option("--max-planner-bytes", o->max_planner_bytes,
                  "Cap on the planner's table, e.g. 8GiB (default: half of physical RAM)");
  return [=] { run(*o); };
}

}  // namespace remat::cli
