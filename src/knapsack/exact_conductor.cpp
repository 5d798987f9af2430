// The expanding core's conductor: what the search does at its checkpoints (each time the state
// list doubles past 8192 states) and, once they have failed, after every step. In order: the
// result bound timed; proportional_search (at most 64 items); a restart on bundled duplicates;
// meet in the middle over the items nearest the break; pairing each live state with one item
// outside the core (O(n log L)); the surrogate cardinality bound; offset_groups (runtime affine
// in memory up to two intercepts); cardinality_split and band_split, each within a share of the
// time spent. Each side search either proves a plan optimal, which ends the search, or leaves a
// better incumbent, which prunes the list. Sources: combo (Martello, Pisinger and Toth 1999) and
// the files named above; the search itself is in exact_core.cpp.
#include "knapsack/expanding_core.hpp"

namespace remat::detail::exact {

// The list grew past the first checkpoint: the instance is hard for the core (typically
// subset-sum-like, where Dantzig's bound cannot prune until a plan fills the budget). Meet in
// the middle over the items nearest the break gives a strong incumbent, or the optimum when
// the core holds every item (returns true then). Its size fits the time left.
bool ExpandingCore::seed_from_core_enumeration() {
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

// The splits are first tried at a checkpoint, where the search may not yet have run as long as
// a split costs; the next checkpoint may never come (circle n = 1e5: the list stayed below
// 611814 states for 8 s, so whether the bands ran at all hung on a few milliseconds at the last
// one). So once the cardinality bound has been computed and failed, each split's first try is
// also made after every step as soon as its time share allows, the cardinality split's before
// the bands' (almost strongly correlated instances need the former, and an early band try
// there only costs its LPs).
std::optional<ReducedSolution> ExpandingCore::retry_splits() {
  if (split_tries_ < kMaxSplitTries &&
      (split_tries_ > 0 ? best_value_ > split_tried_at_ : plain_cardinality_gap_ >= 0)) {
    // A try cut short is retried once the incumbent has improved (its plans count) and its
    // share of the time allows, not only at the next checkpoint (which may come much later
    // once the list is long). Without a better incumbent a retry would mostly repeat the same
    // search (circle instances: the split's bounds barely beat Dantzig's).
    if (auto done = split_by_cardinality()) return done;
  }
  if (band_tries_ < kMaxSplitTries && (split_tries_ > 0 || !tuning_.shift) &&
      (band_tries_ > 0 ? band_retry_due() : plain_cardinality_gap_ >= 0)) {
    if (auto done = split_by_band()) return done;
  }
  return std::nullopt;
}

// At a checkpoint (the list has doubled past 8192 states), with the core at (s, t): look for
// better plans outside the core, and try to prove the incumbent, cheapest proofs first. A
// solution ends the search (an empty one: restart on bundled items).
std::optional<ReducedSolution> ExpandingCore::at_checkpoint(std::ptrdiff_t s, std::ptrdiff_t t) {
  if (deadline_) time_result_bound(s, t);
  if (try_proportional_ && p_.size() >= min_proportional_items_ &&
      p_.size() <= kProportionalMaxItems) {
    try_proportional_ = false;
    if (auto done = proportional_proof(s, t)) return done;
  }
  if (bundling_ && !enumerated_ && restart_bundled()) return ReducedSolution{};
  if (!enumerated_) {
    enumerated_ = true;
    if (seed_from_core_enumeration()) return finish_enumerated();
  }
  pair_with_outside_items(s, t);
  if (proven_by_cardinality()) return finish_enumerated();
  // After the cheap proofs, which settle most correlated instances at once.
  if (try_offset_groups_ && integral_values_) {
    try_offset_groups_ = false;
    if (auto done = offset_groups_proof(s, t)) return done;
  }
  if (auto done = split_by_cardinality()) return done;
  return split_by_band();
}

// Small instances (n <= 64) whose list grows: near-proportional ones (runtime about a fixed
// multiple of weight) are solved by proportional_search.cpp, which returns the optimum or a
// proof for the incumbent; a deadline there ends the search with its bound.
std::optional<ReducedSolution> ExpandingCore::proportional_proof(std::ptrdiff_t s,
                                                                 std::ptrdiff_t t) {
  ProportionalOutcome o = proportional_search(p_, best_value_, integral_values_ ? value_step_ : 0.0,
                                              memory_, work_deadline());
  return conclude_side_search(o.take, o.best_value, o.status == ProportionalOutcome::kProven,
                              o.status == ProportionalOutcome::kDeadline, o.upper_bound,
                              "proportional_search", s, t);
}

// Runtime affine in weight up to two intercepts (offset_groups.cpp): the optimum by count
// vectors, or the incumbent proven; a deadline there ends the search with its bound.
std::optional<ReducedSolution> ExpandingCore::offset_groups_proof(std::ptrdiff_t s,
                                                                  std::ptrdiff_t t) {
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
std::optional<ReducedSolution> ExpandingCore::conclude_side_search(
    std::vector<char>& take, double value, bool proven, bool at_deadline, double bound,
    const char* path, std::ptrdiff_t s, std::ptrdiff_t t) {
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
bool ExpandingCore::proven_by_cardinality() {
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
std::optional<ReducedSolution> ExpandingCore::split_by_cardinality() {
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
std::optional<ReducedSolution> ExpandingCore::adopt(SplitOutcome& o, const std::string& step,
                                                    int& tries) {
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
std::optional<ReducedSolution> ExpandingCore::split_by_band() {
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
double ExpandingCore::lp_bound() const {
  if (break_pos_ == order_.size()) return break_value_;
  const std::uint32_t k = order_[break_pos_];
  return break_value_ + p_.value[k] * (static_cast<double>(p_.capacity - break_weight_) /
                                       static_cast<double>(p_.weight[k]));
}

// A band split cut short is tried again once the incumbent improved or the search has run
// a quarter longer than when it was last tried (its inner searches then get more time).
bool ExpandingCore::band_retry_due() const {
  if (best_value_ > band_tried_at_) return true;
  return std::chrono::duration<double>(Clock::now() - start_).count() >= 1.25 * band_tried_after_;
}

// State pairing (after combo): every live state combined with one item outside the core,
// saved if it is after the core or dropped if before. States are sorted by weight with
// increasing value, so each item's best partner is the last state within the weight left:
// one binary search. O(n log L) for L states.
void ExpandingCore::pair_with_outside_items(std::ptrdiff_t s, std::ptrdiff_t t) {
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

std::vector<char> ExpandingCore::take_with_flips(const std::vector<std::uint32_t>& flipped) const {
  std::vector<char> take(p_.size(), 0);
  for (std::size_t pos = 0; pos < break_pos_; ++pos) take[order_[pos]] = 1;
  for (std::uint32_t k : flipped) take[k] ^= 1;
  return take;
}

ReducedSolution ExpandingCore::finish_enumerated() {
  ReducedSolution solution;
  solution.take = enumerated_take_;
  solution.status = SolveStatus::kOptimal;
  solution.path = proven_by_bound_
                      ? (best_node_ == kGreedyIncumbent ? incumbent_source_ : "expanding_core") +
                            "+cardinality_bound"
                      : "meet_in_the_middle";
  return solution;
}

// Times the result's bound (remaining_bound) on the list as it is, so that the search stops
// early enough to compute it by the deadline: one pass over the list each time it has doubled
// (at the checkpoints), against the merges that doubled it.
void ExpandingCore::time_result_bound(std::ptrdiff_t s, std::ptrdiff_t t) {
  if (states_.size() < kMeasuredStates) return;
  const auto start = Clock::now();
  static_cast<void>(remaining_bound(s, t));
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  seconds_per_state_ = std::max(seconds_per_state_, took / static_cast<double>(states_.size()));
}

// Many identical items make the list long for nothing (states that differ only in which copy
// they save): when bundling halves the items, this search stops, hands its memory back, and
// solve_exact starts over on the bundles. Easy instances never get here, so they never pay
// for the sort.
bool ExpandingCore::restart_bundled() {
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

}  // namespace remat::detail::exact
