// Minimum s-t cut by Dinic's maximum flow (Dinic 1970): breadth-first levels from the source,
// then blocking flows along level-increasing paths by depth-first search with per-node edge
// cursors, until the sink is out of reach. The sink's side of the cut is what can still reach
// the sink in the residual graph, found by a reverse breadth-first search.
//
// Time O(V^2 E) worst case (far less on the layered graphs of a partitioner); memory O(V + E).
// The partition equals networkx.minimum_cut's, which torch's solve_min_cut takes: both return
// the nodes that can reach the sink in the residual graph of a maximum flow, the same set for
// every maximum flow (Ford and Fulkerson 1962; Picard and Queyranne 1980). Capacities are
// integers here and exact in networkx's floats below 2^53, which the edge checks enforce.
#include "remat/min_cut.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "remat/errors.hpp"

namespace remat {
namespace {

constexpr std::int64_t kExactLimit = std::int64_t{1} << 53;

struct Arc {
  std::uint32_t head;
  std::int64_t residual;
};

class FlowNetwork {
 public:
  FlowNetwork(std::size_t nodes, const std::vector<FlowEdge>& edges, std::int64_t unbounded)
      : first_(nodes + 1, 0), level_(nodes), cursor_(nodes) {
    for (const FlowEdge& e : edges) {
      ++first_[e.tail + 1];
      ++first_[e.head + 1];
    }
    for (std::size_t v = 0; v < nodes; ++v) first_[v + 1] += first_[v];
    arcs_.resize(2 * edges.size());
    partner_.resize(arcs_.size());
    std::vector<std::size_t> next(first_.begin(), first_.end() - 1);
    for (const FlowEdge& e : edges) {
      const std::size_t forward = next[e.tail]++;
      const std::size_t backward = next[e.head]++;
      const std::int64_t capacity = e.capacity == kUnboundedCapacity ? unbounded : e.capacity;
      arcs_[forward] = {e.head, capacity};
      arcs_[backward] = {e.tail, 0};
      partner_[forward] = backward;
      partner_[backward] = forward;
    }
  }

  std::int64_t max_flow(std::uint32_t source, std::uint32_t sink) {
    std::int64_t total = 0;
    while (levels_from(source, sink)) {
      std::copy(first_.begin(), first_.end() - 1, cursor_.begin());
      while (const std::int64_t pushed = augment(source, sink)) total += pushed;
    }
    return total;
  }

  std::vector<char> reaching(std::uint32_t sink) const {
    // Arc u->v with residual > 0 lets u reach v: walk the partners of v's arcs backwards.
    std::vector<char> seen(level_.size(), 0);
    std::vector<std::uint32_t> queue{sink};
    seen[sink] = 1;
    for (std::size_t i = 0; i < queue.size(); ++i) {
      const std::uint32_t v = queue[i];
      for (std::size_t a = first_[v]; a < first_[v + 1]; ++a) {
        const std::uint32_t u = arcs_[a].head;
        if (!seen[u] && arcs_[partner_[a]].residual > 0) {
          seen[u] = 1;
          queue.push_back(u);
        }
      }
    }
    return seen;
  }

 private:
  bool levels_from(std::uint32_t source, std::uint32_t sink) {
    std::fill(level_.begin(), level_.end(), -1);
    std::vector<std::uint32_t> queue{source};
    level_[source] = 0;
    for (std::size_t i = 0; i < queue.size(); ++i) {
      const std::uint32_t u = queue[i];
      for (std::size_t a = first_[u]; a < first_[u + 1]; ++a) {
        if (arcs_[a].residual > 0 && level_[arcs_[a].head] < 0) {
          level_[arcs_[a].head] = level_[u] + 1;
          queue.push_back(arcs_[a].head);
        }
      }
    }
    return level_[sink] >= 0;
  }

  // One augmenting path along increasing levels, iteratively (graphs have thousands of nodes).
  std::int64_t augment(std::uint32_t source, std::uint32_t sink) {
    path_.clear();
    std::uint32_t u = source;
    while (u != sink) {
      bool advanced = false;
      for (std::size_t& a = cursor_[u]; a < first_[u + 1]; ++a) {
        const Arc& arc = arcs_[a];
        if (arc.residual > 0 && level_[arc.head] == level_[u] + 1) {
          path_.push_back(a);
          u = arc.head;
          advanced = true;
          break;
        }
      }
      if (advanced) continue;
      if (path_.empty()) return 0;
      level_[u] = -1;  // a dead end: no path through it in this phase
      u = arcs_[partner_[path_.back()]].head;
      path_.pop_back();
      ++cursor_[u];
    }
    std::int64_t pushed = std::numeric_limits<std::int64_t>::max();
    for (std::size_t a : path_) pushed = std::min(pushed, arcs_[a].residual);
    for (std::size_t a : path_) {
      arcs_[a].residual -= pushed;
      arcs_[partner_[a]].residual += pushed;
    }
    return pushed;
  }

  std::vector<std::size_t> first_;
  std::vector<Arc> arcs_;
  std::vector<std::size_t> partner_;
  std::vector<int> level_;
  std::vector<std::size_t> cursor_;
  std::vector<std::size_t> path_;
};

std::int64_t checked_finite_sum(std::size_t nodes, const std::vector<FlowEdge>& edges) {
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const FlowEdge& e = edges[i];
    if (e.tail >= nodes) throw InputError("edges.tail", i, "node index out of range");
    if (e.head >= nodes) throw InputError("edges.head", i, "node index out of range");
    if (e.capacity == kUnboundedCapacity) continue;
    if (e.capacity < 0) throw InputError("edges.capacity", i, "must be >= 0 or unbounded");
    if (e.capacity > kExactLimit - sum) {
      throw InputError("edges.capacity", i, "the finite capacities sum past 2^53");
    }
    sum += e.capacity;
  }
  return sum;
}

bool unbounded_path(std::size_t nodes, const std::vector<FlowEdge>& edges, std::uint32_t source,
                    std::uint32_t sink) {
  std::vector<std::vector<std::uint32_t>> out(nodes);
  for (const FlowEdge& e : edges) {
    if (e.capacity == kUnboundedCapacity) out[e.tail].push_back(e.head);
  }
  std::vector<char> seen(nodes, 0);
  std::vector<std::uint32_t> stack{source};
  seen[source] = 1;
  while (!stack.empty()) {
    const std::uint32_t u = stack.back();
    stack.pop_back();
    if (u == sink) return true;
    for (std::uint32_t v : out[u]) {
      if (!seen[v]) {
        seen[v] = 1;
        stack.push_back(v);
      }
    }
  }
  return false;
}

}  // namespace

MinCut min_cut(std::size_t nodes, const std::vector<FlowEdge>& edges, std::uint32_t source,
               std::uint32_t sink) {
  if (source >= nodes) throw InputError("source", std::nullopt, "node index out of range");
  if (sink >= nodes) throw InputError("sink", std::nullopt, "node index out of range");
  if (source == sink) throw InputError("sink", std::nullopt, "must differ from the source");
  const std::int64_t finite = checked_finite_sum(nodes, edges);
  MinCut cut;
  if (unbounded_path(nodes, edges, source, sink)) {
    cut.unbounded = true;
    return cut;
  }
  // Larger than any finite cut, so an unbounded edge is never saturated (as networkx does).
  const std::int64_t unbounded = 3 * finite + 1;
  FlowNetwork network(nodes, edges, unbounded);
  cut.value = network.max_flow(source, sink);
  cut.sink_side = network.reaching(sink);
  return cut;
}

}  // namespace remat
