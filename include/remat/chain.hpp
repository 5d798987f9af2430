// Checkpointing schedules on a chain of layers, and a simulator that measures any schedule.
//
// Model (unit costs): layers 1..n, a_0 is the input, a_i = layer_i(a_{i-1}). The backward of
// layer i needs a_{i-1}; backwards run i = n down to 1 after the first forward pass reached a_n.
// memory = the most activations among a_0..a_{n-1} held at one time (a_n is not counted);
// recompute = layer evaluations beyond the first computation of each a_i.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace remat::chain {

// One step of a schedule. A forward action evaluates layers first..last from a_{first-1}: the
// intermediate values advance in place (each replaces the last), and only a_last is held
// afterwards; with keep_input false, a_{first-1} is consumed (replaced in place) as well.
// Single-layer forwards (first == last) are the textbook's "forward layer i keeping its output".
struct Action {
  enum class Kind { kForward, kBackward, kFree };
  Kind kind;
  std::int64_t first = 0;  // forward: first layer; backward: the layer; free: the activation j
  std::int64_t last = 0;   // forward only
  bool keep_input = true;  // forward only

  static Action forward(std::int64_t first, std::int64_t last, bool keep_input = true) {
    return {Kind::kForward, first, last, keep_input};
  }
  static Action backward(std::int64_t layer) { return {Kind::kBackward, layer, layer, true}; }
  static Action free(std::int64_t activation) {
    return {Kind::kFree, activation, activation, true};
  }
};

std::string to_string(const Action& action);

// Schedules are streamed to a sink, so that long ones (store-first at n = 10^5 has 10^5
// actions but 5 x 10^9 evaluations) never need to be materialized.
using ActionSink = std::function<void(const Action&)>;

// Thrown by the simulator on an invalid step; names the step.
class InvalidSchedule : public std::runtime_error {
 public:
  InvalidSchedule(std::int64_t step, const std::string& why);
  std::int64_t step() const { return step_; }

 private:
  std::int64_t step_;
};

struct Simulation {
  std::int64_t memory = 0;     // peak activations held among a_0..a_{n-1}
  std::int64_t recompute = 0;  // layer evaluations after the first computation
  std::int64_t actions = 0;
  std::int64_t memory_bytes = 0;  // peak bytes held (equals memory on a unit chain)
  double recompute_time = 0;      // forward time of the recomputed evaluations
};

// A heterogeneous chain: the bytes of every activation and the forward time of every layer.
struct ChainProfile {
  std::vector<std::int64_t> activation_bytes;  // [0]: the input a_0; [i]: a_i, i = 1..n
  std::vector<double> forward_time;            // [i]: layer i, i = 1..n; [0] is unused
  std::vector<std::string> names;              // [i]: layer i's name (optional; [0] unused)

  std::int64_t layers() const { return static_cast<std::int64_t>(activation_bytes.size()) - 1; }
  // Every activation 1 byte, every layer 1 time unit: the unit model.
  static ChainProfile uniform(std::int64_t layers);
  // Throws InputError naming layers[i].field for negative or non-finite entries.
  void validate() const;
};

// Executes a schedule on a chain of n layers, starting with a_0 held. Rejects the first invalid
// step with InvalidSchedule; a schedule that ends before every backward ran is invalid too.
class Simulator {
 public:
  explicit Simulator(std::int64_t layers);
  // Also measures bytes and time (O(n log n) set-up for range maxima of activation sizes).
  explicit Simulator(const ChainProfile& profile);
  void apply(const Action& action);
  Simulation finish() const;

 private:
  void fail(const std::string& why) const;
  bool held(std::int64_t j) const { return held_[static_cast<std::size_t>(j)] != 0; }
  void hold(std::int64_t j);
  void drop(std::int64_t j);
  std::int64_t bytes(std::int64_t j) const;
  std::int64_t largest_bytes(std::int64_t first, std::int64_t last) const;  // over a_first..a_last
  double time_of(std::int64_t first, std::int64_t last) const;              // layers first..last

  std::int64_t n_;
  std::vector<char> held_;
  std::int64_t held_count_ = 0;  // among a_0..a_{n-1}
  std::int64_t held_bytes_ = 0;  // among a_0..a_{n-1}
  std::int64_t frontier_ = 0;    // a_1..a_frontier have been computed at least once
  std::int64_t next_backward_;
  Simulation result_;
  // Empty on a unit chain.
  std::vector<std::vector<std::int64_t>> max_bytes_;  // sparse table: level k covers 2^k entries
  std::vector<double> time_prefix_;                   // time_prefix_[i] = time of layers 1..i
};

enum class Strategy { kStoreAll, kStoreFirst, kEvery, kSqrt, kOptimal };
std::string to_string(Strategy strategy);
// Throws InputError(field "strategy") on an unknown name.
Strategy parse_strategy(const std::string& name);

// The segment length sqrt uses: argmin of ceil(n/s) + s - 1, ties to the s nearest sqrt(n).
std::int64_t sqrt_segment(std::int64_t layers);

void schedule_store_all(std::int64_t layers, const ActionSink& sink);
void schedule_store_first(std::int64_t layers, const ActionSink& sink);
void schedule_every(std::int64_t layers, std::int64_t segment, const ActionSink& sink);

// --- optimal schedules for uniform chains (binomial / revolve structure) ---

// Least recompute to reverse n layers within `memory` activations, the first pass free.
// Returns nullopt when no schedule fits (memory < 2 with n >= 2). O(levels) time.
std::optional<std::int64_t> optimal_recompute(std::int64_t layers, std::int64_t memory);
// Least memory whose optimal recompute is at most `recompute`.
std::int64_t optimal_memory(std::int64_t layers, std::int64_t recompute);
// Emits an optimal schedule for `memory` (throws InputError if none fits).
void schedule_optimal(std::int64_t layers, std::int64_t memory, const ActionSink& sink);

// --- optimal schedules for heterogeneous chains under a budget in bytes ---

struct ProfilePlan {
  Simulation simulation;           // measured by the simulator in true bytes and times
  std::int64_t unit_bytes = 0;     // the discretization step
  std::int64_t slots = 0;          // budget / unit_bytes: the memory units the program counts
  std::int64_t divisor_bytes = 0;  // greatest common divisor of the activation sizes (>= 1)
  bool exact = false;  // every size is a whole number of units: the plan is optimal in true bytes
  double predicted_recompute_time = 0;
  std::int64_t bands = 0;  // bands of states the planner filled until one was certified (>= 1)
};

// The least recompute time that fits `budget_bytes`, by an exact dynamic program over
// (segment, memory in units), filled on a band of its states that widens until a lower bound
// certifies that no state outside it is optimal or tied (src/chain/band/): the objective and
// the plan are those of the full program, bit for bit. The unit is floor(budget / slots) bytes, so
// the budget holds `slots` units (a few more when the budget is under slots * (slots + 1) bytes),
// except when that is no more than the sizes' greatest common divisor D: then the unit is D, every
// size is a whole number of units, the plan is optimal in true bytes, and floor(budget / D) units
// are all there is to count (under 2 slots when D equals floor(budget / slots), under slots when D
// is larger). Sizes are rounded up to whole units, so every plan fits
// the true budget; the plan is optimal among schedules whose rounded sizes fit, and at least as
// good as the true optimum for budget_bytes - n * unit_bytes. Throws InputError("budget") when
// nothing fits, stating the least feasible budget, and PlannerMemoryError when the table would
// exceed max_planner_bytes.
ProfilePlan plan_profile(const ChainProfile& profile, std::int64_t budget_bytes, std::int64_t slots,
                         std::size_t max_planner_bytes, const ActionSink& also = nullptr);

// The least budget in bytes any schedule of `profile` needs: a_0, held all along, with the
// largest output but the chain's own (the last backward starts from it). Rounding to units may
// need more.
std::int64_t least_profile_budget(const ChainProfile& profile);

// Runs a strategy through the simulator. `parameter` is the segment length for kEvery and the
// memory for kOptimal; ignored otherwise.
Simulation simulate(std::int64_t layers, Strategy strategy, std::int64_t parameter,
                    const ActionSink& also = nullptr);
// The same on a heterogeneous chain, measuring bytes and times too. kOptimal here is the unit
// model's schedule (use plan_profile for the byte-budget optimum).
Simulation simulate(const ChainProfile& profile, Strategy strategy, std::int64_t parameter,
                    const ActionSink& also = nullptr);

// --- activation memory estimate of a transformer-like model (textbook problem 12) ---

struct EstimateInput {
  std::int64_t layers = 0, batch = 0, seq = 0, hidden = 0;
  std::int64_t dtype_bytes = 2;
  std::int64_t tensors_per_layer = 1;
  std::optional<std::int64_t> every;  // checkpoint layer outputs every s layers
};

struct Estimate {
  double tensor_gib = 0;                 // one B x T x H tensor
  double no_checkpoint_gib = 0;          // layers x tensors_per_layer tensors
  std::optional<double> checkpoint_gib;  // with --every: peak layer outputs held x tensor
  std::optional<std::int64_t> checkpoint_tensors;
  std::optional<std::int64_t> recompute_layers;
};

Estimate estimate(const EstimateInput& input);
// Bytes of one element for bf16, fp16, fp32, fp64, fp8, int8 (throws InputError otherwise).
std::int64_t dtype_size(const std::string& dtype);

}  // namespace remat::chain
