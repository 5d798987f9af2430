// Exhaustive search over every schedule of a chain, for the tests: Dijkstra on the states
// (held set, first-pass frontier, next backward) with unit actions (forward one layer keeping or
// consuming its input, backward, free), under a cap on held bytes. Exponential: n <= 10 or so.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <tuple>
#include <vector>

#include "remat/chain.hpp"

namespace remat::chain::testing {

// The least recompute time of any valid schedule within `budget` bytes; -1 when none exists.
inline double exhaustive_min_time(const ChainProfile& p, std::int64_t budget) {
  const int n = static_cast<int>(p.layers());
  using State = std::tuple<std::uint32_t, int, int>;  // held mask over a_0..a_{n-1}, frontier, next
  std::map<State, double> dist;
  using Entry = std::pair<double, State>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  auto bytes_of = [&](std::uint32_t held) {
    std::int64_t total = 0;
    for (int j = 0; j < n; ++j) {
      if (held >> j & 1) total += p.activation_bytes[static_cast<std::size_t>(j)];
    }
    return total;
  };
  auto push = [&](State s, double d) {
    if (bytes_of(std::get<0>(s)) > budget) return;
    auto it = dist.find(s);
    if (it != dist.end() && it->second <= d) return;
    dist[s] = d;
    queue.push({d, s});
  };
  push({1u, 0, n}, 0);
  while (!queue.empty()) {
    auto [d, s] = queue.top();
    queue.pop();
    if (dist[s] < d) continue;
    auto [held, frontier, next] = s;
    if (next == 0) return d;
    for (int i = 1; i <= n; ++i) {
      if (!(held >> (i - 1) & 1)) continue;
      const double cost = d + (i <= frontier ? p.forward_time[static_cast<std::size_t>(i)] : 0.0);
      const int new_frontier = std::max(frontier, i);
      const std::uint32_t out = i < n ? (1u << i) : 0u;
      if (i == n || !(held >> i & 1)) {
        push({held | out, new_frontier, next}, cost);                       // keep the input
        push({(held & ~(1u << (i - 1))) | out, new_frontier, next}, cost);  // advance in place
      }
    }
    if (frontier == n && (held >> (next - 1) & 1)) push({held, frontier, next - 1}, d);
    for (int j = 0; j < n; ++j) {
      if (held >> j & 1) push({held & ~(1u << j), frontier, next}, d);
    }
  }
  return -1;
}

}  // namespace remat::chain::testing
