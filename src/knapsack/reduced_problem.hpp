// Internal interface between solve() and the individual solver files.
//
// Every solver works on the same reduced problem: items whose decision is forced by the problem
// semantics (zero weight with positive runtime: always saved; runtime <= 0 or weight above the
// budget: never saved) are settled once here, so each algorithm only sees items with
// 1 <= weight <= capacity and runtime > 0. Reduced items keep the order of the problem's items
// (original_index ascends), so an order-based tie rule on reduced items is the same rule on the
// problem's items.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "remat/problem.hpp"
#include "remat/result.hpp"

namespace remat::detail {

struct ReducedProblem {
  std::vector<std::size_t> original_index;  // reduced item k is problem item original_index[k]
  std::vector<std::int64_t> weight;         // 1 <= weight[k] <= capacity
  std::vector<double> value;                // > 0
  std::int64_t capacity = 0;
  std::vector<std::size_t> forced_saved;  // weight 0, runtime > 0
  std::size_t original_size = 0;          // items in the problem, settled ones included

  std::size_t size() const { return weight.size(); }
};

ReducedProblem reduce(const KnapsackProblem& problem);

// Accounts a solver's working memory against the caller's cap. Solvers reserve before they
// allocate, so a refusal never follows an out-of-memory crash.
class PlannerMemory {
 public:
  PlannerMemory(std::size_t cap, std::string solver_name)
      : cap_(cap), solver_name_(std::move(solver_name)) {}
  // Throws PlannerMemoryError when current + bytes would exceed the cap.
  void reserve(std::size_t bytes);
  void release(std::size_t bytes) { current_ -= bytes < current_ ? bytes : current_; }
  std::size_t peak() const { return peak_; }
  std::size_t cap() const { return cap_; }
  std::size_t current() const { return current_; }

 private:
  std::size_t cap_;
  std::string solver_name_;
  std::size_t current_ = 0;
  std::size_t peak_ = 0;
};

using Clock = std::chrono::steady_clock;

// What a solver decides on the reduced items.
struct ReducedSolution {
  std::vector<char> take;  // per reduced item
  SolveStatus status = SolveStatus::kOptimal;
  // Upper bound on the reduced objective; read unless status is kOptimal.
  double upper_bound = 0.0;
  std::string limit_note;  // with kMemoryLimit: what the cap refused
  std::string path;        // which algorithm decided, for the result's "path" field
};

// min over mu of the surrogate cardinality bounds (see cardinality_bound.cpp): no plan that beats
// `incumbent` saves more runtime. Reserves O(n) against `memory` (throws PlannerMemoryError).
double cardinality_bound(const ReducedProblem& p, double incumbent, bool integral,
                         PlannerMemory& memory);

struct ShiftedItem {
  double efficiency, value;
  std::int64_t weight;
};

// The same bound for a search whose incumbent improves: the incumbent-free parts are computed
// once, and a bound is recomputed only when the incumbent changes k_min. Holds its O(n) memory
// against `memory` from construction (throws PlannerMemoryError) to destruction.
class CardinalityBounds {
 public:
  CardinalityBounds(const ReducedProblem& p, bool integral, PlannerMemory& memory);
  ~CardinalityBounds();
  CardinalityBounds(const CardinalityBounds&) = delete;
  CardinalityBounds& operator=(const CardinalityBounds&) = delete;
  // +infinity (no bound) when the deadline passes first.
  double bound(double incumbent, std::optional<Clock::time_point> deadline = std::nullopt);
  // Every plan that beats `incumbent` saves at least this many items.
  std::size_t min_items(double incumbent) const;

 private:
  const ReducedProblem& p_;
  bool integral_;
  PlannerMemory& memory_;
  std::size_t bytes_ = 0;
  std::size_t k_max_ = 0;
  std::vector<double> values_;    // runtimes, largest first
  std::vector<double> top_sums_;  // top_sums_[k]: the k + 1 largest runtimes together
  std::vector<ShiftedItem> scratch_;
  std::size_t cached_k_min_ = static_cast<std::size_t>(-1);
  double cached_bound_ = 0;
};

// Dantzig's bound with every runtime lowered by mu (items left with a runtime <= 0 left out);
// `items` is scratch space. Expected O(n) (see cardinality_bound.cpp).
double shifted_lp(const ReducedProblem& p, double mu, std::vector<ShiftedItem>& items);

struct ExactTuning;

// Integral runtimes only (every runtime a multiple of value_step >= 1, sums below 2^45): splits
// the plans that can beat `incumbent` by their number of items and solves each remaining
// cardinality's Lagrangian-shifted knapsack exactly (see cardinality_split.cpp). `lp_items`: the
// items before the break item in efficiency order. `take` is empty unless a better plan was found.
struct SplitOutcome {
  std::vector<char> take;
  double best_value = 0;                                         // of `take`, or the incumbent
  bool proven = false;                                           // no plan beats best_value
  bool attempted = false;                                        // an inner search ran
  double inner_seconds = 0;                                      // spent in inner searches
  double upper_bound = std::numeric_limits<double>::infinity();  // on plans beating incumbent
  std::size_t bands = 0;                                         // band_split: the bands it counted
  std::size_t dual_rounds = 0;  // band_split: shifted searches beyond the first of each vector
};
// A split's shifted knapsack `q` (`q_weight`: the total weight of its items), solved exactly by
// the expanding core under the earlier of `deadline` and `inner_deadline`; when everything fits,
// every item is saved without a search. A search sets `out.attempted` and adds its time to
// `out.inner_seconds`. With `inner_seconds`, an unset `inner_deadline` is set that far from the
// first search's start (the inner searches' share counts from the first of them).
ReducedSolution search_shifted(const ReducedProblem& q, std::int64_t q_weight,
                               PlannerMemory& memory, std::optional<Clock::time_point> deadline,
                               std::optional<Clock::time_point>& inner_deadline,
                               std::optional<double> inner_seconds, const ExactTuning& tuning,
                               SplitOutcome& out);
// The incumbent-free LP bounds of earlier calls on the same problem, kept by the caller.
struct SplitCache {
  struct Entry {
    int side;  // -1: plans of at most k items, +1: at least k
    std::size_t k;
    double bound, mu;
  };
  std::vector<Entry> entries;
};
SplitOutcome cardinality_split(const ReducedProblem& p, std::size_t lp_items, double incumbent,
                               double value_step, SplitCache& cache, PlannerMemory& memory,
                               std::optional<Clock::time_point> deadline,
                               std::optional<Clock::time_point> inner_deadline,
                               const ExactTuning& tuning);

// A count constraint on the items of a group of bands (a bit mask of them).
struct BandCount {
  enum class Sense { kAtMost, kExactly, kAtLeast };
  unsigned mask;
  Sense sense;
  std::size_t count;
  bool operator==(const BandCount& o) const {
    return mask == o.mask && sense == o.sense && count == o.count;
  }
};
// The LP bound of band_split.cpp on every plan of `p` that meets `counts` (disjoint groups; item
// k is in band band_of[k], or free when it is -1): -infinity when no plan can. For the tests.
double band_count_bound(const ReducedProblem& p, const std::vector<int>& band_of, std::size_t bands,
                        const std::vector<BandCount>& counts);

// The multipliers each count vector's subgradient steps reached, kept by the caller between tries
// on the same problem (the bands depend on the incumbent; a vector's multipliers are valid for
// any).
struct BandCache {
  struct Core {  // which core the entries are for
    std::size_t size = 0;
    std::int64_t capacity = -1;
    double fixed_value = 0;
    bool operator==(const Core& o) const {
      return size == o.size && capacity == o.capacity && fixed_value == o.fixed_value;
    }
  } core;
  struct Bound {
    std::vector<BandCount> constraints;
    double bound, lambda;
  };
  std::vector<Bound> bounds;
  struct Entry {
    std::vector<std::size_t> count;
    std::vector<double> mu;
  };
  std::vector<Entry> entries;
};
// Integral runtimes only: the plans that can beat `incumbent`, on the core that reduced-cost
// fixing leaves, split by how many items they save in each band of weight near the break item's,
// each count vector's shifted knapsack solved exactly (see band_split.cpp). `order` and
// `break_pos` as in the expanding core; the inner searches get `inner_seconds` together, from the
// first one's start; `take`, when not empty, is a plan of `p`.
SplitOutcome band_split(const ReducedProblem& p, const std::vector<std::uint32_t>& order,
                        std::size_t break_pos, double incumbent, double value_step,
                        PlannerMemory& memory, std::optional<Clock::time_point> deadline,
                        std::optional<double> inner_seconds, BandCache& cache,
                        const ExactTuning& tuning);

// The best set of flips of the break solution within the 2h items nearest the break item (see
// core_enumeration.cpp).
struct CoreEnumeration {
  std::vector<std::uint32_t> flipped;  // reduced item indices whose break decision is flipped
  std::int64_t flipped_weight = 0;     // signed change of weight
  double flipped_value = 0.0;          // signed change of value
  bool all_items = false;              // the core held every item: the plan is optimal
};

// `room` is the budget left by the break solution; nullopt when no flip set fits (never, since
// the empty set does). Reserves its lists against `memory` (throws PlannerMemoryError).
std::optional<CoreEnumeration> enumerate_core(const ReducedProblem& p,
                                              const std::vector<std::uint32_t>& order,
                                              std::size_t break_pos, std::int64_t room,
                                              std::size_t half_items, PlannerMemory& memory);

// Small near-proportional instances (see proportional_search.cpp): the best plan that beats
// `incumbent`, or a proof that none does. kGaveUp when the instance is not near-proportional
// enough (its flip listings pass a cap) or n > kProportionalMaxItems; kDeadline when the
// deadline passed, with the bound proven so far. `take` is empty when no better plan was found.
// `value_step` > 0: every runtime is an integral multiple of it (sums exact), so a better plan
// gains at least that much; 0 otherwise.
inline constexpr std::size_t kProportionalMaxItems = 64;
struct ProportionalOutcome {
  enum Status { kGaveUp, kProven, kDeadline } status = kGaveUp;
  std::vector<char> take;
  double best_value = 0;                                         // of `take`, or the incumbent
  double upper_bound = std::numeric_limits<double>::infinity();  // on every plan
};
ProportionalOutcome proportional_search(const ReducedProblem& p, double incumbent,
                                        double value_step, PlannerMemory& memory,
                                        std::optional<Clock::time_point> deadline);

// Runtime one affine function of weight up to at most two intercepts, every runtime integral
// (Pisinger's strongly, inverse strongly and multiple strongly correlated and subset-sum classes;
// see offset_groups.cpp): plans split by how many items of each intercept they save, each count
// vector's heaviest plan within the budget found by a bit-set program over balanced swaps.
// kNotApplicable without that structure; kGaveUp when more than max_vectors count vectors could
// beat `incumbent`, or before a vector whose program would pass max_work word operations (all
// vectors together) or max_bytes; kDeadline with the bound of the vectors not yet solved. `take`
// is empty unless a better plan than `incumbent` was found. Never throws PlannerMemoryError: a
// refusal is a kGaveUp.
struct OffsetGroupLimits {
  std::size_t max_vectors = std::size_t{1} << 20;
  double max_work = 0x1p28;
  double max_bytes = 0x1p28;
};
struct OffsetGroupsOutcome {
  enum Status { kNotApplicable, kGaveUp, kProven, kDeadline } status = kNotApplicable;
  std::vector<char> take;
  double best_value = 0;                                         // of `take`, or the incumbent
  double upper_bound = std::numeric_limits<double>::infinity();  // with kDeadline, on every plan
  std::size_t groups = 0;                                        // intercepts found
  std::size_t vectors = 0, solved = 0;  // count vectors listed, and their programs run
  std::size_t filled = 0;               // vectors met without a program (offset_groups.cpp)
};
OffsetGroupsOutcome offset_groups_search(const ReducedProblem& p, double incumbent,
                                         PlannerMemory& memory,
                                         std::optional<Clock::time_point> deadline,
                                         const OffsetGroupLimits& limits = {});

// Identical items bundled by binary splitting (see duplicate_bundles.cpp). Bundle k stands for
// bundle_count[k] copies of group bundle_group[k]; a group's items are
// members[group_start[g] .. group_start[g + 1]), lowest index first. problem.original_index holds
// a representative reduced item, not a problem item.
struct Bundling {
  ReducedProblem problem;
  std::vector<std::uint32_t> bundle_group;
  std::vector<std::size_t> bundle_count;
  std::vector<std::size_t> group_start;
  std::vector<std::uint32_t> members;
  std::size_t bytes = 0;  // reserved against the planner-memory cap; the caller releases them
};

// nullopt (nothing reserved) when bundling would not at least halve the number of items and
// `only_if_halved`.
std::optional<Bundling> bundle_duplicates(const ReducedProblem& p, PlannerMemory& memory,
                                          bool only_if_halved = true);
// A plan of the bundled problem as a plan of the reduced one with `items` items.
std::vector<char> unbundle(const Bundling& b, const std::vector<char>& bundle_take,
                           std::size_t items);

// Thresholds of the exact solver, fixed in production; tests lower them to reach every path on
// instances small enough for brute force.
struct ExactTuning {
  std::size_t first_checkpoint = std::size_t{1} << 13;  // states before enumeration and pairing
  std::size_t min_bundled_items = 64;                   // smaller instances are never bundled
  bool bundle_only_if_halved = true;
  std::size_t max_enumerated_half = 20;  // core enumeration: 2^half sums a half
  bool shift = true;                     // cardinality_split (cardinality_split.cpp)
  bool band = true;                      // band_split (band_split.cpp)
  // band_split runs only once the surrogate cardinality bound has left more than this share of
  // Dantzig's gap over the incumbent (negative: whatever it left, or before it ran), and searches
  // only when its own bounds leave at most this share.
  double band_after_cardinality_share = 0.5;
  double band_max_gap_share = 0.05;
  bool offset_groups = true;  // offset_groups_search at the first checkpoint
  bool proportional = true;   // proportional_search for n <= 64
  // Up to 2 x 16 items, core enumeration over every item is exact and cheaper.
  std::size_t min_proportional_items = 33;
  // Seconds the search runs before it first tries the surrogate cardinality bound (negative:
  // about what one bound takes, 1.8 us an item). The bound is timed, so whether it runs at all
  // on a small instance depends on the machine's speed; tests set 0 to reach its path anyway.
  double first_cardinality_after = -1;
  // Only plans worth at least this much are looked for (cardinality_split's inner searches):
  // when none exists, the plan returned is worth less and is not optimal, and status kOptimal
  // says that no plan reaches `target`.
  double target = -std::numeric_limits<double>::infinity();
};

ReducedSolution solve_exact(const ReducedProblem& p, PlannerMemory& memory,
                            std::optional<Clock::time_point> deadline,
                            const ExactTuning& tuning = {});
// The table solvers check `deadline` once an item row and throw WorkLimitError past it.
ReducedSolution solve_sliding_hirschberg(const ReducedProblem& p, PlannerMemory& memory,
                                         std::optional<Clock::time_point> deadline);
ReducedSolution solve_full_table_dp(const ReducedProblem& p, PlannerMemory& memory,
                                    std::optional<Clock::time_point> deadline);
// The deadline `seconds` after `start`; none for no limit, or for one past what the clock can hold
// (a century, inf), which converted would overflow into the past. Throws InputError("time_limit")
// unless seconds > 0.
std::optional<Clock::time_point> deadline_after(Clock::time_point start,
                                                std::optional<double> seconds);
// Throws WorkLimitError, naming `solver`, when `deadline` has passed.
void stop_at_deadline(std::optional<Clock::time_point> deadline, const char* solver);
ReducedSolution solve_greedy(const ReducedProblem& p, PlannerMemory& memory);

// Working memory of the table solvers on this problem, computed before they allocate.
std::size_t full_table_bytes(const ReducedProblem& p);
std::size_t sliding_hirschberg_bytes(const ReducedProblem& p);

// Dantzig's LP bound of the reduced problem: an upper bound on every feasible plan's value.
double lp_upper_bound(const ReducedProblem& p);

// Reduced item indices sorted by runtime per quantum, best first; ties by index (stable).
std::vector<std::uint32_t> order_by_efficiency(const ReducedProblem& p);

}  // namespace remat::detail
