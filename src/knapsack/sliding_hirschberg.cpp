// Sliding-window DP with Hirschberg's divide and conquer, the algorithm of arXiv 2608.08740 and
// torch's dp_knapsack_sliding_hirschberg: torch's plan, ties included, whenever torch's plan is
// within the budget, and an exact plan within the budget always.
//
// A segment is (items [lo, hi) of the problem, capacity c). As in torch it splits at
// mid = lo + (hi - lo) / 2, counted over all the problem's items (reduce() settles some of them,
// but they still count, so the splits are torch's). Each half gets one DP row, the best value
// within every capacity up to c. The later half [mid, hi) gets the least capacity b that
// maximizes later[b] + earlier[c - b] (torch.argmax returns the first maximum), the earlier half
// [lo, mid) gets the rest, and both are pushed on an explicit stack. A one-item segment saves its
// item if it fits.
//
// torch gives the earlier half c + 1 - b, one quantum more than the split (capped at W), which
// is how it goes over budget: pytorch/pytorch issue 197871. By induction on segments, a segment's
// plan is worth at least its DP value either way (the later half is worth later[b], the earlier
// one at least earlier[c - b] since rows are nondecreasing), so at the top torch's plan is worth
// at least the optimum, and is optimal whenever it is within W. Hence two passes:
//   1. torch's split, widening included: if the plan is within W it is returned, torch's plan;
//   2. otherwise the same rule with the earlier half given exactly c - b, so every segment stays
//      within its capacity: an optimal plan within W (torch's rule with the split fixed).
// Beyond where the splits fall, the settled items cannot change one: zero-weight ones shift a
// row uniformly, the others never improve one.
//
// Time O(n W) per pass (the halves' work halves at each level), at most two passes, the second
// reusing the first's splits of the segments that end the problem (the top split, the largest,
// among them); memory two rows of W+1 doubles plus O(n) for prefix sums: independent of n in the
// W term. W is the quantized budget; each row is further cut to the total weight of its half.
#include <algorithm>
#include <vector>

#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

namespace {

// dst[i] = max(dst[i], src[i] + v); the ranges never overlap, which lets the compiler vectorize.
void relax_chunk(double* __restrict dst, const double* __restrict src, std::size_t len, double v) {
  for (std::size_t i = 0; i < len; ++i) dst[i] = std::max(dst[i], src[i] + v);
}

// Adds one item of weight w to row[0..cap]. Walks down in chunks no longer than w so that every
// chunk reads only cells below it, which still hold the values without the item.
void add_item(double* row, std::size_t cap, std::size_t w, double v) {
  std::size_t hi = cap + 1;
  while (hi > w) {
    const std::size_t len = std::min(hi - w, w);
    relax_chunk(row + hi - len, row + hi - len - w, len, v);
    hi -= len;
  }
}

void fill_row(const ReducedProblem& p, std::size_t lo, std::size_t hi, std::size_t cap, double* row,
              std::optional<Clock::time_point> deadline) {
  std::fill(row, row + cap + 1, 0.0);
  for (std::size_t k = lo; k < hi; ++k) {
    stop_at_deadline(deadline, "sliding_hirschberg");
    const auto w = static_cast<std::size_t>(p.weight[k]);
    if (w <= cap) add_item(row, cap, w, p.value[k]);
  }
}

struct Segment {
  std::size_t lo, hi;  // positions in the problem, settled items included
  std::int64_t capacity;
};

class SlidingHirschberg {
 public:
  SlidingHirschberg(const ReducedProblem& p, std::optional<Clock::time_point> deadline)
      : p_(p),
        deadline_(deadline),
        prefix_weight_(p.size() + 1, 0),
        earlier_(static_cast<std::size_t>(p.capacity) + 1),
        later_(static_cast<std::size_t>(p.capacity) + 1) {
    for (std::size_t k = 0; k < p.size(); ++k) {
      prefix_weight_[k + 1] = prefix_weight_[k] + p.weight[k];
    }
  }

  // One pass over the segment tree; `widen` gives the earlier half torch's extra quantum.
  // Returns the quantized weight of the plan written to take.
  std::int64_t run(bool widen, std::vector<char>& take) {
    take.assign(p_.size(), 0);
    std::vector<Segment> stack{{0, p_.original_size, p_.capacity}};
    std::size_t spine_step = 0;
    while (!stack.empty()) {
      const Segment s = stack.back();
      stack.pop_back();
      const std::size_t first = reduced_position(s.lo), last = reduced_position(s.hi);
      if (first == last) continue;  // only settled items: nothing to decide
      const std::int64_t total = prefix_weight_[last] - prefix_weight_[first];
      if (total <= s.capacity) {  // every item fits: torch's splits save them all too
        std::fill(take.begin() + first, take.begin() + last, 1);
        continue;
      }
      // A one-item segment that does not fit saves nothing. Without the widening neither does
      // a segment of capacity 0 (reduced items weigh at least 1); with it, a half of such a
      // segment can still get one quantum, as in torch.
      if (s.hi - s.lo == 1 || (!widen && s.capacity == 0)) continue;
      const std::size_t mid = s.lo + (s.hi - s.lo) / 2;
      // Segments that end the problem get the same capacities in both passes (they are later
      // halves all the way up), so the second pass reuses their splits: the top one is the
      // largest of all.
      const bool on_spine = s.hi == p_.original_size;
      std::int64_t b = 0;
      if (on_spine && spine_step < spine_.size()) {
        b = spine_[spine_step];
      } else {
        b = split(s, first, reduced_position(mid), last);
        if (on_spine) spine_.push_back(b);
      }
      spine_step += on_spine;
      const std::int64_t rest = s.capacity - b;
      const std::int64_t earlier_capacity = widen ? std::min(rest + 1, p_.capacity) : rest;
      stack.push_back({s.lo, mid, earlier_capacity});
      stack.push_back({mid, s.hi, b});
    }
    std::int64_t used = 0;
    for (std::size_t k = 0; k < p_.size(); ++k) used += take[k] ? p_.weight[k] : 0;
    return used;
  }

 private:
  // Index of the first reduced item at or after problem position pos.
  std::size_t reduced_position(std::size_t pos) const {
    return static_cast<std::size_t>(
        std::lower_bound(p_.original_index.begin(), p_.original_index.end(), pos) -
        p_.original_index.begin());
  }

  // The least capacity b of the later half [mid, last) that maximizes later[b] +
  // earlier[c - b]. Past its total weight a row is flat, so the least maximizer is
  // at most the later half's total, and the earlier row is read at min(c - b, its total).
  std::int64_t split(const Segment& s, std::size_t first, std::size_t mid, std::size_t last) {
    const std::int64_t c = s.capacity;
    const auto cap_earlier =
        static_cast<std::size_t>(std::min(c, prefix_weight_[mid] - prefix_weight_[first]));
    const auto cap_later =
        static_cast<std::size_t>(std::min(c, prefix_weight_[last] - prefix_weight_[mid]));
    fill_row(p_, first, mid, cap_earlier, earlier_.data(), deadline_);
    fill_row(p_, mid, last, cap_later, later_.data(), deadline_);
    const auto cap = static_cast<std::size_t>(c);
    std::size_t best_b = 0;
    double best_value = -1;
    for (std::size_t b = 0; b <= cap_later; ++b) {
      const double value = later_[b] + earlier_[std::min(cap - b, cap_earlier)];
      if (value > best_value) {  // strict: the first maximum, as torch.argmax
        best_value = value;
        best_b = b;
      }
    }
    return static_cast<std::int64_t>(best_b);
  }

  const ReducedProblem& p_;
  std::optional<Clock::time_point> deadline_;
  std::vector<std::int64_t> prefix_weight_;
  std::vector<double> earlier_, later_;
  std::vector<std::int64_t> spine_;  // splits of the segments [lo, n), in the order they are made
};

}  // namespace

std::size_t sliding_hirschberg_bytes(const ReducedProblem& p) {
  const std::size_t width = static_cast<std::size_t>(p.capacity) + 1;
  // Rows, prefix sums, and the stack and spine, each at most one entry a level (< 64 levels).
  return 2 * width * sizeof(double) + (p.size() + 1) * sizeof(std::int64_t) +
         64 * (sizeof(Segment) + sizeof(std::int64_t));
}

ReducedSolution solve_sliding_hirschberg(const ReducedProblem& p, PlannerMemory& memory,
                                         std::optional<Clock::time_point> deadline) {
  memory.reserve(sliding_hirschberg_bytes(p));
  SlidingHirschberg solver(p, deadline);
  ReducedSolution solution;
  if (solver.run(/*widen=*/true, solution.take) <= p.capacity) return solution;
  solver.run(/*widen=*/false, solution.take);
  return solution;
}

}  // namespace remat::detail
