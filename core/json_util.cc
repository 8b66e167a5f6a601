// Strict JSON reading; see json_util.h. Tested by tests/core/json_util_test.cc.
#include "core/json_util.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

namespace trainplan {

namespace {
// Deeper nesting than any config needs. nlohmann::json copies, compares and dumps values
// recursively, so a file of a million '[' would overflow the stack after parsing.
constexpr std::size_t kMaxJsonDepth = 256;

// Byte offset of the first bracket nested deeper than kMaxJsonDepth, or npos.
std::size_t too_deep_at(std::string_view text) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

// One open object or array while scanning for repeated keys.
struct ScanFrame {
  bool object = false;
  std::set<std::string> keys;  // keys seen so far (objects)
  std::string key;             // the key whose value is being read (objects)
  std::int64_t index = 0;      // the element being read (arrays)
};

// JSON Pointer of `key` in the innermost frame (RFC 6901, without ~ escaping: for messages).
std::string pointer_to(const std::vector<ScanFrame>& stack, const std::string& key) {
  std::string path;
  for (std::size_t i = 0; i + 1 < stack.size(); ++i)
    path += "/" + (stack[i].object ? stack[i].key : std::to_string(stack[i].index));
  return path + "/" + key;
}

// The first key an object repeats in already-validated JSON text. nlohmann::json keeps the
// last of repeated keys silently (RFC 8259 sec. 4 leaves it open); a strict loader refuses,
// since the two values may differ and only one would be used. Keys are compared decoded, so
// "a" and "\u0061" are the same key.
Status check_repeated_keys(std::string_view text, std::string_view source) {
  std::vector<ScanFrame> stack;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      std::size_t end = i + 1;
      while (end < text.size() && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
      std::size_t next = end + 1;
      while (next < text.size() && std::isspace(static_cast<unsigned char>(text[next]))) ++next;
      if (!stack.empty() && stack.back().object && next < text.size() && text[next] == ':') {
        const std::string key = Json::parse(text.substr(i, end + 1 - i)).get<std::string>();
        if (!stack.back().keys.insert(key).second) {
          std::ostringstream os;
          os << source << ": duplicate key \"" << key << "\" at byte " << i << " (path "
             << pointer_to(stack, key) << "): each key may appear once in an object";
          return Status::Error(os.str());
        }
        stack.back().key = key;
      }
      i = end;
    } else if (c == '{' || c == '[') {
      stack.push_back(ScanFrame{c == '{', {}, {}, 0});
    } else if ((c == '}' || c == ']') && !stack.empty()) {
      stack.pop_back();
    } else if (c == ',' && !stack.empty() && !stack.back().object) {
      ++stack.back().index;
    }
  }
  return Status::Ok();
}
}  // namespace

Result<Json> parse_json_text(std::string_view text, std::string_view source) {
  if (const std::size_t at = too_deep_at(text); at != std::string_view::npos) {
    std::ostringstream os;
    os << source << ": malformed JSON at byte " << at << ": nesting deeper than "
       << kMaxJsonDepth << " levels";
    return Status::Error(os.str());
  }
  try {
    Json json = Json::parse(text.begin(), text.end());
    Status repeated = check_repeated_keys(text, source);
    if (!repeated.ok()) return repeated;
    return json;
  } catch (const Json::parse_error& e) {
    std::ostringstream os;
    os << source << ": malformed JSON at byte " << e.byte << ": " << e.what();
    return Status::Error(os.str());
  } catch (const Json::exception& e) {
    std::ostringstream os;
    os << source << ": malformed JSON: " << e.what();
    return Status::Error(os.str());
  }
}

std::string json_value_for_message(const Json& value) {
  std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) {
    // Cut on a UTF-8 character boundary, so the message stays valid UTF-8 (it may be
    // embedded in JSON output later).
    std::size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    s = s.substr(0, cut) + "...";
  }
  return s;
}

JsonReader::JsonReader(const Json& json, std::string where)
    : json_(json), where_(std::move(where)) {
  if (!json_.is_object()) {
    is_object_ = false;
    fail(where_ + ": expected a JSON object, got " + json_value_for_message(json_));
  }
}

void JsonReader::fail(const std::string& message) {
  if (status_.ok()) status_ = Status::Error(message);
}

void JsonReader::fail_field(const char* key, const std::string& why) {
  fail(where_ + ": field '" + key + "': " + why);
}

void JsonReader::accept(const char* key) { known_.insert(key); }

const Json* JsonReader::find(const char* key, bool required) {
  known_.insert(key);
  if (failed() || !is_object_) return nullptr;
  auto it = json_.find(key);
  if (it == json_.end() || it->is_null()) {
    if (required) fail(where_ + ": missing required field '" + key + "'");
    return nullptr;
  }
  return &*it;
}

namespace {
// A JSON number that is a whole int64 within [min, max]; otherwise `why` says what is wrong.
bool whole_in_range(const Json& v, std::int64_t min, std::int64_t max, std::int64_t& out,
                    std::string& why) {
  std::string range = "[";  // appended piece by piece: GCC 12 warns (-Wrestrict) on "[" + s
  range += std::to_string(min);
  range += ", ";
  range += std::to_string(max);
  range += "]";
  std::int64_t value = 0;
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      why = "value " + v.dump() + " is out of range " + range;
      return false;
    }
    value = static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    value = v.get<std::int64_t>();
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) {
      why = "value " + v.dump() + " is not a whole number";
      return false;
    }
    // Beyond 2^53 a double no longer holds every integer; and casting one beyond int64 is UB.
    if (std::fabs(d) > 9.0e15) {
      why = "value " + v.dump() + " is out of range " + range;
      return false;
    }
    value = static_cast<std::int64_t>(d);
  } else {
    why = "expected an integer, got " + json_value_for_message(v);
    return false;
  }
  if (value < min || value > max) {
    why = "value " + std::to_string(value) + " is out of range " + range;
    return false;
  }
  out = value;
  return true;
}
}  // namespace

bool JsonReader::get_int(const char* key, std::int64_t& out, std::int64_t min,
                         std::int64_t max, bool required) {
  const Json* v = find(key, required);
  if (v == nullptr) return false;
  std::string why;
  if (!whole_in_range(*v, min, max, out, why)) fail_field(key, why);
  return true;
}

bool JsonReader::get_int_list(const char* key, std::vector<std::int64_t>& out, std::int64_t min,
                              std::int64_t max, bool required) {
  const Json* v = find(key, required);
  if (v == nullptr) return false;
  if (!v->is_array()) {
    fail_field(key, "expected an array of integers, got " + json_value_for_message(*v));
    return true;
  }
  std::vector<std::int64_t> values;
  for (std::size_t i = 0; i < v->size(); ++i) {
    std::int64_t value = 0;
    std::string why;
    if (!whole_in_range((*v)[i], min, max, value, why)) {
      std::string message = "entry ";  // built by appending: GCC 12 warns on "a" + s + "b"
      message += std::to_string(i);
      message += ": ";
      message += why;
      fail_field(key, message);
      return true;
    }
    values.push_back(value);
  }
  out = std::move(values);
  return true;
}

bool JsonReader::get_double(const char* key, double& out, double min, double max,
                            bool required) {
  const Json* v = find(key, required);
  if (v == nullptr) return false;
  if (!v->is_number()) {
    fail_field(key, "expected a number, got " + json_value_for_message(*v));
    return true;
  }
  double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    std::ostringstream os;
    os << "value " << v->dump() << " is out of range [" << min << ", " << max << "]";
    fail_field(key, os.str());
    return true;
  }
  out = d;
  return true;
}

bool JsonReader::get_bool(const char* key, bool& out, bool required) {
  const Json* v = find(key, required);
  if (v == nullptr) return false;
  if (!v->is_boolean()) {
    fail_field(key, "expected true or false, got " + json_value_for_message(*v));
    return true;
  }
  out = v->get<bool>();
  return true;
}

bool JsonReader::get_string(const char* key, std::string& out, bool required) {
  const Json* v = find(key, required);
  if (v == nullptr) return false;
  if (!v->is_string()) {
    fail_field(key, "expected a string, got " + json_value_for_message(*v));
    return true;
  }
  out = v->get<std::string>();
  return true;
}

bool JsonReader::get_choice(const char* key, int& out, std::initializer_list<const char*> names,
                            bool required) {
  std::string s;
  if (!get_string(key, s, required) || failed()) return false;
  int i = 0;
  for (const char* n : names) {
    if (s == n) {
      out = i;
      return true;
    }
    ++i;
  }
  std::string allowed;
  for (const char* n : names) allowed += (allowed.empty() ? "" : ", ") + std::string(n);
  fail_field(key, "unknown value \"" + s + "\" (expected one of: " + allowed + ")");
  return true;
}

const Json* JsonReader::get_object(const char* key, bool required) {
  const Json* v = find(key, required);
  if (v == nullptr) return nullptr;
  if (!v->is_object()) {
    fail_field(key, "expected an object, got " + json_value_for_message(*v));
    return nullptr;
  }
  return v;
}

std::vector<std::string> JsonReader::unknown_keys() const {
  std::vector<std::string> out;
  if (!is_object_) return out;
  for (auto it = json_.begin(); it != json_.end(); ++it)
    if (known_.count(it.key()) == 0) out.push_back(it.key());
  return out;
}

Status JsonReader::finish(bool allow_unknown) {
  if (failed()) return status_;
  if (!allow_unknown) {
    for (auto it = json_.begin(); it != json_.end(); ++it) {
      if (known_.count(it.key()) == 0) {
        std::string allowed;
        for (const auto& k : known_) allowed += (allowed.empty() ? "" : ", ") + k;
        return Status::Error(where_ + ": unknown field '" + it.key() + "' (known fields: " +
                             allowed + ")");
      }
    }
  }
  return Status::Ok();
}

}  // namespace trainplan
