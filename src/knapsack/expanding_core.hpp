// The expanding core's search state, shared by its two parts: the list search
// (exact_core.cpp: the core grown item by item, the state list merged, bounded, pruned and
// garbage-collected) and its conductor (exact_conductor.cpp: at checkpoints, the side searches
// that find better plans outside the core or prove the incumbent). The algorithm, its sources
// and its complexity are in exact_core.cpp's header comment. The bound and the clock reads that
// the merge runs for every state stay here, so both parts inline them.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "knapsack/reduced_problem.hpp"
#include "remat/errors.hpp"

namespace remat::detail::exact {

struct State {
  std::int64_t weight;
  double value;
  std::uint32_t node;  // decisions that differ from the break solution, see Node
};

// One flipped decision; following parents up to the root lists every flip of a state.
struct Node {
  std::uint32_t parent;
  std::uint32_t item;  // reduced item index
};

constexpr std::uint32_t kRoot = 0;
constexpr std::uint32_t kGreedyIncumbent = std::numeric_limits<std::uint32_t>::max();

class ExpandingCore {
 public:
  // Where a search that decides to restart on bundled items leaves them (see restart_bundled).
  struct BundlingRequest {
    bool only_if_halved = true;
    std::optional<Bundling> result;
  };

  ExpandingCore(const ReducedProblem& p, PlannerMemory& memory,
                std::optional<Clock::time_point> deadline, const ExactTuning& tuning,
                BundlingRequest* bundling = nullptr);

  ReducedSolution run();

 private:
  void find_break_solution();

  // The break solution filled greedily with later items that still fit: a cheap lower bound
  // that lets the first bound tests prune.
  void set_greedy_incumbent();

  // With integral runtimes (and sums exact in double) a plan can only beat the incumbent z by
  // reaching z + 1, so a bound below z + 1 already prunes: the classical integer test, which
  // matters on instances with many ties.
  //
  // Every plan's runtime is then a multiple of g, the greatest common divisor of the runtimes
  // ("rudimentary divisibility", as in combo): a better plan reaches at least z + g, so bounds
  // below z + g prune (g = 3 on Pisinger's profit-ceiling class).
  bool all_values_integral();

  // `value` is the state's value the bound was computed from. With integral runtimes the slack
  // covers the bound's rounding (a few ulps of |value| + |bound|, at most 1/16 below 2^45) and
  // stays far below the gap of 1 between integers, so the z + 1 test prunes even at large values.
  bool can_beat_incumbent(double bound, double value) const {
    if (!integral_values_) return bound > best_value_;
    const double slack = 0x1.0p-49 * (std::abs(value) + std::abs(bound) + 1.0);
    return bound + slack >= best_value_ + value_step_;
  }

  double efficiency(std::ptrdiff_t pos) const {
    const std::uint32_t k = order_[static_cast<std::size_t>(pos)];
    return p_.value[k] / static_cast<double>(p_.weight[k]);
  }

  // Dantzig's bound of a state when items at positions >= s are out and <= t are in.
  double bound(const State& state, double add_efficiency, double drop_efficiency,
               bool can_drop) const {
    if (state.weight <= p_.capacity) {
      return state.value + static_cast<double>(p_.capacity - state.weight) * add_efficiency;
    }
    if (!can_drop) return -std::numeric_limits<double>::infinity();
    return state.value - static_cast<double>(state.weight - p_.capacity) * drop_efficiency;
  }

  // The bound's inputs while items at positions >= s are out and <= t are in.
  struct BoundInputs {
    double add_efficiency, drop_efficiency;
    bool can_drop;
  };

  BoundInputs bound_inputs(std::ptrdiff_t s, std::ptrdiff_t t) const {
    const auto m = static_cast<std::ptrdiff_t>(order_.size());
    return {s < m ? efficiency(s) : 0.0, t >= 0 ? efficiency(t) : 0.0, t >= 0};
  }

  void prune(std::ptrdiff_t s, std::ptrdiff_t t);

  // The largest bound over the live states (or, before the first state exists, the break
  // state's Dantzig bound), and whether any of them can still beat the incumbent.
  struct Remaining {
    double bound;
    bool open;
  };

  Remaining remaining_bound(std::ptrdiff_t s, std::ptrdiff_t t) const;

  // The list grew past the first checkpoint: the instance is hard for the core (typically
  // subset-sum-like, where Dantzig's bound cannot prune until a plan fills the budget). Meet in
  // the middle over the items nearest the break gives a strong incumbent, or the optimum when
  // the core holds every item (returns true then). Its size fits the time left.
  bool seed_from_core_enumeration();

  // The splits are first tried at a checkpoint, where the search may not yet have run as long as
  // a split costs; the next checkpoint may never come (circle n = 1e5: the list stayed below
  // 611814 states for 8 s, so whether the bands ran at all hung on a few milliseconds at the last
  // one). So once the cardinality bound has been computed and failed, each split's first try is
  // also made after every step as soon as its time share allows, the cardinality split's before
  // the bands' (almost strongly correlated instances need the former, and an early band try
  // there only costs its LPs).
  std::optional<ReducedSolution> retry_splits();

  // At a checkpoint (the list has doubled past 8192 states), with the core at (s, t): look for
  // better plans outside the core, and try to prove the incumbent, cheapest proofs first. A
  // solution ends the search (an empty one: restart on bundled items).
  std::optional<ReducedSolution> at_checkpoint(std::ptrdiff_t s, std::ptrdiff_t t);

  // Small instances (n <= 64) whose list grows: near-proportional ones (runtime about a fixed
  // multiple of weight) are solved by proportional_search.cpp, which returns the optimum or a
  // proof for the incumbent; a deadline there ends the search with its bound.
  std::optional<ReducedSolution> proportional_proof(std::ptrdiff_t s, std::ptrdiff_t t);

  // Runtime affine in weight up to two intercepts (offset_groups.cpp): the optimum by count
  // vectors, or the incumbent proven; a deadline there ends the search with its bound.
  std::optional<ReducedSolution> offset_groups_proof(std::ptrdiff_t s, std::ptrdiff_t t);

  // What a search beside the core found: its better plan becomes the incumbent; a proof ends the
  // search with the incumbent, and so does the deadline, with the side search's bound (valid for
  // every plan) joining the result's.
  std::optional<ReducedSolution> conclude_side_search(std::vector<char>& take, double value,
                                                      bool proven, bool at_deadline, double bound,
                                                      const char* path, std::ptrdiff_t s,
                                                      std::ptrdiff_t t);

  // Strongly correlated classes: a plan that fills the budget with the most items (or, inverse
  // strongly correlated, the fewest) meets the surrogate cardinality bound, which proves it
  // optimal without any search. Tried once for each new incumbent.
  //
  // The bound costs about 45 linear-time LPs; it is only computed once the search has spent at
  // least as long as the last computation took (estimated at first), so on instances where it
  // cannot help it at most doubles the time.
  bool proven_by_cardinality();

  // Pisinger's almost strongly correlated class: the incumbent is often optimal early, but
  // Dantzig's bound lets too many states live, since it saves a fraction of an item and these
  // classes reward the number of items. cardinality_split.cpp solves, for each number of items a
  // better plan could have, the Lagrangian-shifted knapsack whose bound is the LP bound with that
  // cardinality. Its LP bounds (about 4 searches of 40 LPs at first, cached after) wait until
  // the search has run as long as the step last took; its inner searches get half the time the
  // search itself has had (at least 10 ms), and altogether at most half of it. When they are cut
  // short, the step is tried again after the incumbent improves, as soon as that share allows,
  // up to 4 times.
  std::optional<ReducedSolution> split_by_cardinality();

  // A split's outcome: its better plan becomes the incumbent, and a proof ends the search, with
  // the plan's source and then the split in the path (the split's own plans: just the split).
  // A split that tried no inner search cannot do better later: it is not tried again.
  std::optional<ReducedSolution> adopt(SplitOutcome& o, const std::string& step, int& tries);

  // Pisinger's circle class: the split above barely beats Dantzig's bound, since a few tiny
  // items let its LP trade the number of items for almost nothing. band_split.cpp fixes what the
  // incumbent settles and counts only the items of the core whose weight is near the break
  // item's. Same schedule as split_by_cardinality, with its own tries and time share.
  std::optional<ReducedSolution> split_by_band();

  // Dantzig's bound of the whole problem, from the break solution (lp_upper_bound's sum in the
  // same order, without its sort: that sort could run past the deadline on large instances).
  double lp_bound() const;

  // A band split cut short is tried again once the incumbent improved or the search has run
  // a quarter longer than when it was last tried (its inner searches then get more time).
  bool band_retry_due() const;

  // State pairing (after combo): every live state combined with one item outside the core,
  // saved if it is after the core or dropped if before. States are sorted by weight with
  // increasing value, so each item's best partner is the last state within the weight left:
  // one binary search. O(n log L) for L states.
  void pair_with_outside_items(std::ptrdiff_t s, std::ptrdiff_t t);

  std::vector<char> take_with_flips(const std::vector<std::uint32_t>& flipped) const;

  ReducedSolution finish_enumerated();

  std::vector<char> finish_take() const;

  // Merges the list with a copy of itself shifted by (dw, dv): the same plans with item k's
  // decision flipped. Both are sorted by weight; dominated states are dropped as they appear.
  // Returns false, leaving the list as it was, when the deadline passes during the merge.
  //
  // States the bound at the next core (`next`) cannot let beat the incumbent are left out as
  // they are made; a state dominated by one left out is left out too (its completions are no
  // better), so the list keeps values strictly increasing.
  bool expand(std::int64_t dw, double dv, std::uint32_t k, const BoundInputs& next);

  // Times the result's bound (remaining_bound) on the list as it is, so that the search stops
  // early enough to compute it by the deadline: one pass over the list each time it has doubled
  // (at the checkpoints), against the merges that doubled it.
  void time_result_bound(std::ptrdiff_t s, std::ptrdiff_t t);

  // When every step of the search must end so that the result is ready by the deadline (none
  // without one): the deadline less what the result costs on the list as it is. Every step reads
  // this, not the deadline itself; the merge, which may double the list, reads stop_time.
  std::optional<Clock::time_point> work_deadline() const {
    if (!deadline_) return std::nullopt;
    return stop_time(states_.size());
  }
  double seconds_left() const;
  // Whether a step that sorts and builds O(n) items without reading the deadline (bundling,
  // offset_groups) ends in time: bundling's sort compares up to three keys and it builds a new
  // problem, 2 to 6 times the ordering's time at n = 1e5 (Release and AddressSanitizer builds),
  // so such a step needs 8 times that left.
  bool time_for_uncut_sorts() const;

  // When the search must stop so that the result is ready by the deadline: its bound over
  // `states` states (remaining_bound), and the search's lists freed.
  Clock::time_point stop_time(std::size_t states) const;

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  // What growing `v` to `needed` copies: all it holds, when it must move.
  template <typename T>
  static std::size_t copied_bytes(const std::vector<T>& v, std::size_t needed) {
    return v.capacity() >= needed ? 0 : v.size() * sizeof(T);
  }

  void update_incumbent();

  std::size_t ordering_bytes() const;

  // Many identical items make the list long for nothing (states that differ only in which copy
  // they save): when bundling halves the items, this search stops, hands its memory back, and
  // solve_exact starts over on the bundles. Easy instances never get here, so they never pay
  // for the sort.
  bool restart_bundled();

  // The collection cannot stop halfway: near the deadline the search keeps its garbage instead,
  // since it ends soon anyway. Its cost is the slowest rate any collection of this search has
  // had (its parent walks miss the cache: 27 to 44 ns an entry at 0.6 to 2.4 million nodes),
  // with half as much again to spare, since the rate grows with the list.
  bool too_late_for_garbage_collection() const;

  // Keeps only history nodes reachable from live states and the incumbent. Parents always
  // precede their children, so one forward pass renumbers them.
  void collect_garbage();

  // The best plan and, when a limit stopped the search, the bound over the live states. A plan
  // that meets that bound (exactly, or below z + 1 with integral runtimes) is proven optimal,
  // whichever limit stopped the search.
  ReducedSolution finish(SolveStatus status, std::ptrdiff_t s, std::ptrdiff_t t);

  // Grows a vector's capacity to at least `needed`, accounting the bytes first. The copy and the
  // freeing of the old buffer are timed apart: the search's own lists are freed by the deadline
  // too (stop_time), and a growth starts only when its copy ends in time (expand).
  template <typename T>
  void grow(std::vector<T>& v, std::size_t& reserved_bytes, std::size_t needed) {
    if (v.capacity() >= needed) return;
    const std::size_t target = std::max(needed, 2 * v.capacity());
    const std::size_t bytes = target * sizeof(T);
    memory_.reserve(bytes - std::min(bytes, reserved_bytes));
    reserved_bytes = std::max(reserved_bytes, bytes);
    const std::size_t copied = copied_bytes(v, needed);
    const auto copy_start = Clock::now();
    std::vector<T> bigger;
    bigger.reserve(target);
    bigger.insert(bigger.end(), v.begin(), v.end());
    v.swap(bigger);
    const std::size_t freed = bigger.capacity() * sizeof(T);
    const auto free_start = Clock::now();
    bigger = std::vector<T>();
    note_rate(grow_seconds_per_byte_, free_start - copy_start, copied);
    note_rate(free_seconds_per_byte_, Clock::now() - free_start, freed);
  }

  // Keeps the slowest rate seen, of steps at least kMeasuredGrowth bytes large.
  static void note_rate(double& seconds_per_byte, Clock::duration took, std::size_t bytes) {
    if (bytes < kMeasuredGrowth) return;
    seconds_per_byte = std::max(
        seconds_per_byte, std::chrono::duration<double>(took).count() / static_cast<double>(bytes));
  }

  static constexpr std::size_t kMinGcThreshold = 1 << 16;
  static constexpr std::size_t kStepsPerClockRead = 1 << 14;
  // Rates are measured on lists and growths at least this large (smaller ones are mostly
  // overhead, and their results are ready at once anyway).
  static constexpr std::size_t kMeasuredStates = 1 << 12;
  static constexpr std::size_t kMeasuredGrowth = std::size_t{1} << 20;
  static constexpr std::size_t kMaxEnumeratedHalf = 20;  // exact when n <= 40
  static constexpr std::size_t kIncumbentHalf = 16;      // incumbent only: keep it cheap
  static constexpr int kMaxSplitTries = 4;

  BundlingRequest* bundling_;
  const ReducedProblem& p_;
  PlannerMemory& memory_;
  std::optional<Clock::time_point> deadline_;
  // The slowest rates seen: the result bound's seconds per state, a growth's seconds per byte
  // copied (into memory first touched by the copy: 1 to 2.5 s a GB on a virtual machine), and
  // freeing's seconds per byte (0.1 s a GB there).
  double seconds_per_state_ = 0;
  double grow_seconds_per_byte_ = 1e-9;
  double free_seconds_per_byte_ = 0.15e-9;
  ExactTuning tuning_;
  std::size_t max_enumerated_half_;
  std::vector<std::uint32_t> order_;
  std::size_t break_pos_ = 0;
  std::int64_t break_weight_ = 0;
  double break_value_ = 0;
  std::vector<char> greedy_take_;
  bool integral_values_ = false;
  double value_step_ = 1;  // with integral runtimes: their greatest common divisor
  double best_value_ = 0;
  std::uint32_t best_node_ = kGreedyIncumbent;
  std::vector<State> states_, scratch_;
  std::vector<Node> nodes_;
  std::size_t reserved_states_ = 0, reserved_scratch_ = 0, reserved_nodes_ = 0;
  std::size_t gc_threshold_ = kMinGcThreshold;
  std::ptrdiff_t s_ = 0, t_ = -1;  // the core after the last complete step
  bool enumerated_ = false;
  std::size_t next_checkpoint_;
  bool try_proportional_;
  bool try_offset_groups_;
  std::size_t min_proportional_items_;
  std::string incumbent_source_ = "greedy";  // where a plan outside the history tree came from
  bool proven_by_bound_ = false;
  int split_tries_ = 0;
  double split_tried_at_ = 0;  // the incumbent when the last try began
  double split_spent_ = 0;     // seconds in the split's inner searches so far
  SplitCache split_cache_;
  int band_tries_ = 0;
  double band_tried_at_ = 0;
  double band_spent_ = 0;
  double band_tried_after_ = 0;  // seconds the search had run when the band split was last tried
  BandCache band_cache_;
  double plain_cardinality_gap_ = -1;  // the last surrogate cardinality bound over the incumbent
  double band_cost_ = 4.8e-6 * static_cast<double>(p_.size());  // seconds, as split_cost_
  double split_cost_ =
      4.8e-6 * static_cast<double>(p_.size());  // seconds, see split_by_cardinality
  std::optional<CardinalityBounds> cardinality_;
  bool cardinality_failed_ = false;
  double cardinality_checked_value_ = -1;
  Clock::time_point start_ = Clock::now();
  double ordering_seconds_ = 0;         // how long order_by_efficiency took
  double gc_seconds_per_entry_ = 4e-8;  // see too_late_for_garbage_collection
  // Seconds one cardinality bound is expected to take: about 45 LPs of ~40 ns an item at first.
  double cardinality_cost_ = tuning_.first_cardinality_after >= 0
                                 ? tuning_.first_cardinality_after
                                 : 1.8e-6 * static_cast<double>(p_.size());
  double cardinality_bound_ = std::numeric_limits<double>::infinity();
  std::vector<char> enumerated_take_;
};

}  // namespace remat::detail::exact
