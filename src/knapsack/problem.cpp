// Validation and quantization: the one place where user input becomes a KnapsackProblem.
#include "remat/problem.hpp"

#include <cmath>
#include <limits>

#include "common/text.hpp"
#include "remat/errors.hpp"

namespace remat {

namespace {

std::string describe(const std::string& field, std::optional<std::size_t> index,
                     const std::string& detail) {
  std::string out = field;
  if (index) {
    out += '[';
    out += text::integer(*index);
    out += ']';
  }
  out += ": ";
  out += detail;
  return out;
}

std::string number_text(double x) {
  return text::number(x);
}

// 2^63 is the first double that does not fit in int64.
constexpr double kInt64Limit = 9223372036854775808.0;

std::int64_t quantize_one(double x, double scale, const std::string& field,
                          std::optional<std::size_t> index) {
  if (std::isnan(x)) throw InputError(field, index, "is NaN");
  if (std::isinf(x)) throw InputError(field, index, "is infinite");
  if (x < 0) throw InputError(field, index, "is negative (" + number_text(x) + ")");
  const double q = round_half_even(x * scale);
  if (!(q < kInt64Limit)) {
    throw InputError(field, index,
                     number_text(x) + " times scale " + number_text(scale) +
                         " does not fit in a 64-bit integer");
  }
  return static_cast<std::int64_t>(q);
}

}  // namespace

InputError::InputError(std::string field, std::optional<std::size_t> index,
                       const std::string& detail)
    : std::invalid_argument(describe(field, index, detail)),
      field_(std::move(field)),
      index_(index) {}

double round_half_even(double x) {
  // std::nearbyint rounds half to even under the default rounding mode, as Python's round() does.
  return std::nearbyint(x);
}

KnapsackProblem quantize(const KnapsackInput& input) {
  if (!std::isfinite(input.scale) || input.scale <= 0) {
    throw InputError("scale", std::nullopt,
                     "must be a positive finite number, got " + number_text(input.scale));
  }
  if (input.memory.size() > kMaxItems) {
    throw InputError("memory", std::nullopt,
                     "has " + text::integer(input.memory.size()) + " entries; at most " +
                         text::integer(kMaxItems) + " are supported");
  }
  if (input.runtime.size() != input.memory.size()) {
    throw InputError("runtime", std::nullopt,
                     "has " + text::integer(input.runtime.size()) + " entries but memory has " +
                         text::integer(input.memory.size()));
  }
  KnapsackProblem problem;
  problem.scale = input.scale;
  problem.capacity = quantize_one(input.max_memory, input.scale, "max_memory", std::nullopt);
  const std::size_t n = input.memory.size();
  problem.weight.resize(n);
  problem.value.resize(n);
  problem.memory = input.memory;
  std::int64_t weight_sum = 0;
  double runtime_sum = 0;  // of magnitudes: a plan's value must be a finite double
  for (std::size_t i = 0; i < n; ++i) {
    problem.weight[i] = quantize_one(input.memory[i], input.scale, "memory", i);
    if (problem.weight[i] > std::numeric_limits<std::int64_t>::max() - weight_sum) {
      throw InputError("memory", i, "the sum of quantized memory overflows a 64-bit integer");
    }
    weight_sum += problem.weight[i];
    const double r = input.runtime[i];
    if (std::isnan(r)) throw InputError("runtime", i, "is NaN");
    if (std::isinf(r)) throw InputError("runtime", i, "is infinite");
    // Subnormal values lose precision in the solvers' sums and comparisons (the exact solver
    // then claimed a worse plan optimal); no runtime measured in any unit is that small.
    if (r != 0 && std::fabs(r) < std::numeric_limits<double>::min()) {
      throw InputError("runtime", i,
                       "is subnormal (" + number_text(r) + "); scale runtimes to a larger unit");
    }
    runtime_sum += std::fabs(r);
    if (std::isinf(runtime_sum)) {
      throw InputError("runtime", i,
                       "the sum of runtimes overflows a double; scale runtimes to a smaller unit");
    }
    problem.value[i] = r;
  }
  return problem;
}

}  // namespace remat
