// `remat solve` and `remat pareto`.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "io/byte_units.hpp"
#include "io/json_io.hpp"
#include "remat/errors.hpp"
#include "remat/knapsack.hpp"

namespace remat::cli {

std::string read_input(const std::string& path) {
  if (path.empty() || path == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), {});
  }
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw InputError("input", std::nullopt,
                     "'" + path + "' is a directory; give a JSON file, or - for standard input");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw InputError("input", std::nullopt, "cannot open '" + path + "'");
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::optional<std::int64_t> option_bytes(const std::optional<std::string>& text,
                                         const std::string& field) {
  if (!text) return std::nullopt;
  return io::parse_bytes(*text, field);
}

std::optional<std::size_t> planner_cap(const std::optional<std::string>& text) {
  const std::optional<std::int64_t> cap = option_bytes(text, "max_planner_bytes");
  if (!cap) return std::nullopt;
  if (*cap < 1) {
    throw InputError("max_planner_bytes", std::nullopt,
                     "must be at least 1 byte (leave it out for the default, half the RAM)");
  }
  return static_cast<std::size_t>(*cap);
}

namespace {

struct CommonOptions {
  std::string file;
  double scale = kDefaultScale;
  std::optional<std::string> max_planner_bytes;
};

void add_common(CLI::App* sub, CommonOptions& o) {
  sub->add_option("--scale", o.scale, "Quanta per unit of memory (torch uses 10000)");
  sub->add_option("--max-planner-bytes", o.max_planner_bytes,
                  "Cap on the solver's working memory, e.g. 8GiB (default: half of physical RAM)");
  sub->add_option("file", o.file, "Instance JSON file, or - for standard input");
}

std::size_t planner_bytes(const CommonOptions& o) {
  return planner_cap(o.max_planner_bytes).value_or(0);  // 0: the solver's default
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The interpreter that runs the plot: $REMAT_PYTHON, else the python3 installed next to this
// executable (pip puts both in the same scripts directory, so that one has the package), else
// python3 on PATH.
std::string python_interpreter() {
  if (const char* named = std::getenv("REMAT_PYTHON"); named != nullptr && *named != '\0') {
    return named;
  }
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const std::filesystem::path sibling = self.parent_path() / "python3";
    if (std::filesystem::exists(sibling, error)) return sibling.string();
  }
  return "python3";
}

std::string last_line(const std::string& text) {
  const std::size_t end = text.find_last_not_of("\r\n");
  if (end == std::string::npos) return "";
  const std::size_t newline = text.rfind('\n', end);
  const std::size_t start = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(start, end + 1 - start);
}

std::filesystem::path temporary_path(const std::string& suffix) {
  return std::filesystem::temp_directory_path() /
         ("remat-plot-" + std::to_string(::getpid()) + suffix);
}

// A double as text that reads back as the same double (for the plotting child's arguments).
std::string exact_text(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  return text.str();
}

// Plotting lives in the Python package (matplotlib); the instance is validated here first, so
// bad input gets the same error and exit code as without --plot. The child's error line (a format
// matplotlib cannot write, a path that cannot be written) becomes this command's, exit code 2.
// The curve is drawn by `python -m remat pareto --plot`, which gets this command's limits: the
// time limit and the planner-memory cap hold with --plot as without (exit 3 past them).
void plot_through_python(const CommonOptions& o, const std::string& image,
                         const std::optional<double>& time_limit) {
  const std::string text = read_input(o.file);
  quantize([&] {
    io::Instance instance = io::read_instance(text);
    instance.input.scale = o.scale;
    return instance.input;
  }());
  std::string path = o.file;
  std::string temporary;
  if (path.empty() || path == "-") {
    temporary = temporary_path(".json").string();
    std::ofstream(temporary) << text;
    path = temporary;
  }
  const std::string errors = temporary_path(".err").string();
  std::string limits;
  if (time_limit) limits += " --time-limit " + exact_text(*time_limit);
  if (const auto cap = planner_cap(o.max_planner_bytes)) {
    limits += " --max-planner-bytes " + std::to_string(*cap);
  }
  const std::string python = python_interpreter();
  // --plot=FILE and -- before the instance: names that start with '-' stay names.
  const std::string command = shell_quote(python) + " -m remat pareto --plot=" +
                              shell_quote(image) + " --scale " + exact_text(o.scale) + limits +
                              " -- " + shell_quote(path) + " 2>" + shell_quote(errors);
  std::cout.flush();
  const int status = std::system(command.c_str());
  if (!temporary.empty()) std::filesystem::remove(temporary);
  std::string said;
  {
    std::ifstream file(errors);
    std::ostringstream content;
    content << file.rdbuf();
    said = last_line(content.str());
  }
  std::filesystem::remove(errors);
  const int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return;
  const std::string prefix = "error: ";
  if ((code == 2 || code == 3) && said.rfind(prefix, 0) == 0) {
    throw CommandError(code, said.substr(prefix.size()));
  }
  if (code == 127 || said.find("No module named") != std::string::npos) {
    throw CommandError(2, "plot: --plot draws through the remat Python package, and '" + python +
                              " -m remat' cannot run (" + (said.empty() ? "not found" : said) +
                              "); install the package from the remat source tree (pip install ., "
                              "docs/install.md) or set REMAT_PYTHON to an interpreter that has "
                              "it");
  }
  throw CommandError(1, "internal: plot: '" + python + " -m remat pareto --plot' failed (exit " +
                            std::to_string(code) + (said.empty() ? "" : ": " + said) + ")");
}

KnapsackProblem load_problem(const CommonOptions& o) {
  io::Instance instance = io::read_instance(read_input(o.file));
  instance.input.scale = o.scale;
  return quantize(instance.input);
}

}  // namespace

Command add_solve(CLI::App& app) {
  auto* sub = app.add_subcommand("solve", "Solve one knapsack instance; prints a JSON plan");
  auto common = std::make_shared<CommonOptions>();
  auto solver = std::make_shared<std::string>("exact");
  auto time_limit = std::make_shared<std::optional<double>>();
  sub->add_option("--solver", *solver, "exact | sliding_hirschberg | dp | greedy");
  sub->add_option("--time-limit", *time_limit,
                  "Seconds; the exact solver then returns its best plan");
  auto on_memory_limit = std::make_shared<std::string>("best");
  sub->add_option("--on-memory-limit", *on_memory_limit,
                  "best: exact returns its best plan and bound at the planner-memory cap "
                  "(status memory_limit, exit 0); refuse: exit 3 with no plan")
      ->check(CLI::IsMember({"best", "refuse"}));
  add_common(sub, *common);
  return [=] {
    SolveOptions options;
    options.solver = parse_solver(*solver);
    options.time_limit_seconds = *time_limit;
    options.max_planner_bytes = planner_bytes(*common);
    options.on_memory_limit =
        *on_memory_limit == "refuse" ? OnMemoryLimit::kRefuse : OnMemoryLimit::kBest;
    const KnapsackProblem problem = load_problem(*common);
    const KnapsackResult result = solve(problem, options);
    std::cout << io::result_json(result) << "\n";
    if (result.status == SolveStatus::kMemoryLimit) {
      std::cerr << "note: exact reached the planner-memory cap; this is its best plan, and no "
                   "plan saves more than upper_bound (raise --max-planner-bytes to search "
                   "further, or --on-memory-limit refuse to exit 3 instead)\n";
    }
  };
}

Command add_pareto(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "pareto", "Best saved runtime for every budget from 0 to max_memory, in one pass");
  auto common = std::make_shared<CommonOptions>();
  auto points = std::make_shared<std::int64_t>(0);
  auto plot = std::make_shared<std::string>();
  auto time_limit = std::make_shared<std::optional<double>>();
  sub->add_option("--points", *points, "K evenly spaced budgets instead of every breakpoint");
  sub->add_option("--time-limit", *time_limit,
                  "Seconds; past them there is no front (exit 3), as a front is exact only "
                  "once every item is in");
  auto* plot_option = sub->add_option(
      "--plot", *plot,
      "Draw the curve to this image (.png/.svg) through the remat Python package");
  add_common(sub, *common);
  return [=] {
    if (*points < 0 || *points == 1) {
      throw InputError("points", std::nullopt, "must be 0 (every breakpoint) or at least 2");
    }
    // Each point is a line of output: past this the request is a mistake, not a curve.
    constexpr std::int64_t kMaxPoints = 10'000'000;
    if (*points > kMaxPoints) throw InputError("points", std::nullopt, "must be at most 10^7");
    if (plot_option->count() > 0 && plot->empty()) {
      throw InputError("plot", std::nullopt, "needs a file name");
    }
    if (!plot->empty()) {
      if (*points != 0) {
        throw InputError("points", std::nullopt,
                         "--plot draws every breakpoint; give --points or --plot, not both");
      }
      plot_through_python(*common, *plot, *time_limit);
      return;
    }
    const KnapsackProblem problem = load_problem(*common);
    const std::vector<ParetoPoint> front =
        pareto_front(problem, planner_bytes(*common), *time_limit);
    if (*points == 0) {
      std::cout << io::pareto_json(problem, front) << "\n";
      return;
    }
    if (*points - 1 > problem.capacity) {
      throw InputError("points", std::nullopt,
                       "must be at most " + std::to_string(problem.capacity + 1) +
                           ", the distinct budgets 0.." + std::to_string(problem.capacity) +
                           " quanta of max_memory");
    }
    std::vector<ParetoPoint> sampled;
    sampled.reserve(static_cast<std::size_t>(*points));
    for (std::int64_t k = 0; k < *points; ++k) {
      const double share = static_cast<double>(k) / static_cast<double>(*points - 1);
      const auto budget =
          static_cast<std::int64_t>(std::nearbyint(share * static_cast<double>(problem.capacity)));
      sampled.push_back({budget, pareto_value_at(front, budget)});
    }
    std::cout << io::pareto_json(problem, sampled) << "\n";
  };
}

}  // namespace remat::cli
