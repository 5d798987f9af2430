// Forced decisions, planner-memory accounting and the helpers several solvers share.
#include "knapsack/reduced_problem.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "common/text.hpp"
#include "remat/errors.hpp"

namespace remat::detail {

ReducedProblem reduce(const KnapsackProblem& problem) {
  ReducedProblem reduced;
  reduced.capacity = problem.capacity;
  reduced.original_size = problem.size();
  // Sized first: small instances are solved by the thousand, and growing three vectors item by
  // item was half of reduce()'s time.
  std::size_t kept = 0, forced = 0;
  for (std::size_t i = 0; i < problem.size(); ++i) {
    if (problem.value[i] <= 0 || problem.weight[i] > problem.capacity) continue;
    ++(problem.weight[i] == 0 ? forced : kept);
  }
  reduced.original_index.reserve(kept);
  reduced.weight.reserve(kept);
  reduced.value.reserve(kept);
  reduced.forced_saved.reserve(forced);
  for (std::size_t i = 0; i < problem.size(); ++i) {
    const std::int64_t w = problem.weight[i];
    const double v = problem.value[i];
    if (v <= 0 || w > problem.capacity) continue;  // never saved
    if (w == 0) {
      reduced.forced_saved.push_back(i);
      continue;
    }
    reduced.original_index.push_back(i);
    reduced.weight.push_back(w);
    reduced.value.push_back(v);
  }
  return reduced;
}

void PlannerMemory::reserve(std::size_t bytes) {
  if (bytes > cap_ || current_ > cap_ - bytes) {
    throw PlannerMemoryError(solver_name_ + " needs more than " + text::integer(cap_) +
                             " bytes of planner memory (had " + text::integer(current_) +
                             ", asked " + text::integer(bytes) + ")");
  }
  current_ += bytes;
  peak_ = std::max(peak_, current_);
}

std::vector<std::uint32_t> order_by_efficiency(const ReducedProblem& p) {
  std::vector<double> efficiency(p.size());
  for (std::size_t k = 0; k < p.size(); ++k) {
    efficiency[k] = p.value[k] / static_cast<double>(p.weight[k]);
  }
  std::vector<std::uint32_t> order(p.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return efficiency[a] > efficiency[b]; });
  return order;
}

double lp_upper_bound(const ReducedProblem& p) {
  double bound = 0;
  std::int64_t room = p.capacity;
  for (std::uint32_t k : order_by_efficiency(p)) {
    if (p.weight[k] <= room) {
      room -= p.weight[k];
      bound += p.value[k];
    } else {
      bound += p.value[k] * (static_cast<double>(room) / static_cast<double>(p.weight[k]));
      break;
    }
  }
  return bound;
}

std::optional<Clock::time_point> deadline_after(Clock::time_point start,
                                                std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  if (!(*seconds > 0)) {
    throw InputError("time_limit", std::nullopt, "must be a positive number of seconds");
  }
  constexpr double kLongestLimit = 3.15e9;
  if (*seconds >= kLongestLimit) return std::nullopt;
  return start +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*seconds));
}

void stop_at_deadline(std::optional<Clock::time_point> deadline, const char* solver) {
  if (deadline && Clock::now() >= *deadline) {
    throw WorkLimitError(std::string(solver) +
                         " passed the time limit before its table was done (a table solver has "
                         "no plan until then); use {solver=exact}, which returns its best plan "
                         "by the limit");
  }
}

}  // namespace remat::detail
