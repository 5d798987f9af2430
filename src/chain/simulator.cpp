// The schedule simulator: the single source of every reported chain figure. Each action costs
// O(1) (a forward over k layers is one step that counts k evaluations), so a schedule of A
// actions on n layers runs in O(A + n) time and O(n) memory.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/text.hpp"
#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {

namespace {

std::string describe_failure(std::int64_t step, const std::string& why) {
  return "step " + text::integer(step) + ": " + why;
}

}  // namespace

InvalidSchedule::InvalidSchedule(std::int64_t step, const std::string& why)
    : std::runtime_error(describe_failure(step, why)), step_(step) {}

std::string to_string(const Action& a) {
  switch (a.kind) {
    case Action::Kind::kForward:
      return "forward " + text::integer(a.first) +
             (a.last != a.first ? ".." + text::integer(a.last) : "") +
             (a.keep_input ? "" : " (consuming input)");
    case Action::Kind::kBackward:
      return "backward " + text::integer(a.first);
    case Action::Kind::kFree:
      return "free a_" + text::integer(a.first);
  }
  return "?";
}

ChainProfile ChainProfile::uniform(std::int64_t layers) {
  ChainProfile profile;
  profile.activation_bytes.assign(static_cast<std::size_t>(layers) + 1, 1);
  profile.forward_time.assign(static_cast<std::size_t>(layers) + 1, 1.0);
  profile.forward_time[0] = 0;
  return profile;
}

void ChainProfile::validate() const {
  if (layers() < 1) throw InputError("layers", std::nullopt, "must list at least one layer");
  if (forward_time.size() != activation_bytes.size()) {
    throw InputError("layers", std::nullopt, "activation sizes and times differ in length");
  }
  if (activation_bytes[0] < 0) throw InputError("input_bytes", std::nullopt, "is negative");
  // Peaks are sums of sizes and recompute times sums of times, a layer run at most n times: past
  // these limits they would wrap (a plan printed far under its true peak) or print as null.
  constexpr std::int64_t kByteLimit = std::int64_t{1} << 60;
  if (activation_bytes[0] > kByteLimit) {
    throw InputError("input_bytes", std::nullopt,
                     "(the first layer's output when not given) is past 2^60 bytes");
  }
  std::int64_t bytes = activation_bytes[0];
  const double time_limit =
      std::numeric_limits<double>::max() / static_cast<double>(activation_bytes.size());
  double time = 0;
  for (std::size_t i = 1; i < activation_bytes.size(); ++i) {
    if (activation_bytes[i] < 0) throw InputError("layers", i - 1, "activation_bytes is negative");
    if (!std::isfinite(forward_time[i]) || forward_time[i] < 0) {
      throw InputError("layers", i - 1, "forward_time must be finite and >= 0");
    }
    bytes += std::min(activation_bytes[i], kByteLimit);
    if (bytes > kByteLimit) {
      throw InputError("layers", i - 1, "activation_bytes: the chain's bytes add up past 2^60");
    }
    time += forward_time[i];
    if (!(time <= time_limit)) {
      throw InputError("layers", i - 1,
                       "forward_time: the chain's times add up past what a schedule's total "
                       "(each layer run up to n times) can hold in a double");
    }
  }
  // The planners price a run of layers as a difference of running sums of times, which errs by
  // about n ulps of the total: a time below that would count as nothing (a layer of time 1 after
  // one of 1e17 did, and its plan recomputed it for free).
  const double error =
      static_cast<double>(layers()) * time * std::numeric_limits<double>::epsilon();
  for (std::size_t i = 1; i < forward_time.size(); ++i) {
    if (forward_time[i] > 0 && error > 1e-3 * forward_time[i]) {
      throw InputError("layers", i - 1,
                       "forward_time " + text::number(forward_time[i]) +
                           " is too small beside the chain's total of " + text::number(time) +
                           ": the planners' sums of times would count it to worse than 0.1%; "
                           "rescale the times or set it to 0");
    }
  }
}

Simulator::Simulator(std::int64_t layers)
    : n_(layers),
      held_(static_cast<std::size_t>(std::max<std::int64_t>(layers, 0)) + 1, 0),
      next_backward_(layers) {
  if (layers < 1) throw InputError("layers", std::nullopt, "must be at least 1");
  hold(0);
  result_.memory = held_count_;
  result_.memory_bytes = held_bytes_;
}

Simulator::Simulator(const ChainProfile& profile) : Simulator(profile.layers()) {
  profile.validate();
  max_bytes_.push_back(profile.activation_bytes);
  for (std::size_t width = 2; width <= profile.activation_bytes.size(); width *= 2) {
    const std::vector<std::int64_t>& below = max_bytes_.back();
    std::vector<std::int64_t> level(profile.activation_bytes.size() - width + 1);
    for (std::size_t i = 0; i < level.size(); ++i)
      level[i] = std::max(below[i], below[i + width / 2]);
    max_bytes_.push_back(std::move(level));
  }
  time_prefix_.assign(profile.forward_time.size(), 0.0);
  for (std::size_t i = 1; i < time_prefix_.size(); ++i) {
    time_prefix_[i] = time_prefix_[i - 1] + profile.forward_time[i];
  }
  held_bytes_ = 0;
  held_count_ = 0;
  held_[0] = 0;
  hold(0);
  result_.memory_bytes = held_bytes_;
}

std::int64_t Simulator::bytes(std::int64_t j) const {
  return max_bytes_.empty() ? 1 : max_bytes_[0][static_cast<std::size_t>(j)];
}

std::int64_t Simulator::largest_bytes(std::int64_t first, std::int64_t last) const {
  if (max_bytes_.empty()) return 1;
  std::size_t level = 0;
  while ((std::size_t{2} << level) <= static_cast<std::size_t>(last - first + 1)) ++level;
  const auto& row = max_bytes_[level];
  return std::max(row[static_cast<std::size_t>(first)],
                  row[static_cast<std::size_t>(last + 1 - (std::int64_t{1} << level))]);
}

double Simulator::time_of(std::int64_t first, std::int64_t last) const {
  if (last < first) return 0;
  if (time_prefix_.empty()) return static_cast<double>(last - first + 1);
  return time_prefix_[static_cast<std::size_t>(last)] -
         time_prefix_[static_cast<std::size_t>(first - 1)];
}

void Simulator::fail(const std::string& why) const {
  throw InvalidSchedule(result_.actions, why);
}

void Simulator::hold(std::int64_t j) {
  held_[static_cast<std::size_t>(j)] = 1;
  if (j < n_) {
    ++held_count_;
    held_bytes_ += bytes(j);
  }
}

void Simulator::drop(std::int64_t j) {
  held_[static_cast<std::size_t>(j)] = 0;
  if (j < n_) {
    --held_count_;
    held_bytes_ -= bytes(j);
  }
}

void Simulator::apply(const Action& a) {
  ++result_.actions;
  // The action's text is built only when a step fails: this loop is the simulator's hot path.
  auto reject = [&](const std::string& why) { fail(to_string(a) + ": " + why); };
  switch (a.kind) {
    case Action::Kind::kForward: {
      if (a.first < 1 || a.last < a.first || a.last > n_) reject("layers out of range");
      if (!held(a.first - 1)) reject("input a_" + text::integer(a.first - 1) + " is not held");
      if (held(a.last)) reject("a_" + text::integer(a.last) + " is already held");
      // While the layers run, one working value (the latest a_k, k < n) is held besides the
      // rest; without keep_input it takes the input's place from the first layer on.
      const std::int64_t base = held_count_ - (a.keep_input ? 0 : 1);
      const std::int64_t base_bytes = held_bytes_ - (a.keep_input ? 0 : bytes(a.first - 1));
      const bool working = a.first < n_;  // a_n is never counted
      result_.memory = std::max(result_.memory, base + (working ? 1 : 0));
      if (working) {
        result_.memory_bytes = std::max(
            result_.memory_bytes, base_bytes + largest_bytes(a.first, std::min(a.last, n_ - 1)));
      }
      const std::int64_t already_last = std::min(a.last, frontier_);
      result_.recompute += std::max<std::int64_t>(0, already_last - a.first + 1);
      result_.recompute_time += time_of(a.first, already_last);
      frontier_ = std::max(frontier_, a.last);
      if (!a.keep_input) drop(a.first - 1);
      hold(a.last);
      break;
    }
    case Action::Kind::kBackward:
      if (a.first < 1 || a.first > n_) reject("layer out of range");
      if (frontier_ < n_) reject("the first forward pass has not reached a_" + text::integer(n_));
      if (a.first != next_backward_) {
        reject("expected backward " + text::integer(next_backward_) + " next");
      }
      if (!held(a.first - 1))
        reject("needs a_" + text::integer(a.first - 1) + ", which is not held");
      --next_backward_;
      break;
    case Action::Kind::kFree:
      if (a.first < 0 || a.first > n_ || !held(a.first)) reject("not held");
      drop(a.first);
      break;
  }
  result_.memory = std::max(result_.memory, held_count_);
  result_.memory_bytes = std::max(result_.memory_bytes, held_bytes_);
}

Simulation Simulator::finish() const {
  if (next_backward_ != 0) {
    throw InvalidSchedule(result_.actions,
                          "schedule ended before backward " + text::integer(next_backward_));
  }
  return result_;
}

}  // namespace remat::chain
