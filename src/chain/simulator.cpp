// The schedule simulator: the single source of every reported chain figure. Each action costs
// O(1) (a forward over k layers is one step that counts k evaluations), so a schedule of A
// actions on n layers runs in O(A + n) time and O(n) memory.
#include <algorithm>

#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {

namespace {

std::string describe_failure(std::int64_t step, const std::string& why) {
  return "step " + std::to_string(step) + ": " + why;
}

}  // namespace

InvalidSchedule::InvalidSchedule(std::int64_t step, const std::string& why)
    : std::runtime_error(describe_failure(step, why)), step_(step) {}

std::string to_string(const Action& a) {
  switch (a.kind) {
    case Action::Kind::kForward:
      return "forward " + std::to_string(a.first) +
             (a.last != a.first ? ".." + std::to_string(a.last) : "") +
             (a.keep_input ? "" : " (consuming input)");
    case Action::Kind::kBackward:
      return "backward " + std::to_string(a.first);
    case Action::Kind::kFree:
      return "free a_" + std::to_string(a.first);
  }
  return "?";
}

Simulator::Simulator(std::int64_t layers)
    : n_(layers), held_(static_cast<std::size_t>(layers) + 1, 0), next_backward_(layers) {
  if (layers < 1) throw InputError("layers", std::nullopt, "must be at least 1");
  hold(0);
  result_.memory = held_count_;
}

void Simulator::fail(const std::string& why) const {
  throw InvalidSchedule(result_.actions, why);
}

void Simulator::hold(std::int64_t j) {
  held_[static_cast<std::size_t>(j)] = 1;
  if (j < n_) ++held_count_;
}

void Simulator::drop(std::int64_t j) {
  held_[static_cast<std::size_t>(j)] = 0;
  if (j < n_) --held_count_;
}

void Simulator::apply(const Action& a) {
  ++result_.actions;
  // The action's text is built only when a step fails: this loop is the simulator's hot path.
  auto reject = [&](const std::string& why) { fail(to_string(a) + ": " + why); };
  switch (a.kind) {
    case Action::Kind::kForward: {
      if (a.first < 1 || a.last < a.first || a.last > n_) reject("layers out of range");
      if (!held(a.first - 1)) reject("input a_" + std::to_string(a.first - 1) + " is not held");
      if (held(a.last)) reject("a_" + std::to_string(a.last) + " is already held");
      // While the layers run, one working value (the latest a_k, k < n) is held besides the
      // rest; without keep_input it takes the input's place from the first layer on.
      const std::int64_t base = held_count_ - (a.keep_input ? 0 : 1);
      const std::int64_t working = a.first < n_ ? 1 : 0;
      result_.memory = std::max(result_.memory, base + working);
      const std::int64_t already =
          std::max<std::int64_t>(0, std::min(a.last, frontier_) - a.first + 1);
      result_.recompute += already;
      frontier_ = std::max(frontier_, a.last);
      if (!a.keep_input) drop(a.first - 1);
      hold(a.last);
      break;
    }
    case Action::Kind::kBackward:
      if (frontier_ < n_) reject("the first forward pass has not reached a_" + std::to_string(n_));
      if (a.first != next_backward_) {
        reject("expected backward " + std::to_string(next_backward_) + " next");
      }
      if (!held(a.first - 1))
        reject("needs a_" + std::to_string(a.first - 1) + ", which is not held");
      --next_backward_;
      break;
    case Action::Kind::kFree:
      if (a.first < 0 || a.first > n_ || !held(a.first)) reject("not held");
      drop(a.first);
      break;
  }
  result_.memory = std::max(result_.memory, held_count_);
}

Simulation Simulator::finish() const {
  if (next_backward_ != 0) {
    throw InvalidSchedule(result_.actions,
                          "schedule ended before backward " + std::to_string(next_backward_));
  }
  return result_;
}

}  // namespace remat::chain
