// Random chain profiles for the tests of the heterogeneous planner
// (test_chain_profile_reference.cpp, test_chain_profile_band_bounds.cpp).
#pragma once

#include <cstdint>
#include <random>

#include "remat/chain.hpp"

namespace remat::chain::testing {

// kind 0: sizes and times from tiny sets (many ties); 1: sizes over a wide range, real times;
// 2: a few huge layers among small ones; 3: equal sizes, times with ties.
inline ChainProfile random_profile(std::mt19937_64& rng, std::int64_t n, int kind) {
  ChainProfile p;
  std::uniform_int_distribution<std::int64_t> small(1, 3), wide(1, std::int64_t{1} << 30);
  std::uniform_int_distribution<int> tie_time(1, 3), coin(0, 9);
  std::uniform_real_distribution<double> real_time(0.0, 5.0);
  for (std::int64_t i = 0; i <= n; ++i) {
    std::int64_t bytes = 0;
    double time = 0;
    switch (kind) {
      case 0:
        bytes = small(rng);
        time = tie_time(rng);
        break;
      case 1:
        bytes = wide(rng);
        time = real_time(rng);
        break;
      case 2:
        bytes = coin(rng) == 0 ? 1000 + small(rng) : 10 * small(rng);
        time = coin(rng) == 0 ? 0.0 : real_time(rng);
        break;
      default:
        bytes = 4096;
        time = tie_time(rng) * 0.5;
        break;
    }
    p.activation_bytes.push_back(bytes);
    p.forward_time.push_back(i == 0 ? 0.0 : time);
  }
  return p;
}

}  // namespace remat::chain::testing
