// What the eager planner's programs and its evaluator share: one profile's sizes and prefix sums,
// in bytes or in rounded units (see eager_planner.cpp for the model).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "remat/eager.hpp"

namespace remat::eager::chain_model {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline std::size_t at(std::int64_t i) {
  return static_cast<std::size_t>(i);
}

// `bytes` in units of `unit`, rounded up: plans counted so always fit the true bytes.
inline std::int64_t round_up(std::int64_t bytes, std::int64_t unit) {
  return bytes / unit + (bytes % unit != 0 ? 1 : 0);
}

// Sizes and prefix sums of one profile, in bytes or in rounded units.
class Chain {
 public:
  Chain(const Profile& profile, std::int64_t unit) : n_(std::ssize(profile.layers)) {
    time_prefix_.assign(at(n_) + 1, 0.0);
    for (std::int64_t i = 0; i < n_; ++i) {
      const Layer& layer = profile.layers[at(i)];
      boundary_.push_back(round_up(layer.output_bytes, unit));
      inner_.push_back(round_up(layer.saved_bytes + layer.output_bytes, unit));
      last_.push_back(
          round_up(layer.saved_bytes + (layer.saves_output ? layer.output_bytes : 0), unit));
      time_prefix_[at(i) + 1] = time_prefix_[at(i)] + layer.forward_time;
      option_start_.push_back(std::ssize(held_));
      for (const Option& option : layer.options) {
        held_.push_back(round_up(option.held_bytes, unit));
        option_cost_.push_back(option.recompute_time + profile.region_overhead);
      }
    }
    option_start_.push_back(std::ssize(held_));
    input_ = round_up(profile.input_bytes, unit);
    overhead_ = profile.region_overhead;
    max_region_layers_ = profile.max_region_layers;
  }

  std::int64_t layers() const { return n_; }
  std::int64_t input() const { return input_; }
  // What plain layer j keeps inside segment ..t: its saved bytes and, unless it ends the
  // segment without saving it, its output.
  std::int64_t kept(std::int64_t j, std::int64_t t) const {
    return j < t ? inner_[at(j)] : last_[at(j)];
  }
  std::int64_t boundary(std::int64_t j) const { return boundary_[at(j)]; }
  // The last layer a region starting at s may end on, inside a segment ending at t (a region
  // never covers its whole segment).
  std::int64_t last_region_end(std::int64_t s, std::int64_t t) const {
    return max_region_layers_ > 0 ? std::min(t - 1, s + max_region_layers_ - 1) : t - 1;
  }
  // What region first..last costs besides its nested regions: its re-run and its overhead.
  double region_cost(std::int64_t first, std::int64_t last) const {
    return time_prefix_[at(last) + 1] - time_prefix_[at(first)] + overhead_;
  }
  // Layer j's options: how many, what option k holds besides the layer's output until its
  // re-run, and what that re-run costs (its recompute time and the region overhead).
  std::int64_t options(std::int64_t j) const {
    return option_start_[at(j) + 1] - option_start_[at(j)];
  }
  std::int64_t held(std::int64_t j, std::int64_t k) const {
    return held_[at(option_start_[at(j)] + k)];
  }
  double option_cost(std::int64_t j, std::int64_t k) const {
    return option_cost_[at(option_start_[at(j)] + k)];
  }

 private:
  std::int64_t n_;
  std::int64_t input_ = 0;
  double overhead_ = 0;
  std::int64_t max_region_layers_ = 0;
  std::vector<std::int64_t> boundary_, inner_, last_;
  std::vector<double> time_prefix_;
  std::vector<std::int64_t> option_start_, held_;  // layer j's options: option_start_[j]..[j + 1]
  std::vector<double> option_cost_;
};

}  // namespace remat::eager::chain_model
