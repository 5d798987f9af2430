// The band program's tuning, for the tests: the defaults are plan_profile's. Any tuning gives the
// same objective and plan (the certificate decides when a band is enough); it changes only how
// much is filled on the way, so the tests can make small chains take every path of the program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "remat/chain.hpp"

namespace remat::chain::detail {

// Threads beyond these gain little: the fill is bound by memory traffic.
constexpr std::int64_t kMaxThreads = 8;

struct BandTuning {
  std::int64_t first_max_length = 64;  // the first band's longest segment, in layers
  std::int64_t tail_gap = 128;  // see fill_f: segments this far past the band, priced together
  // Entries of a row a split is checked against at once (lower_blocks); 16 to 64 were about as
  // fast at 1000 layers.
  std::int64_t skip_block = 32;
  double small_work = 2e7;  // up to this much work (n^3 C / 6) the full program runs at once
  // The splitting lemma's bounds in the certificate (see fill_f); off only to show what they save.
  bool split_lemma = true;
  // Far under G, a start point's segments grow more: to the next split the lemma can take, and
  // fourfold when very far under (kFarUnder, kVeryFarUnder in band/band_program.hpp); off only to
  // show what that saves.
  bool far_under_growth = true;
  // Threads that fill a band's rows (the same values with any number), used from this many
  // entries on; plan_profile takes the machine's cores, at most kMaxThreads.
  std::int64_t threads = 1;
  std::size_t threads_from = std::size_t{1} << 21;
  // Tests only: the start point whose block of rows fails to allocate (std::bad_alloc), on
  // whichever thread sets it up; -1 for none.
  std::int64_t fail_block = -1;
};

// The machine's cores, at most kMaxThreads (1 when unknown).
std::int64_t default_threads();

// One band, filled (`caps[s]`: the last end point of a segment from s, raised not to fall with
// s): G(0, C) over its good derivations, the lower bounds B_W and B_L over the derivations with
// a too heavy and with a too long (not too heavy) first-pass segment, and the start points where
// a too long segment is not ruled out (those whose segments grow when B_L fails).
struct BandValues {
  double good, heavy, long_;
  std::vector<std::int64_t> localized;
  // Per start point s, C + 1 entries: the bound of F(s, c + w_s) that the splitting lemma reads
  // past C, formed for c = C - w_s + 1 .. C (empty when the band has no bad segment).
  std::vector<double> past;
};
BandValues band_values(const ChainProfile& profile, std::int64_t budget_bytes, std::int64_t slots,
                       std::int64_t delta, const std::vector<std::int64_t>& caps,
                       const BandTuning& tuning);

ProfilePlan plan_profile_tuned(const ChainProfile& profile, std::int64_t budget_bytes,
                               std::int64_t slots, std::size_t max_planner_bytes,
                               const BandTuning& tuning, const ActionSink& also = nullptr);

// The schedule of a solved program, rebuilt from its choices: the first pass's segments
// (`f_choice(s, m)`: where the forward from a_s with m units ends, n at the chain's end), then
// each segment's backward, depth first (`r_choice(s, t, m)`: where segment (s, t) splits). The
// band program and the full-table reference both emit through this.
template <class Weight, class FirstChoice, class Choice>
void emit_schedule(std::int64_t n, std::int64_t capacity, const Weight& w,
                   const FirstChoice& f_choice, const Choice& r_choice, const ActionSink& sink) {
  struct Task {
    std::int64_t s, t, m;
  };
  std::vector<Task> stack;
  std::int64_t s = 0, m = capacity;
  while (true) {
    const std::int64_t j = f_choice(s, m);
    sink(Action::forward(s + 1, j));
    stack.push_back({s, j, m});
    if (j == n) break;
    m -= w(s);
    s = j;
  }
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

// The error when no schedule fits `budget_bytes`: the least any schedule needs, or the rounding
// of sizes to `unit` bytes (`capacity` units) when the program was not exact.
[[noreturn]] void throw_no_schedule(const ChainProfile& profile, std::int64_t budget_bytes,
                                    bool exact, std::int64_t unit, std::int64_t capacity);

// A solved program's plan: its schedule run through the simulator (each action also to `also`),
// with the program's unit, slots, divisor and prediction.
template <class Program>
ProfilePlan simulated_plan(const ChainProfile& profile, const Program& program,
                           const ActionSink& also) {
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
  return plan;
}

}  // namespace remat::chain::detail
