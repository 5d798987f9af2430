// The recurrence R(s, t, m) = min_j T(s+1..j) + R(j, t, m - w_s) + R(s, j, m) over the band's rows,
// in tiles of end points, as a wavefront over start points on up to 8 threads (every entry the
// same double as with one), each split applied only where bound (a) leaves it and in blocks its
// samples do not rule out. Time O(n L^2 delta) at worst, far less in practice; memory: the rows.
// Source (Beaumont et al., "Optimal checkpointing for heterogeneous chains", 2019) and
// derivation: docs/design/chain_planner.md.
#include "chain/band/band_program.hpp"

namespace remat::chain::band {

// Fills every row. (s, t) needs (s, j) and (j, t) for s < j < t: in a tile of end points,
// start points downwards and end points upwards fill both first. The tile's right parts (j, t)
// stay in cache, and the left parts (s, j), which lie together, are read once for the whole
// tile. With several threads, thread k fills the rows s = k mod threads, in that order, each
// (s, t) once row s + 1 is done up to t (rows past s + 1 were done before it): a wavefront
// whose order is the one above, so every entry is the same double.
void BandProgram::fill_rows() {
  const std::int64_t wanted = entries_ >= threads_from_ ? threads_ : 1;
  std::vector<std::atomic<std::int64_t>> done(static_cast<std::size_t>(n_) + 1);
  const auto fill_share = [&](std::int64_t share, std::int64_t threads,
                              const std::atomic<bool>& failed) {
    std::int64_t first_start = 0;
    for (std::int64_t t0 = 1; t0 <= n_; t0 += kTileEnds) {
      const std::int64_t t1 = std::min(n_, t0 + kTileEnds - 1);
      while (last(first_start) < t0) ++first_start;
      for (std::int64_t s = t1 - 1; s >= first_start; --s) {
        if (s % threads != share) continue;
        auto& below = done[static_cast<std::size_t>(s) + 1];
        const std::int64_t t_end = std::min(t1, last(s));
        for (std::int64_t t = std::max(t0, s + 1); t <= t_end; ++t) {
          if (threads > 1) {
            for (int spins = 0; t > s + 1 && below.load(std::memory_order_acquire) < t;) {
              // The row below will never be done: run_shares rethrows the other share's error.
              if (failed.load(std::memory_order_acquire)) return;
              if (++spins > 64) std::this_thread::yield();
            }
          }
          fill_r(s, t, known_from(s, t));
          note_least(s, t);
          done[static_cast<std::size_t>(s)].store(t, std::memory_order_release);
        }
        done[static_cast<std::size_t>(s)].store(t1, std::memory_order_release);
      }
    }
  };
  run_shares(wanted, fill_share);
}

// The row of (s, t) below `known_from` (from it up, the row holds its values already).
void BandProgram::fill_r(std::int64_t s, std::int64_t t, std::int64_t known_from) {
  const std::int64_t row_lo = lo(s, t), row_top = top(s, t);
  const std::int64_t stop = std::min(row_top, known_from - 1);
  if (row_lo > stop) return;
  double* row = r(s, t) - row_lo;  // row[m] for m in [row_lo, row_top]
  if (t == s + 1) {
    for (std::int64_t m = row_lo; m <= stop; ++m) row[m] = 0;
    return;
  }
  const double floor = time(s + 1, t - 1);
  const std::int64_t ws = w(s);
  // The least values of the parts (s, j) and (j, t), j = s + 1, s + 2, ...
  const Least* left_least = least_by_start_.data() + pair_index(s, s + 1);
  const Least* right_least = least_by_end_.data() + end_index(s + 1, t);
  std::int64_t need = ws;
  for (std::int64_t j = s + 1; j < t; ++j) {
    need = std::max(need, ws + w(j));
    if (need > stop) break;
    // (a): every m whose best so far is below the floor of this split, and of every later
    // split, is settled. The best is non-increasing in m, so those m form a suffix.
    const double bound = (floor + time(s + 1, j - 1)) * (1 - kMargin) - slack();
    if (row[std::max(row_lo, need)] < bound) break;
    const Least& left_part = left_least[j - s - 1];
    const Least& right_part = right_least[-(j - s - 1)];
    // Below the first m where both parts are finite the split's value is infinite.
    const std::int64_t first =
        std::max({row_lo, need, left_part.finite_from, right_part.finite_from + ws});
    if (first > stop || row[first] < bound) continue;
    // The split's value at each m is no lower than at the top of both parts, formed in the
    // same order (rounded sums are monotone): where the row is already no higher, it stays.
    const double cost = time(s + 1, j);
    const double least = cost + right_part.value + left_part.value;
    if (least >= row[first]) continue;
    std::int64_t low = first, high = row_top + 1;  // row[low] stays; find the first that does not
    while (high - low > 1) {
      const std::int64_t mid = low + (high - low) / 2;
      (row[mid] < bound || row[mid] <= least ? high : low) = mid;
    }
    // The known part of the row is final and no higher than the rest: the search above finds
    // the same end below it as on a row filled from scratch.
    relax(row, first, std::min(high, stop + 1), cost, s, j, t);
  }
}

// Records R(s, t, top), the least value of the row (it only falls with m), for the splits of
// longer segments that have (s, t) as a part.
void BandProgram::note_least(std::int64_t s, std::int64_t t) {
  Least least;
  const std::int64_t row_lo = lo(s, t), row_top = top(s, t);
  if (row_lo <= row_top) {
    const double* row = r(s, t) - row_lo;
    least.value = row[row_top];
    if (least.value < kInf) {
      // The row falls with m: its finite entries are a suffix.
      std::int64_t low = row_lo - 1, high = row_top;  // row[high] finite; row[low] not or none
      while (high - low > 1) {
        const std::int64_t mid = low + (high - low) / 2;
        (row[mid] < kInf ? high : low) = mid;
      }
      least.finite_from = high;
    }
  }
  least_by_start_[pair_index(s, t)] = least;
  const std::size_t by_end = end_index(s, t);
  least_by_end_[by_end] = least;
  if (row_lo <= row_top) {
    const double* row = r(s, t) - row_lo;
    double* samples = samples_.data() + by_end * sample_count();
    for (std::int64_t k = row_lo / skip_block_; k < sample_count(); ++k) {
      samples[k] = row[std::min(row_top, k * skip_block_ + skip_block_ - 1)];
    }
  }
}

}  // namespace remat::chain::band
