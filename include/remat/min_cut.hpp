// Minimum s-t cut of a directed graph with integer capacities, for torch.compile's partitioner
// (remat.compiled predicts each candidate plan's saved values with it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace remat {

// A capacity no cut may cross (networkx's math.inf).
inline constexpr std::int64_t kUnboundedCapacity = -1;

struct FlowEdge {
  std::uint32_t tail = 0;
  std::uint32_t head = 0;
  std::int64_t capacity = 0;  // >= 0, or kUnboundedCapacity
};

struct MinCut {
  // A path of unbounded edges joins the source to the sink: no finite cut exists.
  bool unbounded = false;
  std::int64_t value = 0;  // the maximum flow, which is the cut's capacity
  // Per node: whether it can still reach the sink in the residual graph of a maximum flow.
  // That set is the same for every maximum flow, so the partition (the sink's side: these
  // nodes; the source's side: the rest) does not depend on the algorithm that found the flow.
  std::vector<char> sink_side;
};

// Throws InputError naming the field and index for an endpoint out of range, a negative
// capacity other than kUnboundedCapacity, equal or out-of-range source and sink, or finite
// capacities whose sum exceeds 2^53 (past which a float computation, networkx's, is inexact).
MinCut min_cut(std::size_t nodes, const std::vector<FlowEdge>& edges, std::uint32_t source,
               std::uint32_t sink);

}  // namespace remat
