#include "remat/errors.hpp"

#include <string>
#include <string_view>

namespace remat {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

bool is_name(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

void word_one(std::string& out, std::string_view name, std::string_view value, bool has_value,
              OptionStyle style) {
  if (style == OptionStyle::kCommandLine) {
    out.append("--");
    for (char c : name) out.push_back(c == '_' ? '-' : c);
    if (has_value) {
      out.push_back(' ');
      out.append(value);
    }
    return;
  }
  out.append(name);
  out.push_back('=');
  if (has_value) {
    out.push_back('"');
    out.append(value);
    out.push_back('"');
  }
}

}  // namespace

std::string word_options(std::string_view message, OptionStyle style) {
  std::string out;
  std::size_t at = 0;
  while (at < message.size()) {
    const std::size_t open = message.find('{', at);
    if (open == std::string_view::npos) break;
    const std::size_t close = message.find('}', open + 1);
    if (close == std::string_view::npos) break;
    const std::string_view inside = message.substr(open + 1, close - open - 1);
    const std::size_t equals = inside.find('=');
    const std::string_view name = inside.substr(0, equals);
    const bool has_value = equals != std::string_view::npos;
    const std::string_view value = has_value ? inside.substr(equals + 1) : std::string_view();
    out.append(message.substr(at, open - at));
    if (is_name(name) && (!has_value || is_name(value))) {
      word_one(out, name, value, has_value, style);
      at = close + 1;
    } else {
      out += '{';
      at = open + 1;
    }
  }
  out.append(message.substr(at));
  return out;
}

}  // namespace remat
