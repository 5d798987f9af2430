// Error types shared by the library and its edges (CLI, Python).
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace remat {

// Bad user input. Names the field and, for arrays, the index, so that every edge can print
// "error: memory[3]: ..." without knowing where the check happened.
class InputError : public std::invalid_argument {
 public:
  InputError(std::string field, std::optional<std::size_t> index, const std::string& detail);
  const std::string& field() const { return field_; }
  std::optional<std::size_t> index() const { return index_; }

 private:
  std::string field_;
  std::optional<std::size_t> index_;
};

// A request refused up front because it would exceed a resource limit. The CLI exits 3.
class ResourceLimitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A solver would need more planner memory than the caller allows. Raised before the allocation,
// never after it failed.
class PlannerMemoryError : public ResourceLimitError {
 public:
  using ResourceLimitError::ResourceLimitError;
};

// A computation could not finish within the caller's time limit: refused up front (a table
// solver's work is known before it starts) or stopped at the limit with no answer to give.
class WorkLimitError : public ResourceLimitError {
 public:
  using ResourceLimitError::ResourceLimitError;
};

// The caller's stop request (a StopRequest that returned true) ended a computation.
class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

// Messages that suggest another setting (the resource-limit errors) name the caller's options in a
// neutral form, "{name}" or "{name=value}": "use {solver=exact} (or raise {max_planner_bytes})".
// Each edge words them its own way before showing the message:
//   kCommandLine  "use --solver exact (or raise --max-planner-bytes)"
//   kPython       "use solver=\"exact\" (or raise max_planner_bytes=)"
// Only lower-case names, digits and underscores inside the braces form an option; any other text
// is left as it is.
enum class OptionStyle { kCommandLine, kPython };
std::string word_options(std::string_view message, OptionStyle style);

}  // namespace remat
