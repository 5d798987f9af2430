// plan_profile: the least-recompute schedule of a chain of unequal layers under a budget in bytes.
// It lays out a first band (segments up to 64 layers, delta = C / 4 + max w), fills it, and checks
// the certificate; where it fails the band widens (delta to full when B_W failed, the segments
// from the start points where B_L failed grow) until it holds, at worst to the full program,
// O(n^3 C / 6). The schedule is rebuilt by re-evaluating the minimizations (emit). Memory is
// accounted against max_planner_bytes before each band is allocated.
// Source and derivation: docs/design/chain_planner.md.
#include <optional>
#include <string>

#include "chain/band/band_program.hpp"
#include "common/text.hpp"
#include "remat/errors.hpp"

namespace remat::chain {

namespace band {

void BandProgram::emit(const ActionSink& sink) const {
  detail::emit_schedule(
      n_, capacity_, [this](std::int64_t i) { return w(i); },
      [this](std::int64_t s, std::int64_t m) { return f_choice(s, m); },
      [this](std::int64_t s, std::int64_t t, std::int64_t m) { return r_choice(s, t, m); }, sink);
}

// The j that the full program chose (the first minimizer, with the same arithmetic). Bad
// segments are skipped: the certificate shows they are worse than the target.
std::int64_t BandProgram::f_choice(std::int64_t s, std::int64_t m) const {
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

std::int64_t BandProgram::r_choice(std::int64_t s, std::int64_t t, std::int64_t m) const {
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

}  // namespace band

using band::BandProgram;
using band::kFarthestReach;
using band::kFarUnder;
using band::kInf;
using band::kLargeBandLength;
using band::kVeryFarUnder;
using band::LongFailure;

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

void throw_no_schedule(const ChainProfile& profile, std::int64_t budget_bytes, bool exact,
                       std::int64_t unit, std::int64_t capacity) {
  std::string detail = "no schedule fits in " + text::integer(budget_bytes) + " bytes";
  const std::int64_t largest = least_profile_budget(profile);
  if (largest > budget_bytes) {
    detail += "; every schedule needs at least " + text::integer(largest) +
              " bytes (the input, held all along, with the largest output before the last)";
  } else if (!exact) {
    detail += " with sizes rounded up to units of " + text::integer(unit) +
              " bytes (the budget holds " + text::integer(capacity) +
              "); more slots count sizes more finely";
  }
  throw InputError("budget", std::nullopt, detail);
}

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
    detail::throw_no_schedule(profile, budget_bytes, program.exact(), program.unit(),
                              program.capacity());
  }
  ProfilePlan plan = detail::simulated_plan(profile, program, also);
  plan.bands = bands;
  return plan;
}

}  // namespace detail

}  // namespace remat::chain
