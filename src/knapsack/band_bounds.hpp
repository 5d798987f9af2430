// Band split's LP bounds: the bound B(k) on every plan with k_j items from each band j (the other
// items free), minimized over one multiplier by golden-section search, and the bands themselves.
// The derivation and the complexity are in band_split.cpp's header comment.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "knapsack/golden_section.hpp"
#include "knapsack/reduced_problem.hpp"

namespace remat::detail::band_split_steps {

using Sense = BandCount::Sense;
using Constraint = BandCount;

// The core after fixing: its items, the bands they fall in (-1: free) and the terms' scratch.
class BandBounds {
 public:
  BandBounds(const ReducedProblem& core, std::vector<int> band_of, std::size_t bands)
      : core_(core), band_of_(std::move(band_of)), members_(bands) {
    for (std::size_t k = 0; k < core.size(); ++k) {
      if (band_of_[k] >= 0) members_[static_cast<std::size_t>(band_of_[k])].push_back(k);
      lambda_max_ = std::max(lambda_max_, core.value[k] / static_cast<double>(core.weight[k]));
    }
  }

  std::size_t bands() const { return members_.size(); }
  int band(std::size_t k) const { return band_of_[k]; }
  std::size_t size_of(unsigned mask) const {
    std::size_t size = 0;
    for (std::size_t j = 0; j < members_.size(); ++j)
      size += (mask >> j & 1u) ? members_[j].size() : 0;
    return size;
  }

  // The bound at one lambda under disjoint constraints (items of bands no constraint names are
  // free), with a margin for its rounded terms; -infinity when a group cannot hold its count.
  double at(double lambda, const std::vector<Constraint>& constraints) const {
    unsigned covered = 0;
    for (const Constraint& c : constraints) covered |= c.mask;
    double sum = lambda * static_cast<double>(core_.capacity), magnitude = std::abs(sum);
    for (std::size_t k = 0; k < core_.size(); ++k) {
      if (band_of_[k] >= 0 && (covered >> band_of_[k] & 1u)) continue;
      const double t = core_.value[k] - lambda * static_cast<double>(core_.weight[k]);
      if (t > 0) sum += t;
      magnitude += std::abs(t);
    }
    for (const Constraint& c : constraints) {
      gather(lambda, c.mask);
      if (c.count > terms_.size() && c.sense != Sense::kAtMost) {
        return -std::numeric_limits<double>::infinity();  // no plan has that many
      }
      const std::size_t top = std::min(c.count, terms_.size());
      std::nth_element(terms_.begin(), terms_.begin() + static_cast<std::ptrdiff_t>(top),
                       terms_.end(), std::greater<>());
      // Exactly: the top k; at most: their positive terms; at least: the top k and every
      // positive term after them.
      for (std::size_t i = 0; i < terms_.size(); ++i) {
        const double t = terms_[i].first;
        magnitude += std::abs(t);
        const bool taken =
            i < top ? (c.sense != Sense::kAtMost || t > 0) : (c.sense == Sense::kAtLeast && t > 0);
        if (taken) sum += t;
      }
    }
    const double n = static_cast<double>(core_.size() + 2);
    return sum + n * 0x1.0p-51 * (magnitude + 1.0);
  }

  struct Minimum {
    double bound, lambda;
  };

  // The least bound the search visits over lambda in [0, lambda_max] (each one valid).
  Minimum minimize(const std::vector<Constraint>& constraints,
                   std::optional<Clock::time_point> deadline) const {
    Minimum best{std::numeric_limits<double>::infinity(), 0};
    auto eval = [&](double lambda) {
      const double b = at(lambda, constraints);
      if (b < best.bound) best = {b, lambda};
      return b;
    };
    // B is piecewise linear in lambda: a bracket of 1e-10 of the range costs a few units at most
    // where its slope (the budget left) is large, and each point visited is a valid bound.
    const double width = 1e-10 * std::max(1.0, lambda_max_);
    golden_section(eval, 0.0, lambda_max_, width, 80, deadline);
    eval(0.0);
    return best;
  }

  // How many of the `count` largest terms of the group at lambda fall in each band.
  std::vector<std::size_t> top_counts(double lambda, unsigned mask, std::size_t count) const {
    gather(lambda, mask);
    const std::size_t top = std::min(count, terms_.size());
    std::nth_element(terms_.begin(), terms_.begin() + static_cast<std::ptrdiff_t>(top),
                     terms_.end(), std::greater<>());
    std::vector<std::size_t> counts(members_.size(), 0);
    for (std::size_t i = 0; i < top; ++i) ++counts[terms_[i].second];
    return counts;
  }

  // mu_j for exact counts at lambda: midway between the k_j-th and the (k_j + 1)-th largest term
  // of band j, the LP's multiplier for that count.
  std::vector<double> multipliers(double lambda, const std::vector<std::size_t>& count) const {
    std::vector<double> mu(members_.size(), 0.0);
    for (std::size_t j = 0; j < members_.size(); ++j) {
      gather(lambda, 1u << j);
      std::sort(terms_.begin(), terms_.end(), std::greater<>());
      const std::size_t k = count[j];
      const double upper = k > 0 ? terms_[k - 1].first : terms_.front().first + 1.0;
      const double lower = k < terms_.size() ? terms_[k].first : terms_.back().first - 1.0;
      mu[j] = 0.5 * (upper + lower);
    }
    return mu;
  }

 private:
  void gather(double lambda, unsigned mask) const {
    terms_.clear();
    for (std::size_t j = 0; j < members_.size(); ++j) {
      if (!(mask >> j & 1u)) continue;
      for (std::size_t i : members_[j]) {
        terms_.push_back({core_.value[i] - lambda * static_cast<double>(core_.weight[i]), j});
      }
    }
  }

  const ReducedProblem& core_;
  std::vector<int> band_of_;
  std::vector<std::vector<std::size_t>> members_;
  double lambda_max_ = 0;
  mutable std::vector<std::pair<double, std::size_t>> terms_;
};

// Band edges (see the header): w_b / 4, w_b / 2 and just above 2 w_b, and with `at_gaps` any gap
// in the core's sorted weights wider than w_b / 16 between them.
inline std::vector<int> bands_of(const ReducedProblem& core, std::int64_t wb, bool at_gaps,
                                 std::size_t& bands) {
  std::vector<std::int64_t> edges;
  for (std::int64_t e : {(wb + 3) / 4, (wb + 1) / 2, 2 * wb + 1}) edges.push_back(e);
  std::vector<std::int64_t> sorted(core.weight);
  std::sort(sorted.begin(), sorted.end());
  const std::int64_t wide = std::max<std::int64_t>(1, wb / 16);
  for (std::size_t i = 1; at_gaps && i < sorted.size(); ++i) {
    if (sorted[i] - sorted[i - 1] > wide && sorted[i] > edges.front() &&
        sorted[i - 1] < edges.back()) {
      edges.push_back(sorted[i]);
    }
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  // Band j holds weights in [edges[j], edges[j + 1]); only non-empty bands are kept.
  std::vector<int> raw(core.size(), -1);
  std::vector<std::size_t> used(edges.size(), 0);
  for (std::size_t k = 0; k < core.size(); ++k) {
    const auto it = std::upper_bound(edges.begin(), edges.end(), core.weight[k]);
    if (it == edges.begin() || it == edges.end()) continue;
    const auto j = static_cast<std::size_t>(it - edges.begin() - 1);
    raw[k] = static_cast<int>(j);
    ++used[j];
  }
  std::vector<int> renumber(edges.size(), -1);
  bands = 0;
  for (std::size_t j = 0; j < edges.size(); ++j) {
    if (used[j] > 0) renumber[j] = static_cast<int>(bands++);
  }
  for (int& j : raw) {
    if (j >= 0) j = renumber[static_cast<std::size_t>(j)];
  }
  return raw;
}

}  // namespace remat::detail::band_split_steps
