#include "io/byte_units.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "remat/errors.hpp"

namespace remat::io {

namespace {

// Length of the whitespace character at `at` (0 when there is none): the characters Python's
// str.isspace() accepts, which is what parse_bytes's \s matches, ASCII and UTF-8 alike.
std::size_t space_at(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u;
  };
  const unsigned c = byte(at);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  if (c == 0xc2 && (byte(at + 1) == 0x85 || byte(at + 1) == 0xa0)) return 2;  // U+0085, U+00A0
  if (c == 0xe1 && byte(at + 1) == 0x9a && byte(at + 2) == 0x80) return 3;    // U+1680
  if (c == 0xe2 && byte(at + 1) == 0x80) {
    const unsigned d = byte(at + 2);
    if ((d >= 0x80 && d <= 0x8a) || d == 0xa8 || d == 0xa9 || d == 0xaf) return 3;  // U+2000..
  }
  if (c == 0xe2 && byte(at + 1) == 0x81 && byte(at + 2) == 0x9f) return 3;  // U+205F
  if (c == 0xe3 && byte(at + 1) == 0x80 && byte(at + 2) == 0x80) return 3;  // U+3000
  return 0;
}

std::size_t skip_spaces(std::string_view text, std::size_t at) {
  while (const std::size_t n = space_at(text, at)) at += n;
  return at;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::size_t skip_digits(std::string_view text, std::size_t at) {
  while (at < text.size() && is_digit(text[at])) ++at;
  return at;
}

// The end of the number that starts at `at` ([0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?), or nullopt.
std::optional<std::size_t> number_end(std::string_view text, std::size_t at) {
  std::size_t end = skip_digits(text, at);
  if (end < text.size() && text[end] == '.') {
    const std::size_t fraction = skip_digits(text, end + 1);
    if (fraction == end + 1) {
      // "5." is no number; "5" alone is, when something other than digits follows the point.
      if (end == at) return std::nullopt;
    } else {
      end = fraction;
    }
  } else if (end == at) {
    return std::nullopt;
  }
  if (end < text.size() && (text[end] == 'e' || text[end] == 'E')) {
    std::size_t exponent = end + 1;
    if (exponent < text.size() && (text[exponent] == '+' || text[exponent] == '-')) ++exponent;
    const std::size_t digits = skip_digits(text, exponent);
    if (digits > exponent) end = digits;  // else the e starts the unit
  }
  return end;
}

std::optional<std::int64_t> unit_scale(std::string_view unit) {
  std::string lower;
  for (char c : unit) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  static const std::pair<const char*, std::int64_t> kUnits[] = {
      {"", 1},
      {"b", 1},
      {"kb", 1000},
      {"mb", 1000000},
      {"gb", 1000000000},
      {"tb", 1000000000000},
      {"kib", std::int64_t{1} << 10},
      {"mib", std::int64_t{1} << 20},
      {"gib", std::int64_t{1} << 30},
      {"tib", std::int64_t{1} << 40},
  };
  for (const auto& [name, scale] : kUnits) {
    if (lower == name) return scale;
  }
  return std::nullopt;
}

// floor(number * scale) for a number as number_end() reads it, computed exactly in decimal
// digits (as a double, "1.005KB" is 1004.9999999999999 bytes); nullopt when it is 2^62 or more.
std::optional<std::int64_t> exact_bytes(std::string_view number, std::int64_t scale) {
  // number = digits * 10^exponent.
  std::string digits;
  std::size_t at = 0;
  for (; at < number.size() && number[at] != 'e' && number[at] != 'E'; ++at) {
    if (number[at] != '.') digits += number[at];
  }
  // Each digit after the point is a tenth of the one before.
  const std::size_t point = number.substr(0, at).find('.');
  std::int64_t exponent =
      point == std::string_view::npos ? 0 : -static_cast<std::int64_t>(at - point - 1);
  if (at < number.size()) {
    bool negative = false;
    std::size_t e = at + 1;
    if (number[e] == '+' || number[e] == '-') negative = number[e++] == '-';
    std::int64_t written = 0;  // saturates: past 10^9 only the sign matters below
    for (; e < number.size(); ++e) {
      written = std::min<std::int64_t>(written * 10 + number[e] - '0', 1000000000);
    }
    exponent += negative ? -written : written;
  }
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.empty()) return 0;
  const auto length = static_cast<std::int64_t>(digits.size());
  // number >= 10^(length - 1 + exponent); scale < 10^13, so number * scale < 10^(length + exponent
  // + 13).
  if (length - 1 + exponent >= 19) return std::nullopt;
  if (length + exponent + 13 <= 0) return 0;
  // digits * scale, still in decimal digits, most significant first. The carry stays below the
  // scale (at most 2^40), so each step fits 64 bits.
  std::string product(digits.size() + 14, '0');
  std::uint64_t carry = 0;
  for (std::size_t i = digits.size(), k = product.size(); k-- > 0;) {
    std::uint64_t value = carry;
    if (i > 0)
      value += static_cast<std::uint64_t>(digits[--i] - '0') * static_cast<std::uint64_t>(scale);
    product[k] = static_cast<char>('0' + static_cast<int>(value % 10));
    carry = value / 10;
  }
  // Times 10^exponent, then floored: zeros appended, or the last -exponent digits dropped.
  if (exponent >= 0) {
    product.append(static_cast<std::size_t>(exponent), '0');
  } else if (static_cast<std::int64_t>(product.size()) <= -exponent) {
    return 0;
  } else {
    product.resize(product.size() - static_cast<std::size_t>(-exponent));
  }
  product.erase(0, std::min(product.find_first_not_of('0'), product.size()));
  if (product.size() > 19) return std::nullopt;
  std::uint64_t bytes = 0;
  for (char c : product) bytes = bytes * 10 + static_cast<std::uint64_t>(c - '0');
  if (bytes >= (std::uint64_t{1} << 62)) return std::nullopt;
  return static_cast<std::int64_t>(bytes);
}

// Python's repr() of a str, for the characters a command line carries: quotes chosen as Python
// chooses them, backslash escapes for control characters, other bytes as they are.
std::string python_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static const char* const kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + quote;
}

}  // namespace

std::int64_t parse_bytes(std::string_view text, const std::string& field) {
  const auto unreadable = [&] {
    return InputError(field, std::nullopt,
                      "cannot read " + python_repr(text) +
                          " as bytes (write e.g. 2147483648, '2GiB', '1.5GB', '512MiB')");
  };
  const std::size_t start = skip_spaces(text, 0);
  const std::optional<std::size_t> end = number_end(text, start);
  if (!end) throw unreadable();
  std::size_t unit_start = skip_spaces(text, *end);
  std::size_t unit_end = unit_start;
  while (unit_end < text.size() && is_letter(text[unit_end])) ++unit_end;
  if (skip_spaces(text, unit_end) != text.size()) throw unreadable();
  const std::optional<std::int64_t> scale =
      unit_scale(text.substr(unit_start, unit_end - unit_start));
  if (!scale) throw unreadable();
  const std::optional<std::int64_t> bytes = exact_bytes(text.substr(start, *end - start), *scale);
  if (!bytes) throw InputError(field, std::nullopt, python_repr(text) + " is too large");
  return *bytes;
}

}  // namespace remat::io
