#include "io/json_io.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_set>
#include <vector>

#include "remat/errors.hpp"

namespace remat::io {

namespace {

using nlohmann::json;

std::string type_name(const json& value) {
  if (value.is_boolean()) return "a boolean";
  if (value.is_string()) return "a string";
  if (value.is_null()) return "null";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "a number";
}

// `key` names the value inside the object at field[index] ("" for a field of its own), so that
// two keys of one layer give two messages.
double number_at(const json& value, const std::string& field, std::optional<std::size_t> index,
                 const std::string& key = "") {
  if (!value.is_number()) {
    throw InputError(field, index,
                     (key.empty() ? "expected a number" : key + " must be a number") + ", got " +
                         type_name(value));
  }
  return value.get<double>();
}

std::vector<double> number_array(const json& root, const std::string& field) {
  const auto it = root.find(field);
  if (it == root.end()) throw InputError(field, std::nullopt, "missing");
  if (!it->is_array())
    throw InputError(field, std::nullopt, "expected an array, got " + type_name(*it));
  std::vector<double> values;
  values.reserve(it->size());
  for (std::size_t i = 0; i < it->size(); ++i) values.push_back(number_at((*it)[i], field, i));
  return values;
}

// Text quoted from the input may be invalid UTF-8 or control characters: those bytes are written
// as \xNN so that an error stays one printable line.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char* const kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// nlohmann prefixes its messages with "[json.exception.parse_error.101] "; users need the rest.
std::string without_exception_id(const std::string& message) {
  const auto pos = message.find("] ");
  return printable(pos == std::string::npos ? message : message.substr(pos + 2));
}

// Whether a bad literal is NaN or Infinity in one of the spellings other JSON writers use.
bool names_nan_or_infinity(std::string_view literal) {
  const auto starts = [literal](std::string_view word) {
    if (literal.size() < word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i) {
      const char c = literal[i];
      if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != word[i]) return false;
    }
    return true;
  };
  return starts("nan") || starts("inf");
}

// One open object or array while parsing: where the parser is in it, and an object's keys.
struct OpenContainer {
  bool array = false;
  std::size_t index = 0;  // an array's current element
  std::string key;        // an object's current member
  std::unordered_set<std::string> keys;
};

// The path of the member `key` of the innermost open object: layers[1].saved_bytes.
std::string path_of(const std::vector<OpenContainer>& open, const std::string& key) {
  std::string path;
  for (std::size_t depth = 0; depth + 1 < open.size(); ++depth) {
    const OpenContainer& c = open[depth];
    if (c.array) {
      path += "[" + std::to_string(c.index) + "]";
    } else {
      path += (path.empty() ? "" : ".") + printable(c.key);
    }
  }
  return path + (path.empty() ? "" : ".") + printable(key);
}

json parse_document(std::string_view text) {
  // nlohmann keeps the last of two equal keys; a document that says two things is refused
  // instead, naming the key and where it is, so that an edited file cannot be half read.
  std::vector<OpenContainer> open;
  const auto element_done = [&open] {
    if (!open.empty() && open.back().array) ++open.back().index;
  };
  const json::parser_callback_t no_duplicate_keys = [&](int, json::parse_event_t event,
                                                        json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        open.push_back({event == json::parse_event_t::array_start, 0, {}, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        element_done();
        break;
      case json::parse_event_t::key:
        if (!open.empty()) {
          const std::string& key = parsed.get_ref<const std::string&>();
          if (!open.back().keys.insert(key).second) {
            throw InputError(path_of(open, key), std::nullopt, "appears twice in one object");
          }
          open.back().key = key;
        }
        break;
      case json::parse_event_t::value:
        element_done();
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), no_duplicate_keys);
  } catch (const json::parse_error& e) {
    std::string detail = without_exception_id(e.what());
    const std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
    if (names_nan_or_infinity(text.substr(std::min(at, text.size())))) {
      detail += " (NaN and Infinity are not JSON; every value must be a finite number)";
    }
    throw InputError("input", std::nullopt, "malformed JSON: " + detail);
  } catch (const json::out_of_range& e) {
    // A literal such as 1e999 that no double can hold.
    throw InputError("input", std::nullopt, "malformed JSON: " + without_exception_id(e.what()));
  }
}

}  // namespace

Instance read_instance(std::string_view text) {
  const json root = parse_document(text);
  if (!root.is_object()) {
    throw InputError("input", std::nullopt, "expected a JSON object, got " + type_name(root));
  }
  Instance instance;
  instance.input.memory = number_array(root, "memory");
  instance.input.runtime = number_array(root, "runtime");
  const auto budget = root.find("max_memory");
  if (budget == root.end()) throw InputError("max_memory", std::nullopt, "missing");
  instance.input.max_memory = number_at(*budget, "max_memory", std::nullopt);
  const auto names = root.find("names");
  if (names != root.end() && names->is_array() && names->size() == instance.input.memory.size()) {
    for (const json& name : *names) {
      if (!name.is_string()) {
        instance.names.clear();
        break;
      }
      instance.names.push_back(name.get<std::string>());
    }
  }
  return instance;
}

namespace {

// A whole number >= 0 that an int64 holds. `key` names it inside the object at field[index]
// ("" for a field of its own); `unit` says what it counts ("of bytes ", or "").
std::int64_t whole_count(const json& value, const std::string& field,
                         std::optional<std::size_t> index, const std::string& key,
                         const std::string& unit) {
  const double x = number_at(value, field, index, key);
  const std::string what = key.empty() ? "" : key + " ";
  if (!std::isfinite(x) || x < 0 || x != std::floor(x)) {
    throw InputError(field, index, what + "must be a whole number " + unit + ">= 0");
  }
  if (x >= 9.2e18) throw InputError(field, index, what + "is too large (at most 9.2e18)");
  return static_cast<std::int64_t>(x);
}

std::int64_t byte_count(const json& value, const std::string& field,
                        std::optional<std::size_t> index, const std::string& key = "") {
  return whole_count(value, field, index, key, "of bytes ");
}

// The document's object and its non-empty "layers" array, shared by both profile formats.
std::pair<json, json> profile_document(std::string_view text) {
  json root = parse_document(text);
  if (!root.is_object()) {
    throw InputError("input", std::nullopt, "expected a JSON object, got " + type_name(root));
  }
  const auto layers = root.find("layers");
  if (layers == root.end()) throw InputError("layers", std::nullopt, "missing");
  if (!layers->is_array() || layers->empty()) {
    throw InputError("layers", std::nullopt, "expected a non-empty array of layers");
  }
  json array = std::move(*layers);
  return {std::move(root), std::move(array)};
}

// A profile of the other format is named as such, rather than reported as a missing field: chain
// profiles' layers have activation_bytes, eager profiles' saved_bytes and output_bytes.
bool has_key(const json& layer, const char* key) {
  return layer.is_object() && layer.find(key) != layer.end();
}

bool looks_like_chain_profile(const json& layers) {
  const json& first = layers.front();
  return has_key(first, "activation_bytes") && !has_key(first, "saved_bytes") &&
         !has_key(first, "output_bytes");
}

bool looks_like_eager_profile(const json& layers) {
  const json& first = layers.front();
  return !has_key(first, "activation_bytes") &&
         (has_key(first, "saved_bytes") || has_key(first, "output_bytes"));
}

}  // namespace

chain::ChainProfile read_profile(std::string_view text) {
  const auto [root, layer_array] = profile_document(text);
  const json* layers = &layer_array;
  if (looks_like_eager_profile(*layers)) {
    throw InputError("input", std::nullopt,
                     "this is an eager profile (layers have saved_bytes and output_bytes); remat "
                     "chain --profile reads chain profiles (layers with activation_bytes and "
                     "forward_time); plan an eager profile with remat eager");
  }
  chain::ChainProfile profile;
  profile.activation_bytes.push_back(0);
  profile.forward_time.push_back(0);
  profile.names.push_back("input");
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const json& layer = (*layers)[i];
    if (!layer.is_object())
      throw InputError("layers", i, "expected an object, got " + type_name(layer));
    const auto bytes = layer.find("activation_bytes");
    if (bytes == layer.end()) throw InputError("layers", i, "activation_bytes is missing");
    const auto time = layer.find("forward_time");
    if (time == layer.end()) throw InputError("layers", i, "forward_time is missing");
    profile.activation_bytes.push_back(byte_count(*bytes, "layers", i, "activation_bytes"));
    const double t = number_at(*time, "layers", i, "forward_time");
    if (!std::isfinite(t) || t < 0)
      throw InputError("layers", i, "forward_time must be finite and >= 0");
    profile.forward_time.push_back(t);
    const auto name = layer.find("name");
    profile.names.push_back(name != layer.end() && name->is_string()
                                ? name->get<std::string>()
                                : "layer" + std::to_string(i + 1));
  }
  const auto input = root.find("input_bytes");
  profile.activation_bytes[0] = input == root.end()
                                    ? profile.activation_bytes[1]
                                    : byte_count(*input, "input_bytes", std::nullopt);
  return profile;
}

namespace {

// The eager profile of a parsed document (its layers moved out of `root`, see profile_document).
eager::Profile eager_profile_of(const json& root, const json& layer_array) {
  const json* layers = &layer_array;
  if (looks_like_chain_profile(*layers)) {
    throw InputError("input", std::nullopt,
                     "this is a chain profile (layers have activation_bytes); remat eager reads "
                     "eager profiles (layers with saved_bytes, output_bytes and forward_time, as "
                     "remat.torch.Profile.to_json() writes them); plan a chain profile with remat "
                     "chain --profile");
  }
  eager::Profile profile;
  const auto input = root.find("input_bytes");
  if (input == root.end()) throw InputError("input_bytes", std::nullopt, "missing");
  profile.input_bytes = byte_count(*input, "input_bytes", std::nullopt);
  const auto overhead = root.find("region_overhead");
  if (overhead != root.end()) {
    profile.region_overhead = number_at(*overhead, "region_overhead", std::nullopt);
  }
  const auto max_region_layers = root.find("max_region_layers");
  if (max_region_layers != root.end()) {
    profile.max_region_layers =
        whole_count(*max_region_layers, "max_region_layers", std::nullopt, "", "");
  }
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const json& layer = (*layers)[i];
    if (!layer.is_object())
      throw InputError("layers", i, "expected an object, got " + type_name(layer));
    auto field = [&](const char* name) -> const json& {
      const auto it = layer.find(name);
      if (it == layer.end()) throw InputError("layers", i, std::string(name) + " is missing");
      return *it;
    };
    eager::Layer parsed;
    parsed.saved_bytes = byte_count(field("saved_bytes"), "layers", i, "saved_bytes");
    parsed.output_bytes = byte_count(field("output_bytes"), "layers", i, "output_bytes");
    parsed.forward_time = number_at(field("forward_time"), "layers", i, "forward_time");
    const auto saves_output = layer.find("saves_output");
    if (saves_output != layer.end()) {
      if (!saves_output->is_boolean()) {
        throw InputError("layers", i,
                         "saves_output must be true or false, got " + type_name(*saves_output));
      }
      parsed.saves_output = saves_output->get<bool>();
    }
    const auto options = layer.find("options");
    if (options != layer.end()) {
      if (!options->is_array()) {
        throw InputError("layers", i, "options must be an array, got " + type_name(*options));
      }
      const std::string where = "layers[" + std::to_string(i) + "].options";
      for (std::size_t j = 0; j < options->size(); ++j) {
        const json& option = (*options)[j];
        if (!option.is_object() || !option.contains("held_bytes") ||
            !option.contains("recompute_time")) {
          throw InputError(where, j, "expected an object with held_bytes and recompute_time");
        }
        parsed.options.push_back({byte_count(option["held_bytes"], where, j, "held_bytes"),
                                  number_at(option["recompute_time"], where, j, "recompute_time")});
      }
    }
    profile.layers.push_back(parsed);
  }
  eager::validate(profile);  // names forward_time[i] etc. for values out of range
  return profile;
}

}  // namespace

eager::Profile read_eager_profile(std::string_view text) {
  const auto [root, layers] = profile_document(text);
  return eager_profile_of(root, layers);
}

namespace {

eager::StepPartKind step_part_kind(const json& value, std::size_t index) {
  static const std::pair<const char*, eager::StepPartKind> kinds[] = {
      {"pre", eager::StepPartKind::pre},       {"forward", eager::StepPartKind::forward},
      {"after", eager::StepPartKind::after},   {"backward", eager::StepPartKind::backward},
      {"before", eager::StepPartKind::before}, {"done", eager::StepPartKind::done}};
  if (value.is_string()) {
    for (const auto& [name, kind] : kinds) {
      if (value.get<std::string>() == name) return kind;
    }
  }
  throw InputError("step.parts", index,
                   "part must be one of pre, forward, after, backward, before, done");
}

eager::StepFigures read_step(const json& step) {
  if (!step.is_object()) {
    throw InputError("step", std::nullopt, "expected an object, got " + type_name(step));
  }
  const auto bytes_of = [&](const char* key) {
    const auto it = step.find(key);
    if (it == step.end()) throw InputError(std::string("step.") + key, std::nullopt, "missing");
    return byte_count(*it, std::string("step.") + key, std::nullopt);
  };
  eager::StepFigures figures;
  figures.start_bytes = bytes_of("start_bytes");
  figures.outside_bytes = bytes_of("outside_bytes");
  if (step.contains("margin_bytes")) figures.margin_bytes = bytes_of("margin_bytes");
  const auto parts = step.find("parts");
  if (parts == step.end()) throw InputError("step.parts", std::nullopt, "missing");
  if (!parts->is_array()) {
    throw InputError("step.parts", std::nullopt, "expected an array, got " + type_name(*parts));
  }
  for (std::size_t i = 0; i < parts->size(); ++i) {
    const json& part = (*parts)[i];
    if (!part.is_object() || !part.contains("part") || !part.contains("beside_bytes")) {
      throw InputError("step.parts", i, "expected an object with part and beside_bytes");
    }
    eager::StepPart parsed;
    parsed.kind = step_part_kind(part["part"], i);
    parsed.beside_bytes = byte_count(part["beside_bytes"], "step.parts", i, "beside_bytes");
    if (eager::has_call(parsed.kind)) {
      if (!part.contains("call")) throw InputError("step.parts", i, "call is missing");
      parsed.call = whole_count(part["call"], "step.parts", i, "call", "");
    }
    if (part.contains("region_beside_bytes")) {
      if (parsed.kind != eager::StepPartKind::forward) {
        throw InputError("step.parts", i, "region_beside_bytes is for forward parts only");
      }
      parsed.region_beside_bytes =
          byte_count(part["region_beside_bytes"], "step.parts", i, "region_beside_bytes");
    }
    figures.parts.push_back(parsed);
  }
  return figures;
}

}  // namespace

EagerInput read_eager_input(std::string_view text) {
  const auto [root, layers] = profile_document(text);
  EagerInput input{eager_profile_of(root, layers), std::nullopt};
  if (const auto step = root.find("step"); step != root.end()) {
    input.step = read_step(*step);
    eager::validate(input.profile, *input.step);
  }
  return input;
}

std::string instance_json(const GeneratedInstance& instance) {
  json out;
  out["memory"] = instance.input.memory;
  out["runtime"] = instance.input.runtime;
  out["max_memory"] = instance.input.max_memory;
  if (!instance.names.empty()) out["names"] = instance.names;
  return out.dump();
}

std::string result_json(const KnapsackResult& r) {
  json out;
  visit_fields(r, [&](const char* name, const auto& value) { out[name] = value; });
  return out.dump();
}

std::string pareto_json(const KnapsackProblem& problem, const std::vector<ParetoPoint>& points) {
  json list = json::array();
  for (const ParetoPoint& p : points) {
    list.push_back({{"budget_quanta", p.budget_quanta},
                    {"max_memory", static_cast<double>(p.budget_quanta) / problem.scale},
                    {"max_runtime", p.max_runtime}});
  }
  json out;
  out["quantized_max_memory"] = problem.capacity;
  out["scale"] = problem.scale;
  out["points"] = std::move(list);
  return out.dump();
}

}  // namespace remat::io
