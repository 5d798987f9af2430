// Exact 0/1 knapsack by an expanding core, in the family of Pisinger's minknap (Pisinger 1997,
// "A minimal algorithm for the 0-1 knapsack problem", Operations Research 45(5)), with
// ingredients of combo (Martello, Pisinger and Toth 1999, "Dynamic programming and strong bounds
// for the 0-1 knapsack problem", Management Science 45(3)); written from the papers'
// descriptions, not from their code.
//
// Items are ordered by runtime per quantum. The greedy break solution saves every item before the
// break item b. A state is a plan that agrees with the break solution outside the core
// [t+1, s-1]; states live in one list sorted by weight with strictly increasing value
// (dominance). The core grows alternately by adding item s (states may try saving it) and item t
// (states may try dropping it); states over the budget are allowed, since a later drop can bring
// them back. Each state gets Dantzig's bound, using the efficiency of s for a state within the
// budget and of t for one over it; the merge that makes the new list leaves out states that
// cannot beat the incumbent (a separate pruning pass runs only after the incumbent improves).
// With integral runtimes whose greatest common divisor is g, a bound below z + g prunes
// (combo's "rudimentary divisibility"). The list empties when the incumbent is proven optimal.
//
// When the list passes 8192 states (and each time it doubles after that), the bounds are weak
// and the search reaches for combo's tools: identical items bundled by binary splitting (a
// restart on the bundles when that halves n, see duplicate_bundles.cpp); meet in the middle over
// the items nearest the break (core_enumeration.cpp) and state pairing (each live state with one
// item outside the core) for a strong incumbent; and the surrogate cardinality bound
// (cardinality_bound.cpp), which proves that incumbent optimal on strongly correlated,
// inverse strongly correlated and subset-sum-like instances. With integral runtimes, once the
// search has run about as long as its LP bounds take, cardinality_split.cpp solves the
// Lagrangian-shifted knapsack of each number of items a better plan could have (almost strongly
// correlated instances), with a share of the time, and band_split.cpp does the same on the core
// that reduced-cost fixing leaves, counting only the items of weight near the break item's
// (circle instances). When the cardinality bound has not proven the incumbent and every runtime
// is an integral affine function of weight up to two intercepts, offset_groups.cpp solves the
// instance by count vectors per intercept (multiple strongly correlated instances, where the
// list otherwise holds every reachable weight near the budget). Before those, an instance of at
// most 64 items (and more than 32) goes to proportional_search.cpp (meet in the middle over flip
// sets of bounded loss against Dantzig's bound), which solves near-proportional ones (runtime
// proportional to memory at a fine scale) or gives up quickly. The bound costs O(n) per LP, so it
// is computed only once the search has run as long as it last took, and not when the deadline is
// nearer than that.
//
// Time: O(n log n) for the ordering plus O(sum of list lengths); the list never holds more than
// min(2^core, weight range) states and, on the instances torch produces, stays short because the
// bounds are tight. Pairing costs O(n log L) per checkpoint. Neither time nor memory grows with
// the budget W as such. Memory: the list (24 bytes a state) and a history tree of the decisions
// (8 bytes a node), garbage-collected so that only nodes reachable from live states are kept.
// Every growth is accounted against the planner-memory cap before it is allocated. The deadline
// is read every 2^14 merge steps, inside pairing, and before a garbage collection, a growth or a
// bound that could not finish in time; the search stops early enough for the result's own bound
// (one pass over the list, timed at the checkpoints) and the freeing of its lists (timed when
// they grow) to be done by the deadline.
//
// Values are doubles (runtimes); a state is pruned only when its bound is <= the incumbent, so
// the only inexactness is double rounding in the bounds (relative 1e-16).
//
// Ties: the plan returned is the first of the best value that the core reaches (states of equal
// value keep the lighter, a bound equal to the incumbent prunes). That is deterministic but is
// not an order on plans that a caller could state, and it is not torch's: torch's ilp_knapsack
// leaves ties to HiGHS, which states none either.
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

namespace remat::detail {

namespace {

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
                BundlingRequest* bundling = nullptr)
      : bundling_(bundling),
        p_(p),
        memory_(memory),
        deadline_(deadline),
        tuning_(tuning),
        max_enumerated_half_(std::min(tuning.max_enumerated_half, kMaxEnumeratedHalf)),
        next_checkpoint_(tuning.first_checkpoint),
        try_proportional_(tuning.proportional),
        try_offset_groups_(tuning.offset_groups),
        min_proportional_items_(tuning.min_proportional_items) {}

  ReducedSolution run() {
    try {
      memory_.reserve(ordering_bytes());
    } catch (const PlannerMemoryError& e) {
      // Not even the ordering fits: the empty plan with the trivial bound (all runtime).
      ReducedSolution nothing{std::vector<char>(p_.size(), 0), SolveStatus::kMemoryLimit, 0.0,
                              e.what(), "expanding_core"};
      for (double v : p_.value) nothing.upper_bound += v;
      return nothing;
    }
    order_ = order_by_efficiency(p_);
    ordering_seconds_ = std::chrono::duration<double>(Clock::now() - start_).count();
    integral_values_ = all_values_integral();
    find_break_solution();
    set_greedy_incumbent();
    if (tuning_.target > best_value_) {
      // A plan of value v beats the incumbent z when v >= z + step (integral runtimes) or
      // v > z: this z lets every plan worth at least the target through, and nothing below.
      best_value_ = integral_values_
                        ? tuning_.target - value_step_
                        : std::nextafter(tuning_.target, -std::numeric_limits<double>::infinity());
    }
    std::ptrdiff_t s = static_cast<std::ptrdiff_t>(break_pos_);
    std::ptrdiff_t t = s - 1;
    // Until the search has its first state, the greedy plan stands with Dantzig's bound.
    s_ = s;
    t_ = t;
    try {
      grow(states_, reserved_states_, 1);
      states_.push_back({break_weight_, break_value_, kRoot});
      grow(nodes_, reserved_nodes_, 1);
      nodes_.push_back({kRoot, 0});
      const auto m = static_cast<std::ptrdiff_t>(order_.size());
      bool add_next = true;
      double pruned_at = -std::numeric_limits<double>::infinity();
      while (true) {
        // The merge prunes the states it makes; a separate pass only pays after the incumbent
        // improved.
        if (best_value_ != pruned_at) {
          prune(s, t);
          pruned_at = best_value_;
        }
        if (states_.empty() || (s >= m && t < 0)) break;
        if (deadline_ && Clock::now() >= *work_deadline()) {
          return finish(SolveStatus::kTimeLimit, s, t);
        }
        // s and t move only once the expansion is complete: if the cap stops it, the states
        // still leave that item free, and the bound at (s, t) stays valid.
        if ((add_next && s < m) || t < 0) {
          const std::uint32_t k = order_[s];
          if (!expand(p_.weight[k], p_.value[k], k, bound_inputs(s + 1, t))) {
            return finish(SolveStatus::kTimeLimit, s, t);
          }
          ++s;
        } else {
          const std::uint32_t k = order_[t];
          if (!expand(-p_.weight[k], -p_.value[k], k, bound_inputs(s, t - 1))) {
            return finish(SolveStatus::kTimeLimit, s, t);
          }
          --t;
        }
        add_next = !add_next;
        update_incumbent();
        // The splits are first tried at a checkpoint, where the search may not yet have run as
        // long as a split costs; the next checkpoint may never come (circle n = 1e5: the list
        // stayed below 611814 states for 8 s, so whether the bands ran at all hung on a few
        // milliseconds at the last one). So once the cardinality bound has been computed and
        // failed, each split's first try is also made here as soon as its time share allows,
        // the cardinality split's before the bands' (almost strongly correlated instances need
        // the former, and an early band try there only costs its LPs).
        if (split_tries_ < kMaxSplitTries &&
            (split_tries_ > 0 ? best_value_ > split_tried_at_ : plain_cardinality_gap_ >= 0)) {
          // A try cut short is retried once the incumbent has improved (its plans count) and
          // its share of the time allows, not only at the next checkpoint (which may come much
          // later once the list is long). Without a better incumbent a retry would mostly
          // repeat the same search (circle instances: the split's bounds barely beat Dantzig's).
          if (const auto done = split_by_cardinality()) return *done;
        }
        if (band_tries_ < kMaxSplitTries && (split_tries_ > 0 || !tuning_.shift) &&
            (band_tries_ > 0 ? band_retry_due() : plain_cardinality_gap_ >= 0)) {
          if (const auto done = split_by_band()) return *done;
        }
        if (states_.size() > next_checkpoint_) {
          // The list keeps growing: the bounds are weak here. Look for better plans outside the
          // core, and try to prove the incumbent with the cardinality bound.
          next_checkpoint_ = 2 * states_.size();
          if (deadline_) time_result_bound(s, t);
          if (try_proportional_ && p_.size() >= min_proportional_items_ &&
              p_.size() <= kProportionalMaxItems) {
            try_proportional_ = false;
            if (const auto done = proportional_proof(s, t)) return *done;
          }
          if (bundling_ && !enumerated_ && restart_bundled()) return {};
          if (!enumerated_) {
            enumerated_ = true;
            if (seed_from_core_enumeration()) return finish_enumerated();
          }
          pair_with_outside_items(s, t);
          if (proven_by_cardinality()) return finish_enumerated();
          // After the cheap proofs, which settle most correlated instances at once.
          if (try_offset_groups_ && integral_values_) {
            try_offset_groups_ = false;
            if (const auto done = offset_groups_proof(s, t)) return *done;
          }
          if (const auto done = split_by_cardinality()) return *done;
          if (const auto done = split_by_band()) return *done;
        }
        s_ = s;
        t_ = t;
        if (nodes_.size() > gc_threshold_ && !too_late_for_garbage_collection()) {
          collect_garbage();
        }
      }
    } catch (const PlannerMemoryError& e) {
      ReducedSolution best = finish(SolveStatus::kMemoryLimit, s_, t_);
      best.limit_note = e.what();
      return best;
    }
    return finish(SolveStatus::kOptimal, s, t);
  }

 private:
  void find_break_solution() {
    break_pos_ = 0;
    while (break_pos_ < order_.size() &&
           break_weight_ + p_.weight[order_[break_pos_]] <= p_.capacity) {
      break_weight_ += p_.weight[order_[break_pos_]];
      break_value_ += p_.value[order_[break_pos_]];
      ++break_pos_;
    }
  }

  // The break solution filled greedily with later items that still fit: a cheap lower bound
  // that lets the first bound tests prune.
  void set_greedy_incumbent() {
    greedy_take_.assign(p_.size(), 0);
    std::int64_t room = p_.capacity - break_weight_;
    best_value_ = break_value_;
    for (std::size_t pos = 0; pos < order_.size(); ++pos) {
      const std::uint32_t k = order_[pos];
      if (pos < break_pos_) {
        greedy_take_[k] = 1;
      } else if (p_.weight[k] <= room) {
        greedy_take_[k] = 1;
        room -= p_.weight[k];
        best_value_ += p_.value[k];
      }
    }
    best_node_ = kGreedyIncumbent;
  }

  // With integral runtimes (and sums exact in double) a plan can only beat the incumbent z by
  // reaching z + 1, so a bound below z + 1 already prunes: the classical integer test, which
  // matters on instances with many ties.
  //
  // Every plan's runtime is then a multiple of g, the greatest common divisor of the runtimes
  // ("rudimentary divisibility", as in combo): a better plan reaches at least z + g, so bounds
  // below z + g prune (g = 3 on Pisinger's profit-ceiling class).
  bool all_values_integral() {
    double total = 0;
    std::int64_t g = 0;
    for (double v : p_.value) {
      if (v != std::floor(v)) return false;
      total += v;
      if (total >= 0x1.0p45) return false;
      g = std::gcd(g, static_cast<std::int64_t>(v));
    }
    value_step_ = static_cast<double>(std::max<std::int64_t>(g, 1));
    return true;
  }

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

  void prune(std::ptrdiff_t s, std::ptrdiff_t t) {
    const BoundInputs in = bound_inputs(s, t);
    std::size_t kept = 0;
    for (const State& state : states_) {
      const double b = bound(state, in.add_efficiency, in.drop_efficiency, in.can_drop);
      if (can_beat_incumbent(b, state.value)) {
        states_[kept++] = state;
      }
    }
    states_.resize(kept);
  }

  // The largest bound over the live states (or, before the first state exists, the break
  // state's Dantzig bound), and whether any of them can still beat the incumbent.
  struct Remaining {
    double bound;
    bool open;
  };

  Remaining remaining_bound(std::ptrdiff_t s, std::ptrdiff_t t) const {
    const BoundInputs in = bound_inputs(s, t);
    Remaining r{best_value_, false};
    const State root{break_weight_, break_value_, kRoot};
    const std::vector<State> just_root{root};
    for (const State& state : states_.empty() ? just_root : states_) {
      const double b = bound(state, in.add_efficiency, in.drop_efficiency, in.can_drop);
      r.bound = std::max(r.bound, b);
      r.open = r.open || can_beat_incumbent(b, state.value);
    }
    return r;
  }

  // The list grew past the first checkpoint: the instance is hard for the core (typically
  // subset-sum-like, where Dantzig's bound cannot prune until a plan fills the budget). Meet in
  // the middle over the items nearest the break gives a strong incumbent, or the optimum when
  // the core holds every item (returns true then). Its size fits the time left.
  bool seed_from_core_enumeration() {
    std::size_t half = max_enumerated_half_;
    if (deadline_) {
      const double left = seconds_left();
      // About 25 ns per listed sum and level of the sort; spend at most a quarter of the time.
      while (half > 8 &&
             25e-9 * static_cast<double>(std::size_t{2} << half) * static_cast<double>(half) >
                 0.25 * left) {
        --half;
      }
    }
    if (order_.size() > 2 * half) half = std::min(half, kIncumbentHalf);
    half = std::min(half, max_enumerated_half_);
    std::optional<CoreEnumeration> found;
    try {
      found = enumerate_core(p_, order_, break_pos_, p_.capacity - break_weight_, half, memory_);
    } catch (const PlannerMemoryError&) {
      return false;  // the search goes on without it
    }
    if (!found) return false;
    if (found->all_items) {
      enumerated_take_ = take_with_flips(found->flipped);
      return true;
    }
    const double value = break_value_ + found->flipped_value;
    if (value > best_value_) {
      best_value_ = value;
      greedy_take_ = take_with_flips(found->flipped);
      best_node_ = kGreedyIncumbent;
      incumbent_source_ = "core_enumeration";
    }
    return proven_by_cardinality();
  }

  // Small instances (n <= 64) whose list grows: near-proportional ones (runtime about a fixed
  // multiple of weight) are solved by proportional_search.cpp, which returns the optimum or a
  // proof for the incumbent; a deadline there ends the search with its bound.
  std::optional<ReducedSolution> proportional_proof(std::ptrdiff_t s, std::ptrdiff_t t) {
    ProportionalOutcome o = proportional_search(
        p_, best_value_, integral_values_ ? value_step_ : 0.0, memory_, work_deadline());
    return conclude_side_search(o.take, o.best_value, o.status == ProportionalOutcome::kProven,
                                o.status == ProportionalOutcome::kDeadline, o.upper_bound,
                                "proportional_search", s, t);
  }

  // Runtime affine in weight up to two intercepts (offset_groups.cpp): the optimum by count
  // vectors, or the incumbent proven; a deadline there ends the search with its bound.
  std::optional<ReducedSolution> offset_groups_proof(std::ptrdiff_t s, std::ptrdiff_t t) {
    // Its preparation (sorting each group by weight, listing and sorting the count vectors) is
    // not cut by the deadline, as bundling is not (subset sum n = 1e5 under AddressSanitizer ran
    // 63 ms past a 50 ms limit without this).
    if (!time_for_uncut_sorts()) return std::nullopt;
    OffsetGroupsOutcome o = offset_groups_search(p_, best_value_, memory_, work_deadline());
    return conclude_side_search(o.take, o.best_value, o.status == OffsetGroupsOutcome::kProven,
                                o.status == OffsetGroupsOutcome::kDeadline, o.upper_bound,
                                "offset_groups", s, t);
  }

  // What a search beside the core found: its better plan becomes the incumbent; a proof ends the
  // search with the incumbent, and so does the deadline, with the side search's bound (valid for
  // every plan) joining the result's.
  std::optional<ReducedSolution> conclude_side_search(std::vector<char>& take, double value,
                                                      bool proven, bool at_deadline, double bound,
                                                      const char* path, std::ptrdiff_t s,
                                                      std::ptrdiff_t t) {
    if (!take.empty() && value > best_value_) {
      best_value_ = value;
      greedy_take_ = std::move(take);
      best_node_ = kGreedyIncumbent;
      incumbent_source_ = path;
    }
    if (proven) {
      ReducedSolution solution;
      solution.take = best_node_ == kGreedyIncumbent ? greedy_take_ : finish_take();
      solution.status = SolveStatus::kOptimal;
      solution.path = path;
      return solution;
    }
    if (at_deadline) {
      cardinality_bound_ = std::min(cardinality_bound_, bound);
      ReducedSolution solution = finish(SolveStatus::kTimeLimit, s, t);
      solution.path = path;
      return solution;
    }
    return std::nullopt;
  }

  // Strongly correlated classes: a plan that fills the budget with the most items (or, inverse
  // strongly correlated, the fewest) meets the surrogate cardinality bound, which proves it
  // optimal without any search. Tried once for each new incumbent.
  //
  // The bound costs about 45 linear-time LPs; it is only computed once the search has spent at
  // least as long as the last computation took (estimated at first), so on instances where it
  // cannot help it at most doubles the time.
  bool proven_by_cardinality() {
    if (best_value_ == cardinality_checked_value_ || cardinality_failed_) return false;
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - start_).count() < cardinality_cost_) return false;
    if (deadline_ && seconds_left() < cardinality_cost_) {
      return false;  // it would most likely stop at the deadline without a bound
    }
    cardinality_checked_value_ = best_value_;
    double bound = 0;
    try {
      if (!cardinality_) cardinality_.emplace(p_, integral_values_, memory_);
      bound = cardinality_->bound(best_value_, work_deadline());
      cardinality_cost_ =
          std::max(cardinality_cost_, std::chrono::duration<double>(Clock::now() - now).count());
    } catch (const PlannerMemoryError&) {
      cardinality_failed_ = true;  // the search goes on without it
      return false;
    }
    if (integral_values_ ? bound < best_value_ + value_step_ : bound <= best_value_) {
      enumerated_take_ = best_node_ == kGreedyIncumbent ? greedy_take_ : finish_take();
      proven_by_bound_ = true;
      return true;
    }
    cardinality_bound_ = std::min(cardinality_bound_, bound);  // valid for the reports
    plain_cardinality_gap_ = bound - best_value_;
    return false;
  }

  // Pisinger's almost strongly correlated class: the incumbent is often optimal early, but
  // Dantzig's bound lets too many states live, since it saves a fraction of an item and these
  // classes reward the number of items. cardinality_split.cpp solves, for each number of items a
  // better plan could have, the Lagrangian-shifted knapsack whose bound is the LP bound with that
  // cardinality. Its LP bounds (about 4 searches of 40 LPs at first, cached after) wait until
  // the search has run as long as the step last took; its inner searches get half the time the
  // search itself has had (at least 10 ms), and altogether at most half of it. When they are cut
  // short, the step is tried again after the incumbent improves, as soon as that share allows,
  // up to 4 times.
  std::optional<ReducedSolution> split_by_cardinality() {
    if (!tuning_.shift || !integral_values_ || split_tries_ >= kMaxSplitTries) return std::nullopt;
    // Like the cardinality bound: only once the search has run as long as the step last took
    // (at first: about 4 searches of 40 LPs), and not when the deadline is nearer than that.
    const auto now = Clock::now();
    const double ran = std::chrono::duration<double>(now - start_).count();
    if (ran < split_cost_ || split_spent_ > 0.5 * (ran - split_spent_)) return std::nullopt;
    if (deadline_ && seconds_left() < split_cost_) {
      return std::nullopt;
    }
    ++split_tries_;
    split_tried_at_ = best_value_;
    const auto inner_deadline =
        now + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(std::max(0.01, 0.5 * (ran - split_spent_))));
    SplitOutcome o;
    try {
      o = cardinality_split(p_, break_pos_, best_value_, value_step_, split_cache_, memory_,
                            work_deadline(), inner_deadline, tuning_);
    } catch (const PlannerMemoryError&) {
      return std::nullopt;  // the search goes on without it
    }
    const double took = std::chrono::duration<double>(Clock::now() - now).count();
    split_cost_ = std::max(split_cost_, took);
    split_spent_ += o.inner_seconds;
    return adopt(o, "cardinality_split", split_tries_);
  }

  // A split's outcome: its better plan becomes the incumbent, and a proof ends the search, with
  // the plan's source and then the split in the path (the split's own plans: just the split).
  // A split that tried no inner search cannot do better later: it is not tried again.
  std::optional<ReducedSolution> adopt(SplitOutcome& o, const std::string& step, int& tries) {
    if (!o.take.empty() && o.best_value > best_value_) {
      best_value_ = o.best_value;
      greedy_take_ = std::move(o.take);
      best_node_ = kGreedyIncumbent;
      incumbent_source_ = step;
    }
    if (o.proven) {
      ReducedSolution solution;
      solution.take = best_node_ == kGreedyIncumbent ? greedy_take_ : finish_take();
      solution.status = SolveStatus::kOptimal;
      const std::string source =
          best_node_ == kGreedyIncumbent ? incumbent_source_ : std::string("expanding_core");
      solution.path = source == step ? source : source + "+" + step;
      return solution;
    }
    cardinality_bound_ = std::min(cardinality_bound_, o.upper_bound);
    if (!o.attempted) tries = kMaxSplitTries;
    return std::nullopt;
  }

  // Pisinger's circle class: the split above barely beats Dantzig's bound, since a few tiny
  // items let its LP trade the number of items for almost nothing. band_split.cpp fixes what the
  // incumbent settles and counts only the items of the core whose weight is near the break
  // item's. Same schedule as split_by_cardinality, with its own tries and time share.
  std::optional<ReducedSolution> split_by_band() {
    if (!tuning_.band || !integral_values_ || band_tries_ >= kMaxSplitTries) return std::nullopt;
    // Only where the surrogate cardinality bound (all items counted) has been tried and left
    // more than half of Dantzig's gap: where it is strong (strongly correlated classes) it proves
    // the incumbent soon, and the bands would only take time from it.
    if (!(plain_cardinality_gap_ >
          tuning_.band_after_cardinality_share * (lp_bound() - best_value_))) {
      return std::nullopt;
    }
    const auto now = Clock::now();
    const double ran = std::chrono::duration<double>(now - start_).count();
    const double spent = split_spent_ + band_spent_;
    if (ran < band_cost_ || band_spent_ > ran - spent) return std::nullopt;
    if (deadline_ && seconds_left() < band_cost_) {
      return std::nullopt;
    }
    ++band_tries_;
    band_tried_at_ = best_value_;
    band_tried_after_ = ran;
    const double inner_seconds = std::max(0.01, ran - spent);
    SplitOutcome o;
    try {
      o = band_split(p_, order_, break_pos_, best_value_, value_step_, memory_, work_deadline(),
                     inner_seconds, band_cache_, tuning_);
    } catch (const PlannerMemoryError&) {
      return std::nullopt;  // the search goes on without it
    }
    band_cost_ = std::max(band_cost_, std::chrono::duration<double>(Clock::now() - now).count());
    band_spent_ += o.inner_seconds;
    return adopt(o, "band_split", band_tries_);
  }

  // Dantzig's bound of the whole problem, from the break solution (lp_upper_bound's sum in the
  // same order, without its sort: that sort could run past the deadline on large instances).
  double lp_bound() const {
    if (break_pos_ == order_.size()) return break_value_;
    const std::uint32_t k = order_[break_pos_];
    return break_value_ + p_.value[k] * (static_cast<double>(p_.capacity - break_weight_) /
                                         static_cast<double>(p_.weight[k]));
  }

  // A band split cut short is tried again once the incumbent improved or the search has run
  // a quarter longer than when it was last tried (its inner searches then get more time).
  bool band_retry_due() const {
    if (best_value_ > band_tried_at_) return true;
    return std::chrono::duration<double>(Clock::now() - start_).count() >= 1.25 * band_tried_after_;
  }

  // State pairing (after combo): every live state combined with one item outside the core,
  // saved if it is after the core or dropped if before. States are sorted by weight with
  // increasing value, so each item's best partner is the last state within the weight left:
  // one binary search. O(n log L) for L states.
  void pair_with_outside_items(std::ptrdiff_t s, std::ptrdiff_t t) {
    if (states_.empty()) return;
    double best = best_value_;
    std::size_t best_state = 0;
    std::uint32_t best_item = 0;
    bool found = false;
    auto try_limit = [&](std::int64_t limit, double dv, std::uint32_t k) {
      auto it = std::upper_bound(states_.begin(), states_.end(), limit,
                                 [](std::int64_t c, const State& st) { return c < st.weight; });
      if (it == states_.begin()) return;
      --it;
      if (it->value + dv > best) {
        best = it->value + dv;
        best_state = static_cast<std::size_t>(it - states_.begin());
        best_item = k;
        found = true;
      }
    };
    const auto m = static_cast<std::ptrdiff_t>(order_.size());
    const std::optional<Clock::time_point> until = work_deadline();
    // Outside the core: positions < t + 1 (saved, may be dropped) and >= s (may be saved).
    for (std::ptrdiff_t pos = 0; pos < m; ++pos) {
      if (pos == t + 1) pos = s;
      if (pos >= m) break;
      if (until && pos % 1024 == 0 && Clock::now() >= *until) break;
      const std::uint32_t k = order_[static_cast<std::size_t>(pos)];
      if (pos >= s) {
        try_limit(p_.capacity - p_.weight[k], p_.value[k], k);
      } else {
        try_limit(p_.capacity + p_.weight[k], -p_.value[k], k);
      }
    }
    if (!found) return;
    std::vector<char> take(p_.size(), 0);
    for (std::size_t pos = 0; pos < break_pos_; ++pos) take[order_[pos]] = 1;
    for (std::uint32_t node = states_[best_state].node; node != kRoot; node = nodes_[node].parent) {
      take[nodes_[node].item] ^= 1;
    }
    take[best_item] ^= 1;
    best_value_ = best;
    greedy_take_ = std::move(take);
    best_node_ = kGreedyIncumbent;
    incumbent_source_ = "state_pairing";
  }

  std::vector<char> take_with_flips(const std::vector<std::uint32_t>& flipped) const {
    std::vector<char> take(p_.size(), 0);
    for (std::size_t pos = 0; pos < break_pos_; ++pos) take[order_[pos]] = 1;
    for (std::uint32_t k : flipped) take[k] ^= 1;
    return take;
  }

  ReducedSolution finish_enumerated() {
    ReducedSolution solution;
    solution.take = enumerated_take_;
    solution.status = SolveStatus::kOptimal;
    solution.path = proven_by_bound_
                        ? (best_node_ == kGreedyIncumbent ? incumbent_source_ : "expanding_core") +
                              "+cardinality_bound"
                        : "meet_in_the_middle";
    return solution;
  }

  std::vector<char> finish_take() const {
    std::vector<char> take(p_.size(), 0);
    for (std::size_t pos = 0; pos < break_pos_; ++pos) take[order_[pos]] = 1;
    for (std::uint32_t node = best_node_; node != kRoot; node = nodes_[node].parent) {
      take[nodes_[node].item] ^= 1;
    }
    return take;
  }

  // Merges the list with a copy of itself shifted by (dw, dv): the same plans with item k's
  // decision flipped. Both are sorted by weight; dominated states are dropped as they appear.
  // Returns false, leaving the list as it was, when the deadline passes during the merge.
  //
  // States the bound at the next core (`next`) cannot let beat the incumbent are left out as
  // they are made; a state dominated by one left out is left out too (its completions are no
  // better), so the list keeps values strictly increasing.
  bool expand(std::int64_t dw, double dv, std::uint32_t k, const BoundInputs& next) {
    if (nodes_.size() + states_.size() >= kGreedyIncumbent) {
      throw PlannerMemoryError("exact: more than 2^32 live decision nodes");
    }
    const std::size_t n = states_.size();
    // The merge makes up to 2n states, which the result's bound would then go over.
    const Clock::time_point stop_at = deadline_ ? stop_time(2 * n) : Clock::time_point::max();
    // Growing a list copies what it holds into fresh memory, first touched by the copy: nothing
    // can stop that halfway (a few tenths of a second at 10^7 states on a virtual machine), so
    // it starts only when it ends before the merge must stop.
    scratch_.clear();  // its old states are dead: nothing to copy
    const std::size_t copied =
        copied_bytes(scratch_, 2 * n) + copied_bytes(nodes_, nodes_.size() + n);
    if (deadline_ && copied > 0 &&
        Clock::now() + seconds(1.5 * grow_seconds_per_byte_ * static_cast<double>(copied)) >=
            stop_at) {
      return false;
    }
    grow(scratch_, reserved_scratch_, 2 * n);
    grow(nodes_, reserved_nodes_, nodes_.size() + n);
    std::size_t i = 0, j = 0;
    double last_value = -std::numeric_limits<double>::infinity();
    auto push = [&](const State& candidate, bool flipped, std::uint32_t parent) {
      if (candidate.value <= last_value) return;
      last_value = candidate.value;
      const double b = bound(candidate, next.add_efficiency, next.drop_efficiency, next.can_drop);
      if (!can_beat_incumbent(b, candidate.value)) return;
      State kept = candidate;
      if (flipped) {
        nodes_.push_back({parent, k});
        kept.node = static_cast<std::uint32_t>(nodes_.size() - 1);
      }
      scratch_.push_back(kept);
    };
    std::size_t until_clock = kStepsPerClockRead;
    while (i < n || j < n) {
      if (deadline_ && --until_clock == 0) {
        until_clock = kStepsPerClockRead;
        if (Clock::now() >= stop_at) return false;
      }
      const bool take_unchanged =
          j == n || (i < n && (states_[i].weight < states_[j].weight + dw ||
                               (states_[i].weight == states_[j].weight + dw &&
                                states_[i].value >= states_[j].value + dv)));
      if (take_unchanged) {
        push(states_[i], false, 0);
        ++i;
      } else {
        const State& from = states_[j];
        push({from.weight + dw, from.value + dv, from.node}, true, from.node);
        ++j;
      }
    }
    states_.swap(scratch_);
    std::swap(reserved_states_, reserved_scratch_);
    return true;
  }

  // Times the result's bound (remaining_bound) on the list as it is, so that the search stops
  // early enough to compute it by the deadline: one pass over the list each time it has doubled
  // (at the checkpoints), against the merges that doubled it.
  void time_result_bound(std::ptrdiff_t s, std::ptrdiff_t t) {
    if (states_.size() < kMeasuredStates) return;
    const auto start = Clock::now();
    static_cast<void>(remaining_bound(s, t));
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    seconds_per_state_ = std::max(seconds_per_state_, took / static_cast<double>(states_.size()));
  }

  // When every step of the search must end so that the result is ready by the deadline (none
  // without one): the deadline less what the result costs on the list as it is. Every step reads
  // this, not the deadline itself; the merge, which may double the list, reads stop_time.
  std::optional<Clock::time_point> work_deadline() const {
    if (!deadline_) return std::nullopt;
    return stop_time(states_.size());
  }
  double seconds_left() const {
    return std::chrono::duration<double>(*work_deadline() - Clock::now()).count();
  }
  // Whether a step that sorts and builds O(n) items without reading the deadline (bundling,
  // offset_groups) ends in time: bundling's sort compares up to three keys and it builds a new
  // problem, 2 to 6 times the ordering's time at n = 1e5 (Release and AddressSanitizer builds),
  // so such a step needs 8 times that left.
  bool time_for_uncut_sorts() const {
    return !deadline_ || seconds_left() >= 8 * ordering_seconds_;
  }

  // When the search must stop so that the result is ready by the deadline: its bound over
  // `states` states (remaining_bound), and the search's lists freed.
  Clock::time_point stop_time(std::size_t states) const {
    const double held = static_cast<double>(reserved_states_ + reserved_scratch_ + reserved_nodes_);
    return *deadline_ - seconds(1.5 * (seconds_per_state_ * static_cast<double>(states) +
                                       free_seconds_per_byte_ * held));
  }

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  // What growing `v` to `needed` copies: all it holds, when it must move.
  template <typename T>
  static std::size_t copied_bytes(const std::vector<T>& v, std::size_t needed) {
    return v.capacity() >= needed ? 0 : v.size() * sizeof(T);
  }

  void update_incumbent() {
    // Values increase with weight, so the best plan within budget is the last one at or under it.
    auto it = std::upper_bound(states_.begin(), states_.end(), p_.capacity,
                               [](std::int64_t c, const State& s) { return c < s.weight; });
    if (it == states_.begin()) return;
    --it;
    if (it->value > best_value_) {
      best_value_ = it->value;
      best_node_ = it->node;
    }
  }

  std::size_t ordering_bytes() const {
    return p_.size() * (sizeof(std::uint32_t) + sizeof(double) + 2);
  }

  // Many identical items make the list long for nothing (states that differ only in which copy
  // they save): when bundling halves the items, this search stops, hands its memory back, and
  // solve_exact starts over on the bundles. Easy instances never get here, so they never pay
  // for the sort.
  bool restart_bundled() {
    // Nothing can stop it halfway: too near the deadline, the search goes on unbundled (it ends
    // soon anyway).
    if (!time_for_uncut_sorts()) return false;
    std::optional<Bundling> bundled;
    try {
      bundled = bundle_duplicates(p_, memory_, bundling_->only_if_halved);
    } catch (const PlannerMemoryError&) {
      return false;
    }
    if (!bundled) return false;
    memory_.release(ordering_bytes() + reserved_states_ + reserved_scratch_ + reserved_nodes_);
    bundling_->result = std::move(bundled);
    return true;
  }

  // The collection cannot stop halfway: near the deadline the search keeps its garbage instead,
  // since it ends soon anyway. Its cost is the slowest rate any collection of this search has
  // had (its parent walks miss the cache: 27 to 44 ns an entry at 0.6 to 2.4 million nodes),
  // with half as much again to spare, since the rate grows with the list.
  bool too_late_for_garbage_collection() const {
    if (!deadline_) return false;
    const double left = seconds_left();
    return left < 1.5 * gc_seconds_per_entry_ * static_cast<double>(nodes_.size() + states_.size());
  }

  // Keeps only history nodes reachable from live states and the incumbent. Parents always
  // precede their children, so one forward pass renumbers them.
  void collect_garbage() {
    const auto start = Clock::now();
    const auto entries = static_cast<double>(nodes_.size() + states_.size());
    memory_.reserve(nodes_.size() * (sizeof(char) + sizeof(std::uint32_t)));
    std::vector<char> live(nodes_.size(), 0);
    live[kRoot] = 1;
    auto mark = [&](std::uint32_t node) {
      while (!live[node]) {
        live[node] = 1;
        node = nodes_[node].parent;
      }
    };
    for (const State& state : states_) mark(state.node);
    if (best_node_ != kGreedyIncumbent) mark(best_node_);
    std::vector<std::uint32_t> renumber(nodes_.size());
    std::size_t kept = 0;
    for (std::size_t node = 0; node < nodes_.size(); ++node) {
      if (!live[node]) continue;
      renumber[node] = static_cast<std::uint32_t>(kept);
      nodes_[kept++] = {renumber[nodes_[node].parent], nodes_[node].item};
    }
    nodes_.resize(kept);
    for (State& state : states_) state.node = renumber[state.node];
    if (best_node_ != kGreedyIncumbent) best_node_ = renumber[best_node_];
    memory_.release(live.size() * (sizeof(char) + sizeof(std::uint32_t)));
    gc_threshold_ = std::max<std::size_t>(kMinGcThreshold, 2 * kept + 2 * states_.size());
    gc_seconds_per_entry_ =
        std::max(gc_seconds_per_entry_,
                 std::chrono::duration<double>(Clock::now() - start).count() / entries);
  }

  // The best plan and, when a limit stopped the search, the bound over the live states. A plan
  // that meets that bound (exactly, or below z + 1 with integral runtimes) is proven optimal,
  // whichever limit stopped the search.
  ReducedSolution finish(SolveStatus status, std::ptrdiff_t s, std::ptrdiff_t t) {
    ReducedSolution solution;
    solution.status = status;
    // The core's own search, and whether its plan came from the enumerated core.
    solution.path = best_node_ == kGreedyIncumbent && incumbent_source_ != "greedy"
                        ? "expanding_core+" + incumbent_source_
                        : "expanding_core";
    if (status != SolveStatus::kOptimal) {
      const Remaining remaining = remaining_bound(s, t);
      // Both bounds hold for every plan that beats the incumbent: report the tighter one.
      solution.upper_bound = std::max(best_value_, std::min(remaining.bound, cardinality_bound_));
      if (!remaining.open) solution.status = SolveStatus::kOptimal;
    }
    if (best_node_ == kGreedyIncumbent) {
      solution.take = greedy_take_;
      return solution;
    }
    solution.take.assign(p_.size(), 0);
    for (std::size_t pos = 0; pos < break_pos_; ++pos) solution.take[order_[pos]] = 1;
    for (std::uint32_t node = best_node_; node != kRoot; node = nodes_[node].parent) {
      solution.take[nodes_[node].item] ^= 1;
    }
    return solution;
  }

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

}  // namespace

ReducedSolution solve_exact(const ReducedProblem& p, PlannerMemory& memory,
                            std::optional<Clock::time_point> deadline, const ExactTuning& tuning) {
  if (p.size() < tuning.min_bundled_items) return ExpandingCore(p, memory, deadline, tuning).run();
  ExpandingCore::BundlingRequest request{tuning.bundle_only_if_halved, std::nullopt};
  ReducedSolution solution = ExpandingCore(p, memory, deadline, tuning, &request).run();
  if (!request.result) return solution;
  const Bundling& bundled = *request.result;
  solution = ExpandingCore(bundled.problem, memory, deadline, tuning).run();
  solution.take = unbundle(bundled, solution.take, p.size());
  solution.path = "duplicates_bundled+" + solution.path;
  memory.release(bundled.bytes);
  return solution;
}

}  // namespace remat::detail
