#include <gtest/gtest.h>

#include "io/json_io.hpp"
#include "remat/errors.hpp"

namespace remat {
namespace {

std::string error_of(const std::string& text) {
  try {
    io::read_instance(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ReadInstance, ParsesAndIgnoresOtherKeys) {
  const io::Instance in = io::read_instance(
      R"({"memory": [1, 2.5], "runtime": [3, -1e2], "max_memory": 4, "model": "x", "names": ["a", "b"]})");
  EXPECT_EQ(in.input.memory, (std::vector<double>{1, 2.5}));
  EXPECT_EQ(in.input.runtime, (std::vector<double>{3, -100}));
  EXPECT_EQ(in.input.max_memory, 4);
  EXPECT_EQ(in.names, (std::vector<std::string>{"a", "b"}));
}

TEST(ReadInstance, ErrorsNameFieldAndIndex) {
  EXPECT_EQ(error_of(R"({"runtime": [], "max_memory": 1})"), "memory: missing");
  EXPECT_EQ(error_of(R"({"memory": [], "max_memory": 1})"), "runtime: missing");
  EXPECT_EQ(error_of(R"({"memory": [], "runtime": []})"), "max_memory: missing");
  EXPECT_EQ(error_of(R"({"memory": [1, "2"], "runtime": [1, 1], "max_memory": 1})"),
            "memory[1]: expected a number, got a string");
  EXPECT_EQ(error_of(R"({"memory": [1], "runtime": [true], "max_memory": 1})"),
            "runtime[0]: expected a number, got a boolean");
  EXPECT_EQ(error_of(R"({"memory": 1, "runtime": [], "max_memory": 1})"),
            "memory: expected an array, got a number");
  EXPECT_EQ(error_of(R"({"memory": [], "runtime": [], "max_memory": null})"),
            "max_memory: expected a number, got null");
  EXPECT_EQ(error_of("[1, 2]"), "input: expected a JSON object, got an array");
}

TEST(ReadInstance, MalformedJsonIsAnInputError) {
  EXPECT_NE(error_of(R"({"memory": [1, 2)").find("input: malformed JSON"), std::string::npos);
  EXPECT_NE(error_of("").find("input: malformed JSON"), std::string::npos);
  const std::string nan = error_of(R"({"memory": [NaN], "runtime": [1], "max_memory": 1})");
  EXPECT_NE(nan.find("NaN and Infinity are not JSON"), std::string::npos) << nan;
  EXPECT_NE(error_of("{\"memory\": [1], \"x\": \"\xff\"}").find("malformed JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace remat
