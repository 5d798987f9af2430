// The band planner's certificate (band_values) against the whole table of R on chains small
// enough to enumerate: its bounds are lower bounds, the splitting lemma they use holds on every
// state, and every start point whose segments must grow is among those it localizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "chain/profile_planner.hpp"
#include "chain_profile_random.hpp"
#include "remat/chain.hpp"

namespace remat::chain {
namespace {

using testing::random_profile;

// The certificate's bounds are lower bounds: B_W is at most the least cost of a first pass with a
// too heavy segment, B_L of one with a too long (not too heavy) segment, both found here from the
// whole table of R on chains small enough to enumerate, whatever the band and the tail's gap. The
// splitting lemma they use holds on every state of that table.
TEST(ProfilePlannerReference, BandBoundsAreLowerBounds) {
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng(4016);
  int heavy_checked = 0, long_checked = 0, some_localized = 0, fewer_localized = 0;
  std::int64_t lemma_checked = 0, past_checked = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const int kind = std::vector<int>{0, 2, 3}[trial % 3];  // sizes with small units
    const auto n = 2 + static_cast<std::int64_t>(rng() % 22);
    const ChainProfile p = random_profile(rng, n, kind);
    std::int64_t unit = 0;
    for (std::int64_t b : p.activation_bytes) unit = std::gcd(unit, b);
    std::vector<std::int64_t> w, prefix{0};
    for (std::int64_t b : p.activation_bytes) {
      w.push_back(b / unit);
      prefix.push_back(prefix.back() + w.back());
    }
    const std::int64_t least = least_profile_budget(p) / unit;
    const std::int64_t capacity = least + static_cast<std::int64_t>(rng() % (prefix[n] + 1));
    const auto total = [&](std::int64_t s, std::int64_t t) { return prefix[t] - prefix[s]; };
    const auto time = [&](std::int64_t a, std::int64_t b) {  // layers a..b
      double sum = 0;
      for (std::int64_t i = a; i <= b; ++i) sum += p.forward_time[static_cast<std::size_t>(i)];
      return sum;
    };
    // R[s][t][m] by the planner's recurrence, every state, up to the largest size past C (the
    // band bounds F there too: past).
    const auto size = static_cast<std::size_t>(capacity) + 1;
    const std::int64_t widest = capacity + *std::max_element(w.begin(), w.end());
    std::vector<std::vector<std::vector<double>>> r(
        static_cast<std::size_t>(n) + 1,
        std::vector<std::vector<double>>(
            static_cast<std::size_t>(n) + 1,
            std::vector<double>(static_cast<std::size_t>(widest) + 1, kInfinity)));
    for (std::int64_t length = 1; length <= n; ++length) {
      for (std::int64_t s = 0; s + length <= n; ++s) {
        const std::int64_t t = s + length;
        auto& row = r[static_cast<std::size_t>(s)][static_cast<std::size_t>(t)];
        for (std::int64_t m = 0; m <= widest; ++m) {
          if (length == 1) {
            row[static_cast<std::size_t>(m)] = w[s] <= m ? 0 : kInfinity;
            continue;
          }
          std::int64_t need = w[s];
          for (std::int64_t j = s + 1; j < t; ++j) {
            need = std::max(need, w[s] + w[j]);
            if (need > m) break;
            row[static_cast<std::size_t>(m)] =
                std::min(row[static_cast<std::size_t>(m)],
                         time(s + 1, j) +
                             r[static_cast<std::size_t>(j)][static_cast<std::size_t>(t)]
                              [static_cast<std::size_t>(m - w[s])] +
                             r[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)]
                              [static_cast<std::size_t>(m)]);
          }
        }
      }
    }
    // The splitting lemma (c) on every state, in its chained form (u = v is (c) itself):
    // R(s, t, m) >= R(s, u, m) + T(u..v) + R(v, t, m - w_s + w_v), s < u <= v < t (on every
    // fourth table: O(n^4 C) each).
    const auto at = [&](std::int64_t a, std::int64_t b, std::int64_t k) {
      return r[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)]
              [static_cast<std::size_t>(k)];
    };
    for (std::int64_t s = 0; trial % 4 == 0 && s < n; ++s) {
      for (std::int64_t t = s + 2; t <= n; ++t) {
        for (std::int64_t u = s + 1; u < t; ++u) {
          for (std::int64_t v = u; v < t; ++v) {
            for (std::int64_t m = 0; m <= capacity; ++m) {
              const std::int64_t right = m - w[s] + w[v];
              if (right < 0 || right > capacity) continue;
              const double whole = at(s, t, m);
              const double parts = at(s, u, m) + time(u, v) + at(v, t, right);
              if (whole < kInfinity) ++lemma_checked;
              ASSERT_GE(whole * (1 + 1e-12) + 1e-12, parts)
                  << "lemma, trial " << trial << " s " << s << " u " << u << " v " << v << " t "
                  << t << " m " << m;
            }
          }
        }
      }
    }
    const auto delta = 1 + static_cast<std::int64_t>(rng() % (prefix[n] + 1));
    // End caps: every start point's segments as long (half the trials), or caps that grow
    // unevenly, as when only some start points' segments were lengthened; the band raises them
    // not to fall with s, and so does this.
    const auto max_length = 1 + static_cast<std::int64_t>(rng() % n);
    std::vector<std::int64_t> caps(static_cast<std::size_t>(n));
    for (std::int64_t s = 0; s < n; ++s) {
      const std::int64_t cap =
          trial % 2 == 0 ? s + max_length : s + 1 + static_cast<std::int64_t>(rng() % n) / 2;
      caps[static_cast<std::size_t>(s)] =
          std::max(cap, s == 0 ? cap : caps[static_cast<std::size_t>(s - 1)]);
    }
    const auto last = [&](std::int64_t s) {
      std::int64_t t = s + 1;
      while (t + 1 <= n && total(s, t + 1) <= capacity + delta) ++t;
      return std::min(t, caps[static_cast<std::size_t>(s)]);
    };
    // Least costs of the rest of the first pass from (s, m): any, with a too heavy segment, with
    // a too long one that is not too heavy; up to the largest size past C, as R (past below).
    std::vector<std::vector<double>> any(
        static_cast<std::size_t>(n) + 1,
        std::vector<double>(static_cast<std::size_t>(widest) + 1, kInfinity));
    auto heavy = any, longer = any;
    for (std::int64_t s = n - 1; s >= 0; --s) {
      for (std::int64_t m = 0; m <= widest; ++m) {
        std::int64_t need = w[s];
        for (std::int64_t j = s + 1; j <= n; ++j) {
          if (j < n) need = std::max(need, w[s] + w[j]);
          if (need > m) break;
          const double cost = r[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)]
                               [static_cast<std::size_t>(m)];
          const bool too_heavy = m < total(s, j) - delta;
          const bool too_long = !too_heavy && j > last(s);
          const auto at = [&](const std::vector<std::vector<double>>& table) {
            return j == n ? (&table == &any ? 0.0 : kInfinity)
                          : table[static_cast<std::size_t>(j)][static_cast<std::size_t>(m - w[s])];
          };
          auto& here = [&](auto& table) -> double& {
            return table[static_cast<std::size_t>(s)][static_cast<std::size_t>(m)];
          }(any);
          here = std::min(here, cost + at(any));
          double& h = heavy[static_cast<std::size_t>(s)][static_cast<std::size_t>(m)];
          h = std::min(h, cost + (too_heavy ? at(any) : at(heavy)));
          double& l = longer[static_cast<std::size_t>(s)][static_cast<std::size_t>(m)];
          l = std::min(l, cost + (too_long ? at(any) : at(longer)));
        }
      }
    }
    detail::BandTuning tuning;
    tuning.tail_gap = static_cast<std::int64_t>(rng() % 4);
    tuning.threads = 1 + trial % 2;
    tuning.threads_from = 0;
    const auto band = detail::band_values(p, capacity * unit, capacity * unit, delta, caps, tuning);
    // past(s)[c] is at most F(s, c + w_s), the least first pass from s with that much, past C.
    if (!band.past.empty()) {
      for (std::int64_t s = 0; s < n; ++s) {
        for (std::int64_t c = std::max<std::int64_t>(0, capacity - w[s] + 1);
             c <= capacity && c + w[s] <= widest; ++c) {
          const double bound =
              band.past[static_cast<std::size_t>(s) * size + static_cast<std::size_t>(c)];
          const double least_here =
              any[static_cast<std::size_t>(s)][static_cast<std::size_t>(c + w[s])];
          if (least_here < kInfinity) ++past_checked;
          EXPECT_LE(bound, least_here * (1 + 1e-12) + 1e-12)
              << "past, trial " << trial << " s " << s << " c " << c;
        }
      }
    }
    const double best_heavy = heavy[0][static_cast<std::size_t>(capacity)];
    const double best_long = longer[0][static_cast<std::size_t>(capacity)];
    const std::string where = "trial " + std::to_string(trial) + " n " + std::to_string(n) +
                              " capacity " + std::to_string(capacity) + " delta " +
                              std::to_string(delta) + " L " + std::to_string(max_length);
    if (best_heavy < kInfinity) {
      EXPECT_LE(band.heavy, best_heavy * (1 + 1e-12) + 1e-12) << where;
      ++heavy_checked;
    }
    if (best_long < kInfinity) {
      EXPECT_LE(band.long_, best_long * (1 + 1e-12) + 1e-12) << where;
      ++long_checked;
    }
    EXPECT_GE(band.good, any[0][static_cast<std::size_t>(capacity)] * (1 - 1e-12)) << where;
    // Every start point where a good first pass from (0, C) followed by a too long segment costs
    // no more than G(0, C) (not ruled out) is among those whose segments grow: the least such
    // cost, by a forward pass over good segments and the whole table after.
    std::vector<std::vector<double>> reach(static_cast<std::size_t>(n) + 1,
                                           std::vector<double>(size, kInfinity));
    reach[0][static_cast<std::size_t>(capacity)] = 0;
    std::vector<bool> needed(static_cast<std::size_t>(n), false);
    for (std::int64_t s = 0; s < n; ++s) {
      for (std::int64_t m = 0; m <= capacity; ++m) {
        const double before = reach[static_cast<std::size_t>(s)][static_cast<std::size_t>(m)];
        if (before == kInfinity) continue;
        std::int64_t need = w[s];
        for (std::int64_t j = s + 1; j <= n; ++j) {
          if (j < n) need = std::max(need, w[s] + w[j]);
          if (need > m) break;
          if (m < total(s, j) - delta) continue;  // too heavy
          const double cost = before + at(s, j, m);
          if (j > last(s)) {
            const double rest =
                j == n ? 0.0 : any[static_cast<std::size_t>(j)][static_cast<std::size_t>(m - w[s])];
            if (cost + rest <= band.good * (1 + 1e-12)) needed[static_cast<std::size_t>(s)] = true;
          } else if (j < n) {
            double& next = reach[static_cast<std::size_t>(j)][static_cast<std::size_t>(m - w[s])];
            next = std::min(next, cost);
          }
        }
      }
    }
    std::int64_t needed_count = 0;
    for (std::int64_t s = 0; s < n; ++s) {
      if (!needed[static_cast<std::size_t>(s)]) continue;
      ++needed_count;
      EXPECT_TRUE(std::find(band.localized.begin(), band.localized.end(), s) !=
                  band.localized.end())
          << where << " start " << s;
    }
    const auto localized = static_cast<std::int64_t>(band.localized.size());
    some_localized += needed_count > 0 ? 1 : 0;
    fewer_localized += localized > 0 && localized < n - 1 ? 1 : 0;
  }
  EXPECT_GT(heavy_checked, 40);
  EXPECT_GT(long_checked, 40);
  EXPECT_GT(some_localized, 20);   // start points that must grow, found
  EXPECT_GT(fewer_localized, 20);  // and not every start point's segments grow
  EXPECT_GT(lemma_checked, 100000);
  EXPECT_GT(past_checked, 10000);
}

}  // namespace
}  // namespace remat::chain
