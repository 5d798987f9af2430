// `remat`: the command-line edge. Exit codes: 0 success, 2 bad input or usage, 3 refused for a
// resource limit (planner memory, or a table solver's work beyond --time-limit), 1 anything
// unexpected. Errors are one line on stderr starting with "error:"; nothing is written to stdout on
// failure (each command prints only after it has succeeded).
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "remat/errors.hpp"

#ifndef REMAT_VERSION
#error "REMAT_VERSION must be defined (CMakeLists.txt passes the project version)"
#endif

namespace {

std::string command_list(const CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

// The first argument, when it is meant as a command but names none.
bool is_unknown_command(const CLI::App& app, const std::string& arg) {
  if (arg.empty() || arg[0] == '-') return false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == arg) return false;
  }
  return true;
}

// CLI11 clamps an integer past its type's range to the largest value (--seed 2^64 read as
// 2^64 - 1): every integer option refuses it instead.
CLI::Validator integer_in_range(bool is_unsigned) {
  return CLI::Validator(
      [is_unsigned](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        if (is_unsigned) {
          std::strtoull(text.c_str(), &end, 0);
        } else {
          std::strtoll(text.c_str(), &end, 0);
        }
        return errno == ERANGE ? "out of range, got " + text : std::string();
      },
      "");
}

void refuse_integers_out_of_range(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    for (CLI::Option* option : sub->get_options({})) {
      const std::string type = option->get_type_name();
      if (type == "INT" || type == "UINT") option->check(integer_in_range(type == "UINT"));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"remat: exact activation-checkpointing planners (knapsack and chain)", "remat"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  app.set_version_flag("--version", std::string("remat ") + REMAT_VERSION);
  std::vector<std::pair<CLI::App*, remat::cli::Command>> commands;
  auto add = [&](remat::cli::Command (*adder)(CLI::App&)) {
    const std::size_t before = app.get_subcommands({}).size();
    remat::cli::Command run = adder(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(run));
  };
  add(remat::cli::add_solve);
  add(remat::cli::add_pareto);
  add(remat::cli::add_generate);
  add(remat::cli::add_demo);
  add(remat::cli::add_chain);
  add(remat::cli::add_estimate);
  add(remat::cli::add_eager);
  refuse_integers_out_of_range(app);
  if (argc < 2) {
    std::cerr << "error: give a command: " << command_list(app)
              << " (remat --help describes them)\n";
    return 2;
  }
  if (is_unknown_command(app, argv[1])) {
    std::cerr << "error: unknown command '" << argv[1] << "'; the commands are "
              << command_list(app) << " (remat --help describes them)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  try {
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) run();
    }
  } catch (const remat::cli::CommandError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const remat::InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const remat::ResourceLimitError& e) {
    std::cerr << "error: " << remat::word_options(e.what(), remat::OptionStyle::kCommandLine)
              << "\n";
    return 3;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "error: internal: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
