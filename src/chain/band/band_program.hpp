// The band program of the chain planner (plan_profile): the class its four parts share.
//
// The optimal checkpointing of a heterogeneous chain under a budget in bytes is a dynamic program
// over (start, end, memory) states; BandProgram computes it on a band of those states, with a
// certificate that the states outside cannot matter, so its objective and plan are the full
// program's. The parts, one file each:
//   layout.cpp       the band's shape (which segments, which memory range) and its rows' storage;
//   fill.cpp         the recurrence R over the band's rows, on every core;
//   certificate.cpp  the first pass F on the band and the lower bounds that certify it;
//   driver.cpp       plan_profile: the bands tried, widened until the certificate holds, and the
//                    schedule rebuilt from the filled rows.
// The derivation, the bounds and why each shortcut is exact: docs/design/chain_planner.md. Small,
// hot member functions (the split relaxations) stay here so that every part inlines them.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
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

#include "chain/profile_planner.hpp"
#include "remat/chain.hpp"

namespace remat::chain::band {

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
              const detail::BandTuning& tuning);

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
  std::size_t layout(std::int64_t delta, const std::vector<std::int64_t>& caps);

  // The first m each row of the band stores: its first finite value (R(s, t, .) is finite from
  // one m up: each condition of the recurrence is a lower limit on m, and the rows are flat past
  // their tops), or past its top when it has none. These least m follow the recurrence with max
  // for + and min for min, O(n L^2) integer steps, no rows; a pair the kept band had, with the
  // same delta, keeps its start (its parts are kept pairs too). Below its start a row is
  // infinite and not stored: at the tightest budgets a third to a half of the entries.
  void find_starts();

  // Whether the band laid out last holds a schedule (G(0, C) finite), found without filling it:
  // the least m of G(0, .) from the rows' first finite m, O(n L) integer steps.
  bool holds_a_schedule() const;

  struct Verdict {
    bool heavy_ok, long_ok;  // no W-bad (L-bad) derivation is optimal or tied
  };

  // Fills the band and the F passes, and checks the certificate for both kinds of bad segment.
  Verdict solve(bool tight);

  // After a band whose B_L failed: the start points s where a too long segment is not yet ruled
  // out, i.e. some m where a good first pass from (0, C) to (s, m) (its least cost P(s, m), found
  // forwards over the band's rows) plus the bound of a derivation from (s, m) whose first segment
  // is too long does not beat G(0, C). Empty when unknown (solved without the splitting lemma).
  // If B_W held, every derivation with a too heavy segment is beaten, so every one not beaten
  // with a too long segment reaches its first one by good segments: at one of these s. At tight
  // budgets these are a few of the start points near the chain's start (where the rest of the
  // chain is long and G(s, m) large), and only their segments need to grow (2 to 165 of 1000 at
  // 1-1.5% budgets).
  std::vector<LongFailure> localized() const;

  // The first u past the band's segments from s that the splitting lemma takes at an m with
  // `spare_units` units under C (w_u <= w_s + spare_units), n when none.
  std::int64_t next_lemma_split(std::int64_t s, std::int64_t spare_units) const;

  // Every start point's row of past (fill_f; formed for c past C - w_s), for the tests; empty
  // when not formed.
  std::vector<double> past_rows() const;

  // What the rows kept from the last filled band take.
  std::size_t kept_bytes() const;
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

  void emit(const ActionSink& sink) const;

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
  void fill_rows();

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
  void prepare_rows();

  // How many of start point s's rows the kept band stored exactly as this one lays them out, when
  // those are all it stored (the same lo and top each, so the same offsets); -1 if none are kept
  // or some row was laid out otherwise.
  std::int64_t kept_rows_alike(std::int64_t s) const;

  // The row of (s, t) below `known_from` (from it up, the row holds its values already).
  void fill_r(std::int64_t s, std::int64_t t, std::int64_t known_from);

  // Records R(s, t, top), the least value of the row (it only falls with m), for the splits of
  // longer segments that have (s, t) as a part.
  void note_least(std::int64_t s, std::int64_t t);

  // The first m of (s, t) that the kept band stored (past row_top if none).
  std::int64_t known_from(std::int64_t s, std::int64_t t) const {
    const auto at = static_cast<std::size_t>(s);
    if (!kept_.present || t > kept_.last[at]) return std::numeric_limits<std::int64_t>::max();
    return kept_.start[kept_.pair_base[at] + static_cast<std::size_t>(t - s - 1)];
  }

  // Copies the kept band's rows of start point s into this one's, and frees them: a row's stored
  // entries depend only on (s, t, m), never on the band, so they are this band's values too.
  void copy_kept(std::int64_t s);

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
  void fill_f();

  // The first start point from which the rows of F the last pass formed are this band's too: the
  // same kind of pass, the same delta, and from there on the same caps and last end points (n_
  // when none are).
  template <bool kSplitLemma>
  std::int64_t kept_f_from(bool any_bad) const;

  // Lowers past(s)[c], the bound of F(s, c + w_s), by the first-pass segments (s, j): (b) prices
  // (s, j) at c + w_s units by the knapsack beside a_s within c units, and the rest of such a
  // derivation has c units, where the rows of F are known (low(j)[c]). From tail_start on, every
  // longer segment at once: (b) grows with the end point, and a rest costs at least 0. Only the c
  // past C - w_s are formed: the lemma reads past(s) only where c + w_s is past C.
  void lower_past(std::int64_t s, std::int64_t j, std::int64_t tail_start,
                  const std::vector<double>& knap, double* beyond) const;

  // The splitting lemma (c): a derivation whose first segment (s, t) runs past the band costs at
  // least R(s, u, m) + tau_u + F(u, m - w_s + w_u) for every stored u, since F(u, m - w_s + w_u)
  // <= R(u, t, m - w_s + w_u) + F(t, m - w_s), the rest of that derivation. u is taken where
  // m - w_s + w_u <= C (F is known only there). Raises lemma[m] to that bound for this u.
  void split_bound(std::int64_t s, std::int64_t u, std::int64_t need, bool with_past,
                   double* lemma) const;

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
  void extend_tail(Tail& tail, std::int64_t from);

  // 0/1 knapsack over capacities 0..C: knap[c] = the most time of the items added within c units.
  static void add_item(std::vector<double>& knap, std::vector<double>& next, std::int64_t weight,
                       double value);

  // The j that the full program chose (the first minimizer, with the same arithmetic). Bad
  // segments are skipped: the certificate shows they are worse than the target.
  std::int64_t f_choice(std::int64_t s, std::int64_t m) const;

  std::int64_t r_choice(std::int64_t s, std::int64_t t, std::int64_t m) const;

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

}  // namespace remat::chain::band
