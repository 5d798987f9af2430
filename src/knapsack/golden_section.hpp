// Golden-section search for the minimum of a function that is convex on [lo, hi] (Kiefer 1953):
// each step keeps the part of the bracket that holds the minimum and evaluates one new point, so
// the bracket shrinks by 0.618 a step. Time: 2 + steps evaluations. Used by the cardinality bound
// and the cardinality split, whose functions (a multiplier's Lagrangian bound) are convex in the
// multiplier; every value there is a valid bound, so the callers also keep the least one seen.
#pragma once

#include <chrono>
#include <optional>

#include "knapsack/reduced_problem.hpp"

namespace remat::detail {

struct GoldenBracket {
  double lo, hi;  // the bracket left
  double a, fa;   // its two inner points and their values
  double b, fb;
  bool cut = false;  // the deadline ended the search before the bracket was narrow enough
};

// Narrows [lo, hi] until it is at most `width` wide, for at most `max_steps` steps, or until the
// deadline passes (then `cut`).
template <class F>
GoldenBracket golden_section(F&& f, double lo, double hi, double width, int max_steps,
                             std::optional<Clock::time_point> deadline) {
  constexpr double kRatio = 0.6180339887498949;
  GoldenBracket g{lo, hi, hi - kRatio * (hi - lo), 0, lo + kRatio * (hi - lo), 0};
  g.fa = f(g.a);
  g.fb = f(g.b);
  for (int step = 0; step < max_steps && g.hi - g.lo > width; ++step) {
    if (deadline && Clock::now() >= *deadline) {
      g.cut = true;
      break;
    }
    if (g.fa <= g.fb) {
      g.hi = g.b;
      g.b = g.a;
      g.fb = g.fa;
      g.a = g.hi - kRatio * (g.hi - g.lo);
      g.fa = f(g.a);
    } else {
      g.lo = g.a;
      g.a = g.b;
      g.fa = g.fb;
      g.b = g.lo + kRatio * (g.hi - g.lo);
      g.fb = f(g.b);
    }
  }
  return g;
}

}  // namespace remat::detail
