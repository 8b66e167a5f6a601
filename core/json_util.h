// Strict JSON reading shared by every loader (model, cluster, plan, hardware profile,
// measured.json). Each field read is range-checked; a key the loader never asked for is an error
// that names it; every message names the source (usually the file), the field and the value.
// No file I/O here: callers pass text or parsed JSON.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace trainplan {

using Json = nlohmann::json;

// Parses text; a syntax error names the source and the byte offset, and so does a key repeated
// within one object (with its JSON Pointer path): nlohmann::json would keep the last silently.
Result<Json> parse_json_text(std::string_view text, std::string_view source);

// Renders a JSON value for an error message, shortened to at most 60 characters.
std::string json_value_for_message(const Json& value);

// Reads the fields of one JSON object. The first error is kept; later reads become no-ops.
class JsonReader {
 public:
  // `where` names the object in messages, e.g. "model 'models/gpt3.json'".
  JsonReader(const Json& json, std::string where);

  // Integers must be whole numbers within [min, max]. Returns whether the key was present.
  bool get_int(const char* key, std::int64_t& out, std::int64_t min, std::int64_t max,
               bool required);
  // An array of such integers; an entry that is not one is named by its index.
  bool get_int_list(const char* key, std::vector<std::int64_t>& out, std::int64_t min,
                    std::int64_t max, bool required);
  bool get_double(const char* key, double& out, double min, double max, bool required);
  bool get_bool(const char* key, bool& out, bool required);
  bool get_string(const char* key, std::string& out, bool required);
  // A string that must be one of `names`; out receives its index in that list.
  bool get_choice(const char* key, int& out, std::initializer_list<const char*> names,
                  bool required);
  // A nested object; returns nullptr if absent (and records an error if required).
  const Json* get_object(const char* key, bool required);
  // Marks a key as understood without reading it (documentation strings, sources).
  void accept(const char* key);
  // Records a custom error about a field (cross-field checks).
  void fail_field(const char* key, const std::string& why);

  // Ends reading: unknown keys are an error unless allow_unknown (Hugging Face configs carry
  // many keys we do not model).
  Status finish(bool allow_unknown = false);
  bool failed() const { return !status_.ok(); }
  // Keys of the object that were neither read nor accepted (after reading, for finish(true)
  // callers that report what they ignored).
  std::vector<std::string> unknown_keys() const;
  const std::string& where() const { return where_; }

 private:
  const Json* find(const char* key, bool required);
  void fail(const std::string& message);

  const Json& json_;
  std::string where_;
  std::set<std::string> known_;
  Status status_;
  bool is_object_ = true;
};

}  // namespace trainplan
