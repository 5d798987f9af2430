// `remat demo`: the main job on an embedded instance recorded from torch.compile. Solves it with
// every solver and prints a table and the exact plan.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "io/json_io.hpp"
#include "remat/errors.hpp"
#include "remat/knapsack.hpp"

namespace remat::cli {

namespace {

#include "cli/demo_instance.inc"  // defines kDemoInstance and kDemoSource

std::string human_bytes(std::size_t bytes) {
  char text[32];
  if (bytes < 1024) {
    std::snprintf(text, sizeof text, "%zu B", bytes);
  } else if (bytes < (1u << 20)) {
    std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / 1024);
  } else {
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  }
  return text;
}

std::string item_list(const std::vector<std::size_t>& items,
                      const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i : items) {
    if (!out.empty()) out += ", ";
    out += names.empty() ? std::to_string(i) : names[i];
  }
  return out.empty() ? "(none)" : out;
}

void print_table(const KnapsackProblem& problem, const std::vector<KnapsackResult>& results) {
  std::printf("%-19s %-10s %14s %12s %10s %12s %11s\n", "solver", "status", "saved runtime",
              "memory used", "budget", "time (ms)", "planner peak");
  for (const KnapsackResult& r : results) {
    std::printf("%-19s %-10s %14.6g %12.6g %10.6g %12.3f %11s\n", r.solver.c_str(),
                to_string(r.status).c_str(), r.max_runtime, r.memory_used,
                static_cast<double>(problem.capacity) / problem.scale, r.seconds * 1e3,
                human_bytes(r.planner_peak_bytes).c_str());
  }
}

}  // namespace

Command add_demo(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "demo", "Solve the embedded torch.compile instance (or FILE) with every solver");
  auto file = std::make_shared<std::string>();
  auto time_limit = std::make_shared<std::optional<double>>();
  sub->add_option("file", *file, "Instance JSON file instead of the embedded one");
  sub->add_option("--time-limit", *time_limit,
                  "Seconds for each solver: exact returns its best plan by then, a table solver "
                  "that would take longer is skipped");
  return [=] {
    const io::Instance instance =
        io::read_instance(file->empty() ? std::string(kDemoInstance) : read_input(*file));
    const KnapsackProblem problem = quantize(instance.input);
    std::vector<KnapsackResult> results;
    for (Solver solver : all_solvers()) {
      SolveOptions options;
      options.solver = solver;
      options.time_limit_seconds = *time_limit;
      try {
        results.push_back(solve(problem, options));
      } catch (const ResourceLimitError& e) {  // over the planner-memory cap or the time limit
        std::cout << "(" << to_string(solver)
                  << " skipped: " << word_options(e.what(), OptionStyle::kCommandLine) << ")\n";
      }
    }
    std::cout << "instance: " << (file->empty() ? kDemoSource : *file) << "\n"
              << problem.size() << " candidate ops, budget " << instance.input.max_memory
              << " of normalized activation memory (" << problem.capacity << " quanta)\n\n";
    print_table(problem, results);
    const auto exact = std::find_if(results.begin(), results.end(),
                                    [](const KnapsackResult& r) { return r.solver == "exact"; });
    if (exact == results.end()) {
      std::cout << "\nno exact plan (the exact solver was skipped)\n";
      return;
    }
    const KnapsackResult& best = *exact;
    std::cout << "\n"
              << (best.status == SolveStatus::kOptimal ? "exact" : "best") << " plan: save "
              << best.saved.size() << ", recompute " << best.recomputed.size()
              << "\n  saved:      " << item_list(best.saved, instance.names)
              << "\n  recomputed: " << item_list(best.recomputed, instance.names) << "\n";
  };
}

}  // namespace remat::cli
