// The `remat` subcommands. Each registers its options on the app and returns the callback that
// runs it; errors propagate as exceptions and main() maps them to messages and exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
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
// file cannot be read or is a directory.
std::string read_input(const std::string& path);

// A byte count given on the command line ("30MB", "1.5GiB", "2147483648"), read as the Python
// package reads memory budgets (io::parse_bytes); nullopt when the option was not given.
std::optional<std::int64_t> option_bytes(const std::optional<std::string>& text,
                                         const std::string& field);

// --max-planner-bytes as a cap in bytes; nullopt when not given (the default is then half of
// physical memory). A cap given as 0 bytes is refused, not read as "not given".
std::optional<std::size_t> planner_cap(const std::optional<std::string>& text);

// A failure whose message is complete as it is: main() prints "error: " + what() and exits with
// exit_code() (used when a child process has already said what went wrong).
class CommandError : public std::runtime_error {
 public:
  CommandError(int exit_code, const std::string& message)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

}  // namespace remat::cli
