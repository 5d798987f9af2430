// Number formatting for messages, built on std::to_chars. The core and the Python binding must
// not touch iostreams or locales: a statically linked libstdc++ (GCC 13, as on some GPU images)
// can leave the stream facets of a dlopen'ed module uninitialized, and formatting an error
// message through them crashed the interpreter.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <type_traits>

namespace remat::text {

// Shortest text that reads back as the same value ("-2", "0.1", "1e+300").
inline std::string number(double x) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x);
  return std::string(buffer, result.ptr);
}

// Fixed notation with `digits` after the point ("0.250").
inline std::string fixed(double x, int digits) {
  char buffer[400];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::fixed, digits);
  if (result.ec != std::errc()) return number(x);
  return std::string(buffer, result.ptr);
}

template <typename Integer>
requires std::is_integral_v<Integer> std::string integer(Integer x) {
  char buffer[24];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x);
  return std::string(buffer, result.ptr);
}

// A count of bytes as a message says it: "1 byte", "2 bytes".
template <typename Integer>
requires std::is_integral_v<Integer> std::string bytes(Integer count) {
  return integer(count) + (count == 1 ? " byte" : " bytes");
}

}  // namespace remat::text
