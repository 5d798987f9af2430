// The first pass F(s, m) = min(R(s, n, m), min_j F(j, m - w_s) + R(s, j, m)) computed three times
// in one pass: on the band's good segments (G, the candidate) and as lower bounds over the
// derivations with a too heavy (B_W) and a too long (B_L) first-pass segment, priced by the
// knapsack bound (b) and the splitting lemma (c). When both bounds beat G(0, C), G is the full
// program's value and its plan the full program's. Time O(n (L + gap) C) per band; memory
// 7 n (C + 1) doubles. Source and derivation: docs/design/chain_planner.md.
#include "chain/band/band_program.hpp"

namespace remat::chain::band {

// Fills the band and the F passes, and checks the certificate for both kinds of bad segment.
BandProgram::Verdict BandProgram::solve(bool tight) {
  // Each start point's rows lie together, in a block of their own (see prepare_rows).
  row_offset_.clear();
  row_offset_.reserve(pairs_);
  chunk_entries_.assign(static_cast<std::size_t>(n_), 0);
  for (std::int64_t s = 0; s < n_; ++s) {
    std::size_t entries = 0;
    for (std::int64_t u = s + 1; u <= last(s); ++u) {
      row_offset_.push_back(entries);
      entries += row_length(s, u);
    }
    chunk_entries_[static_cast<std::size_t>(s)] = entries;
  }
  prepare_rows();
  least_by_start_.assign(pairs_, Least{});
  least_by_end_.assign(pairs_, Least{});
  samples_.assign(pairs_ * sample_count(), -kInf);
  fill_rows();
  forget_kept();
  const auto verdict = [&] {
    const double good = g(0)[static_cast<std::size_t>(capacity_)];
    const auto beaten = [&](double bad) {
      return bad == kInf ||
             (good < kInf && bad * (1 - kMargin) > good * (1 + kMargin) + 2 * slack());
    };
    return Verdict{beaten(bw(0)[static_cast<std::size_t>(capacity_)]),
                   beaten(bl(0)[static_cast<std::size_t>(capacity_)])};
  };
  // The splitting lemma's bounds cost about half as much again as the rest of the F passes,
  // and they certify what (b) does not only where optimal first-pass segments are long: they
  // are formed once the budget is known to be tight.
  if (tight && split_lemma_) {
    fill_f<true>();
  } else {
    fill_f<false>();
  }
  return verdict();
}

// After a band whose B_L failed: the start points s where a too long segment is not yet ruled
// out, i.e. some m where a good first pass from (0, C) to (s, m) (its least cost P(s, m), found
// forwards over the band's rows) plus the bound of a derivation from (s, m) whose first segment
// is too long does not beat G(0, C). Empty when unknown (solved without the splitting lemma).
// If B_W held, every derivation with a too heavy segment is beaten, so every one not beaten
// with a too long segment reaches its first one by good segments: at one of these s. At tight
// budgets these are a few of the start points near the chain's start (where the rest of the
// chain is long and G(s, m) large), and only their segments need to grow (2 to 165 of 1000 at
// 1-1.5% budgets).
std::vector<LongFailure> BandProgram::localized() const {
  if (long_first_.empty()) return {};
  const std::size_t size = row_size();
  const double good = g(0)[static_cast<std::size_t>(capacity_)];
  // The certificate's test loosened (sums here add in another order): bad values up to this
  // count as not beaten; more start points found is never wrong, only more work.
  const double beaten_above = (good * (1 + 2 * kMargin) + 4 * slack()) / (1 - 2 * kMargin);
  std::vector<double> prefix(static_cast<std::size_t>(n_) * size, kInf);
  std::vector<LongFailure> found;
  prefix[static_cast<std::size_t>(capacity_)] = 0;
  for (std::int64_t s = 0; s < n_; ++s) {
    const double* here = prefix.data() + static_cast<std::size_t>(s) * size;
    const double* first = long_first_.data() + static_cast<std::size_t>(s) * size;
    std::int64_t reached_from = capacity_ + 1, reached_to = -1;  // the m with a prefix
    LongFailure failure{s, -1, kInf};
    for (std::int64_t m = 0; m <= capacity_; ++m) {
      if (here[m] == kInf) continue;
      reached_from = std::min(reached_from, m);
      reached_to = m;
      const double bound = here[m] + first[m];
      if (bound > beaten_above) continue;
      if (failure.spare_units < 0) failure.spare_units = capacity_ - m;
      failure.under = std::min(failure.under, good > 0 ? bound / good : 0.0);
    }
    if (failure.spare_units >= 0) found.push_back(failure);
    const std::int64_t ws = w(s);
    std::int64_t need = ws;
    for (std::int64_t j = s + 1; j <= last(s) && j < n_ && reached_to >= 0; ++j) {
      need = std::max(need, ws + w(j));
      if (need > reached_to) break;
      double* next = prefix.data() + static_cast<std::size_t>(j) * size - ws;
      // Below the row's first entry R(s, j, m) is infinite, past its top flat.
      const std::int64_t row_lo = lo(s, j), row_top = top(s, j);
      if (row_lo > row_top) continue;
      const double* segment = r(s, j) - row_lo;
      const std::int64_t from = std::max({need, total(s, j) - delta_, reached_from, row_lo});
      for (std::int64_t m = from; m <= reached_to; ++m) {
        // A prefix that alone reaches the bar leads to no start point worth finding.
        const double cost = here[m] + segment[std::min(m, row_top)];
        if (cost < next[m] && cost <= beaten_above) next[m] = cost;
      }
    }
  }
  return found;
}

// The first u past the band's segments from s that the splitting lemma takes at an m with
// `spare_units` units under C (w_u <= w_s + spare_units), n when none.
std::int64_t BandProgram::next_lemma_split(std::int64_t s, std::int64_t spare_units) const {
  for (std::int64_t u = last(s) + 1; u < n_; ++u) {
    if (w(u) <= w(s) + spare_units) return u;
  }
  return n_;
}

// Every start point's row of past (fill_f; formed for c past C - w_s), for the tests; empty
// when not formed.
std::vector<double> BandProgram::past_rows() const {
  if (!past_formed_) return {};
  const double* from = past(0);
  return std::vector<double>(from, from + static_cast<std::size_t>(n_) * row_size());
}

// G over good segments with the full program's arithmetic; B, the least lower bound of a
// derivation with a bad segment, pricing bad segments by (b), and with kSplitLemma by the
// better of (b) and (c).
template <bool kSplitLemma>
void BandProgram::fill_f() {
  const std::size_t size = row_size();
  // The caps do not fall with s: some segment is too long exactly when one from 0 is.
  const bool any_bad = delta_ < full_delta() || caps_[0] < n_;
  // The rows of F from s on depend only on the band from s on (first-pass segments end after
  // their start): those the last pass formed the same way are kept, and only the start points
  // before them are formed again (bands widened near the chain's start redo a third of them).
  const std::int64_t from = kept_f_from<kSplitLemma>(any_bad);
  if (from == n_) {
    f_.assign(kFormedRows * static_cast<std::size_t>(n_) * size, kInf);
    long_first_.assign(kSplitLemma ? static_cast<std::size_t>(n_) * size : 0, kInf);
  } else {
    const std::size_t rows = static_cast<std::size_t>(from) * size;
    for (std::size_t k = 0; k < kFormedRows; ++k) {
      std::fill_n(f_.begin() + static_cast<std::ptrdiff_t>(k * static_cast<std::size_t>(n_) * size),
                  rows, kInf);
    }
    std::fill_n(long_first_.begin(), kSplitLemma ? rows : 0, kInf);
  }
  f_formed_ = {kSplitLemma, any_bad, delta_, last_, caps_};
  // The lemma reads past only when it is formed, and only some segment is bad then.
  past_formed_ = kSplitLemma && any_bad;
  const bool form_past = past_formed_;
  // With delta full no segment is too heavy: B_W, a bound over no derivation, stays infinite.
  const bool any_heavy = delta_ < full_delta();
  std::vector<double> knap(size), next(size);
  // Of derivations whose first segment is too long: their bounds by (b) (two, as above), and
  // by the splitting lemma (see split_bound). Without the lemma, wrow and lrow take the (b)
  // bounds directly: nothing to combine.
  std::vector<double> long_w(kSplitLemma ? size : 0), long_l(long_w.size()), lemma(long_w.size());
  Tail tail(n_ + 1, size);
  for (std::int64_t s = from - 1; s >= 0; --s) {
    std::fill(long_w.begin(), long_w.end(), kInf);
    std::fill(long_l.begin(), long_l.end(), kInf);
    std::fill(lemma.begin(), lemma.end(), -kInf);
    // Past this end point, segments from s are priced together (see below); they are all too
    // long, by tail_gap_ layers and by twice the band's longest segment.
    const std::int64_t tail_start =
        last(s) + 1 + std::max(tail_gap_, 2 * (caps_[static_cast<std::size_t>(s)] - s));
    double* grow = g(s);
    double* wrow = bw(s);
    double* lrow = bl(s);
    double* long_wrow = kSplitLemma ? long_w.data() : wrow;
    double* long_lrow = kSplitLemma ? long_l.data() : lrow;
    const std::int64_t ws = w(s);
    std::fill(knap.begin(), knap.end(), 0.0);
    double* beyond = past(s);
    std::int64_t need = ws;
    std::int64_t j = s + 1;
    bool stopped_by_need = false;
    for (; j <= n_; ++j) {
      if (j < n_) need = std::max(need, ws + w(j));
      if (need > capacity_) {
        stopped_by_need = true;
        break;
      }
      if (any_bad && j - 1 > s) {
        add_item(knap, next, w(j - 1), times_[static_cast<std::size_t>(j - 1)]);
      }
      if (form_past) lower_past(s, j, tail_start, knap, beyond);
      if (j >= tail_start) {
        // Segments s..j' for every j' >= j at once, by (b) loosened to be the same for all.
        // Their knapsack is at most this one's plus T(j..j'-1), and at most this one's plus
        // the knapsack of every layer from j on (far_knap): so segment j' costs at least
        // T(s+1..j-1) - knap + T(s+1..j'-1) + rest, and at least
        // 2 T(s+1..j'-1) - knap - far_knap + rest, rest the least of the three bounds past j'.
        extend_tail(tail, j);
        const double once = time_prefix_[static_cast<std::size_t>(j - 1)] -
                            2 * time_prefix_[static_cast<std::size_t>(s)];
        const double twice = -2 * time_prefix_[static_cast<std::size_t>(s)];
        for (std::int64_t m = need; m <= capacity_; ++m) {
          const auto c = static_cast<std::size_t>(m - ws);
          const double price = std::max(once - knap[c] + tail.once[c],
                                        twice - knap[c] - tail.far_knap[c] + tail.twice[c]);
          if (any_heavy) long_wrow[m] = std::min(long_wrow[m], price);
          long_lrow[m] = std::min(long_lrow[m], price);
        }
        break;
      }
      // Below `split` the segment is too heavy (W-bad); from it up, good, or too long (L-bad)
      // past last(s).
      const std::int64_t split = std::max(need, total(s, j) - delta_);
      const std::int64_t heavy_end = std::min(split, capacity_ + 1);
      const bool long_segment = j > last(s);
      const double inside = time(s + 1, j - 1);
      // (b): a bad segment's layers run twice, except a knapsack of them beside a_s.
      const auto bound = [&](std::int64_t m) {
        return 2 * inside - knap[static_cast<std::size_t>(m - ws)];
      };
      // A W-bad state of a stored row costs at least the row's first entry (rows fall with m),
      // one with no entry at all is infinite.
      const double clamped = long_segment ? 0.0 : (lo(s, j) <= top(s, j) ? r(s, j)[0] : kInf);
      const auto heavy_bound = [&](std::int64_t m) { return std::max(bound(m), clamped); };
      if (j == n_) {
        double* heavy_row = long_segment ? long_wrow : wrow;
        for (std::int64_t m = need; m < heavy_end; ++m)
          heavy_row[m] = std::min(heavy_row[m], heavy_bound(m));
        if (long_segment) {
          for (std::int64_t m = split; m <= capacity_; ++m)
            long_lrow[m] = std::min(long_lrow[m], bound(m));
        } else {
          for (std::int64_t m = split; m <= capacity_; ++m)
            grow[m] = std::min(grow[m], r_at(s, j, m));
        }
        continue;
      }
      const double* grest = g(j) - ws;
      const double* wrest = bw(j) - ws;
      const double* lrest = bl(j) - ws;
      const double* anyrest = low(j) - ws;
      {
        double* heavy_w = long_segment ? long_wrow : wrow;
        double* heavy_l = long_segment ? long_lrow : lrow;
        for (std::int64_t m = need; m < heavy_end; ++m) {
          const double price = heavy_bound(m);
          double heavy = anyrest[m] + price, heavy_long = lrest[m] + price;
          if constexpr (kSplitLemma) {
            // lemma[m]: the splitting lemma's bound over u < j, for the whole derivation
            heavy = std::max(heavy, lemma[static_cast<std::size_t>(m)]);
            heavy_long = std::max(heavy_long, lemma[static_cast<std::size_t>(m)]);
          }
          heavy_w[m] = std::min(heavy_w[m], heavy);
          heavy_l[m] = std::min(heavy_l[m], heavy_long);
        }
      }
      if constexpr (kSplitLemma) {
        if (!long_segment) split_bound(s, j, need, form_past, lemma.data());
      }
      if (long_segment) {
        for (std::int64_t m = split; m <= capacity_; ++m) {
          const double price = bound(m);
          long_lrow[m] = std::min(long_lrow[m], anyrest[m] + price);
          if (any_heavy) long_wrow[m] = std::min(long_wrow[m], wrest[m] + price);
        }
      } else if (lo(s, j) <= top(s, j) && std::max(split, lo(s, j)) <= capacity_) {
        // Below the row's first entry the segment is infinite: nothing to lower there.
        const double* segment = r(s, j) - lo(s, j);
        const std::int64_t seg_end = top(s, j) + 1, first = std::max(split, lo(s, j));
        std::int64_t m = first;
        for (; m < seg_end; ++m) {
          grow[m] = std::min(grow[m], grest[m] + segment[m]);
          lrow[m] = std::min(lrow[m], lrest[m] + segment[m]);
        }
        const double flat = segment[seg_end - 1];
        for (; m <= capacity_; ++m) {
          grow[m] = std::min(grow[m], grest[m] + flat);
          lrow[m] = std::min(lrow[m], lrest[m] + flat);
        }
        for (m = first; any_heavy && m <= capacity_; ++m) {
          wrow[m] = std::min(wrow[m], wrest[m] + segment[std::min(m, seg_end - 1)]);
        }
      }
    }
    // past(s) also takes the segments that need more than C units: with C + w_s they fit as
    // long as none of their outputs is over C.
    for (; form_past && stopped_by_need && j <= n_; ++j) {
      if (j < n_ && w(j) > capacity_) break;
      if (j - 1 > s) add_item(knap, next, w(j - 1), times_[static_cast<std::size_t>(j - 1)]);
      lower_past(s, j, tail_start, knap, beyond);
      if (j >= tail_start) break;  // its floor holds every longer segment
    }
    if constexpr (kSplitLemma) {
      double* first = long_first_.data() + static_cast<std::size_t>(s) * size;
      for (std::size_t m = 0; m < size; ++m) {
        first[m] = std::max(long_l[m], lemma[m]);
        wrow[m] = std::min(wrow[m], std::max(long_w[m], lemma[m]));
        lrow[m] = std::min(lrow[m], first[m]);
      }
    }
    double* lower = low(s);
    for (std::size_t m = 0; m < size; ++m) lower[m] = std::min({grow[m], wrow[m], lrow[m]});
  }
}

// The first start point from which the rows of F the last pass formed are this band's too: the
// same kind of pass, the same delta, and from there on the same caps and last end points (n_
// when none are).
template <bool kSplitLemma>
std::int64_t BandProgram::kept_f_from(bool any_bad) const {
  const FormedBy& last = f_formed_;
  if (last.split_lemma != kSplitLemma || last.any_bad != any_bad || last.delta != delta_ ||
      last.last.size() != last_.size() || f_.empty()) {
    return n_;
  }
  std::int64_t from = n_;
  while (from > 0) {
    const auto at = static_cast<std::size_t>(from - 1);
    if (last.last[at] != last_[at] || last.caps[at] != caps_[at]) break;
    --from;
  }
  return from;
}

// Lowers past(s)[c], the bound of F(s, c + w_s), by the first-pass segments (s, j): (b) prices
// (s, j) at c + w_s units by the knapsack beside a_s within c units, and the rest of such a
// derivation has c units, where the rows of F are known (low(j)[c]). From tail_start on, every
// longer segment at once: (b) grows with the end point, and a rest costs at least 0. Only the c
// past C - w_s are formed: the lemma reads past(s) only where c + w_s is past C.
void BandProgram::lower_past(std::int64_t s, std::int64_t j, std::int64_t tail_start,
                             const std::vector<double>& knap, double* beyond) const {
  const double twice_inside = 2 * time(s + 1, j - 1);
  const auto first = static_cast<std::size_t>(std::max<std::int64_t>(0, capacity_ - w(s) + 1));
  if (j == n_ || j >= tail_start) {
    for (std::size_t c = first; c < knap.size(); ++c) {
      beyond[c] = std::min(beyond[c], twice_inside - knap[c]);
    }
    return;
  }
  const double* rest = low(j);
  for (std::size_t c = first; c < knap.size(); ++c) {
    beyond[c] = std::min(beyond[c], twice_inside - knap[c] + rest[c]);
  }
}

// The splitting lemma (c): a derivation whose first segment (s, t) runs past the band costs at
// least R(s, u, m) + tau_u + F(u, m - w_s + w_u) for every stored u, since F(u, m - w_s + w_u)
// <= R(u, t, m - w_s + w_u) + F(t, m - w_s), the rest of that derivation. u is taken where
// m - w_s + w_u <= C (F is known only there). Raises lemma[m] to that bound for this u.
void BandProgram::split_bound(std::int64_t s, std::int64_t u, std::int64_t need, bool with_past,
                              double* lemma) const {
  const std::int64_t ws = w(s), wu = w(u);
  const std::int64_t row_lo = lo(s, u), row_top = top(s, u);
  if (row_lo > row_top) return;
  const double* piece = r(s, u) - row_lo;
  const double tau = times_[static_cast<std::size_t>(u)];
  // lemma[m] >= R(s, u, m) + tau + rest[m] for m in [from, to], R(s, u, m) taken at the row's
  // first entry below it (rows fall with m) and at its top past it (flat there): three runs
  // rather than a clamp at every m.
  const auto raise = [&](const double* rest, std::int64_t from, std::int64_t to) {
    std::int64_t m = from;
    for (const double below = piece[row_lo]; m <= to && m < row_lo; ++m) {
      lemma[m] = std::max(lemma[m], below + tau + rest[m]);
    }
    for (; m <= to && m <= row_top; ++m) lemma[m] = std::max(lemma[m], piece[m] + tau + rest[m]);
    for (const double above = piece[row_top]; m <= to; ++m) {
      lemma[m] = std::max(lemma[m], above + tau + rest[m]);
    }
  };
  const std::int64_t end = std::min(capacity_, capacity_ + ws - wu);
  raise(low(u) + wu - ws, need, end);
  // Past C, F(u, m - w_s + w_u) by past(u)[m - w_s] (lower_past): every u serves at every m,
  // where low(u) serves only those no larger than a_s at m = C.
  if (with_past) raise(past(u) - ws, std::max(need, end + 1), capacity_);
}

// Brings the tail down to the segments ending at `from` and after (nothing past the chain's
// end, j = n).
void BandProgram::extend_tail(Tail& tail, std::int64_t from) {
  while (tail.from > from) {
    const std::int64_t j = --tail.from;
    const double before = time_prefix_[static_cast<std::size_t>(j - 1)];
    if (j == n_) {
      for (double& v : tail.once) v = std::min(v, before);
      for (double& v : tail.twice) v = std::min(v, 2 * before);
      continue;
    }
    add_item(tail.far_knap, tail.next, w(j), times_[static_cast<std::size_t>(j)]);
    const double* rest = low(j);
    for (std::size_t c = 0; c < tail.once.size(); ++c) {
      tail.once[c] = std::min(tail.once[c], before + rest[c]);
      tail.twice[c] = std::min(tail.twice[c], 2 * before + rest[c]);
    }
  }
}

// 0/1 knapsack over capacities 0..C: knap[c] = the most time of the items added within c units.
void BandProgram::add_item(std::vector<double>& knap, std::vector<double>& next,
                           std::int64_t weight, double value) {
  const auto wt = static_cast<std::size_t>(weight);
  if (wt >= knap.size()) return;
  std::copy(knap.begin(), knap.begin() + static_cast<std::ptrdiff_t>(wt), next.begin());
  for (std::size_t c = wt; c < knap.size(); ++c) next[c] = std::max(knap[c], knap[c - wt] + value);
  knap.swap(next);
}

}  // namespace remat::chain::band
