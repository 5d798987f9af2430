// Fuzzes min_cut on graphs decoded from the bytes: any graph must be cut or rejected with
// InputError, never crash, and on graphs of at most 10 nodes the cut's value and sink side must
// equal brute force's (the least cut over every partition; the sink side every least cut
// shares).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "remat/errors.hpp"
#include "remat/min_cut.hpp"

namespace {

void check(bool condition) {
  if (!condition) __builtin_trap();
}

void check_against_brute_force(std::size_t n, const std::vector<remat::FlowEdge>& edges,
                               const remat::MinCut& cut) {
  const std::uint32_t sink = static_cast<std::uint32_t>(n - 1);
  bool found = false;
  std::int64_t best = 0;
  std::vector<char> shared(n, 1);
  for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (!(mask & 1u) || (mask >> sink & 1u)) continue;
    bool unbounded = false;
    std::int64_t value = 0;
    for (const remat::FlowEdge& e : edges) {
      if ((mask >> e.tail & 1u) && !(mask >> e.head & 1u)) {
        if (e.capacity == remat::kUnboundedCapacity) {
          unbounded = true;
        } else {
          value += e.capacity;
        }
      }
    }
    if (unbounded) continue;
    if (!found || value < best) {
      found = true;
      best = value;
      shared.assign(n, 1);
    }
    if (value == best) {
      for (std::uint32_t v = 0; v < n; ++v) shared[v] &= !(mask >> v & 1u);
    }
  }
  check(cut.unbounded == !found);
  if (found) check(cut.value == best && cut.sink_side == shared);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t n = 2 + data[0] % 15;
  std::vector<remat::FlowEdge> edges;
  for (std::size_t k = 1; k + 2 < size; k += 3) {
    const auto tail = static_cast<std::uint32_t>(data[k] % (n + 1));  // n: out of range
    const auto head = static_cast<std::uint32_t>(data[k + 1] % (n + 1));
    const std::uint8_t c = data[k + 2];
    const std::int64_t capacity = c == 255 ? remat::kUnboundedCapacity : c == 254 ? -3 : c % 17;
    edges.push_back({tail, head, capacity});
  }
  try {
    const remat::MinCut cut = remat::min_cut(n, edges, 0, static_cast<std::uint32_t>(n - 1));
    check(cut.unbounded || cut.sink_side.size() == n);
    if (n <= 10) check_against_brute_force(n, edges, cut);
  } catch (const remat::InputError&) {
  }
  return 0;
}
