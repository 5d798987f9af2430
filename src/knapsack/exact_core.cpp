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
// and the search reaches for combo's tools (the conductor of these side searches is
// exact_conductor.cpp; this file is the list search): identical items bundled by binary splitting
// (a restart on the bundles when that halves n, see duplicate_bundles.cpp); meet in the middle over
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
#include "knapsack/expanding_core.hpp"

namespace remat::detail {

namespace exact {

ExpandingCore::ExpandingCore(const ReducedProblem& p, PlannerMemory& memory,
                             std::optional<Clock::time_point> deadline, const ExactTuning& tuning,
                             BundlingRequest* bundling)
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

ReducedSolution ExpandingCore::run() {
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
      if (const auto done = retry_splits()) return *done;
      if (states_.size() > next_checkpoint_) {
        // The list keeps growing: the bounds are weak here.
        next_checkpoint_ = 2 * states_.size();
        if (const auto done = at_checkpoint(s, t)) return *done;
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

void ExpandingCore::find_break_solution() {
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
void ExpandingCore::set_greedy_incumbent() {
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
bool ExpandingCore::all_values_integral() {
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

void ExpandingCore::prune(std::ptrdiff_t s, std::ptrdiff_t t) {
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

ExpandingCore::Remaining ExpandingCore::remaining_bound(std::ptrdiff_t s, std::ptrdiff_t t) const {
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

std::vector<char> ExpandingCore::finish_take() const {
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
bool ExpandingCore::expand(std::int64_t dw, double dv, std::uint32_t k, const BoundInputs& next) {
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
    const bool take_unchanged = j == n || (i < n && (states_[i].weight < states_[j].weight + dw ||
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

double ExpandingCore::seconds_left() const {
  return std::chrono::duration<double>(*work_deadline() - Clock::now()).count();
}

// Whether a step that sorts and builds O(n) items without reading the deadline (bundling,
// offset_groups) ends in time: bundling's sort compares up to three keys and it builds a new
// problem, 2 to 6 times the ordering's time at n = 1e5 (Release and AddressSanitizer builds),
// so such a step needs 8 times that left.
bool ExpandingCore::time_for_uncut_sorts() const {
  return !deadline_ || seconds_left() >= 8 * ordering_seconds_;
}

// When the search must stop so that the result is ready by the deadline: its bound over
// `states` states (remaining_bound), and the search's lists freed.
Clock::time_point ExpandingCore::stop_time(std::size_t states) const {
  const double held = static_cast<double>(reserved_states_ + reserved_scratch_ + reserved_nodes_);
  return *deadline_ - seconds(1.5 * (seconds_per_state_ * static_cast<double>(states) +
                                     free_seconds_per_byte_ * held));
}

void ExpandingCore::update_incumbent() {
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

std::size_t ExpandingCore::ordering_bytes() const {
  return p_.size() * (sizeof(std::uint32_t) + sizeof(double) + 2);
}

// The collection cannot stop halfway: near the deadline the search keeps its garbage instead,
// since it ends soon anyway. Its cost is the slowest rate any collection of this search has
// had (its parent walks miss the cache: 27 to 44 ns an entry at 0.6 to 2.4 million nodes),
// with half as much again to spare, since the rate grows with the list.
bool ExpandingCore::too_late_for_garbage_collection() const {
  if (!deadline_) return false;
  const double left = seconds_left();
  return left < 1.5 * gc_seconds_per_entry_ * static_cast<double>(nodes_.size() + states_.size());
}

// Keeps only history nodes reachable from live states and the incumbent. Parents always
// precede their children, so one forward pass renumbers them.
void ExpandingCore::collect_garbage() {
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
  gc_seconds_per_entry_ = std::max(
      gc_seconds_per_entry_, std::chrono::duration<double>(Clock::now() - start).count() / entries);
}

// The best plan and, when a limit stopped the search, the bound over the live states. A plan
// that meets that bound (exactly, or below z + 1 with integral runtimes) is proven optimal,
// whichever limit stopped the search.
ReducedSolution ExpandingCore::finish(SolveStatus status, std::ptrdiff_t s, std::ptrdiff_t t) {
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

}  // namespace exact

using exact::ExpandingCore;

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
