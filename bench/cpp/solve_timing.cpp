// In-process timing of remat::solve(exact) on instance files, for comparing two builds of the
// core library (bench/knapsack_classes.py --regression builds this against each):
//   solve_timing REPEATS FILE...   (FILE: "n max_memory scale" then n lines "memory runtime")
// prints, per file, the median seconds of REPEATS calls, the status, the path and the value.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "remat/knapsack.hpp"

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const int repeats = std::stoi(argv[1]);
  for (int f = 2; f < argc; ++f) {
    std::ifstream in(argv[f]);
    std::size_t n = 0;
    remat::KnapsackInput input;
    in >> n >> input.max_memory >> input.scale;
    input.memory.resize(n);
    input.runtime.resize(n);
    for (std::size_t i = 0; i < n; ++i) in >> input.memory[i] >> input.runtime[i];
    const remat::KnapsackProblem p = remat::quantize(input);
    remat::SolveOptions options;
    options.solver = remat::Solver::kExact;
    options.time_limit_seconds = 20;
    std::vector<double> times;
    remat::KnapsackResult r;
    for (int k = 0; k < repeats; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      r = remat::solve(p, options);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
    std::printf("%s %.9g %s %s %.17g\n", argv[f], times[repeats / 2],
                remat::to_string(r.status).c_str(), r.path.c_str(), r.max_runtime);
  }
  return 0;
}
