// `remat generate`: writes an instance in the input format of `remat solve`.
#include <iostream>

#include "cli/commands.hpp"
#include "io/json_io.hpp"
#include "remat/generate.hpp"

namespace remat::cli {

Command add_generate(CLI::App& app) {
  auto* sub = app.add_subcommand("generate", "Write a generated instance as JSON");
  auto o = std::make_shared<GenerateOptions>();
  std::string families;
  for (const auto& f : generator_families()) families += (families.empty() ? "" : " | ") + f;
  sub->add_option("--family", o->family, families)->required();
  // Both are unsigned, and CLI11 would wrap a negative value around: refuse it instead.
  const CLI::Validator not_negative(
      [](std::string& text) {
        return text.find('-') == std::string::npos ? std::string() : "must be >= 0, got " + text;
      },
      "");
  sub->add_option("--n", o->n, "Number of items")->required()->check(not_negative);
  sub->add_option("--seed", o->seed, "Random seed")->required()->check(not_negative);
  sub->add_option("--range", o->range, "Pisinger classes: coefficients in [1, R] (default 1000)");
  sub->add_option("--capacity-ratio", o->capacity_ratio,
                  "Pisinger classes: capacity as a share of total weight (default 0.5)");
  sub->add_option("--budget", o->budget, "torch_like: budget as a share of memory (default 0.3)");
  sub->add_option("--budget-quanta", o->budget_quanta,
                  "paper_scale: quantized budget at scale 10^4 (default 1e9)");
  return [=] { std::cout << io::instance_json(generate(*o)) << "\n"; };
}

}  // namespace remat::cli
