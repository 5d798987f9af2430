// Optimal checkpointing of a uniform chain: the binomial structure of Griewank's revolve
// (Griewank 1992; Griewank and Walther 2000), re-derived for this project's model in which the
// first forward pass is free and a_0 counts as memory.
//
// Reversal of m layers from a held a_s with k slots (a_s included) obeys
//   R(m, k) = min_j { j + R(m - j, k - 1) + R(j, k) },  R(1, k) = 0,  R(m >= 2, 1) = inf,
// whose solution is R(m, k) = r m - C(k - 1 + r, k) with r the least level such that
// C(k - 1 + r, k - 1) >= m; j = max(1, m - C(k - 2 + r, k - 2), C(k + r - 3, k - 1)) attains the
// minimum. With the first pass free, the chain splits into up to c consecutive segments, the
// i-th reversed with c - i + 1 slots:
//   F(n, c) = min over n = j_1 + ... + j_c of sum_i R(j_i, c - i + 1).
// Every R(., k) is convex with C(k - 2 + r, k - 2) steps of slope r, so F takes the n cheapest
// unit steps: c at cost 0 and C(c - 1 + r, r + 1) at cost r >= 1.
// The closed forms are checked against the recursions (and against an exhaustive search over
// schedules for small n) in tests/cpp/test_chain.cpp.
//
// Time: F in O(levels); a schedule in O(n * levels) to emit its O(n) actions. Memory O(c) for
// the segment lengths plus an O(n) explicit stack.
#include <algorithm>
#include <limits>
#include <vector>

#include "common/text.hpp"
#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {

namespace {

__extension__ using Int128 = __int128;
constexpr std::int64_t kCap = std::numeric_limits<std::int64_t>::max() / 4;

// C(n, k), saturating at kCap.
std::int64_t binomial(std::int64_t n, std::int64_t k) {
  if (k < 0 || n < 0 || k > n) return 0;
  k = std::min(k, n - k);
  Int128 value = 1;
  for (std::int64_t i = 1; i <= k; ++i) {
    value = value * (n - k + i) / i;
    if (value > kCap) return kCap;
  }
  return static_cast<std::int64_t>(value);
}

// Least r with C(k - 1 + r, k - 1) >= m, for k >= 2.
std::int64_t level(std::int64_t m, std::int64_t k) {
  std::int64_t r = 0;
  Int128 reach = 1;  // C(k - 1 + r, r)
  while (reach < m) {
    ++r;
    reach = reach * (k - 1 + r) / r;
  }
  return r;
}

// Optimal first split j of reversing m >= 2 layers with k >= 2 slots.
std::int64_t split(std::int64_t m, std::int64_t k) {
  if (k == 2) return m - 1;
  const std::int64_t r = level(m, k);
  return std::max({std::int64_t{1}, m - binomial(k - 2 + r, k - 2), binomial(k + r - 3, k - 1)});
}

// Segment lengths of the first pass: n unit steps, cheapest first; segment i has c - i + 1 slots.
std::vector<std::int64_t> segment_lengths(std::int64_t n, std::int64_t c) {
  std::vector<std::int64_t> length(static_cast<std::size_t>(c), 0);  // index: slots - 1
  // Levels below the last one are taken whole; find the last level.
  std::int64_t taken = 0, r = 0;
  while (true) {
    const std::int64_t units = r == 0 ? c : binomial(c - 1 + r, r + 1);
    if (taken + units >= n) break;
    taken += units;
    ++r;
  }
  for (std::int64_t k = 1; k <= c; ++k) {
    // Steps of R(., k) below level r: its reach at level r - 1.
    const std::int64_t whole = r == 0 ? 0 : (k == 1 ? 1 : binomial(k - 2 + r, k - 1));
    length[static_cast<std::size_t>(k - 1)] = whole;
  }
  std::int64_t extra = n - taken;
  for (std::int64_t k = c; k >= 1 && extra > 0; --k) {
    const std::int64_t reach = k == 1 ? 1 : binomial(k - 1 + r, k - 1);
    const std::int64_t add = std::min(extra, reach - length[static_cast<std::size_t>(k - 1)]);
    length[static_cast<std::size_t>(k - 1)] += add;
    extra -= add;
  }
  return length;
}

}  // namespace

std::optional<std::int64_t> optimal_recompute(std::int64_t n, std::int64_t c) {
  if (n < 1) throw InputError("layers", std::nullopt, "must be at least 1");
  c = std::min(c, n);
  if (n == 1 && c >= 1) return 0;
  if (c < 2) return std::nullopt;
  std::int64_t taken = 0, cost = 0;
  for (std::int64_t r = 0;; ++r) {
    const std::int64_t units = r == 0 ? c : binomial(c - 1 + r, r + 1);
    const std::int64_t take = std::min(units, n - taken);
    cost += take * r;
    taken += take;
    if (taken == n) return cost;
  }
}

std::int64_t optimal_memory(std::int64_t n, std::int64_t recompute) {
  if (recompute < 0) throw InputError("max_recompute", std::nullopt, "must be >= 0");
  std::int64_t lo = n == 1 ? 1 : 2, hi = n;  // F(n, n) = 0
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (*optimal_recompute(n, mid) <= recompute) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

void schedule_optimal(std::int64_t n, std::int64_t memory, const ActionSink& sink) {
  if (!optimal_recompute(n, memory)) {
    throw InputError("memory", std::nullopt,
                     "no schedule of " + text::integer(n) + " layers fits in " +
                         text::integer(memory) + " activations (the least is 2)");
  }
  const std::int64_t c = std::min(memory, n);
  const std::vector<std::int64_t> length = segment_lengths(n, c);
  struct Task {
    std::int64_t start, layers, slots;
  };
  std::vector<Task> segments;
  std::int64_t position = 0;
  for (std::int64_t k = c; k >= 1; --k) {
    const std::int64_t m = length[static_cast<std::size_t>(k - 1)];
    if (m == 0) continue;
    sink(Action::forward(position + 1, position + m));
    segments.push_back({position, m, k});
    position += m;
  }
  std::vector<Task> stack(segments.begin(), segments.end());  // last segment on top
  while (!stack.empty()) {
    const Task t = stack.back();
    stack.pop_back();
    if (t.layers == 1) {
      sink(Action::backward(t.start + 1));
      sink(Action::free(t.start));
      continue;
    }
    const std::int64_t j = split(t.layers, t.slots);
    sink(Action::forward(t.start + 1, t.start + j));
    stack.push_back({t.start, j, t.slots});
    stack.push_back({t.start + j, t.layers - j, t.slots - 1});
  }
}

}  // namespace remat::chain
