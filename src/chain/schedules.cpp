// The textbook's fixed strategies: store-all, store-first (keep only a_0 and replay from it for
// every layer) and a checkpoint every s layers (each segment recomputed and held during its
// backward); sqrt picks s for every. Each emits O(n) actions.
#include <cmath>

#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {

void schedule_store_all(std::int64_t n, const ActionSink& sink) {
  for (std::int64_t i = 1; i <= n; ++i) sink(Action::forward(i, i));
  for (std::int64_t i = n; i >= 1; --i) {
    sink(Action::backward(i));
    sink(Action::free(i - 1));
  }
}

void schedule_store_first(std::int64_t n, const ActionSink& sink) {
  sink(Action::forward(1, n));
  for (std::int64_t i = n; i >= 1; --i) {
    if (i > 1) sink(Action::forward(1, i - 1));
    sink(Action::backward(i));
    sink(Action::free(i - 1));
  }
}

void schedule_every(std::int64_t n, std::int64_t s, const ActionSink& sink) {
  if (s < 1) throw InputError("every", std::nullopt, "must be at least 1");
  // A segment longer than the chain is the whole chain; clamped, n + s - 1 cannot overflow.
  s = std::min(s, std::max<std::int64_t>(n, 1));
  const std::int64_t segments = (n + s - 1) / s;
  for (std::int64_t k = 1; k < segments; ++k) sink(Action::forward((k - 1) * s + 1, k * s));
  sink(Action::forward((segments - 1) * s + 1, n));
  for (std::int64_t k = segments - 1; k >= 0; --k) {
    const std::int64_t start = k * s, end = std::min(n, start + s);
    for (std::int64_t i = start + 1; i < end; ++i) sink(Action::forward(i, i));
    for (std::int64_t i = end; i > start; --i) {
      sink(Action::backward(i));
      sink(Action::free(i - 1));
    }
  }
}

std::int64_t sqrt_segment(std::int64_t n) {
  const double root = std::sqrt(static_cast<double>(n));
  std::int64_t best = 1;
  std::int64_t best_memory = n;  // ceil(n/1) + 0
  for (std::int64_t s = 1; s <= n; ++s) {
    const std::int64_t memory = (n + s - 1) / s + s - 1;
    const bool better = memory < best_memory ||
                        (memory == best_memory && std::abs(static_cast<double>(s) - root) <
                                                      std::abs(static_cast<double>(best) - root));
    if (better) {
      best = s;
      best_memory = memory;
    }
    if (s > 2 * root + 2) break;  // memory only grows past here
  }
  return best;
}

std::string to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::kStoreAll:
      return "store-all";
    case Strategy::kStoreFirst:
      return "store-first";
    case Strategy::kEvery:
      return "every";
    case Strategy::kSqrt:
      return "sqrt";
    case Strategy::kOptimal:
      return "optimal";
  }
  return "?";
}

Strategy parse_strategy(const std::string& name) {
  for (Strategy s : {Strategy::kStoreAll, Strategy::kStoreFirst, Strategy::kEvery, Strategy::kSqrt,
                     Strategy::kOptimal}) {
    if (to_string(s) == name) return s;
  }
  throw InputError(
      "strategy", std::nullopt,
      "unknown strategy '" + name + "' (expected store-all, store-first, sqrt or optimal)");
}

namespace {

Simulation run_strategy(Simulator& simulator, std::int64_t n, Strategy strategy,
                        std::int64_t parameter, const ActionSink& also) {
  const ActionSink sink = [&](const Action& a) {
    simulator.apply(a);
    if (also) also(a);
  };
  switch (strategy) {
    case Strategy::kStoreAll:
      schedule_store_all(n, sink);
      break;
    case Strategy::kStoreFirst:
      schedule_store_first(n, sink);
      break;
    case Strategy::kEvery:
      schedule_every(n, parameter, sink);
      break;
    case Strategy::kSqrt:
      schedule_every(n, sqrt_segment(n), sink);
      break;
    case Strategy::kOptimal:
      schedule_optimal(n, parameter, sink);
      break;
  }
  return simulator.finish();
}

}  // namespace

Simulation simulate(std::int64_t n, Strategy strategy, std::int64_t parameter,
                    const ActionSink& also) {
  Simulator simulator(n);
  return run_strategy(simulator, n, strategy, parameter, also);
}

Simulation simulate(const ChainProfile& profile, Strategy strategy, std::int64_t parameter,
                    const ActionSink& also) {
  Simulator simulator(profile);
  return run_strategy(simulator, profile.layers(), strategy, parameter, also);
}

}  // namespace remat::chain
