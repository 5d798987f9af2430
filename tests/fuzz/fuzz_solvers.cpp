// Fuzzes every solver on instances decoded from the fuzzer's bytes: each plan must be a
// partition, within budget and consistent with its reported sums; for n <= 12 the exact solvers
// must equal brute force and greedy must not beat it; the Pareto front must agree with solve().
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "remat/errors.hpp"
#include "remat/knapsack.hpp"

namespace {

class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint32_t next(std::uint32_t bound) {  // in [0, bound)
    std::uint32_t value = 0;
    for (int k = 0; k < 2; ++k) value = value << 8 | (at_ < size_ ? data_[at_++] : 0);
    return bound == 0 ? 0 : value % bound;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_, at_ = 0;
};

// REMAT_FUZZ_VERBOSE=1 prints where a check failed when a finding is replayed.
#define check(condition) check_at(condition, __LINE__)
void check_at(bool condition, int line) {
  if (condition) return;
  if (std::getenv("REMAT_FUZZ_VERBOSE")) std::fprintf(stderr, "check failed at line %d\n", line);
  __builtin_trap();
}

double brute_force(const remat::KnapsackProblem& p) {
  double best = 0;
  for (std::uint32_t mask = 0; mask < (1u << p.size()); ++mask) {
    std::int64_t w = 0;
    double v = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (mask >> i & 1) {
        w += p.weight[i];
        v += p.value[i];
      }
    }
    if (w <= p.capacity && v > best) best = v;
  }
  return best;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes bytes(data, size);
  const std::uint32_t n = bytes.next(24);
  const std::uint32_t weight_range = 1 + bytes.next(2000);
  remat::KnapsackInput input;
  input.scale = 1;
  for (std::uint32_t i = 0; i < n; ++i) {
    input.memory.push_back(static_cast<double>(bytes.next(weight_range)));
    // Runtimes with ties, zeros and negatives, some fractional.
    input.runtime.push_back((static_cast<double>(bytes.next(4000)) - 500.0) / (1 + bytes.next(4)));
  }
  input.max_memory = static_cast<double>(bytes.next(weight_range * (n + 1)));
  const remat::KnapsackProblem p = remat::quantize(input);
  const double best = n <= 12 ? brute_force(p) : NAN;
  const double tolerance = 1e-9 * (1 + (std::isnan(best) ? 0.0 : std::abs(best)));
  double exact_value = NAN;
  for (remat::Solver solver : remat::all_solvers()) {
    remat::SolveOptions options;
    options.solver = solver;
    options.max_planner_bytes = std::size_t{1} << 28;
    const remat::KnapsackResult r = remat::solve(p, options);
    if (std::getenv("REMAT_FUZZ_VERBOSE")) {
      std::fprintf(stderr, "%s: %.17g (best %.17g) status %d\n", remat::to_string(solver).c_str(),
                   r.max_runtime, best, static_cast<int>(r.status));
    }
    std::vector<int> seen(n, 0);
    std::int64_t w = 0;
    double v = 0;
    for (std::size_t i : r.saved) {
      check(i < n && p.value[i] > 0);
      ++seen[i];
      w += p.weight[i];
      v += p.value[i];
    }
    for (std::size_t i : r.recomputed) check(i < n && ++seen[i] == 1);
    for (int count : seen) check(count == 1);
    check(w <= p.capacity && w == r.quantized_memory_used && v == r.max_runtime);
    check(r.upper_bound + 1e-9 * (1 + std::abs(r.max_runtime)) >= r.max_runtime);
    if (solver == remat::Solver::kGreedy) {
      if (n <= 12) check(r.max_runtime <= best + tolerance);
      continue;
    }
    check(r.status == remat::SolveStatus::kOptimal);
    if (n <= 12) check(std::abs(r.max_runtime - best) <= tolerance);
    if (std::isnan(exact_value)) exact_value = r.max_runtime;
    check(std::abs(r.max_runtime - exact_value) <= 1e-9 * (1 + std::abs(exact_value)));
  }
  const auto front = remat::pareto_front(p, std::size_t{1} << 28);
  check(std::abs(remat::pareto_value_at(front, p.capacity) - exact_value) <=
        1e-9 * (1 + std::abs(exact_value)));
  return 0;
}
