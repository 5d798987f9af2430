// Instance families. Pisinger's classes follow D. Pisinger, "Where are the hard knapsack
// problems?", Computers & Operations Research 32 (2005); the torch-like family imitates what
// torch.compile's partitioner hands its solver (normalized memory, budget in (0,1), flop-like
// runtimes, few distinct tensor sizes); the paper-scale family has quantized budgets around
// 10^9, the setup on which torch's dp_knapsack needs hundreds of GB.
#include <algorithm>
#include <cmath>

#include "common/text.hpp"
#include "remat/errors.hpp"
#include "remat/generate.hpp"

namespace remat {

namespace {

__extension__ using Uint128 = unsigned __int128;

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi], by Lemire's multiply-shift (bias below 2^-64 per draw).
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    const auto span = static_cast<Uint128>(hi - lo) + 1;
    return lo + static_cast<std::int64_t>((static_cast<Uint128>(next()) * span) >> 64);
  }
  double uniform01() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal() {
    const double u = 1.0 - uniform01();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * uniform01());
  }

 private:
  std::uint64_t state_;
};

struct IntegerItems {
  std::vector<std::int64_t> weight, profit;
};

std::int64_t correlated_profit(const std::string& family, std::int64_t w, std::int64_t r,
                               SplitMix64& rng) {
  if (family == "uncorrelated") return rng.uniform(1, r);
  if (family == "weakly_correlated")
    return std::max<std::int64_t>(1, rng.uniform(w - r / 10, w + r / 10));
  if (family == "strongly_correlated") return w + r / 10;
  if (family == "almost_strongly_correlated") {
    return rng.uniform(w + r / 10 - r / 500, w + r / 10 + r / 500);
  }
  if (family == "subset_sum") return w;
  // mstr(3R/10, 2R/10, 6): two strongly correlated classes, by whether 6 divides the weight.
  if (family == "multiple_strongly_correlated") return w + (w % 6 == 0 ? 3 * r / 10 : 2 * r / 10);
  if (family == "profit_ceiling") return 3 * ((w + 2) / 3);
  // circle: profits on an arc, d = 2/3
  const double x = static_cast<double>(w) - 2.0 * static_cast<double>(r);
  return std::max<std::int64_t>(
      1, std::llround(2.0 / 3.0 * std::sqrt(4.0 * static_cast<double>(r) * r - x * x)));
}

IntegerItems pisinger_items(const GenerateOptions& o, SplitMix64& rng) {
  IntegerItems items;
  const std::int64_t r = o.range;
  if (o.family == "spanner") {
    // Spanner(2, 10) over strongly correlated base items: every item is a multiple of one of two.
    std::int64_t base_w[2], base_p[2];
    for (int b = 0; b < 2; ++b) {
      const std::int64_t w = rng.uniform(1, r);
      base_w[b] = std::max<std::int64_t>(1, (2 * w + 9) / 10);
      base_p[b] = std::max<std::int64_t>(1, (2 * (w + r / 10) + 9) / 10);
    }
    for (std::size_t i = 0; i < o.n; ++i) {
      const auto b = static_cast<int>(rng.uniform(0, 1));
      const std::int64_t a = rng.uniform(1, 10);
      items.weight.push_back(a * base_w[b]);
      items.profit.push_back(a * base_p[b]);
    }
    return items;
  }
  for (std::size_t i = 0; i < o.n; ++i) {
    std::int64_t w, p;
    if (o.family == "inverse_strongly_correlated") {
      p = rng.uniform(1, r);
      w = p + r / 10;
    } else {
      w = rng.uniform(1, r);
      p = correlated_profit(o.family, w, r, rng);
    }
    items.weight.push_back(w);
    items.profit.push_back(p);
  }
  return items;
}

GeneratedInstance from_integers(const IntegerItems& items, double capacity_ratio) {
  GeneratedInstance instance;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < items.weight.size(); ++i) {
    // memory * 10^4 rounds back to the integer weight exactly (weights are far below 2^50).
    instance.input.memory.push_back(static_cast<double>(items.weight[i]) / kDefaultScale);
    instance.input.runtime.push_back(static_cast<double>(items.profit[i]));
    total += items.weight[i];
  }
  const auto capacity =
      static_cast<std::int64_t>(std::floor(capacity_ratio * static_cast<double>(total)));
  instance.input.max_memory = static_cast<double>(capacity) / kDefaultScale;
  return instance;
}

// Candidate ops of a transformer-like graph: a few tensor shapes repeat, matmul outputs carry
// flop-heavy runtimes, pointwise outputs cheap ones. Memory is normalized to sum to 1 as torch's
// partitioner does before it applies the budget fraction.
GeneratedInstance torch_like(const GenerateOptions& o, SplitMix64& rng) {
  static const char* const kKinds[] = {"mm", "bmm", "add", "mul", "gelu", "softmax", "view", "sum"};
  static const double kSizes[] = {1, 1, 1, 4, 4, 16, 0.0625};
  GeneratedInstance instance;
  double total = 0;
  for (std::size_t i = 0; i < o.n; ++i) {
    const auto kind = static_cast<std::size_t>(rng.uniform(0, 7));
    const double size = kSizes[rng.uniform(0, 6)];
    const bool matmul = kind < 2;
    const double runtime = matmul ? size * 4096.0 * std::exp(0.3 * rng.normal())
                                  : size * static_cast<double>(rng.uniform(1, 5));
    instance.input.memory.push_back(size);
    instance.input.runtime.push_back(runtime);
    instance.names.push_back(std::string(kKinds[kind]) + "_" + text::integer(i));
    total += size;
  }
  for (double& m : instance.input.memory) m /= total;
  instance.input.max_memory = o.budget;
  return instance;
}

GeneratedInstance paper_scale(const GenerateOptions& o, SplitMix64& rng) {
  GeneratedInstance instance;
  const double mean_quanta = 2.0 * o.budget_quanta / static_cast<double>(o.n);
  for (std::size_t i = 0; i < o.n; ++i) {
    const double memory = 2.0 * mean_quanta * rng.uniform01() / kDefaultScale;
    instance.input.memory.push_back(memory);
    instance.input.runtime.push_back(memory * (0.5 + rng.uniform01()));
  }
  instance.input.max_memory = o.budget_quanta / kDefaultScale;
  return instance;
}

}  // namespace

const std::vector<std::string>& generator_families() {
  static const std::vector<std::string> families{"uncorrelated",
                                                 "weakly_correlated",
                                                 "strongly_correlated",
                                                 "inverse_strongly_correlated",
                                                 "almost_strongly_correlated",
                                                 "subset_sum",
                                                 "spanner",
                                                 "profit_ceiling",
                                                 "circle",
                                                 "multiple_strongly_correlated",
                                                 "torch_like",
                                                 "paper_scale"};
  return families;
}

GeneratedInstance generate(const GenerateOptions& o) {
  const auto& families = generator_families();
  if (std::find(families.begin(), families.end(), o.family) == families.end()) {
    std::string list;
    for (const auto& f : families) list += (list.empty() ? "" : ", ") + f;
    throw InputError("family", std::nullopt,
                     "unknown family '" + o.family + "' (one of: " + list + ")");
  }
  if (o.n > 10'000'000) throw InputError("n", std::nullopt, "must be at most 10^7");
  if (o.range < 10 || o.range > (std::int64_t{1} << 40)) {
    throw InputError("range", std::nullopt, "must be between 10 and 2^40");
  }
  if (!(o.capacity_ratio > 0 && o.capacity_ratio < 1)) {
    throw InputError("capacity_ratio", std::nullopt, "must be in (0, 1)");
  }
  if (!(o.budget > 0 && o.budget < 1))
    throw InputError("budget", std::nullopt, "must be in (0, 1)");
  if (!(o.budget_quanta >= 1 && o.budget_quanta <= 1e15)) {
    throw InputError("budget_quanta", std::nullopt, "must be between 1 and 10^15");
  }
  SplitMix64 rng(o.seed);
  if (o.family == "torch_like") return torch_like(o, rng);
  if (o.family == "paper_scale") return paper_scale(o, rng);
  return from_integers(pisinger_items(o, rng), o.capacity_ratio);
}

}  // namespace remat
