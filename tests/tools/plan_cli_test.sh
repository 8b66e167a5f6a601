#!/usr/bin/env bash
# End-to-end tests of the `plan` tool: exit codes and messages for bad input, the GPT-3 on 32
# GPUs recommendation, byte-identical --json, --emit-plan feeding `simulate`, and context
# parallelism for a long sequence.
# Usage: plan_cli_test.sh TOOLS_DIR SOURCE_DIR   (registered with CTest by CMakeLists.txt)
set -u
tools="$1"; src="$2"
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

plan="$tools/plan"
expect 2 "missing --model" -- "$plan" --gpus 8
expect 2 "unknown option '--frobnicate'" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --frobnicate
expect 2 "--gpus: value 0 is out of range" -- "$plan" --model "$src/models/tiny.json" --gpus 0
expect 2 "--gpus: 'lots' is not an integer" -- "$plan" --model "$src/models/tiny.json" --gpus lots
expect 2 "--allocator: unknown value 'tlsf' (expected one of: pytorch-caching, pytorch-expandable-segments, paddle-auto-growth)" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --allocator tlsf
expect 6 "cannot read" -- "$plan" --model "$tmp/absent.json" --gpus 8
printf '{"name": "x", "num_layers": 4,' > "$tmp/broken.json"
expect 3 "broken.json: malformed JSON at byte" -- "$plan" --model "$tmp/broken.json" --gpus 8
printf '{"name":"x","num_layers":0,"hidden_size":64,"num_attention_heads":4,"ffn_hidden_size":256,"vocab_size":256,"seq_len":64}' > "$tmp/zero.json"
expect 3 "field 'num_layers': value 0 is out of range" -- "$plan" --model "$tmp/zero.json" --gpus 8
printf '{"name":"x","num_layers":4,"hidden_size":64,"num_attention_heads":4,"ffn_hidden_size":256,"vocab_size":256,"seq_len":64,"colour":"blue"}' > "$tmp/unknown.json"
expect 3 "unknown field 'colour'" -- "$plan" --model "$tmp/unknown.json" --gpus 8
expect 3 'unknown GPU "V100"' -- "$plan" --model "$src/models/tiny.json" --gpus 8 --gpu V100
# Volta: fp16 by default (no bf16 tensor cores), DGX-2's 16 GPUs per node; bf16 asked is refused.
expect 0 "2 nodes x 16 V100-32GB (32 GB, 125 TFLOP/s fp16)" -- "$plan" --model "$src/models/gpt2-1.5b.json" --gpus 32 --gpu V100-32GB --top 1
expect 4 "precision bf16: V100-16GB has no bf16 rate" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --gpu V100-16GB --precision bf16
# A board power limit: the die's peaks at that power, or an error naming the value.
expect 0 "1 node x 8 B200-192GB (180 GB, 1833 TFLOP/s bf16)" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --gpu B200-192GB --power-limit-w 750 --top 1
expect 2 "--power-limit-w: power limit 300 W on A100-80GB: no peaks of its die" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --gpu A100-80GB --power-limit-w 300
expect 2 "--power-limit-w: power limit 1500 W on H100-80GB: outside 400-700 W" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --power-limit-w 1500
expect 2 "--power-limit-w: 'hot' is not a number" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --power-limit-w hot
expect 3 "is not a multiple of --gpus-per-node=8" -- "$plan" --model "$src/models/tiny.json" --gpus 12
expect 3 "exceeds max_position_embeddings=1024" -- "$plan" --model "$src/models/gpt2-124m.json" --gpus 8 --seq-len 4096
expect 2 "--precision: unknown value 'fp8'" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --precision fp8
expect 2 "--grad-precision: unknown value 'bf16' (expected one of: compute, fp32)" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --grad-precision bf16
# Megatron-LM's fp32 gradients: 18 bytes per parameter of model states instead of 16.
expect 0 "need 98.2 GB per GPU" -- "$plan" --model "$src/models/gpt3.json" --gpus 32 --grad-precision fp32

# GPT-3 175B on 32 x 80 GB: nothing fits, say so, recommend offload with its cost.
expect_each 0 "Nothing fits in GPU memory" "need 87.3 GB per GPU" "Smallest GPU count that fits without offload" \
  "The offload costs" -- "$plan" --model "$src/models/gpt3.json" --gpus 32
expect 0 "Whole run:" -- "$plan" --model "$src/models/gpt3.json" --gpus 32 --tokens 3e11
# The seed's 32 GPUs as 8 nodes x 4, from a cluster file.
printf '{"gpu": "A100-80GB", "num_nodes": 8, "gpus_per_node": 4}' > "$tmp/cluster.json"
expect 0 "8 nodes x 4 A100-80GB" -- "$plan" --model "$src/models/llama3-8b.json" --cluster "$tmp/cluster.json"
expect 2 "cannot be combined" -- "$plan" --model "$src/models/llama3-8b.json" --cluster "$tmp/cluster.json" --gpus 8

# Hugging Face MoE/MLA configs: DeepSeek-V3 on 256 GPUs with its dense layers and latent
# attention named; a config's long max_position_embeddings as the sequence is said on stderr;
# encoders are refused naming the field.
expect_each 0 "671.03B parameters (37.55B active)" "3 dense layers" -- \
  "$plan" --model "$src/models/hf-deepseek-v3-config.json" --seq-len 4096 --gpus 256 --top 3
expect 0 "note: training sequence length 163840 is the model's max_position_embeddings" -- "$plan" --model "$src/models/hf-deepseek-v3-config.json" --gpus 256 --top 1
expect 3 "field 'model_type': value \"bert\" is an encoder" -- "$plan" --model "$src/tests/data/hf/bert-base-uncased-config.json" --gpus 8

# Byte-identical --json, and the emitted plan runs through simulate.
"$plan" --model "$src/models/hf-llama3.1-8b-config.json" --seq-len 8192 --gpus 16 --json --emit-plan "$tmp/best.json" > "$tmp/a.json" 2>&1
"$plan" --model "$src/models/hf-llama3.1-8b-config.json" --seq-len 8192 --gpus 16 --json > "$tmp/b.json" 2>&1
if cmp -s "$tmp/a.json" "$tmp/b.json" && grep -q '"schema": "trainplan.plan_report/1"' "$tmp/a.json"; then
  passed=$((passed + 1))
else
  echo "FAIL: plan --json is not byte-identical across runs (or lacks its schema)"; failures=$((failures + 1))
fi
expect 0 "step time" -- "$tools/simulate" --model "$src/models/hf-llama3.1-8b-config.json" --seq-len 8192 --gpus 16 --plan "$tmp/best.json"
expect 4 "the plan needs tp*" -- "$tools/simulate" --model "$src/models/hf-llama3.1-8b-config.json" --seq-len 8192 --gpus 32 --plan "$tmp/best.json"

# Context parallelism: Llama 3 8B at 131072 tokens on 16 GPUs is recommended a cp > 1 plan, whose
# table shows the cp column; the emitted plan simulates with its cp group.
out="$("$plan" --model "$src/models/llama3-8b.json" --seq-len 131072 --gpus 16 --emit-plan "$tmp/cp.json" 2>&1)"
if grep -Eq '^Recommendation: tp=[0-9]+ cp=[0-9]+ pp=' <<<"$out" && grep -Eq '^ +# +tp +cp +pp ' <<<"$out" &&
   grep -q '"cp":' "$tmp/cp.json"; then
  passed=$((passed + 1))
else
  echo "FAIL: plan at 131072 tokens recommends no cp > 1 plan:"; echo "$out" | head -20; failures=$((failures + 1))
fi
expect 0 "cp s/exp" -- "$tools/simulate" --model "$src/models/llama3-8b.json" --seq-len 131072 --gpus 16 --plan "$tmp/cp.json"
expect 4 "the plan needs tp*cp*pp*dp" -- "$tools/simulate" --model "$src/models/llama3-8b.json" --seq-len 131072 --gpus 32 --plan "$tmp/cp.json"
# FP8: refused on a GPU without FP8 tensor cores, naming it; on H100 every candidate says fp8.
expect 4 "fp8: A100-80GB has no FP8 tensor-core rate" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 8 --gpu A100-80GB --fp8
expect 0 "Recommendation: tp=" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 8 --fp8 --emit-plan "$tmp/fp8.json"
if grep -q '"fp8": true' "$tmp/fp8.json"; then passed=$((passed + 1)); else echo "FAIL: plan --fp8 emitted no fp8 plan"; failures=$((failures + 1)); fi
# The FP8 recipe as Transformer Engine under Megatron-Core runs it reaches the emitted plan;
# without --fp8 it is a usage error naming the flag, and an unknown scaling names the choices.
expect 0 "Recommendation: tp=" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 8 --fp8 --fp8-scaling delayed --fp8-weight-cache --emit-plan "$tmp/fp8te.json"
if grep -q '"fp8_scaling": "delayed"' "$tmp/fp8te.json" && grep -q '"fp8_weight_cache": true' "$tmp/fp8te.json"; then passed=$((passed + 1)); else echo "FAIL: plan --fp8-scaling delayed --fp8-weight-cache emitted neither field"; failures=$((failures + 1)); fi
expect 2 "--fp8-scaling describes FP8 casts and needs --fp8" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 8 --fp8-scaling delayed
expect 2 "--fp8-weight-cache describes FP8 casts and needs --fp8" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 8 --fp8-weight-cache
expect 2 "--fp8-scaling: unknown value 'rowwise' (expected one of: current, delayed, block, nvfp4)" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 8 --fp8 --fp8-scaling rowwise
# NVFP4 (Transformer Engine's NVFP4BlockScaling) on a B200 reaches the emitted plan; a part
# without FP4 tensor cores is refused naming the recipe and the GPU.
expect 0 "Recommendation: tp=" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 8 --gpu B200-192GB --fp8 --fp8-scaling nvfp4 --emit-plan "$tmp/nvfp4.json"
if grep -q '"fp8_scaling": "nvfp4"' "$tmp/nvfp4.json"; then passed=$((passed + 1)); else echo "FAIL: plan --fp8-scaling nvfp4 emitted no nvfp4 plan"; failures=$((failures + 1)); fi
expect 4 "fp8_scaling nvfp4: H100-80GB has no FP4 tensor-core rate" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 8 --gpu H100-80GB --fp8 --fp8-scaling nvfp4
# --cp-comm: how the candidates' context parallelism exchanges K and V (Llama 3 8B at 131072
# tokens on 64 GPUs picks cp > 1); the emitted plan names it; a bad form is a usage error.
sed 's/"seq_len": 8192/"seq_len": 131072/' "$src/models/llama3-8b.json" > "$tmp/llama128k.json"
expect 0 "cp-comm=torch-allgather" -- "$plan" --model "$tmp/llama128k.json" --gpus 64 --cp-comm torch-allgather --emit-plan "$tmp/cp.json"
if grep -q '"cp_comm": "torch-allgather"' "$tmp/cp.json"; then passed=$((passed + 1)); else echo "FAIL: plan --cp-comm torch-allgather did not emit cp_comm"; failures=$((failures + 1)); fi
expect 2 "--cp-comm: unknown value 'ring' (expected one of: all-gather, p2p, a2a, torch-allgather, torch-alltoall)" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 8 --cp-comm ring
expect 2 "--max-cp: value 0 is out of range" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --max-cp 0
out="$("$plan" --model "$src/models/llama3-8b.json" --seq-len 131072 --gpus 16 --max-cp 1 2>&1)"
if grep -q "cp above --max-cp" <<<"$out" && ! grep -Eq '^Recommendation: tp=[0-9]+ cp=' <<<"$out"; then
  passed=$((passed + 1))
else
  echo "FAIL: plan --max-cp 1 still recommends context parallelism"; failures=$((failures + 1))
fi

# Searching cp must not make the recommendation worse by the simulator's measure: Llama 3 70B
# on 64 GPUs (the README's example), the emitted plans with and without cp, simulated. Ties
# are off here (--tie-tolerance 0): this checks the search, not the tie rule.
"$plan" --model "$src/models/llama3-70b.json" --gpus 64 --tie-tolerance 0 --emit-plan "$tmp/70b_cp.json" > /dev/null 2>&1
"$plan" --model "$src/models/llama3-70b.json" --gpus 64 --tie-tolerance 0 --max-cp 1 --emit-plan "$tmp/70b_flat.json" > /dev/null 2>&1
with_cp="$("$tools/simulate" --model "$src/models/llama3-70b.json" --gpus 64 --plan "$tmp/70b_cp.json" 2>&1 | awk '/^step time/{print $3}')"
without="$("$tools/simulate" --model "$src/models/llama3-70b.json" --gpus 64 --plan "$tmp/70b_flat.json" 2>&1 | awk '/^step time/{print $3}')"
if [ -n "$with_cp" ] && [ -n "$without" ] && awk -v a="$with_cp" -v b="$without" 'BEGIN { exit !(a <= b * 1.001) }'; then
  passed=$((passed + 1))
else
  echo "FAIL: with cp searched the 70B plan simulates at '$with_cp' s, without at '$without' s"
  failures=$((failures + 1))
fi

# --no-zero-bubble: the search leaves zb-h1 and zb-v out; with them, both are among the ranked
# candidates of tiny on 16 GPUs.
zb_on="$("$plan" --model "$src/models/tiny.json" --gpus 16 --top 1000 --simulate-top 0 --json 2>/dev/null)"
zb_off="$("$plan" --model "$src/models/tiny.json" --gpus 16 --top 1000 --simulate-top 0 --json --no-zero-bubble 2>/dev/null)"
if grep -q '"zb-v"' <<<"$zb_on" && grep -q '"zb-h1"' <<<"$zb_on" && grep -q '"1f1b"' <<<"$zb_off" &&
   ! grep -q '"zb-' <<<"$zb_off"; then
  passed=$((passed + 1))
else
  echo "FAIL: --no-zero-bubble: zb schedules with it on: $(grep -o '"zb-[hv1]*"' <<<"$zb_on" | sort | uniq -c | tr '\n' ' '), off: $(grep -o '"zb-[hv1]*"' <<<"$zb_off" | sort | uniq -c | tr '\n' ' ')"
  failures=$((failures + 1))
fi

# Hybrid sharding: Llama 3 8B on 128 GPUs is recommended a plan whose ZeRO shards over 16 of
# its 128 replicas ("zero=2/16"); it simulates no slower than the best plan without hybrid
# sharding, and the emitted plan names its shard group (ties off, as above).
out="$("$plan" --model "$src/models/llama3-8b.json" --gpus 128 --tie-tolerance 0 --emit-plan "$tmp/hsdp.json" 2>&1)"
"$plan" --model "$src/models/llama3-8b.json" --gpus 128 --tie-tolerance 0 --no-hybrid-shard --emit-plan "$tmp/fsdp.json" > /dev/null 2>&1
hsdp="$("$tools/simulate" --model "$src/models/llama3-8b.json" --gpus 128 --plan "$tmp/hsdp.json" 2>&1 | awk '/^step time/{print $3}')"
fsdp="$("$tools/simulate" --model "$src/models/llama3-8b.json" --gpus 128 --plan "$tmp/fsdp.json" 2>&1 | awk '/^step time/{print $3}')"
if grep -Eq '^Recommendation: .* zero=[123]/[0-9]+ ' <<<"$out" && grep -q '"zero_shard_size":' "$tmp/hsdp.json" &&
   ! grep -q '"zero_shard_size":' "$tmp/fsdp.json" &&
   awk -v a="$hsdp" -v b="$fsdp" 'BEGIN { exit !(a != "" && b != "" && a <= b * 1.001) }'; then
  passed=$((passed + 1))
else
  echo "FAIL: hybrid sharding: recommended at '$hsdp' s against '$fsdp' s without it:"; echo "$out" | grep Recommendation
  failures=$((failures + 1))
fi

# The expected error band (validation/error_band.h) and ties: printed and in the JSON; the
# tolerance is checked; a measured hardware profile gets no band from published runs.
expect_each 0 "expected error: measured step time" "held-out runs on H100" -- "$plan" --model "$src/models/llama3-8b.json" --gpus 64
expect 0 '"error_band"' -- "$plan" --model "$src/models/llama3-8b.json" --gpus 64 --json
expect 0 "they are tied" -- "$plan" --model "$src/models/llama3-70b.json" --gpus 64 --tie-tolerance 0.2
expect 2 "--tie-tolerance: '2' is not a number in [0, 1]" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --tie-tolerance 2
expect 2 "--tie-tolerance: 'wide' is not a number in [0, 1]" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --tie-tolerance wide
# Among tied candidates a pipeline the published runs measured goes first (docs/validation.md):
# GPT-3 on 1,024 A100 picks interleaving at pp 4 over DualPipe, which no A100 run measured; with
# --no-prefer-measured it picks DualPipe and says its figures are an extrapolation. Both print
# the MFU a run like the pick measures under the band.
gpt3_1024=("$plan" --model "$src/models/gpt3.json" --gpus 1024 --gpu A100-80GB --global-batch 1536)
expect_each 0 "Its pipeline (interleaved at pp 4 or deeper) was measured by" \
  "whose pipeline published runs measured, the one with the most memory headroom" "Runs like this measure" -- "${gpt3_1024[@]}"
expect_each 0 "Its pipeline (dualpipe at pp 32) was measured by none of the" "Runs like this measure" -- "${gpt3_1024[@]}" --no-prefer-measured
expect_each 0 '"measured_runs": 0' '"measured_mfu_band"' -- "${gpt3_1024[@]}" --no-prefer-measured --json
expect 2 "option '--no-prefer-measured' takes no value" -- "$plan" --model "$src/models/tiny.json" --gpus 8 --no-prefer-measured=yes
expect 2 "--write-residuals needs --cross-validate" -- "$tools/simulate" --published "$src/validation/corpus/published_runs.json" --write-residuals "$tmp/r.json"
expect 2 "--write-residuals needs --published" -- "$tools/simulate" --write-residuals "$tmp/r.json"
expect 0 "expected error: measured step time" -- "$tools/simulate" --model "$src/models/llama3-70b.json" --gpus 64 --plan "$tmp/70b_flat.json"

echo "$passed passed, $failures failed"
[ "$failures" = 0 ]
