// The Hugging Face config.json reader, by model_type. An allow-list of decoder-only model types,
// each with the defaults its transformers configuration class gives a key the file leaves out
// (tie_word_embeddings, hidden_act, max_position_embeddings, head_dim, key/value heads, norm,
// biases); state-space and hybrid types (Mamba, Jamba, Nemotron-H, ...) and encoders are
// refused by name with the reason; any other type is refused unless the caller allows it, and
// then every assumption made is listed. transformers 5's keys (rope_parameters, layer_types,
// dtype) are read as well as the older ones. No file I/O.
// Tested by tests/core/hf_config_test.cc (real published configs of tests/data/hf, SOURCES.md),
// tests/core/hf_families_test.cc, tests/core/moe_mla_test.cc; fuzzed by tests/fuzz/fuzz_hf_config.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/json_util.h"
#include "core/model_spec.h"
#include "core/status.h"

namespace trainplan {

// Whether `json` is a Hugging Face config rather than our model format.
bool is_hf_config(const Json& json);

// Reads a Hugging Face config (a multimodal one through its text_config).
Result<ModelSpec> read_hf_config(const Json& json, std::string_view source,
                                 const HfReadOptions& options);

// The model types read, and those refused with the reason (for docs and tests).
std::vector<std::string> hf_supported_model_types();
// Why `model_type` is refused ("" when it is not on the refusal list).
std::string_view hf_refusal_reason(std::string_view model_type);

}  // namespace trainplan
