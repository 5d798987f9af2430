// Times the heterogeneous chain planner (plan_profile) against the full-table reference
// (plan_profile_reference) on one profile, budget and slot count; for bench/chain_planner.py.
//
//   chain_planner_bench PROFILE.json BUDGET SLOTS new|reference [REPEATS]
//   chain_planner_bench PROFILE.json BUDGET SLOTS density [START_STRIDE]
//
// Prints one JSON object per repeat: wall, user and system CPU seconds of the planning call, the
// objective to the last bit (%.17g), the simulated recompute time and peak bytes, and a hash of
// the action list (equal hashes: the same plan), and the bands the planner filled (0 for the
// reference).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "chain/profile_reference.hpp"
#include "io/json_io.hpp"
#include "remat/chain.hpp"

namespace {

double seconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
}
double user_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return seconds(usage.ru_utime);
}
// Kernel time: at tight budgets, mostly faulting in the band's freshly allocated rows.
double system_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return seconds(usage.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s PROFILE BUDGET SLOTS new|reference [REPEATS]\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[1]);
  std::stringstream text;
  text << file.rdbuf();
  const remat::chain::ChainProfile profile = remat::io::read_profile(text.str());
  const std::int64_t budget = std::atoll(argv[2]);
  const std::int64_t slots = std::atoll(argv[3]);
  const std::string planner = argv[4];
  if (planner == "density") {
    // The full table's density (reference_table_density), on every start_stride-th start point.
    const std::int64_t stride = argc > 5 ? std::atoll(argv[5]) : 1;
    const auto start = std::chrono::steady_clock::now();
    const remat::chain::TableDensity d =
        remat::chain::reference_table_density(profile, budget, slots, std::size_t{1} << 34, stride);
    std::printf(
        "{\"layers\": %lld, \"capacity\": %lld, \"start_stride\": %lld, \"rows\": %lld, "
        "\"entries\": %lld, \"finite_entries\": %lld, \"distinct_values\": %lld, \"splits\": "
        "%lld, \"minimizing_splits\": %lld, \"sole_minimizers\": %lld, \"unresolved_by_samples\": "
        "{\"2\": %lld, \"8\": %lld, \"32\": %lld}, \"wall_s\": %.1f}\n",
        static_cast<long long>(profile.layers()), static_cast<long long>(d.capacity),
        static_cast<long long>(stride), static_cast<long long>(d.rows),
        static_cast<long long>(d.entries), static_cast<long long>(d.finite_entries),
        static_cast<long long>(d.distinct_values), static_cast<long long>(d.splits),
        static_cast<long long>(d.minimizing_splits), static_cast<long long>(d.sole_minimizers),
        static_cast<long long>(d.unresolved_by_samples[0]),
        static_cast<long long>(d.unresolved_by_samples[1]),
        static_cast<long long>(d.unresolved_by_samples[2]),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return 0;
  }
  const int repeats = argc > 5 ? std::atoi(argv[5]) : 1;
  for (int k = 0; k < repeats; ++k) {
    std::uint64_t hash = 1469598103934665603ull;
    const auto sink = [&](const remat::chain::Action& a) {
      for (std::int64_t v : {static_cast<std::int64_t>(a.kind), a.first, a.last}) {
        hash = (hash ^ static_cast<std::uint64_t>(v)) * 1099511628211ull;
      }
    };
    const double user0 = user_seconds(), system0 = system_seconds();
    const auto start = std::chrono::steady_clock::now();
    const remat::chain::ProfilePlan plan =
        planner == "reference"
            ? remat::chain::plan_profile_reference(profile, budget, slots, std::size_t{1} << 34,
                                                   sink)
            : remat::chain::plan_profile(profile, budget, slots, std::size_t{1} << 34, sink);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double user = user_seconds() - user0, system = system_seconds() - system0;
    std::printf(
        "{\"planner\": \"%s\", \"layers\": %lld, \"slots\": %lld, \"wall_s\": %.4f, \"user_s\": "
        "%.4f, \"sys_s\": %.4f, \"objective\": \"%.17g\", \"recompute_time\": %.17g, "
        "\"memory_bytes\": %lld, "
        "\"plan_hash\": \"%016llx\", \"bands\": %lld}\n",
        planner.c_str(), static_cast<long long>(profile.layers()),
        static_cast<long long>(plan.slots), wall, user, system, plan.predicted_recompute_time,
        plan.simulation.recompute_time, static_cast<long long>(plan.simulation.memory_bytes),
        static_cast<unsigned long long>(hash), static_cast<long long>(plan.bands));
    std::fflush(stdout);
  }
  return 0;
}
