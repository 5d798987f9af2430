// Optimal checkpointing of a heterogeneous chain under a budget in bytes: the dynamic program of
// rotor-style planners (Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova, "Optimal checkpointing
// for heterogeneous chains", 2019), written for this project's model (the first pass is free,
// a_0 counts, the working value of a forward counts, backward needs a_{i-1}), computed on a band
// of its states with a certificate that the states outside cannot matter.
//
//   R(s, t, m): least recompute time to run backward t..s+1 with a_s held, m units available
//               (a_s included), nothing of the segment held.
//               R(s, s+1, m) = 0 if w_s <= m;
//               R(s, t, m) = min_j T(s+1..j) + R(j, t, m - w_s) + R(s, j, m),
//               where the forward s+1..j needs w_s + max(w_{s+1..j}) <= m.
//   F(s, m):    the same during the first pass, whose forward is free:
//               F(s, m) = min( R(s, n, m), min_j F(j, m - w_s) + R(s, j, m) ).
// Memory is counted in units u = floor(budget / slots), or the sizes' greatest common divisor D
// when u would be no more than D (then every size is a whole number of units and the program is
// exact in bytes), with every size rounded up, so a plan fits the true budget; it is optimal among
// schedules whose rounded sizes fit (so at least as good as the true optimum for budget - n u).
// With one byte per activation and slots >= budget, u = 1 and the program is exact; it then
// reproduces the unit model's optimum (tested).
//
// The band. Let W(s, t) = w_s + ... + w_{t-1}, what the segment needs to keep everything. Call
// (s, t, m) good when W(s, t) <= m + delta and t <= cap(s), for end caps that do not fall with s
// (at first cap(s) = s + L for all s). Both children of a good state are good (the left one keeps
// m and is shorter, the right one (j, t) has t <= cap(s) <= cap(j), loses w_s of m and at least
// w_s of W), so R is computed exactly on the good states alone: rows of at most delta + 1
// entries, for the segments within the caps with W(s, t) <= C + delta. Conversely every
// ancestor of a bad state is bad, so a derivation that uses a bad state uses a bad first-pass
// segment. Two facts, both by induction on the recurrence, bound the recurrence from below:
//   (a) the value of R(s, t, m) through split j is at least T(s+1..t-1) + T(s+1..j-1) (every
//       layer of both parts runs again at least once). This prunes the split search exactly: the
//       best value so far does not grow with m and the bound grows with j, so split j only needs
//       the m whose best is still at least its bound (a prefix), and the search stops at the first
//       j with none.
//   (b) R(s, t, m) >= 2 T(s+1..t-1) - K(s, t, m - w_s), K the 0/1 knapsack of the times of
//       layers s+1..t-1 within m - w_s units (the left part runs twice; the right part's once-run
//       layers and a_j fit beside a_s).
//   (c) the splitting lemma: R(s, t, m) >= R(s, u, m) + tau_u + R(u, t, m - w_s + w_u) for
//       s < u < t, by induction on t - s, with cases on the first split j (before u: the
//       induction on (j, t) and split j of (s, u); at u: monotone in m; past u: the induction
//       on (s, j) and split j of (u, t)). A segment too long or too heavy for the band thus
//       costs at least a stored part of it plus the rest of the first pass from u with
//       w_u - w_s more memory (fill_f, split_bound).
//       At tight budgets, where optimal first-pass segments are hundreds of layers long, (b)
//       stays 20-25% under the optimum and the band grew to the full table; (c) certifies a
//       band of 256 (1000 layers, 1% of the activation bytes, seeds 1 and 3).
//       The rest, F(u, m - w_s + w_u), lies past C where w_u > w_s + C - m (at m = C, every u
//       with an output larger than a_s). There it is bounded from the rows up to C alone
//       (past, lower_past): a first-pass segment (u, j) with c + w_u units is priced by (b),
//       whose knapsack beside a_u gets c units, and the rest of the derivation has c units, so
//       F(u, c + w_u) >= min_j 2 T(u+1..j-1) - K(c) + min(G, B_W, B_L)(j, c). Only the c past
//       C - w_u are formed. At 1000 layers and a 1.5% budget (seed 2) this certified the band
//       of 256 layers where one of 384 was needed before (B_L 0.7% under G without it).
// F is computed three times in one pass: on good segments only (G, the candidate, with the same
// arithmetic as the full program), and as lower bounds B_W and B_L over the derivations with at
// least one too-heavy (W(s, t) > m + delta) and at least one too-long (t > cap(s)) first-pass
// segment, bad segments priced by the better of (b) and (c), good ones exactly; (c) costs about
// half as much again as the rest of the pass, so it is formed only once a band has widened. If
// B_W(0, C) and B_L(0, C) both exceed G(0, C) by a relative 1e-9 (far above rounding), no bad
// derivation is optimal or tied, so G(0, C) is the full program's value to the last bit and its
// first minimizers, hence the plan, are the full program's too. Otherwise delta becomes full
// (W(0, n + 1)) if B_W failed, and caps grow if B_L did: only at the start points where it failed
// (below), the segments from them twice as long (by half from 256 layers). With delta full and
// every cap at n every state is good: the full program, which small problems (n^3 C / 6 <= 2e7)
// run at once.
//
// Where B_L fails. A derivation with a too long segment reaches its first one, at (s, m), by good
// segments (if B_W held, a too heavy one is ruled out already), so B_L(0, C) is the least over
// (s, m) of P(s, m), the least cost of a good first pass from (0, C) to (s, m) (a forward pass
// over the band's rows), plus the bound of a derivation from (s, m) whose first segment is too
// long (kept from fill_f). Only the s where that sum does not beat G(0, C) need longer segments
// (localized). At tight budgets the bound by (c) stays a few percent under the optimum, which
// the prefix P makes up for all but the start points near the chain's start: at 1000 layers and
// 1-1.5% budgets, 2 to 165 of 1000, where growing every start point's segments filled
// up to twice the rows and took up to three bands more.
// Where that bound stays far under G at a start point, its segments grow at least to the next
// output the lemma can split at (kFarUnder), and fourfold when very far under (kVeryFarUnder).
//
// Time: the full program is O(n^3 C / 6). The band has at most n L segments of at most delta + 1
// entries each, minimized over the splits that (a) leaves: O(n L^2 delta) at worst, far less in
// practice (the first band, delta = C / 4 + max w and L = 64, is enough unless the budget is
// within a few times the largest pair of adjacent sizes; then the band widens, up to the full
// program). Each band also takes the F passes and their knapsacks (see below). Memory: the band's
// rows and offsets, its rows' samples (one in B = skip_block), 6 n (C + 1) doubles for F (G, B_W,
// B_L and their least), the too long bounds and P, and 10 (C + 1) of scratch rows, accounted before
// the allocation. Segments are filled in tiles of kTileEnds end points; within a tile by start
// point downwards, then end point upwards, so both parts of a segment are filled before it and each
// start point's left parts are read once per tile rather than once per end point (the fill is bound
// by memory traffic). The plan is rebuilt by re-evaluating the minimizations, never stored.
//
// These keep the widening cheap; none changes the objective or the plan:
//   - A band that holds no schedule at all is never filled: the least m at which each stored
//     R(s, t, .) is finite follows the recurrence with max for + and min for min, O(n L^2)
//     integer steps, and G(0, C) is finite exactly when its least m is at most C. Such a band
//     widens unfilled (a schedule of a wider band is a bad derivation here, so a filled one would
//     widen too). No schedule at all is known at once: recomputing from a_0 needs least units.
//   - A widened band keeps the last band's rows (a stored R(s, t, m) does not depend on the band)
//     and fills only below them; the split search finds the same ends as from scratch, since the
//     kept part of a row is final and no higher than the rest. Each start point's rows lie in a
//     block of their own: one laid out alike (its caps and delta changed nothing there) is taken
//     whole (lengthened in place when only rows follow), others are copied into a fresh block.
//     Growing at a few start points thus writes only their blocks (one large block copied per
//     band took 0.9-1.5 s at 1000 layers and a 1% budget).
//   - A row is stored from its first finite m (find_starts: the least-m recurrence), not from the
//     band's lower limit: at 1% budgets 35-56% of the band's entries lie below it.
//   - The rows of F from a start point on depend only on the band from there on: those whose
//     band did not change are kept (kept_f_from), and with delta full B_W, a bound over no
//     derivation, is not formed.
//   - In the F passes, first-pass segments from s longer than the band's by a gap (2 L, at least
//     tail_gap layers) are priced all at once, as (b) loosened to hold for all of them: a segment
//     to j' >= J costs at least max(T(s+1..J-1) - K_J + T(s+1..j'-1), 2 T(s+1..j'-1) - K_J - K')
//     plus its rest, K_J the knapsack of s+1..J-1 and K' that of every layer from J on, so two
//     suffix minima over j' of (T or 2 T)(1..j'-1) + rest serve every s. The F passes then take
//     O(n (L + gap) C) rather than O(n^2 C).
// The rows are filled by the machine's cores (at most 8) in a wavefront over start points
// (fill_rows), every entry the same double as with one thread; they are allocated unwritten and
// first written (infinite, then the kept band's rows) by all cores too (prepare_rows). Each filled
// row leaves its least value (at its top) and its first finite m in two small arrays, laid out so
// that a row's splits read them in one run. A split is applied only from the first m where both its
// parts are finite, and only to the prefix of the row still above the split's least value (the sum
// of its parts' least values, formed in the same order, is no higher than its value at any m); the
// prefix is applied in blocks of m, and a block where the split's value at its last m is no lower
// than the row at its first is skipped (lower_blocks). All three are exact, and at tight budgets,
// where most splits improve few m, they skip most of the fill's traffic. The blocks end where the
// right part's samples are (every B-th m, kept by end point beside the least values): a block test
// then reads a sample that is in cache rather than the right part's row, which is not (the test's
// load was half the fill's time at 1000 layers and 1% budgets; now 0.8x the time). The full program
// is kept as plan_profile_reference (profile_reference.cpp) for the tests and the benchmark.
#include "chain/profile_planner.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "common/text.hpp"
#include "remat/chain.hpp"
#include "remat/errors.hpp"

namespace remat::chain {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// A least m that no m reaches.
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max() / 4;
// A split or a bad derivation is set aside only when its lower bound exceeds the value it must
// beat by this relative margin plus this fraction of the chain's total time: floating-point
// sums of these magnitudes (times as prefix-sum differences, at most n per value) err by far
// less.
constexpr double kMargin = 1e-9;
// End points filled together (see solve()); 16 was fastest of 4 to 64 at 1000 layers.
constexpr std::int64_t kTileEnds = 16;
// From this length on, the segments from a start point whose too long ones are not ruled out grow
// by half, not double (plan_profile_tuned): at 1000 layers and a 1% budget (seed 2), doubling
// from 256 to 512 fell short and the next step filled the whole table (11 s); 384, then 576 hold.
constexpr std::int64_t kLargeBandLength = 256;
// Where the bound on a too long first segment from s stays this far under G(0, C) at some m
// (localized), the splitting lemma lacks a split: at that m it takes only the u with w_u <= w_s
// + C - m (F is known only up to C), and segments that stop before the next such u add nothing
// to it, however much longer. At 1000 layers and a 1% budget (seed 2) that bound from s = 0
// stayed 24% under G at 256 and 384 layers: w_0 is 13 units, and no output from 149 to 539 is
// that small; at 540 it passed G. So such a start point's segments grow at least to that u, when
// it is at most kFarthestReach times their length away (two steps of growth by half): three
// bands where four were filled, the same plan. Within 5% of G the bounds of the rest of the
// chain past s, which grow with every band, close the gap at 1-1.5% budgets.
constexpr double kFarUnder = 0.95;
constexpr double kFarthestReach = 2.25;
// Where it stays more than 20% under G, segments shorter than kLargeBandLength grow fourfold, not
// double: the stored part of a too long segment, which the lemma prices, grows faster than its
// length, and at 1000 layers and a 1% budget (seed 2) the bound from s = 0 went from 28% under
// at 128 layers to 5.5% under at 256 and needed 540; at 512, reached at once, it holds (two
// bands where three were filled, the same plan).
constexpr double kVeryFarUnder = 0.8;
// Rows of C + 1 doubles per start point beside the band: G, B_W, B_L, the least of the three, a
// bound of F past C (past), the bound of a derivation whose first segment is too long
// (localized), and the cost of the first pass up to s (prefix).
constexpr std::size_t kFRows = 7;
// Of those, the ones fill_f forms (G, B_W, B_L, the least of the three, and the bound of F past
// C that the splitting lemma reads).
constexpr std::size_t kFormedRows = 5;

// A start point where a derivation whose first too long segment starts is not ruled out
// (BandProgram::localized).
struct LongFailure {
  std::int64_t start;
  std::int64_t spare_units;  // C - m at the least m where it is not
  double under;              // the least (its bound) / G(0, C) there
};

class BandProgram {
 public:
  BandProgram(const ChainProfile& profile, std::int64_t budget, std::int64_t slots,
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

  // The first band's delta: a quarter of the budget plus the largest size.
  std::int64_t first_delta() const {
    return std::max<std::int64_t>(
        1, capacity_ / 4 + *std::max_element(weight_.begin(), weight_.end()));
  }
  // From this up no segment is too heavy.
  std::int64_t full_delta() const { return std::max<std::int64_t>(weight_prefix_.back(), 1); }

  // Lays out the band for `delta` and the end caps (per start point s, the last end point a good
  // segment from s may have; raised here to be at least s + 1 and not to fall with s) and returns
  // the bytes it needs; nothing of size beyond O(n) is allocated before solve().
  std::size_t layout(std::int64_t delta, const std::vector<std::int64_t>& caps) {
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
  void find_starts() {
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
  bool holds_a_schedule() const {
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

  struct Verdict {
    bool heavy_ok, long_ok;  // no W-bad (L-bad) derivation is optimal or tied
  };

  // Fills the band and the F passes, and checks the certificate for both kinds of bad segment.
  Verdict solve(bool tight) {
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
  std::vector<LongFailure> localized() const {
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
  std::int64_t next_lemma_split(std::int64_t s, std::int64_t spare_units) const {
    for (std::int64_t u = last(s) + 1; u < n_; ++u) {
      if (w(u) <= w(s) + spare_units) return u;
    }
    return n_;
  }

  // Every start point's row of past (fill_f; formed for c past C - w_s), for the tests; empty
  // when not formed.
  std::vector<double> past_rows() const {
    if (!past_formed_) return {};
    const double* from = past(0);
    return std::vector<double>(from, from + static_cast<std::size_t>(n_) * row_size());
  }

  // What the rows kept from the last filled band take.
  std::size_t kept_bytes() const {
    std::size_t entries = 0;
    for (const Rows& chunk : kept_.chunks) entries += chunk.size();
    return entries * sizeof(double) +
           (kept_.last.size() + kept_.start.size()) * sizeof(std::int64_t) +
           (kept_.pair_base.size() + kept_.row_offset.size()) * sizeof(std::size_t);
  }
  void forget_kept() { kept_ = Kept{}; }

  double best() const { return g(0)[static_cast<std::size_t>(capacity_)]; }
  double heavy_bound() const { return bw(0)[static_cast<std::size_t>(capacity_)]; }
  double long_bound() const { return bl(0)[static_cast<std::size_t>(capacity_)]; }
  std::int64_t unit() const { return unit_; }
  std::int64_t capacity() const { return capacity_; }
  std::int64_t divisor() const { return divisor_; }
  bool exact() const { return exact_; }
  // What recomputing everything from a_0 holds at most, in units: a_0 and the largest output
  // before the last.
  std::int64_t least_units() const {
    return w(0) + (n_ > 1 ? *std::max_element(weight_.begin() + 1, weight_.begin() + n_) : 0);
  }

  void emit(const ActionSink& sink) const {
    struct Task {
      std::int64_t s, t, m;
    };
    std::vector<Task> segments;
    std::int64_t s = 0, m = capacity_;
    while (true) {
      const std::int64_t j = f_choice(s, m);
      sink(Action::forward(s + 1, j));
      segments.push_back({s, j, m});
      if (j == n_) break;
      m -= w(s);
      s = j;
    }
    std::vector<Task> stack(segments.begin(), segments.end());
    while (!stack.empty()) {
      const Task task = stack.back();
      stack.pop_back();
      if (task.t == task.s + 1) {
        sink(Action::backward(task.t));
        sink(Action::free(task.s));
        continue;
      }
      const std::int64_t j = r_choice(task.s, task.t, task.m);
      sink(Action::forward(task.s + 1, j));
      stack.push_back({task.s, j, task.m});
      stack.push_back({j, task.t, task.m - w(task.s)});
    }
  }

 private:
  std::size_t row_size() const { return static_cast<std::size_t>(capacity_) + 1; }
  // Samples of a row kept beside it, at m = k B + B - 1 (B = skip_block_), k < this.
  std::int64_t sample_count() const { return capacity_ / skip_block_ + 1; }
  std::int64_t w(std::int64_t i) const { return weight_[static_cast<std::size_t>(i)]; }
  std::int64_t total(std::int64_t s, std::int64_t t) const {
    return weight_prefix_[static_cast<std::size_t>(t)] -
           weight_prefix_[static_cast<std::size_t>(s)];
  }
  double time(std::int64_t first, std::int64_t last) const {
    return time_prefix_[static_cast<std::size_t>(last)] -
           time_prefix_[static_cast<std::size_t>(first - 1)];
  }
  std::int64_t last(std::int64_t s) const { return last_[static_cast<std::size_t>(s)]; }
  double slack() const { return kMargin * time_prefix_.back(); }
  // The good states of (s, t): m from this up.
  std::int64_t band_lo(std::int64_t s, std::int64_t t) const {
    return std::max(w(s), total(s, t) - delta_);
  }
  // The stored entries of (s, t): m in [lo, top], lo the first finite one of the good states
  // (find_starts; past top when none is); above top the row is flat.
  std::int64_t lo(std::int64_t s, std::int64_t t) const { return start_[pair_index(s, t)]; }
  // The first m where R(s, t, .) is finite in the band, kNever when none is.
  std::int64_t finite_from(std::int64_t s, std::int64_t t) const {
    const std::int64_t start = lo(s, t);
    return start <= top(s, t) ? start : kNever;
  }
  std::int64_t top(std::int64_t s, std::int64_t t) const {
    return std::min(capacity_, total(s, t));
  }
  std::size_t row_length(std::int64_t s, std::int64_t t) const {
    return static_cast<std::size_t>(std::max<std::int64_t>(0, top(s, t) - lo(s, t) + 1));
  }
  bool good(std::int64_t s, std::int64_t t, std::int64_t m) const {
    return t <= last(s) && total(s, t) - delta_ <= m;
  }
  // Index of (s, t) among the pairs laid out by end point (end_base_).
  std::size_t end_index(std::int64_t s, std::int64_t t) const {
    return end_base_[static_cast<std::size_t>(t)] + static_cast<std::size_t>(t - 1 - s);
  }
  std::size_t pair_index(std::int64_t s, std::int64_t t) const {
    return pair_base_[static_cast<std::size_t>(s)] + static_cast<std::size_t>(t - s - 1);
  }
  // Row of (s, t), indexed by m - lo(s, t).
  double* r(std::int64_t s, std::int64_t t) {
    return chunks_[static_cast<std::size_t>(s)].data() + row_offset_[pair_index(s, t)];
  }
  const double* r(std::int64_t s, std::int64_t t) const {
    return chunks_[static_cast<std::size_t>(s)].data() + row_offset_[pair_index(s, t)];
  }
  // R(s, t, m) for a good state.
  double r_at(std::int64_t s, std::int64_t t, std::int64_t m) const {
    const std::int64_t row_lo = lo(s, t);
    return m < row_lo ? kInf : r(s, t)[std::min(m, top(s, t)) - row_lo];
  }
  double* g(std::int64_t s) { return f_.data() + static_cast<std::size_t>(s) * row_size(); }
  const double* g(std::int64_t s) const {
    return f_.data() + static_cast<std::size_t>(s) * row_size();
  }
  // The lower bounds over derivations with a W-bad (too heavy) and with an L-bad (too long)
  // first-pass segment.
  double* bw(std::int64_t s) { return f_.data() + static_cast<std::size_t>(n_ + s) * row_size(); }
  const double* bw(std::int64_t s) const {
    return f_.data() + static_cast<std::size_t>(n_ + s) * row_size();
  }
  double* bl(std::int64_t s) {
    return f_.data() + static_cast<std::size_t>(2 * n_ + s) * row_size();
  }
  const double* bl(std::int64_t s) const {
    return f_.data() + static_cast<std::size_t>(2 * n_ + s) * row_size();
  }
  // The least of G, B_W and B_L: a lower bound of F(s, m) over every derivation, what the rows
  // before s read as the rest of theirs (one row read rather than three).
  double* low(std::int64_t s) {
    return f_.data() + static_cast<std::size_t>(3 * n_ + s) * row_size();
  }
  const double* low(std::int64_t s) const {
    return f_.data() + static_cast<std::size_t>(3 * n_ + s) * row_size();
  }
  // past(u)[c]: a lower bound of F(u, c + w_u) past C (c in C - w_u + 1 .. C; see lower_past).
  double* past(std::int64_t s) {
    return f_.data() + static_cast<std::size_t>(4 * n_ + s) * row_size();
  }
  const double* past(std::int64_t s) const {
    return f_.data() + static_cast<std::size_t>(4 * n_ + s) * row_size();
  }

  // Fills every row. (s, t) needs (s, j) and (j, t) for s < j < t: in a tile of end points,
  // start points downwards and end points upwards fill both first. The tile's right parts (j, t)
  // stay in cache, and the left parts (s, j), which lie together, are read once for the whole
  // tile. With several threads, thread k fills the rows s = k mod threads, in that order, each
  // (s, t) once row s + 1 is done up to t (rows past s + 1 were done before it): a wavefront
  // whose order is the one above, so every entry is the same double.
  void fill_rows() {
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

  // Runs work(share, threads, failed) for share = 0 .. threads - 1 on up to `wanted` threads, this
  // one included. The work is shared out only once it is known how many threads started: one that
  // cannot be started (a limit on threads) leaves fewer shares, never a share no one does. An
  // exception in any share (std::bad_alloc for a block of rows) sets `failed`, which a share
  // waiting on another polls, and is rethrown here once every thread is joined: thrown on a
  // helper thread, or past one still running, it would end the process (std::terminate).
  template <class Work>
  static void run_shares(std::int64_t wanted, const Work& work) {
    std::atomic<std::int64_t> started{0};
    std::atomic<bool> failed{false};
    std::exception_ptr failure;  // the first one, set under failure_lock
    std::mutex failure_lock;
    const auto run = [&](std::int64_t share, std::int64_t threads) {
      try {
        work(share, threads, failed);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(failure_lock);
        if (!failure) failure = std::current_exception();
        failed.store(true, std::memory_order_release);
      }
    };
    const auto helper = [&](std::int64_t share) {
      std::int64_t threads = 0;
      while ((threads = started.load(std::memory_order_acquire)) == 0) std::this_thread::yield();
      if (share < threads) run(share, threads);
    };
    std::vector<std::thread> helpers;
    // Reserved first: growing the vector could throw with helpers started and never joined.
    helpers.reserve(static_cast<std::size_t>(std::max<std::int64_t>(wanted - 1, 0)));
    try {
      for (std::int64_t share = 1; share < wanted; ++share) helpers.emplace_back(helper, share);
    } catch (const std::system_error&) {
    }
    const auto threads = static_cast<std::int64_t>(helpers.size()) + 1;
    started.store(threads, std::memory_order_release);
    run(0, threads);
    for (std::thread& h : helpers) h.join();
    if (failure) std::rethrow_exception(failure);
  }

  // Sets up each start point's block of rows, each thread a contiguous share of start points. A
  // block whose kept rows this band lays out the same (the same rows, each from the same m) is
  // taken as it is, lengthened in place when rows follow them: bands widened only at some start
  // points (plan_profile_tuned) leave most blocks so, and nothing of the kept rows is copied or
  // written. Any other block is allocated and written first here, infinite, then the kept
  // band's rows copied in: a fresh allocation is faulted in on first touch, which took up to 3 s
  // a band on one thread at 1000 layers and tight budgets.
  void prepare_rows() {
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
  std::int64_t kept_rows_alike(std::int64_t s) const {
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

  // The row of (s, t) below `known_from` (from it up, the row holds its values already).
  void fill_r(std::int64_t s, std::int64_t t, std::int64_t known_from) {
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
  void note_least(std::int64_t s, std::int64_t t) {
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

  // The first m of (s, t) that the kept band stored (past row_top if none).
  std::int64_t known_from(std::int64_t s, std::int64_t t) const {
    const auto at = static_cast<std::size_t>(s);
    if (!kept_.present || t > kept_.last[at]) return std::numeric_limits<std::int64_t>::max();
    return kept_.start[kept_.pair_base[at] + static_cast<std::size_t>(t - s - 1)];
  }

  // Copies the kept band's rows of start point s into this one's, and frees them: a row's stored
  // entries depend only on (s, t, m), never on the band, so they are this band's values too.
  void copy_kept(std::int64_t s) {
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

  // row[m] = min(row[m], cost + R(j, t, m - w_s) + R(s, j, m)) for m in [first, end), with the
  // full program's arithmetic; the rows of both parts are flat past their tops.
  void relax(double* row, std::int64_t first, std::int64_t end, double cost, std::int64_t s,
             std::int64_t j, std::int64_t t) const {
    const std::int64_t ws = w(s);
    const double* left = r(s, j) - lo(s, j);
    const double* right = r(j, t) - lo(j, t) - ws;  // right[m] = R(j, t, m - w_s)
    const std::int64_t left_end = top(s, j) + 1, right_end = top(j, t) + ws + 1;
    const std::int64_t both_end = std::min({end, left_end, right_end});
    std::int64_t m = first;
    if (m < both_end) {
      const double* samples = samples_.data() + end_index(j, t) * sample_count();
      lower_blocks(row, samples, right, left, cost, ws, m, both_end);
      m = both_end;
    }
    if (m >= end) return;
    if (left_end <= m && right_end > m) {
      const double l = left[left_end - 1];
      const std::int64_t stop = std::min(end, right_end);
      for (; m < stop; ++m) row[m] = std::min(row[m], cost + right[m] + l);
    } else if (right_end <= m && left_end > m) {
      const double rv = right[right_end - 1];
      const std::int64_t stop = std::min(end, left_end);
      for (; m < stop; ++m) row[m] = std::min(row[m], cost + rv + left[m]);
    }
    if (m >= end) return;
    const double v = cost + right[std::min(m, right_end - 1)] + left[std::min(m, left_end - 1)];
    for (; m < end; ++m) row[m] = std::min(row[m], v);
  }

  // lower_to_sums over [from, to) block by block, skipping a block where the sum at its last m
  // (the right part read from its sample there, or past it for a block cut short) is no lower
  // than the row at its first: the row and both parts only fall with m (the row is the least of
  // the splits so far, each falling), and rounded sums are monotone, so no entry of that block
  // would change. At tight budgets most blocks are skipped.
  void lower_blocks(double* row, const double* samples, const double* right, const double* left,
                    double cost, std::int64_t ws, std::int64_t from, std::int64_t to) const {
    for (std::int64_t first = from; first < to;) {
      // Blocks end where the right part's samples are: at m - w_s = k B + B - 1.
      const std::int64_t k = (first - ws) / skip_block_;
      const std::int64_t end = std::min(to, ws + k * skip_block_ + skip_block_);
      if (cost + samples[k] + left[end - 1] >= row[first]) {
        first = end;
        continue;
      }
      lower_to_sums(row, right, left, cost, first, end);
      first = end;
    }
  }

  // row[m] = min(row[m], cost + a[m] + b[m]) for m in [from, to). Written without std::min and
  // with the rows declared apart (they are different segments' rows) so that it vectorizes: the
  // band's fill spends most of its time here. The sum is formed in the same order as the full
  // program's, so the values agree to the last bit.
  static void lower_to_sums(double* __restrict row, const double* __restrict a,
                            const double* __restrict b, double cost, std::int64_t from,
                            std::int64_t to) {
    for (std::int64_t m = from; m < to; ++m) {
      const double v = cost + a[m] + b[m];
      row[m] = v < row[m] ? v : row[m];
    }
  }

  // G over good segments with the full program's arithmetic; B, the least lower bound of a
  // derivation with a bad segment, pricing bad segments by (b), and with kSplitLemma by the
  // better of (b) and (c).
  template <bool kSplitLemma>
  void fill_f() {
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
        std::fill_n(
            f_.begin() + static_cast<std::ptrdiff_t>(k * static_cast<std::size_t>(n_) * size), rows,
            kInf);
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
  std::int64_t kept_f_from(bool any_bad) const {
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
  void lower_past(std::int64_t s, std::int64_t j, std::int64_t tail_start,
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
  void split_bound(std::int64_t s, std::int64_t u, std::int64_t need, bool with_past,
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

  // The segments priced together (fill_f): those ending at `from` and after.
  struct Tail {
    explicit Tail(std::int64_t end, std::size_t size)
        : from(end), once(size, kInf), twice(size, kInf), far_knap(size, 0.0), next(size) {}
    std::int64_t from;
    // min over those ends j of T(1..j-1) + min(G, B_W, B_L)(j), and of 2 T(1..j-1) + the same
    std::vector<double> once, twice;
    std::vector<double> far_knap;  // the knapsack of layers from..n-1
    std::vector<double> next;      // add_item's scratch row
  };

  // Brings the tail down to the segments ending at `from` and after (nothing past the chain's
  // end, j = n).
  void extend_tail(Tail& tail, std::int64_t from) {
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
  static void add_item(std::vector<double>& knap, std::vector<double>& next, std::int64_t weight,
                       double value) {
    const auto wt = static_cast<std::size_t>(weight);
    if (wt >= knap.size()) return;
    std::copy(knap.begin(), knap.begin() + static_cast<std::ptrdiff_t>(wt), next.begin());
    for (std::size_t c = wt; c < knap.size(); ++c)
      next[c] = std::max(knap[c], knap[c - wt] + value);
    knap.swap(next);
  }

  // The j that the full program chose (the first minimizer, with the same arithmetic). Bad
  // segments are skipped: the certificate shows they are worse than the target.
  std::int64_t f_choice(std::int64_t s, std::int64_t m) const {
    const double target = g(s)[m];
    std::int64_t need = w(s);
    for (std::int64_t j = s + 1; j <= n_; ++j) {
      if (j < n_) need = std::max(need, w(s) + w(j));
      if (need > m) break;
      if (!good(s, j, m)) continue;
      const double value = j == n_ ? r_at(s, j, m) : g(j)[m - w(s)] + r_at(s, j, m);
      if (value <= target) return j;
    }
    throw std::logic_error("profile planner: no first-pass choice reproduces F");
  }

  std::int64_t r_choice(std::int64_t s, std::int64_t t, std::int64_t m) const {
    m = std::min(m, top(s, t));
    const double target = r_at(s, t, m);
    std::int64_t need = w(s);
    for (std::int64_t j = s + 1; j < t; ++j) {
      need = std::max(need, w(s) + w(j));
      if (need > m) break;
      if (time(s + 1, j) + r_at(j, t, m - w(s)) + r_at(s, j, m) <= target) return j;
    }
    throw std::logic_error("profile planner: no split reproduces R");
  }

  std::int64_t n_;
  std::int64_t tail_gap_;
  std::int64_t skip_block_;   // entries of a row a split is checked against at once
  std::int64_t threads_;      // threads that fill the rows of a band ...
  std::size_t threads_from_;  // ... with at least this many entries
  bool split_lemma_;
  std::int64_t fail_block_;  // tests only (BandTuning::fail_block)
  std::int64_t unit_ = 1, capacity_ = 0, divisor_ = 0, delta_ = 0;
  std::vector<std::int64_t> caps_;  // per s, the last end point a segment from s may have
  bool exact_ = true;
  std::vector<std::int64_t> weight_, weight_prefix_;
  std::vector<double> time_prefix_, times_;
  std::vector<std::int64_t> last_;  // per s: the last t <= s + L with W(s, t) <= C + delta, or s+1
  std::vector<std::size_t> pair_base_, row_offset_, end_base_;
  std::vector<std::int64_t> start_;  // per pair: the first m its row stores (find_starts)
  std::size_t pairs_ = 0, entries_ = 0;
  // Of each row, filled with it: R(s, t, top(s, t)), the least value (it only falls with m), and
  // the first m where it is finite (past the top if none).
  struct Least {
    double value = kInf;
    std::int64_t finite_from = std::numeric_limits<std::int64_t>::max() / 4;
  };
  // By pair_index, and by end point (end_base_).
  std::vector<Least> least_by_start_, least_by_end_;
  // By end point as least_by_end_, sample_count() each: R(j, t, k B + B - 1) (flat past the top),
  // the values a split's block test reads of its right part. Laid out together, they stay in
  // cache where the right parts' rows do not.
  std::vector<double> samples_;
  // One start point's rows, allocated without writing them (prepare_rows writes them on every
  // thread).
  class Rows {
   public:
    void allocate(std::size_t size) {
      data_.reset(
          static_cast<double*>(std::malloc(std::max<std::size_t>(size, 1) * sizeof(double))));
      if (!data_) throw std::bad_alloc();
      size_ = size;
    }
    // Longer, keeping the entries there were: large blocks are remapped, not copied or faulted in
    // again.
    void grow(std::size_t size) {
      void* grown = std::realloc(data_.get(), std::max<std::size_t>(size, 1) * sizeof(double));
      if (grown == nullptr) throw std::bad_alloc();
      static_cast<void>(data_.release());
      data_.reset(static_cast<double*>(grown));
      size_ = size;
    }
    double* data() { return data_.get(); }
    const double* data() const { return data_.get(); }
    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }

   private:
    struct Free {
      void operator()(double* block) const { std::free(block); }
    };
    std::unique_ptr<double, Free> data_;
    std::size_t size_ = 0;
  };
  std::vector<Rows> chunks_;  // by start point: its rows, at row_offset_ within the block
  std::vector<std::size_t> chunk_entries_;
  std::vector<double> f_;
  // What the rows of F in f_ were formed for (kept_f_from).
  struct FormedBy {
    bool split_lemma = false, any_bad = false;
    std::int64_t delta = -1;
    std::vector<std::int64_t> last, caps;
  } f_formed_;
  // With the splitting lemma (fill_f<true>): per s, the bound of a derivation from (s, m) whose
  // first segment is too long (not too heavy), for localized().
  std::vector<double> long_first_;
  bool past_formed_ = false;  // whether fill_f formed the rows of past
  // The band filled before this one (a narrower one: bands only widen), while this one is filled.
  struct Kept {
    bool present = false;
    std::int64_t delta = 0;
    std::vector<std::int64_t> last;
    std::vector<std::size_t> pair_base, row_offset;
    std::vector<std::int64_t> start;
    std::vector<Rows> chunks;  // emptied as they are taken or copied
  } kept_;
};

}  // namespace

std::int64_t least_profile_budget(const ChainProfile& profile) {
  const auto& a = profile.activation_bytes;
  std::int64_t outputs = 0;
  for (std::size_t i = 1; i + 1 < a.size(); ++i) outputs = std::max(outputs, a[i]);
  return a.front() + outputs;
}

ProfilePlan plan_profile(const ChainProfile& profile, std::int64_t budget_bytes, std::int64_t slots,
                         std::size_t max_planner_bytes, const ActionSink& also) {
  detail::BandTuning tuning;
  tuning.threads = detail::default_threads();
  return detail::plan_profile_tuned(profile, budget_bytes, slots, max_planner_bytes, tuning, also);
}

namespace detail {

std::int64_t default_threads() {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp<std::int64_t>(cores, 1, kMaxThreads);
}

BandValues band_values(const ChainProfile& profile, std::int64_t budget_bytes, std::int64_t slots,
                       std::int64_t delta, const std::vector<std::int64_t>& caps,
                       const BandTuning& tuning) {
  profile.validate();
  if (caps.size() != static_cast<std::size_t>(profile.layers())) {
    throw std::invalid_argument("band_values: one cap per start point");
  }
  BandProgram program(profile, budget_bytes, slots, tuning);
  program.layout(delta, caps);
  program.solve(true);
  BandValues values{program.best(), program.heavy_bound(), program.long_bound(), {}, {}};
  for (const LongFailure& failure : program.localized()) {
    values.localized.push_back(failure.start);
  }
  values.past = program.past_rows();
  return values;
}

ProfilePlan plan_profile_tuned(const ChainProfile& profile, std::int64_t budget_bytes,
                               std::int64_t slots, std::size_t max_planner_bytes,
                               const BandTuning& tuning, const ActionSink& also) {
  profile.validate();
  if (budget_bytes < 0) throw InputError("budget", std::nullopt, "must be >= 0");
  if (slots < 1) throw InputError("slots", std::nullopt, "must be at least 1");
  BandProgram program(profile, budget_bytes, slots, tuning);
  // The band grows (delta or the longest segment, as the certificate asks) until the certificate
  // holds; at its widest every state is good and the program is the full one.
  const std::int64_t full = program.full_delta();
  std::int64_t delta = std::min(program.first_delta(), full);
  const std::int64_t n = profile.layers();
  // Per start point s, the last end point of a segment in the band (its longest segment from s is
  // caps[s] - s layers); the band program keeps them from falling with s.
  std::vector<std::int64_t> caps(static_cast<std::size_t>(n));
  const auto set_lengths = [&](std::int64_t length) {
    for (std::int64_t s = 0; s < n; ++s) caps[static_cast<std::size_t>(s)] = s + length;
  };
  set_lengths(std::min<std::int64_t>(std::max<std::int64_t>(tuning.first_max_length, 1), n));
  // Longer segments from s: twice as long, or half as long again from kLargeBandLength (bands of
  // segments that long take hundreds of MB at 1000 layers, and their certificates fail by
  // fractions of a percent).
  const auto lengthen = [&](std::int64_t s) {
    std::int64_t& cap = caps[static_cast<std::size_t>(s)];
    const std::int64_t length = std::min(cap, n) - s;
    cap = std::min(n, s + (length >= kLargeBandLength ? length + length / 2 : 2 * length));
  };
  const auto all_reach_the_end = [&] { return caps.front() >= n; };
  const double layers = static_cast<double>(n);
  if (layers * layers * layers * static_cast<double>(program.capacity()) / 6 <= tuning.small_work) {
    delta = full;  // small enough for the full program in one go
    set_lengths(n);
  }
  std::int64_t bands = 0;
  // Whether the budget is tight: a filled band failed, or bands held no schedule twice (at 1000
  // layers, budgets of 1% of the activation bytes). The certificate then needs the splitting
  // lemma more often than not (see solve()).
  bool tight = false;
  int unfilled = 0;
  // Every schedule holds a_0 with the largest output before the last (least_profile_budget), and
  // recomputing everything from a_0 needs no more; with none, no band is laid out.
  bool any_schedule = program.least_units() <= program.capacity();
  while (any_schedule) {
    const std::size_t bytes = program.layout(delta, caps);
    // A band holds every schedule of a narrower one: once one did, every later one does.
    if (bands == 0 && !program.holds_a_schedule()) {
      // Filling a band without a schedule would only widen it (a schedule of a wider band is a
      // derivation with a bad segment here, its bound finite), so it widens unfilled: delta
      // eightfold, and once delta is full the segments twice as long (checking costs O(n L^2),
      // and a band of short segments with every m is far smaller than one of long segments).
      // The widest band holds every schedule.
      if (delta == full && all_reach_the_end()) {
        throw std::logic_error("profile planner: the full program holds no schedule");
      }
      const bool longer = delta == full;
      delta = delta > full / 8 ? full : 8 * delta;
      tight = tight || ++unfilled >= 2;
      for (std::int64_t s = 0; s < n && longer; ++s) {
        std::int64_t& cap = caps[static_cast<std::size_t>(s)];
        cap = std::min(n, s + 2 * (std::min(cap, n) - s));
      }
      continue;
    }
    ++bands;
    // The last band's rows are copied into this one when both fit the cap; else it starts over.
    if (bytes + program.kept_bytes() > max_planner_bytes) program.forget_kept();
    if (bytes > max_planner_bytes) {
      throw PlannerMemoryError(
          "the profile planner needs " +
          (bytes == std::numeric_limits<std::size_t>::max() ? std::string("more than 2^63")
                                                            : text::integer(bytes)) +
          " bytes for " + text::integer(profile.layers()) + " layers and " +
          text::integer(program.capacity()) + " memory units, over the cap of " +
          text::integer(max_planner_bytes) + "; lower {slots} (or raise {max_planner_bytes})");
    }
    const auto verdict = program.solve(tight);
    if (!(program.best() < kInf)) {
      throw std::logic_error("profile planner: a band that holds a schedule has G(0, C) infinite");
    }
    if (verdict.heavy_ok && verdict.long_ok) break;
    // A too heavy segment not ruled out. Once the budget is known to be tight, every row takes
    // all its m at once: at 1000 layers and 1-1.5% budgets, doubling delta took up to four bands
    // where one does. The first time, delta doubles when B_W was within 5% of G (at 3% budgets,
    // 1% under: the next band holds, and one of every m costs 1.5x as much), and grows fourfold
    // when it was further under (7-18% at 1.5-2.5%, where doubling took a band more).
    if (!verdict.heavy_ok) {
      const std::int64_t growth = program.heavy_bound() < 0.95 * program.best() ? 4 : 2;
      delta = tight || delta > full / growth ? full : growth * delta;
    }
    tight = true;
    if (!verdict.long_ok) {
      // Only the segments from the start points where a too long one is not yet ruled out grow,
      // when those are known (at 1000 layers and 1-1.5% budgets, a few to 165 start points of
      // 1000, near the chain's start); else every start point's.
      const std::vector<LongFailure> failures = program.localized();
      if (failures.empty()) {
        for (std::int64_t s = 0; s < n; ++s) lengthen(s);
      }
      for (const LongFailure& failure : failures) {
        const std::int64_t s = failure.start;
        const std::int64_t length = std::min(caps[static_cast<std::size_t>(s)], n) - s;
        lengthen(s);
        if (!tuning.far_under_growth) continue;
        std::int64_t& cap = caps[static_cast<std::size_t>(s)];
        // Very far under G, short segments grow fourfold (see kVeryFarUnder).
        if (failure.under < kVeryFarUnder && length < kLargeBandLength) {
          cap = std::max(cap, std::min(n, s + 4 * length));
        }
        // Far under G, the bound lacks a split the lemma can take (see kFarUnder): the segments
        // from s reach the next one, unless that is further than two steps of growth.
        if (failure.under < kFarUnder) {
          const std::int64_t u = program.next_lemma_split(s, failure.spare_units);
          if (u < n && u - s <= kFarthestReach * static_cast<double>(length)) {
            cap = std::max(cap, u);
          }
        }
      }
    }
  }
  if (!any_schedule) {
    // F(0, m) only falls as m grows, so nothing fits in fewer units either.
    std::string detail = "no schedule fits in " + text::integer(budget_bytes) + " bytes";
    const std::int64_t largest = least_profile_budget(profile);
    if (largest > budget_bytes) {
      detail += "; every schedule needs at least " + text::integer(largest) +
                " bytes (the input, held all along, with the largest output before the last)";
    } else if (!program.exact()) {
      detail += " with sizes rounded up to units of " + text::integer(program.unit()) +
                " bytes (the budget holds " + text::integer(program.capacity()) +
                "); more slots count sizes more finely";
    }
    throw InputError("budget", std::nullopt, detail);
  }
  Simulator simulator(profile);
  program.emit([&](const Action& a) {
    simulator.apply(a);
    if (also) also(a);
  });
  ProfilePlan plan;
  plan.simulation = simulator.finish();
  plan.unit_bytes = program.unit();
  plan.slots = program.capacity();
  plan.divisor_bytes = program.divisor();
  plan.exact = program.exact();
  plan.predicted_recompute_time = program.best();
  plan.bands = bands;
  return plan;
}

}  // namespace detail

}  // namespace remat::chain
