// The exact budget/runtime trade-off curve by Nemhauser and Ullmann's list algorithm (1969):
// the list of Pareto-optimal (weight, value) plans, extended by one item at a time (merge with a
// shifted copy, drop dominated plans and plans over the budget).
//
// Time O(sum of list lengths) <= O(n min(W, 2^n)); memory two lists of at most W+1 points
// (16 bytes each), accounted against the planner-memory cap. One pass gives every breakpoint. The
// time limit and the caller's stop request are checked between items.
#include <algorithm>
#include <chrono>
#include <string>

#include "common/text.hpp"
#include "knapsack/reduced_problem.hpp"
#include "remat/errors.hpp"
#include "remat/knapsack.hpp"

namespace remat {

namespace {

// Between items: the time limit, and every kStopPeriod the caller's stop request.
class Checkpoints {
 public:
  Checkpoints(std::optional<double> time_limit, const StopRequest& stop,
              detail::Clock::time_point start = detail::Clock::now())
      : deadline_(detail::deadline_after(start, time_limit)),
        time_limit_(time_limit),
        stop_(stop),
        next_stop_(start + kStopPeriod) {}

  void between_items(std::size_t done, std::size_t items) {
    if (!deadline_ && !stop_) return;
    const auto now = detail::Clock::now();
    if (deadline_ && now >= *deadline_) {
      throw WorkLimitError("pareto passed the time limit of " + text::number(*time_limit_) +
                           " s with " + text::integer(static_cast<long long>(done)) + " of " +
                           text::integer(static_cast<long long>(items)) +
                           " items in (a front is exact only once every item is); raise "
                           "{time_limit}, or lower max_memory");
    }
    if (stop_ && now >= next_stop_) {
      next_stop_ = now + kStopPeriod;
      if (stop_()) throw Interrupted();
    }
  }

 private:
  static constexpr std::chrono::milliseconds kStopPeriod{50};
  std::optional<detail::Clock::time_point> deadline_;
  std::optional<double> time_limit_;
  const StopRequest& stop_;
  detail::Clock::time_point next_stop_;
};

}  // namespace

std::vector<ParetoPoint> pareto_front(const KnapsackProblem& problem, std::size_t max_planner_bytes,
                                      std::optional<double> time_limit_seconds,
                                      const StopRequest& stop) {
  Checkpoints checkpoints(time_limit_seconds, stop);
  const detail::ReducedProblem reduced = detail::reduce(problem);
  detail::PlannerMemory memory(max_planner_bytes ? max_planner_bytes : default_max_planner_bytes(),
                               "pareto");
  double forced = 0;
  for (std::size_t i : reduced.forced_saved) forced += problem.value[i];
  std::vector<ParetoPoint> front{{0, forced}}, next;
  std::size_t reserved_points = 0;
  for (std::size_t k = 0; k < reduced.size(); ++k) {
    checkpoints.between_items(k, reduced.size());
    const std::int64_t w = reduced.weight[k];
    const double v = reduced.value[k];
    const std::size_t needed = 2 * front.size();
    if (needed > reserved_points) {
      memory.reserve((needed - reserved_points) * 2 * sizeof(ParetoPoint));
      reserved_points = needed;
      next.reserve(needed);
      front.reserve(needed);
    }
    next.clear();
    std::size_t i = 0, j = 0;
    auto push = [&](ParetoPoint point) {
      if (next.empty() || point.max_runtime > next.back().max_runtime) next.push_back(point);
    };
    while (i < front.size() || j < front.size()) {
      const bool shifted_fits = j < front.size() && front[j].budget_quanta + w <= reduced.capacity;
      if (!shifted_fits) j = front.size();
      const bool take_unchanged =
          j == front.size() ||
          (i < front.size() && (front[i].budget_quanta < front[j].budget_quanta + w ||
                                (front[i].budget_quanta == front[j].budget_quanta + w &&
                                 front[i].max_runtime >= front[j].max_runtime + v)));
      if (take_unchanged) {
        if (i == front.size()) break;
        push(front[i++]);
      } else {
        push({front[j].budget_quanta + w, front[j].max_runtime + v});
        ++j;
      }
    }
    front.swap(next);
  }
  return front;
}

double pareto_value_at(const std::vector<ParetoPoint>& front, std::int64_t budget_quanta) {
  auto it = std::upper_bound(
      front.begin(), front.end(), budget_quanta,
      [](std::int64_t budget, const ParetoPoint& point) { return budget < point.budget_quanta; });
  return it == front.begin() ? 0.0 : std::prev(it)->max_runtime;
}

}  // namespace remat
