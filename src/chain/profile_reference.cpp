// The reference for the heterogeneous chain planner: the dynamic program that plan_profile ran
// before the band program (src/chain/band/), kept verbatim so that tests and the benchmark
// can compare the two. Not part of the core library (remat_chain_reference links it).
//
// Optimal checkpointing of a heterogeneous chain under a budget in bytes: the dynamic program of
// rotor-style planners (Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, "Optimal checkpointing
// for heterogeneous chains", 2019), written for this project's model (the first pass is free,
// a_0 counts, the working value of a forward counts, backward needs a_{i-1}).
//
//   R(s, t, m): least recompute time to run backward t..s+1 with a_s held, m units available
//               (a_s included), nothing of the segment held.
//               R(s, s+1, m) = 0 if w_s <= m;
//               R(s, t, m) = min_j T(s+1..j) + R(j, t, m - w_s) + R(s, j, m),
//               where the forward s+1..j needs w_s + max(w_{s+1..j}) <= m.
//   F(s, m):    the same during the first pass, whose forward is free:
//               F(s, m) = min( R(s, n, m), min_j F(j, m - w_s) + R(s, j, m) ).
// Units and rounding as in plan_profile (include/remat/chain.hpp).
//
// Time O(n^3 C / 6) for C = budget / u units (each R row is cut at the segment's total size);
// memory n (n + 1) / 2 rows of C + 1 doubles for R plus n rows for F, accounted before the
// allocation. The plan is rebuilt by re-evaluating the minimizations, never stored.
#include "chain/profile_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "chain/profile_planner.hpp"
#include "common/text.hpp"
#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class ProfileProgram {
 public:
  ProfileProgram(const ChainProfile& profile, std::int64_t budget, std::int64_t slots)
      : n_(profile.layers()) {
    // `slots` units of floor(budget / slots) bytes, unless the sizes' common divisor is at least
    // that: then it is the unit, and rounding is exact (tensor sizes share large powers of two).
    for (std::int64_t b : profile.activation_bytes) divisor_ = std::gcd(divisor_, b);
    divisor_ = std::max<std::int64_t>(divisor_, 1);
    const std::int64_t share = budget / slots;
    unit_ = share <= divisor_ ? divisor_ : share;
    capacity_ = budget / unit_;
    for (std::int64_t b : profile.activation_bytes) {
      weight_.push_back((b + unit_ - 1) / unit_);
      exact_ = exact_ && b % unit_ == 0;
    }
    time_prefix_.assign(static_cast<std::size_t>(n_) + 1, 0.0);
    for (std::int64_t i = 1; i <= n_; ++i) {
      time_prefix_[static_cast<std::size_t>(i)] = time_prefix_[static_cast<std::size_t>(i - 1)] +
                                                  profile.forward_time[static_cast<std::size_t>(i)];
    }
  }

  std::size_t table_bytes() const {
    const auto pairs = static_cast<std::size_t>(n_) * static_cast<std::size_t>(n_ + 1) / 2;
    // Saturates where the product would wrap past 2^64 (budgets of petabytes in single bytes).
    if (static_cast<double>(pairs + static_cast<std::size_t>(n_)) *
            static_cast<double>(row_size()) * sizeof(double) >=
        0x1p63) {
      return std::numeric_limits<std::size_t>::max();
    }
    return (pairs + static_cast<std::size_t>(n_)) * row_size() * sizeof(double);
  }

  void solve() {
    r_.assign(static_cast<std::size_t>(n_) * static_cast<std::size_t>(n_ + 1) / 2 * row_size(),
              kInf);
    for (std::int64_t length = 1; length <= n_; ++length) {
      for (std::int64_t s = 0; s + length <= n_; ++s) fill_r(s, s + length);
    }
    f_.assign(static_cast<std::size_t>(n_) * row_size(), kInf);
    for (std::int64_t s = n_ - 1; s >= 0; --s) fill_f(s);
  }

  double best() const { return f(0)[static_cast<std::size_t>(capacity_)]; }

  // Whether split j of (s, t) might lower the final row somewhere, as far as samples of its parts
  // at m = stride - 1, 2 stride - 1, ... (and at their tops) tell: on each block of m ending at a
  // sample b, the split is at least cost + R(j, t, the first sample at or above b - w_s) +
  // R(s, j, b), and the row is at most its value at the block's first m.
  bool below_by_samples(std::int64_t s, std::int64_t j, std::int64_t t, std::int64_t need,
                        std::int64_t top, std::int64_t stride) const {
    const double* row = r(s, t);
    const double cost = time(s + 1, j);
    const auto sample = [&](std::int64_t m) { return (m / stride + 1) * stride - 1; };
    for (std::int64_t first = need; first <= top;) {
      const std::int64_t last = std::min(top, sample(first));
      // Both parts' rows hold their flat tops through C, so a sample past C reads the top.
      const double bound = cost + r(j, t)[std::min(capacity_, sample(last - w(s)))] +
                           r(s, j)[std::min(capacity_, last)];
      if (bound < row[first]) return true;
      first = last + 1;
    }
    return false;
  }

  // Counts of reference_table_density over the rows of start points 0, stride, 2 stride, ...;
  // each split's value is formed with fill_r's arithmetic, so "reaches the row" is exact.
  TableDensity density(std::int64_t stride) const {
    TableDensity d;
    d.capacity = capacity_;
    std::vector<int> minimizers(row_size());
    for (std::int64_t s = 0; s < n_; s += stride) {
      for (std::int64_t t = s + 2; t <= n_; ++t) {
        const double* row = r(s, t);
        std::int64_t total = 0;
        for (std::int64_t k = s; k < t; ++k) total += w(k);
        const std::int64_t top = std::min(capacity_, total);
        ++d.rows;
        for (std::int64_t m = w(s); m <= top; ++m) {
          ++d.entries;
          if (row[m] == kInf) continue;
          ++d.finite_entries;
          if (m == w(s) || row[m] != row[m - 1]) ++d.distinct_values;
        }
        std::fill(minimizers.begin(), minimizers.end(), 0);
        std::vector<std::int64_t> reaching;
        std::int64_t need = w(s);
        for (std::int64_t j = s + 1; j < t; ++j) {
          need = std::max(need, w(s) + w(j));
          if (need > top) break;
          const double cost = time(s + 1, j);
          bool finite = false, reaches = false;
          for (std::int64_t m = need; m <= top; ++m) {
            const double value = cost + r(j, t)[m - w(s)] + r(s, j)[m];
            finite = finite || value < kInf;
            if (value < kInf && value == row[m]) {
              reaches = true;
              ++minimizers[static_cast<std::size_t>(m)];
            }
          }
          d.splits += finite;
          if (finite) {
            for (std::size_t k = 0; k < d.kSampleStrides.size(); ++k) {
              d.unresolved_by_samples[k] +=
                  below_by_samples(s, j, t, need, top, d.kSampleStrides[k]);
            }
          }
          d.minimizing_splits += reaches;
          if (reaches) reaching.push_back(j);
        }
        // A split is the sole minimizer at m when it reaches the row there and no other does.
        for (std::int64_t j : reaching) {
          const double cost = time(s + 1, j);
          std::int64_t need_j = w(s);
          for (std::int64_t k = s + 1; k <= j; ++k) need_j = std::max(need_j, w(s) + w(k));
          for (std::int64_t m = need_j; m <= top; ++m) {
            if (minimizers[static_cast<std::size_t>(m)] == 1 &&
                cost + r(j, t)[m - w(s)] + r(s, j)[m] == row[m]) {
              ++d.sole_minimizers;
              break;
            }
          }
        }
      }
    }
    return d;
  }
  std::int64_t unit() const { return unit_; }
  std::int64_t capacity() const { return capacity_; }
  std::int64_t divisor() const { return divisor_; }
  bool exact() const { return exact_; }

  void emit(const ActionSink& sink) const {
    detail::emit_schedule(
        n_, capacity_, [this](std::int64_t i) { return w(i); },
        [this](std::int64_t s, std::int64_t m) { return f_choice(s, m); },
        [this](std::int64_t s, std::int64_t t, std::int64_t m) { return r_choice(s, t, m); }, sink);
  }

 private:
  std::size_t row_size() const { return static_cast<std::size_t>(capacity_) + 1; }
  std::int64_t w(std::int64_t i) const { return weight_[static_cast<std::size_t>(i)]; }
  double time(std::int64_t first, std::int64_t last) const {
    return time_prefix_[static_cast<std::size_t>(last)] -
           time_prefix_[static_cast<std::size_t>(first - 1)];
  }
  std::size_t pair_index(std::int64_t s, std::int64_t t) const {
    const auto offset = static_cast<std::size_t>(s * n_ - s * (s - 1) / 2);
    return offset + static_cast<std::size_t>(t - s - 1);
  }
  double* r(std::int64_t s, std::int64_t t) { return r_.data() + pair_index(s, t) * row_size(); }
  const double* r(std::int64_t s, std::int64_t t) const {
    return r_.data() + pair_index(s, t) * row_size();
  }
  double* f(std::int64_t s) { return f_.data() + static_cast<std::size_t>(s) * row_size(); }
  const double* f(std::int64_t s) const {
    return f_.data() + static_cast<std::size_t>(s) * row_size();
  }

  void fill_r(std::int64_t s, std::int64_t t) {
    double* row = r(s, t);
    if (t == s + 1) {
      for (std::int64_t m = w(s); m <= capacity_; ++m) row[m] = 0;
      return;
    }
    // Past the segment's total size every activation can stay: the row is flat from there.
    std::int64_t total = 0;
    for (std::int64_t k = s; k < t; ++k) total += w(k);
    const std::int64_t top = std::min(capacity_, total);
    std::int64_t need = w(s);
    for (std::int64_t j = s + 1; j < t; ++j) {
      need = std::max(need, w(s) + w(j));
      if (need > top) break;
      const double cost = time(s + 1, j);
      const double* left = r(s, j);
      const double* right = r(j, t);
      const std::int64_t ws = w(s);
      for (std::int64_t m = need; m <= top; ++m) {
        row[m] = std::min(row[m], cost + right[m - ws] + left[m]);
      }
    }
    for (std::int64_t m = top + 1; m <= capacity_; ++m) row[m] = row[top];
  }

  void fill_f(std::int64_t s) {
    double* row = f(s);
    std::int64_t need = w(s);
    for (std::int64_t j = s + 1; j <= n_; ++j) {
      if (j < n_) need = std::max(need, w(s) + w(j));
      if (need > capacity_) break;
      const double* segment = r(s, j);
      if (j == n_) {
        for (std::int64_t m = need; m <= capacity_; ++m) row[m] = std::min(row[m], segment[m]);
      } else {
        const double* rest = f(j);
        const std::int64_t ws = w(s);
        for (std::int64_t m = need; m <= capacity_; ++m) {
          row[m] = std::min(row[m], rest[m - ws] + segment[m]);
        }
      }
    }
  }

  // The j that fill_f / fill_r chose (the first minimizer, with the same arithmetic).
  std::int64_t f_choice(std::int64_t s, std::int64_t m) const {
    const double target = f(s)[m];
    std::int64_t need = w(s);
    for (std::int64_t j = s + 1; j <= n_; ++j) {
      if (j < n_) need = std::max(need, w(s) + w(j));
      if (need > m) break;
      const double value = j == n_ ? r(s, j)[m] : f(j)[m - w(s)] + r(s, j)[m];
      if (value <= target) return j;
    }
    throw std::logic_error("profile planner: no first-pass choice reproduces F");
  }

  std::int64_t r_choice(std::int64_t s, std::int64_t t, std::int64_t m) const {
    std::int64_t total = 0;
    for (std::int64_t k = s; k < t; ++k) total += w(k);
    m = std::min(m, std::min(capacity_, total));
    const double target = r(s, t)[m];
    std::int64_t need = w(s);
    for (std::int64_t j = s + 1; j < t; ++j) {
      need = std::max(need, w(s) + w(j));
      if (need > m) break;
      if (time(s + 1, j) + r(j, t)[m - w(s)] + r(s, j)[m] <= target) return j;
    }
    throw std::logic_error("profile planner: no split reproduces R");
  }

  std::int64_t n_;
  std::int64_t unit_ = 1, capacity_ = 0, divisor_ = 0;
  bool exact_ = true;
  std::vector<std::int64_t> weight_;
  std::vector<double> time_prefix_;
  std::vector<double> r_, f_;
};

}  // namespace

TableDensity reference_table_density(const ChainProfile& profile, std::int64_t budget_bytes,
                                     std::int64_t slots, std::size_t max_planner_bytes,
                                     std::int64_t start_stride) {
  profile.validate();
  if (budget_bytes < 0) throw InputError("budget", std::nullopt, "must be >= 0");
  if (slots < 1) throw InputError("slots", std::nullopt, "must be at least 1");
  if (start_stride < 1) throw InputError("start_stride", std::nullopt, "must be at least 1");
  ProfileProgram program(profile, budget_bytes, slots);
  if (program.table_bytes() > max_planner_bytes) {
    throw PlannerMemoryError("the reference table needs " + text::integer(program.table_bytes()) +
                             " bytes, over the cap of " + text::integer(max_planner_bytes));
  }
  program.solve();
  return program.density(start_stride);
}

ProfilePlan plan_profile_reference(const ChainProfile& profile, std::int64_t budget_bytes,
                                   std::int64_t slots, std::size_t max_planner_bytes,
                                   const ActionSink& also) {
  profile.validate();
  if (budget_bytes < 0) throw InputError("budget", std::nullopt, "must be >= 0");
  if (slots < 1) throw InputError("slots", std::nullopt, "must be at least 1");
  ProfileProgram program(profile, budget_bytes, slots);
  if (program.table_bytes() > max_planner_bytes) {
    throw PlannerMemoryError("the profile planner needs " + text::integer(program.table_bytes()) +
                             " bytes for " + text::integer(profile.layers()) + " layers and " +
                             text::integer(program.capacity()) + " memory units, over the cap of " +
                             text::integer(max_planner_bytes) +
                             "; lower {slots} (or raise {max_planner_bytes})");
  }
  program.solve();
  if (!(program.best() < kInf)) {
    // F(0, m) only falls as m grows, so nothing fits in fewer units either.
    detail::throw_no_schedule(profile, budget_bytes, program.exact(), program.unit(),
                              program.capacity());
  }
  return detail::simulated_plan(profile, program, also);
}

}  // namespace remat::chain
