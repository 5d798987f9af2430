// The `remat` subcommands. Each registers its options on the app and returns the callback that
// runs it; errors propagate as exceptions and main() maps them to messages and exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace remat::cli {

using Command = std::function<void()>;

Command add_solve(CLI::App& app);
Command add_pareto(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_demo(CLI::App& app);
Command add_chain(CLI::App& app);
Command add_estimate(CLI::App& app);
Command add_eager(CLI::App& app);

// Reads FILE, or standard input for "-" or an empty name. Throws InputError("input") when the
// file cannot be read.
std::string read_input(const std::string& path);

}  // namespace remat::cli
