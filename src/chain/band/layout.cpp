// The band's layout: which segments (s, t) it holds (t up to a cap per start point, and
// W(s, t) <= C + delta), from which m each row is stored (the least m where R(s, t, .) is finite,
// by the least-m recurrence: O(n L^2) integer steps), whether the band holds any schedule, and the
// rows' storage (a block per start point, taken whole from the band before where it is laid out
// alike). Time O(n L^2) besides the copies; memory O(n L) beside the rows.
// Source and derivation: docs/design/chain_planner.md.
#include "chain/band/band_program.hpp"

namespace remat::chain::band {

BandProgram::BandProgram(const ChainProfile& profile, std::int64_t budget, std::int64_t slots,
                         const detail::BandTuning& tuning)
    : n_(profile.layers()),
      tail_gap_(tuning.tail_gap),
      skip_block_(std::max<std::int64_t>(1, tuning.skip_block)),
      threads_(std::max<std::int64_t>(1, tuning.threads)),
      threads_from_(tuning.threads_from),
      split_lemma_(tuning.split_lemma),
      fail_block_(tuning.fail_block) {
  // `slots` units of floor(budget / slots) bytes, unless the sizes' common divisor is at least
  // that: then it is the unit, and rounding is exact (tensor sizes share large powers of two).
  for (std::int64_t b : profile.activation_bytes) divisor_ = std::gcd(divisor_, b);
  divisor_ = std::max<std::int64_t>(divisor_, 1);
  const std::int64_t share = budget / slots;
  unit_ = share <= divisor_ ? divisor_ : share;
  capacity_ = budget / unit_;
  weight_prefix_.push_back(0);
  for (std::int64_t b : profile.activation_bytes) {
    weight_.push_back((b + unit_ - 1) / unit_);
    weight_prefix_.push_back(weight_prefix_.back() + weight_.back());
    exact_ = exact_ && b % unit_ == 0;
  }
  time_prefix_.assign(static_cast<std::size_t>(n_) + 1, 0.0);
  for (std::int64_t i = 1; i <= n_; ++i) {
    time_prefix_[static_cast<std::size_t>(i)] = time_prefix_[static_cast<std::size_t>(i - 1)] +
                                                profile.forward_time[static_cast<std::size_t>(i)];
  }
  times_ = profile.forward_time;
}

// Lays out the band for `delta` and the end caps (per start point s, the last end point a good
// segment from s may have; raised here to be at least s + 1 and not to fall with s) and returns
// the bytes it needs; nothing of size beyond O(n) is allocated before solve().
std::size_t BandProgram::layout(std::int64_t delta, const std::vector<std::int64_t>& caps) {
  if (!chunks_.empty()) {
    // The band filled last: its rows are exact, and solve() takes them into this one.
    kept_.present = true;
    kept_.delta = delta_;
    kept_.last = std::move(last_);
    kept_.pair_base = std::move(pair_base_);
    kept_.start = std::move(start_);
    kept_.row_offset = std::move(row_offset_);
    kept_.chunks = std::move(chunks_);
    chunks_.clear();
  }
  delta_ = delta;
  caps_ = caps;
  for (std::int64_t s = 0; s < n_; ++s) {
    std::int64_t& cap = caps_[static_cast<std::size_t>(s)];
    cap = std::max(cap, s == 0 ? s + 1 : std::max(s + 1, caps_[static_cast<std::size_t>(s - 1)]));
  }
  last_.assign(static_cast<std::size_t>(n_), 0);
  pair_base_.assign(static_cast<std::size_t>(n_) + 1, 0);
  std::size_t pairs = 0, entries = 0;
  double approximate_entries = 0;  // the same count, which cannot wrap
  std::int64_t t = 1;
  for (std::int64_t s = 0; s < n_; ++s) {
    t = std::max(t, s + 1);
    while (t + 1 <= n_ && total(s, t + 1) <= capacity_ + delta_) ++t;
    t = std::min(t, caps_[static_cast<std::size_t>(s)]);
    // (s, s+1) is kept even when bad everywhere: its row is then empty.
    last_[static_cast<std::size_t>(s)] = t;
    pair_base_[static_cast<std::size_t>(s)] = pairs;
    pairs += static_cast<std::size_t>(t - s);
  }
  pair_base_[static_cast<std::size_t>(n_)] = pairs;
  pairs_ = pairs;
  find_starts();
  for (std::int64_t s = 0; s < n_; ++s) {
    for (std::int64_t u = s + 1; u <= last(s); ++u) {
      entries += row_length(s, u);
      approximate_entries += static_cast<double>(row_length(s, u));
    }
  }
  entries_ = entries;
  // The pairs (j, t) of the band for one t have j in one range (last() does not fall with s):
  // end_base_[t] + t - 1 - j indexes them, so a row's splits read their right parts' least
  // values from one contiguous run.
  end_base_.assign(static_cast<std::size_t>(n_) + 2, 0);
  for (std::int64_t s = 0; s < n_; ++s) {
    for (std::int64_t u = s + 1; u <= last(s); ++u) ++end_base_[static_cast<std::size_t>(u) + 1];
  }
  std::partial_sum(end_base_.begin(), end_base_.end(), end_base_.begin());
  // With a budget of petabytes counted in single bytes the count would wrap past 2^64: it
  // saturates, and the cap refuses it.
  const double approximate_bytes =
      (approximate_entries +
       kFRows * static_cast<double>(n_ + 1) * static_cast<double>(row_size()) +
       static_cast<double>(pairs) * static_cast<double>(sample_count())) *
      sizeof(double);
  if (approximate_bytes >= 0x1p63) return std::numeric_limits<std::size_t>::max();
  return entries * sizeof(double) + (pairs + 1) * sizeof(std::size_t) +
         pairs * sizeof(std::int64_t) + pairs * 2 * sizeof(Least) +
         (static_cast<std::size_t>(n_) + 2) * sizeof(std::size_t) +
         pairs * static_cast<std::size_t>(sample_count()) * sizeof(double) +
         (kFRows * static_cast<std::size_t>(n_) + 10) * row_size() * sizeof(double);
}

// The first m each row of the band stores: its first finite value (R(s, t, .) is finite from
// one m up: each condition of the recurrence is a lower limit on m, and the rows are flat past
// their tops), or past its top when it has none. These least m follow the recurrence with max
// for + and min for min, O(n L^2) integer steps, no rows; a pair the kept band had, with the
// same delta, keeps its start (its parts are kept pairs too). Below its start a row is
// infinite and not stored: at the tightest budgets a third to a half of the entries.
void BandProgram::find_starts() {
  start_.assign(pairs_, 0);
  const bool same_delta = kept_.present && kept_.delta == delta_;
  for (std::int64_t s = n_ - 1; s >= 0; --s) {
    const auto at = static_cast<std::size_t>(s);
    const std::int64_t ws = w(s);
    for (std::int64_t t = s + 1; t <= last(s); ++t) {
      std::int64_t& start = start_[pair_index(s, t)];
      if (same_delta && t <= kept_.last[at]) {
        start = kept_.start[kept_.pair_base[at] + static_cast<std::size_t>(t - s - 1)];
        continue;
      }
      const std::int64_t row_lo = band_lo(s, t), row_top = top(s, t);
      start = row_top + 1;
      if (row_lo > row_top) continue;
      std::int64_t best = t == s + 1 ? row_lo : kNever;
      std::int64_t need = ws;
      for (std::int64_t j = s + 1; j < t; ++j) {
        need = std::max(need, ws + w(j));
        if (need > row_top) break;
        best = std::min(best, std::max({need, finite_from(j, t) + ws, finite_from(s, j)}));
      }
      if (std::max(best, row_lo) <= row_top) start = std::max(best, row_lo);
    }
  }
}

// Whether the band laid out last holds a schedule (G(0, C) finite), found without filling it:
// the least m of G(0, .) from the rows' first finite m, O(n L) integer steps.
bool BandProgram::holds_a_schedule() const {
  std::vector<std::int64_t> first_pass(static_cast<std::size_t>(n_) + 1, kNever);
  first_pass[static_cast<std::size_t>(n_)] = 0;
  for (std::int64_t s = n_ - 1; s >= 0; --s) {
    const std::int64_t ws = w(s);
    std::int64_t need = ws, best = kNever;
    for (std::int64_t j = s + 1; j <= last(s); ++j) {
      if (j < n_) need = std::max(need, ws + w(j));
      if (need > capacity_) break;
      const std::int64_t rest = j == n_ ? 0 : first_pass[static_cast<std::size_t>(j)] + ws;
      best = std::min(best, std::max({need, total(s, j) - delta_, finite_from(s, j), rest}));
    }
    first_pass[static_cast<std::size_t>(s)] = best;
  }
  return first_pass[0] <= capacity_;
}

// What the rows kept from the last filled band take.
std::size_t BandProgram::kept_bytes() const {
  std::size_t entries = 0;
  for (const Rows& chunk : kept_.chunks) entries += chunk.size();
  return entries * sizeof(double) +
         (kept_.last.size() + kept_.start.size()) * sizeof(std::int64_t) +
         (kept_.pair_base.size() + kept_.row_offset.size()) * sizeof(std::size_t);
}

// Sets up each start point's block of rows, each thread a contiguous share of start points. A
// block whose kept rows this band lays out the same (the same rows, each from the same m) is
// taken as it is, lengthened in place when rows follow them: bands widened only at some start
// points (plan_profile_tuned) leave most blocks so, and nothing of the kept rows is copied or
// written. Any other block is allocated and written first here, infinite, then the kept
// band's rows copied in: a fresh allocation is faulted in on first touch, which took up to 3 s
// a band on one thread at 1000 layers and tight budgets.
void BandProgram::prepare_rows() {
  chunks_.clear();
  chunks_.resize(static_cast<std::size_t>(n_));
  const std::int64_t wanted = entries_ >= threads_from_ ? threads_ : 1;
  run_shares(wanted, [&](std::int64_t share, std::int64_t threads, const std::atomic<bool>&) {
    std::vector<std::size_t> before(static_cast<std::size_t>(n_) + 1, 0);
    for (std::int64_t s = 0; s < n_; ++s) {
      before[static_cast<std::size_t>(s) + 1] =
          before[static_cast<std::size_t>(s)] + chunk_entries_[static_cast<std::size_t>(s)];
    }
    // Start points from where the share's entries begin to where the next share's do.
    const auto start_of = [&](std::int64_t k) {
      const std::size_t at =
          entries_ / static_cast<std::size_t>(threads) * static_cast<std::size_t>(k);
      std::int64_t s = 0;
      while (s < n_ && before[static_cast<std::size_t>(s)] < at) ++s;
      return k == threads ? n_ : s;
    };
    const std::int64_t s0 = start_of(share), s1 = start_of(share + 1);
    for (std::int64_t s = s0; s < s1; ++s) {
      if (s == fail_block_) throw std::bad_alloc();
      Rows& chunk = chunks_[static_cast<std::size_t>(s)];
      const std::int64_t kept_rows = kept_rows_alike(s);
      if (kept_rows >= 0) {
        // The kept rows lie as this band lays them out, and only rows are added after them.
        chunk = std::move(kept_.chunks[static_cast<std::size_t>(s)]);
        const std::size_t kept_entries = chunk.size();
        chunk.grow(chunk_entries_[static_cast<std::size_t>(s)]);
        std::fill(chunk.data() + kept_entries, chunk.data() + chunk.size(), kInf);
        continue;
      }
      chunk.allocate(chunk_entries_[static_cast<std::size_t>(s)]);
      std::fill(chunk.data(), chunk.data() + chunk.size(), kInf);
      copy_kept(s);
    }
  });
}

// How many of start point s's rows the kept band stored exactly as this one lays them out, when
// those are all it stored (the same lo and top each, so the same offsets); -1 if none are kept
// or some row was laid out otherwise.
std::int64_t BandProgram::kept_rows_alike(std::int64_t s) const {
  const auto at = static_cast<std::size_t>(s);
  if (!kept_.present || kept_.last[at] > last(s)) return -1;
  const std::int64_t rows = kept_.last[at] - s;
  for (std::int64_t k = 0; k < rows; ++k) {
    const auto row = static_cast<std::size_t>(k);
    if (kept_.row_offset[kept_.pair_base[at] + row] != row_offset_[pair_base_[at] + row]) {
      return -1;
    }
  }
  // The next row starts where the kept ones end: the last kept row is as long, too.
  const std::size_t kept_end = kept_.chunks[at].size();
  const std::size_t end = rows < last(s) - s
                              ? row_offset_[pair_base_[at] + static_cast<std::size_t>(rows)]
                              : chunk_entries_[at];
  return kept_end == end ? rows : -1;
}

// Copies the kept band's rows of start point s into this one's, and frees them: a row's stored
// entries depend only on (s, t, m), never on the band, so they are this band's values too.
void BandProgram::copy_kept(std::int64_t s) {
  if (!kept_.present) return;
  const auto at = static_cast<std::size_t>(s);
  const std::int64_t kept_last = std::min(last(s), kept_.last[at]);
  for (std::int64_t t = s + 1; t <= kept_last; ++t) {
    const std::int64_t from = known_from(s, t), row_top = top(s, t);
    if (from > row_top) continue;
    const double* kept_row =
        kept_.chunks[at].data() +
        kept_.row_offset[kept_.pair_base[at] + static_cast<std::size_t>(t - s - 1)];
    std::copy(kept_row, kept_row + (row_top - from + 1), r(s, t) + (from - lo(s, t)));
  }
  kept_.chunks[at] = Rows{};
}

}  // namespace remat::chain::band
