// `remat eager`: the eager (torch.utils.checkpoint) planner on a measured profile, as
// remat.torch.Profile.to_json() writes it. Prints the plan as JSON.
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
  std::optional<std::string> budget;
  std::optional<std::int64_t> slots;
  std::optional<std::string> max_planner_bytes;
};

void run(const EagerOptions& o) {
  const std::optional<std::int64_t> budget = option_bytes(o.budget, "budget");
  const std::size_t cap = planner_cap(o.max_planner_bytes).value_or(default_max_planner_bytes());
  if (o.slots && *o.slots < 1) throw InputError("slots", std::nullopt, "must be >= 1");
  const eager::Profile profile = io::read_eager_profile(read_input(o.profile));
  const auto start = std::chrono::steady_clock::now();
  const eager::Plan plan = [&] {
    if (!budget) return eager::minimum_memory_plan(profile);
    try {
      return eager::plan(profile, *budget,
                         o.slots ? *o.slots : eager::default_slots(profile.layers.size()), cap);
    } catch (const InputError& error) {
      // The core names the Python argument; here the budget is --budget.
      if (error.field() != "memory_budget") throw;
      const std::string said = error.what();
      throw InputError("budget", error.index(), said.substr(said.find(": ") + 2));
    }
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
                  "Saved-activation budget in bytes, e.g. 30MB or 1.5GiB: the least recompute "
                  "that fits (without it: the least-memory plan)");
  sub->add_option("--slots", o->slots, "Memory units of the planner (default: by chain length)");
  sub->add_option("--max-planner-bytes", o->max_planner_bytes,
                  "Cap on the planner's table, e.g. 8GiB (default: half of physical RAM)");
  return [=] { run(*o); };
}

}  // namespace remat::cli
