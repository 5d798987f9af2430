// Fuzzes the JSON edge: any bytes must either parse into a valid, quantized problem (or chain
// profile) or raise InputError. Any other exception, crash or sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/json_io.hpp"
#include "remat/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const remat::io::Instance instance = remat::io::read_instance(text);
    const remat::KnapsackProblem problem = remat::quantize(instance.input);
    if (problem.weight.size() != instance.input.memory.size()) __builtin_trap();
  } catch (const remat::InputError&) {
  }
  try {
    remat::io::read_profile(text).validate();
  } catch (const remat::InputError&) {
  }
  try {
    const remat::eager::Profile profile = remat::io::read_eager_profile(text);
    if (profile.layers.empty()) __builtin_trap();
    remat::eager::evaluate(profile, {});
  } catch (const remat::InputError&) {
  }
  return 0;
}
