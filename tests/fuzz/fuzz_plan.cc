// libFuzzer target: plan JSON through plan_from_json, the round trip, and the checks against a
// small model and a world size. Corpus: tests/fuzz/corpus/fuzz_plan.
#include "core/plan.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainplan;
  auto plan = fuzz::load_and_round_trip(data, size, plan_from_json, plan_to_json);
  if (!plan.ok()) return 0;
  TRAINPLAN_CHECK(validate_plan(*plan).ok());
  TRAINPLAN_CHECK(plan->num_micro_batches() >= 1);
  ModelSpec m;  // 8 layers, 8 heads (2 kv), ffn 512: divisible by the usual degrees
  m.name = "fuzz";
  m.num_layers = 8;
  m.hidden_size = 128;
  m.num_attention_heads = 8;
  m.num_kv_heads = 2;
  m.head_dim = 16;
  m.ffn_hidden_size = 512;
  m.vocab_size = 1000;
  m.seq_len = m.max_position_embeddings = 256;
  m.num_experts = 4;
  m.experts_per_token = 2;
  TRAINPLAN_CHECK(validate_model(m, "fuzz").ok());
  if (check_plan_fits_model(*plan, m).ok()) {
    const auto layers = chunk_layers(*plan, m);
    TRAINPLAN_CHECK(static_cast<std::int64_t>(layers.size()) == plan->num_chunks());
  }
  (void)check_plan_world_size(*plan, 64);
  (void)describe(*plan);
  return 0;
}
