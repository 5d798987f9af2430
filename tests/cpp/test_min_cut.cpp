// min_cut against brute force: on random small graphs, the cut value is the least capacity
// over every source/sink partition, and the sink's side is the intersection of the sink sides
// of all least cuts (the set every maximum flow's residual graph yields).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "remat/errors.hpp"
#include "remat/min_cut.hpp"

namespace remat {
namespace {

struct Brute {
  bool unbounded = false;
  std::int64_t value = 0;
  std::vector<char> sink_side;
};

Brute brute_force(std::size_t n, const std::vector<FlowEdge>& edges, std::uint32_t s,
                  std::uint32_t t) {
  Brute best;
  bool found = false;
  std::vector<char> intersection(n, 1);
  for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (!(mask >> s & 1) || (mask >> t & 1)) continue;  // s on the source side, t not
    bool infinite = false;
    std::int64_t cut = 0;
    for (const FlowEdge& e : edges) {
      if ((mask >> e.tail & 1) && !(mask >> e.head & 1)) {
        if (e.capacity == kUnboundedCapacity) {
          infinite = true;
        } else {
          cut += e.capacity;
        }
      }
    }
    if (infinite) continue;
    if (!found || cut < best.value) {
      found = true;
      best.value = cut;
      intersection.assign(n, 1);
    }
    if (cut == best.value) {
      for (std::uint32_t v = 0; v < n; ++v) intersection[v] &= !(mask >> v & 1);
    }
  }
  best.unbounded = !found;
  best.sink_side = intersection;
  return best;
}

TEST(MinCut, EqualsBruteForceOnRandomGraphs) {
  std::mt19937 rng(11);
  const std::int64_t capacities[] = {kUnboundedCapacity, 0, 1, 2, 3, 5, 8, 1000000};
  int compared = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t n = 2 + rng() % 8;
    std::vector<FlowEdge> edges;
    const std::size_t m = rng() % (3 * n + 1);
    for (std::size_t i = 0; i < m; ++i) {
      const auto u = static_cast<std::uint32_t>(rng() % n);
      const auto v = static_cast<std::uint32_t>(rng() % n);
      if (u != v) edges.push_back({u, v, capacities[rng() % 8]});
    }
    const auto t = static_cast<std::uint32_t>(n - 1);
    const MinCut got = min_cut(n, edges, 0, t);
    const Brute want = brute_force(n, edges, 0, t);
    ASSERT_EQ(got.unbounded, want.unbounded) << "trial " << trial;
    if (want.unbounded) continue;
    ASSERT_EQ(got.value, want.value) << "trial " << trial;
    ASSERT_EQ(got.sink_side, want.sink_side) << "trial " << trial;
    ++compared;
  }
  EXPECT_GT(compared, 1000);
}

TEST(MinCut, ParallelEdgesAddUp) {
  const MinCut cut = min_cut(2, {{0, 1, 2}, {0, 1, 3}}, 0, 1);
  EXPECT_FALSE(cut.unbounded);
  EXPECT_EQ(cut.value, 5);
}

TEST(MinCut, ErrorsNameTheFieldAndIndex) {
  try {
    min_cut(3, {{0, 1, 1}, {1, 7, 1}}, 0, 2);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "edges.head");
    EXPECT_EQ(e.index(), 1u);
  }
  EXPECT_THROW(min_cut(3, {{0, 1, -5}}, 0, 2), InputError);
  EXPECT_THROW(min_cut(3, {}, 1, 1), InputError);
  EXPECT_THROW(min_cut(3, {}, 0, 3), InputError);
  const std::int64_t half = std::int64_t{1} << 52;
  EXPECT_THROW(min_cut(3, {{0, 1, half}, {1, 2, half}, {0, 2, 1}}, 0, 2), InputError);
}

TEST(MinCut, ALongChainDoesNotRecurse) {
  const std::uint32_t n = 200000;
  std::vector<FlowEdge> edges;
  for (std::uint32_t v = 0; v + 1 < n; ++v) edges.push_back({v, v + 1, 1 + v % 3});
  const MinCut cut = min_cut(n, edges, 0, n - 1);
  EXPECT_EQ(cut.value, 1);
  // Every capacity-1 edge is saturated; the last one, into the sink, leaves it alone.
  EXPECT_TRUE(cut.sink_side[n - 1]);
  EXPECT_FALSE(cut.sink_side[n - 2]);
  EXPECT_FALSE(cut.sink_side[0]);
}

}  // namespace
}  // namespace remat
