#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "remat/errors.hpp"
#include "remat/problem.hpp"

namespace remat {
namespace {

TEST(RoundHalfEven, MatchesPythonRound) {
  EXPECT_EQ(round_half_even(0.5), 0.0);
  EXPECT_EQ(round_half_even(1.5), 2.0);
  EXPECT_EQ(round_half_even(2.5), 2.0);
  EXPECT_EQ(round_half_even(-0.5), -0.0);
  EXPECT_EQ(round_half_even(2.4999999999999996), 2.0);
  // 0.285 * 10000 is 2849.9999999999995 in double; Python's round() gives 2850.
  EXPECT_EQ(round_half_even(0.285 * 10000), 2850.0);
  // 1.00005 * 10000 is 10000.500000000002 in double: 10001, as Python's round() gives.
  EXPECT_EQ(round_half_even(1.00005 * 10000), 10001.0);
  EXPECT_EQ(round_half_even(10000.5), 10000.0);
}

TEST(Quantize, ScalesAndRounds) {
  const KnapsackProblem p = quantize({{0.5, 1.5, 2.0, 0.00005}, {1, 2, 3, 4}, 2.0, 10000});
  EXPECT_EQ(p.weight, (std::vector<std::int64_t>{5000, 15000, 20000, 0}));
  EXPECT_EQ(p.capacity, 20000);
  EXPECT_EQ(p.value, (std::vector<double>{1, 2, 3, 4}));
}

TEST(Quantize, NegativeZeroIsZero) {
  const KnapsackProblem p = quantize({{-0.0}, {1}, -0.0, 10000});
  EXPECT_EQ(p.weight[0], 0);
  EXPECT_EQ(p.capacity, 0);
}

void expect_error(const KnapsackInput& in, const std::string& message) {
  try {
    quantize(in);
    FAIL() << "expected InputError: " << message;
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(Quantize, RejectsBadInputNamingFieldAndIndex) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  expect_error({{1, nan}, {1, 1}, 1, 10000}, "memory[1]: is NaN");
  expect_error({{1, inf}, {1, 1}, 1, 10000}, "memory[1]: is infinite");
  expect_error({{1, -1}, {1, 1}, 1, 10000}, "memory[1]: is negative (-1)");
  expect_error({{1, 1}, {1, nan}, 1, 10000}, "runtime[1]: is NaN");
  expect_error({{1, 1}, {-inf, 1}, 1, 10000}, "runtime[0]: is infinite");
  expect_error({{1, 1}, {1}, 1, 10000}, "runtime: has 1 entries but memory has 2");
  expect_error({{1}, {1}, -2, 10000}, "max_memory: is negative (-2)");
  expect_error({{1}, {1}, nan, 10000}, "max_memory: is NaN");
  expect_error({{1}, {1}, 1, 0}, "scale: must be a positive finite number, got 0");
  expect_error({{1}, {1}, 1, nan}, "scale: must be a positive finite number, got nan");
  expect_error(
      {{1e300}, {1}, 1, 10000},
      "memory[0]: 1e+300 times scale 10000 does not fit in a 64-bit integer");
  expect_error({{9e14, 9e14}, {1, 1}, 1, 10000},
               "memory[1]: the sum of quantized memory overflows a 64-bit integer");
}

TEST(Quantize, NegativeRuntimeIsAllowed) {
  EXPECT_NO_THROW(quantize({{1}, {-5}, 1, 10000}));
}

}  // namespace
}  // namespace remat
