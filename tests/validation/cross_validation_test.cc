// The accuracy headline as a ratchet: leave-one-family-out cross-validation over the whole corpus
// (validation/corpus/published_runs.json), as `simulate --published ... --cross-validate` runs
// it. Fails when the cross-validated median or p90 |throughput error| rises above its value when
// the ratchet was last tightened, and when the committed residuals
// (validation/corpus/error_residuals.json, the error band's source) are stale.
// Tighten the ratchets as the errors fall; never loosen one without saying why in the commit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "validation/error_band.h"

namespace trainplan {
namespace {

// 2026-11-24: 10.8% over 142 runs in 21 families (bench/results/published-2026-11-24/; it was
// 12.5% before torchtitan's FSDP under pipeline parallelism was read as it runs). Loosened the
// same day to 11.8%, said in the commit and in that folder's NOTES.md: Megatron-family runs read
// at the ZeRO stages their framework offers (not ZeRO-2/3), MoE token permutations and
// node-limited all-to-alls cut the p90 from 60.6% to 52.3% and the presets' median from 11.4%
// to 10.7%, but moved the constants the held-out folds choose (megatron-lm's H100 README family
// 10.2% -> 16.3%). The p90 is ratcheted from then on too.
// 2026-11-25: loosened to 12.6% (12.5% measured), said in bench/results/published-2026-11-25/
// NOTES.md: torchtitan's op-level checkpoint read as it runs cut the held-out memory median
// from 30.8% to 28.9% (torchtitan H200 75% -> 3%), but the simulator hides its recompute behind
// ZeRO-3 gathers queued after reduce-scatters while it charges the layer policy in full
// (torchtitan A100 5.6% -> 8.4%), and the folds' constants moved. Memory is ratcheted from then.
// The same day Megatron-Bridge's scripts read as they run (TP overlap, bf16 gradient reduction)
// brought it to 11.7% and the p90 to 50.5%: tightened to 11.8% and 51%. Then the SMs that
// Transformer Engine's overlap kernels take from the GEMM beside them: 11.25% and 48.8%,
// tightened to 11.3% and 49%. Then PyTorch's eager loss (12 bytes per logit) took the memory
// median from 28.9% to 9.9%, a 28-run NVIDIA dgxc family joined the corpus, and FlashAttention-2's
// published rates timed the runs whose source pins it: 9.58% and 46.2% over 170 runs, tightened
// to 9.7% and 47%, memory to 10.5% (bench/results/published-2026-11-25b/NOTES.md).
// 2026-11-25 (third study): loosened to 11.6%, 45% and 18%, said in
// bench/results/published-2026-11-25c/NOTES.md. Two new families joined (34 runs): nanotron's
// Ultra-Scale Playbook, held out at 24% (+45%, memory 34%), and torchtitan's async-TP runs. On
// that 204-run corpus the old model measured 11.8%, 48.5%, memory 17.6%; the FP8 recipe as
// frameworks run it (delayed scaling, weight casts cached over micro-batches) brings it to
// 11.49%, 44.3%, memory 17.6%. The ratchets hold the larger corpus's figures from here.
// 2026-11-25 (fourth study, bench/results/published-2026-11-25d/): 25 runs in three new families
// (Zero Bubble's pipelines with memory, PyTorch FSDP on A100 and H100) took the old model to
// 10.67%, 44.3%, memory 10.1% over 229 runs; each GPU generation's GEMMs then taken as one share
// of its measured maximum achievable matmul rate (core/cluster_spec.h) to 9.27%, 42.8%:
// tightened to 9.4%, 43.5% and 10.5%.
// 2026-11-25 (fifth study, bench/results/published-2026-11-25e/): the Megatron-LM 2021 paper's
// DeepSpeed ZeRO-3 rows replayed with the per-tensor gathers their DeepSpeed version made
// (Plan::zero3_gather): 9.26%, 37.8%, +8.0%: p90 tightened to 38.5%. Then 18 runs in six new
// families joined (bench/results/published-2026-11-25f/: torchtitan's 405B rows, torchao's float8
// and MX benchmarks with memory, eager among them, OLMo-core, MLPerf v4.0 GPT-3), harder than the
// median: 9.51%, 39.6%, memory 10.54% over 247 and 49 runs (9.66%, 40.9%, 10.54% before the
// ZeRO-3 change). Loosened to hold the larger corpus's figures: 9.6%, 40.0%, 10.6%.
// 2026-11-25 (seventh study, bench/results/published-2026-11-25g/): eager PyTorch's unfused
// norm, rotary and SwiGLU kernels and their saved intermediates (Plan::elementwise eager) on the
// five runs whose sources say compile was off: 8.53%, 37.8%, memory 9.79% over 247 and 49 runs:
// tightened to 8.6%, 38.0%, 10.0%.
// 2026-11-25 (bench/results/published-2026-11-25-nanotron/): nanotron 0.5's framework
// behaviours from its code on the Ultra-Scale Playbook rows (Plan::zero1_collectives per-rank,
// ddp_bucket_copy, cross_entropy cast, elementwise eager-swiglu): 7.84%, 36.8%, memory 9.47%
// over 247 and 49 runs (on that branch alone).
// 2026-11-25 (bench/results/published-2026-11-25h/, the session's merge): nanotron's behaviours
// above, 23 runs in nine new families (MLPerf Training v3.1 / v4.1 / v5.0 / v5.1 with their
// configs, Paxml), the Megatron-Bridge entries corrected from their recipes, the Llama 3 herd's
// interleaved schedule, torchtitan's FSDP behaviours (Plan::fp8_all_gather,
// zero3_recompute_gather): 9.2%, 31.7%, +6.8%, memory 9.5% over 270 and 49 runs. The median
// rose: the new runs mostly miss by more than the old median (8.66% with them alone,
// published-2026-11-25-corpus5/), and the folds' GEMM share sits on a tie between 0.9 and 0.95
// (the fit over all runs is 0.9; 15 of 42 folds choose 0.95, which moves each such family's
// held-out error away from zero where it was predicted too fast). Loosened to hold it: 9.3%;
// p90 and memory tightened: 32.0%, 9.6%.
// 2026-11-25 (bench/results/published-2026-11-25-corpus6/): 10 runs in four new families
// (MLPerf v3.0 GPT-3 by NVIDIA and CoreWeave, Cisco's v5.1 Llama 3.1 8B, the Megatron MoE Model
// Zoo's Qwen3-235B) and the v4.0 GPT-3 entries' fp8_weight_cache from their Megatron-Core:
// 8.41%, 32.08%, +5.8%, memory 9.47% over 278 and 49 runs. Every fold now chooses share 0.9 (the
// new families, predicted 20-43% fast, end the tie), which brings the median down; the p90 rises
// because two new runs miss by more than it (Cisco's TP 2 +42.6%, the Model Zoo's EP 8 row
// -61.7%, whose expert-parallel group the simulator places across nodes). Median tightened to
// 8.5%; p90 loosened to 32.5% to hold them; memory kept.
// 2026-11-25 (bench/results/published-2026-11-25i/, the session's merge): corpus6's runs above,
// DeepSpeed's BF16_Optimizer behaviours on BLOOM (Plan::zero1_collectives all-reduce,
// grad_accumulation_pass) and the PipelineEngine's reduction after the flush on every
// Megatron-DeepSpeed row, DeepSeek-V3 with its DualPipe, fms-fsdp's kept gathers: 8.31%,
// 30.75%, +5.7%, memory 9.47% over 278 and 49 runs; all 46 folds choose share 0.9 and memory
// 0.45 (the presets). Tightened: median 8.4%, p90 31.0%; memory kept.
// 2026-12-02 (bench/results/published-2026-12-02-merged/, the session's merge): nanotron's
// ZeRO-1 path, 28 runs in new families (corpus7: MLPerf v5.0/v5.1 H200, InternEvo, NeMo
// AutoModel, MaxText, llm-foundry's large-scale rows), FSDP's copies and prefetch, folded expert
// layouts, context parallelism's communication forms (cp_comm), and the contention of
// collectives with compute (core/cost/contention.h, replacing the fixed TP-overlap and DualPipe
// slowdowns): 8.91%, 25.83%, +6.0%, memory 8.52% over 310 and 49 runs. The median is above the
// old ratchet because the corpus grew by 32 runs that miss by more than it (corpus7's 28 alone:
// 11.3%); on the 277 runs both this build and the session's first simulate, the presets'
// median fell 9.26% -> 8.45% and the p90 30.19% -> 25.83%. Median loosened to 9.0% to hold
// the larger corpus; p90 and memory tightened: 26.0%, 8.6%.
// 2026-12-02, second merge (bench/results/published-2026-12-02-final/): 16 runs in three new
// families (corpus8: Megatron-LM's 2020 README tables on V100 and A100, dgxc v25.02 MaxText on
// H100; all predicted too slow, held out 12.95% / -13.6%), FlashAttention-2's B200 rates for
// the torchao MX rows, V100's measured matmul rate (DeepBench): 9.91%, 25.39%, +5.1%, memory
// 8.52% over 326 and 49 runs. The median is above the old ratchet for two reasons: the new runs
// miss by more than the rest, and the folds' constants moved. With them in the pool, the fit
// over the other families leaves the presets (0.9, 0.45) in 52 of 55 folds, for their near-tie
// (0.85, 0.6; 5 folds 0.8, 0.6); on the 310 runs of the first merge the held-out figures went 8.91%
// / 25.83% / +6.00% -> 9.65% / 25.22% / +6.03% (11 families better, 24 worse,
// published-2026-12-02-final/NOTES.md). Median loosened to 10.0% to hold the larger corpus;
// p90 tightened to 25.5%; memory kept.
// 2026-12-02, third merge (bench/results/published-2026-12-02-third/): 9 runs in two new
// families (corpus9: TinyLlama on lit-gpt, dgxc v25.04 NeMo 2.x), PyTorch's async TP as its own
// mechanism (Plan::tp_comm_overlap_impl torch-async), Megatron-Core's deferred head weight
// gradients (defer_embedding_wgrad), the MaxText and Paxml entries read from their XLA flags
// and remat policies: 9.56%, 23.68%, +3.5%, memory 8.52% over 335 and 49 runs. 40 of 57 folds
// choose share 0.8 and memory 0.6, 17 share 0.85. Median tightened to 9.7%. The p90 is kept at
// 25.5%: its fall is a rank crossing a gap (the 302nd of 335 errors is 23.7%, the 303rd 25.7%);
// on the 326 runs both studies hold it went 25.39% -> 25.66% (residuals_compare.txt). Memory
// kept.
// 2026-12-03 (bench/results/corpus10-2026-12-03/): Llama 3 405B's FSDP read as ZeRO-1 and the
// FlashAttention repository's training table (5 runs, a new family): 9.54%, 23.29%, +3.7%, memory
// 8.52% over 340 and 49 runs. 35 of 58 folds choose share 0.8, 23 share 0.85; each change flipped
// about ten folds between the two (the near-tie), moving families both ways. Median kept at 9.7%
// (it moves by some 0.2 points with such flips); p90 tightened to 25.0%; memory kept.
// 2026-12-03, later (bench/results/foldcrit-2026-12-03/): three families more (NeMo 25.02 on B200
// and H100, the FlashAttention-2 paper's Table 1; 354 runs) and the folds weighing each family
// as one, a criterion written down before it was run (commit 4af2b86): 8.77%, 21.73%, +0.8%,
// memory 8.5% over 351 and 49 runs (the old criterion on the same runs: 9.1%, 24.0%, +4.8%).
// Every fold chooses share 0.85, memory 0.45. Median tightened to 9.0%, p90 to 22.5%; memory
// kept.
// 2026-12-03, later still (bench/results/a100fa2-2026-12-03/): FlashAttention-2's published A100
// rates and the 16 A100 entries that run it: 8.58%, 21.73%, +1.2%; the four families 13.7% ->
// 0.8%, 12.6% -> 8.4%, 4.2% -> 2.3%, 8.8% -> 2.9%, three folds moved to (0.8, 0.6). Median
// tightened to 8.8%; p90 and memory kept.
// 2026-12-04 (bench/results/nccl-2026-12-04/): NCCL's algorithm and protocol choice and its
// tuning model's hop latencies (specified in validation/corpus/NOTES.md before it was built):
// 8.37%, 21.11%, +0.4%, memory unchanged; all 61 folds choose (0.85, 0.45). Median tightened to
// 8.6%, p90 to 21.8%; memory kept.
// 2026-12-04, later (bench/results/corpus2509-2026-12-04/): Megatron-Bridge's 25.09 MoE rows
// (five runs, no model change): 8.38%, 21.52%, +0.7% over 356 runs, memory unchanged; all folds
// choose (0.85, 0.45). Ratchets kept.
// 2026-12-04, later still (bench/results/corpus2612-2026-12-04/): Lambda Labs' FlashAttention-2
// benchmark (four runs, two new families, no model change): 8.48%, 22.99%, +0.9% over 360 runs,
// memory unchanged; 62 of 63 folds choose (0.85, 0.45). The p90 is loosened to 23.0% (the ninth
// loosening): the two H100 rows miss by +30% held out, and the nearest-rank p90 of 360 runs lands
// on the next value of a steep tail (21.5% -> 23.0%). Median and memory kept.
// 2026-12-05 (bench/results/foldcrit2-2026-12-05/): the folds' criterion weighs the p90 (the
// larger of median/8% and p90/20%; twenty-second pass), then the nineteenth and twenty-first
// passes under it: 8.32%, 22.99%, +1.1% over 360 runs, memory unchanged; all 63 folds choose
// (0.85, 0.45). Median tightened to 8.4%; p90 and memory kept.
// 2026-12-05, later (bench/results/scattergather-2026-12-05/): Megatron-LM's pipeline
// scatter/gather for the 16 entries whose code ran it (twenty-third pass): 8.19%, 22.99%, +1.2%
// over 360 runs, memory unchanged; all 63 folds choose (0.85, 0.45). Median tightened to 8.3%;
// p90 and memory kept.
// 2026-12-05, later still (bench/results/corpus-flagperf-2026-12-05/): FlagPerf's NVIDIA LLM
// cases (seven runs, three new families, no model change; twenty-fourth pass): 8.13%, 22.99%,
// +1.2% over 367 runs; all folds choose (0.85, 0.45). Median tightened to 8.2%. Memory 8.52% over
// 49 -> 8.89% over 56: the seven rows publish device memory in use (tool not stated), which the
// model under-predicts by 7-32%; the memory ratchet is loosened to 9.0% (its first loosening),
// for new data, not for a model change. p90 kept.
// 2026-12-05, twenty-sixth pass (bench/results/deepspeed-grads-2026-12-05/): DeepSpeed's ZeRO-2/3
// gradients read in the model's precision (engine.py get_data_types, a rule from the code) and
// FlagPerf's memory converted from GiB: 8.13%, 23.03%, +1.3% over 367 runs; memory 9.03% over 56.
// The FlagPerf DeepSpeed rows improve (-14.0% -> -6.1%, -9.1% -> -3.6%), the SC21 ZeRO-3 rows,
// which the same rule reads, move further too fast (family p90 19.8% -> 27.9%). p90 loosened to
// 23.1% and memory to 9.1% for a source-backed reading and a unit correction; median kept.
// 2026-12-05, with the twenty-fifth pass (bench/results/cp-kvexpand-2026-12-05/): torchtitan's
// context-parallel rows move K and V at query-head width (Plan::cp_kv_expanded, torchtitan
// 9dec370 repeat_kv): 8.13%, 21.52%, +1.2% over 367 runs, memory 9.03%. p90 tightened to 21.6%.
// 2026-12-05, twenty-seventh pass (bench/results/attention-floor-2026-12-05/): the generic fused
// attention floored by FlashAttention-2's published rate at its length (head dim 128 and up):
// 7.58%, 21.52%, +1.9% over 367 runs, memory 9.03%; all 66 folds choose (0.85, 0.45). Median
// tightened to 7.7%.
// 2026-12-05, twenty-eighth pass (bench/results/moe-own-rows-2026-12-05/): Megatron-Core's
// all-to-all dispatcher routing each TP rank's own rows under the carved layout with SP:
// 7.34%, 20.62%, +2.2% over 367 runs, memory 9.03%; all 66 folds choose (0.85, 0.45). Median
// tightened to 7.4%, p90 to 20.7%.
// 2026-12-06, thirtieth and thirty-first passes with three FlagPerf FlagScale rows
// (bench/results/deepep-corpus-2026-12-06/): board power limits (the 750 W B200 rows, the 500 W
// H100 preset) and DeepEP's per-node dispatch: 7.37%, 20.20%, +2.0% over 370 runs, memory 9.30%
// over 59; all 67 folds choose (0.85, 0.45). p90 tightened to 20.3%; memory loosened to 9.4% for
// the three new rows' memory (device memory in use, under-predicted 15-17%), not a model change.
// 2026-12-06, thirty-second and thirty-third passes (bench/results/mlperf-corpus-2026-12-06/):
// four MLPerf Training v5.1 Llama 3.1 8B FP8 rows on B200 from three submitters the corpus did
// not hold (Verda, Oracle, Dell; no model change): every one of the 70 folds now chooses (0.8,
// 0.75) instead of (0.85, 0.45): 7.85%, 22.54%, +5.6% over 374 runs, memory 9.30% over 59 (at the
// presets over the same runs: 6.9%, 21.6%, +2.7%). The folds' family-weighted p90 sits on a gap
// (validation/corpus/NOTES.md, twenty-ninth and thirty-fourth passes); three small families near
// -24% move it. Median loosened to 7.9% and p90 to 22.6% for new data, not for a model change;
// memory kept. Then cuDNN's published B200 attention rates named on the nine MLPerf v5.1 B200
// entries whose configs leave Transformer Engine's cuDNN fused attention on (thirty-fourth pass,
// bench/results/b200-cudnn-2026-12-06/): 7.75%, 22.54%, +5.7% over 374 runs, memory 9.30%; only
// the four v5.1 B200 families move. Median 7.8%.
// 2026-12-06, thirty-fifth pass (bench/results/foldmean-2026-12-06/): the folds choose by the
// family-weighted mean |error| instead of the larger of median/8% and p90/20%, judged by
// stability on four corpora a few rows apart (bench/scripts/cv_criteria.py): 7.37%, 20.47%, +1.9%
// over 374 runs, memory 9.30%; all 70 folds choose (0.85, 0.45). Median tightened to 7.4%, p90
// to 20.5%; memory kept.
// 2026-12-06, forty-second pass (bench/results/corpus-yafsdp-2026-12-06/): YaFSDP's README
// table of PyTorch FSDP1 step times on A100 (ten runs, one new family, no model change): 7.31%,
// 25.41%, +2.0% over 384 runs, memory unchanged; all folds choose (0.85, 0.45). The four rows at
// 2,048 tokens are held out at +33% to +41%, communication-bound under the A100 preset's network
// (the source does not state its own); they land above the gap between 20.6% and 25.3% on which
// the p90 sat, so the p90 is loosened to 25.5% for new data, not for a model change. Median kept.
// 2026-12-07, forty-fourth pass (bench/results/corpus-2026-12-07b/): 24 runs, no model change:
// ten more scales of five MLPerf families the corpus held (every scale with result logs and a
// configuration), FlagPerf's PaddlePaddle LLaMA-1 table on one DGX A100 (12 rows, a framework
// the corpus did not hold) and a DeepSpeed AutoTP / DTensor TP benchmark on 8 H100 (2 rows, held
// out +102% and +229%). 7.31%, 25.74%, +2.7% over 409 runs; all folds choose (0.85, 0.45).
// Memory 9.30% over 59 -> 11.05% over 71: the twelve Paddle rows publish device memory in use
// (nvidia-smi's, as FlagPerf's other rows), which the model, predicting allocated bytes, puts
// 11-49% under. p90 loosened to 25.8% and memory to 11.1% for new data, not for a model change;
// median kept.
// 2026-12-07, forty-seventh pass (bench/results/nvfp4-2026-12-07/): NVFP4 linear GEMMs and FP8
// attention as plan fields, and nine MLPerf v5.1 Llama 3.1 8B NVFP4 runs on B200 (three new
// families: Nebius, Supermicro, Lenovo; one more scale each of Oracle and Dell), held out at
// -3.8% to +6.2%; every earlier entry byte-identical at the presets. 8.56%, 25.41%, +1.8% over 418
// runs, memory unchanged: 19 of 78 folds now choose (0.8, 0.45), the family-weighted mean being
// nearly flat between 0.8 and 0.85 (13.66% against 13.62%). Median loosened to 8.6% for new data,
// not for a model change; p90 tightened to 25.5%.
// 2026-12-07, forty-ninth pass (bench/results/foldinterp-2026-12-07/): a fold chooses between
// grid points (the vertex of the mean's parabola through the best grid point and its neighbours),
// judged before the replay by stability on seven corpora a few rows apart: a run's held-out error
// moved 0.28 points on average against 1.23 on the grid. No model or corpus change: 7.64%,
// 25.87%, +1.2% over 418 runs, memory unchanged; the folds choose gemm share 0.824-0.832 at
// memory 0.45. Median tightened to 7.7%; p90 loosened to 25.9% (it rises 0.46 points with the
// criterion, which was not chosen by its headline).
// Then the grid's memory axis extended to 0.30 (fiftieth pass, bench/results/gridmem-2026-12-07/),
// registered before it was run to be adopted whatever it gave, so that the range holds the
// LayerNorm measurement (0.35-0.4) it cites: 9.77%, 27.84%, +0.4% over 418 runs, memory
// unchanged. The objective has two near-equal basins, (0.95, 0.30) at 13.56% and (0.85, 0.45) at
// 13.62%: 69 of 78 folds move to the first, at the new edge. Median loosened to 9.8% and p90 to
// 27.9% with the grid, not for a model change.
// 2026-12-07, fifty-first pass (bench/results/memrates-2026-12-07/): memory-bound kernels at
// published rates by kind, direction and implementation (core/cost/memory_kernel_rates.h), and
// the folds choose only the GEMM share (0.747-0.753): 8.53%, 23.52%, +1.9% over 418 runs, memory
// unchanged. Median tightened to 8.6% and p90 to 23.6%.
// Then GB200, GB300 and B300 presets and 22 MLPerf v5.0 / v5.1 Llama 3.1 rows on them (fifty-second
// pass, bench/results/gbpresets-2026-12-07/; nine new families, held out at -21% to +13%, median
// 5.2%): 8.42%, 22.32%, +1.6% over 440 runs. Median tightened to 8.5% and p90 to 22.4%.
// Then Megatron-Bridge's GB200, GB300 and B300 rows (fifty-fourth pass,
// bench/results/mbridge-gb-2026-12-07/; 42 rows, 40 simulated, three new families, held out
// median 13.0%, 8 over 20%; the 440 earlier rows move by at most 0.21 points): 8.55%, 23.08%,
// +1.4% over 480 runs. Median loosened to 8.6% and p90 to 23.1% for new data, not for a model
// change.
// Then the Blackwell Ultra die's own cuDNN attention rates (fifty-fifth pass,
// bench/results/ultra-attention-2026-12-08/): a model change, adopted as registered although the
// headline rose, because the GB300 and B300 rows it speeds up sit in the other families' folds
// and lowered their GEMM share by about 0.0015: 8.68%, 23.20%, +1.3% over 480 runs. Median
// loosened to 8.7% and p90 to 23.3%, for a model change (said, not hidden).
// Then the Megatron-Bridge rows name the cuDNN attention Transformer Engine picks on compute
// capability >= 9.0 (fifty-sixth pass, bench/results/te-cudnn-2026-12-08/): the dense Llama rows
// move from median 15.4% to 7.1%, the MoE rows further (their miss is MoE-specific): 8.71%,
// 23.35%, +2.7% over 480 runs. Median loosened to 8.8% and p90 to 23.4%, for a corpus change
// read from the frameworks' code (said, not hidden).
// Then GPT-OSS's eager clamp and per-expert bias loop as Megatron-Core runs them (fifty-seventh
// pass, bench/results/gptoss-clamp-2026-12-08/; its 9 rows from median 45.7% to 29.1%): 8.67%,
// 23.14%, +2.4% over 480 runs. Median tightened to 8.7% and p90 to 23.2%.
constexpr double kMedianRatchet = 0.087;
constexpr double kP90Ratchet = 0.232;
// Then device memory in use where a source measured it (forty-fifth pass,
// bench/results/device-memory-2026-12-07/): the 22 FlagPerf rows compared with the allocated
// peak plus the CUDA context and NCCL's buffers (device_runtime_bytes, from PyTorch #107667 and
// NCCL #964 / #1685): memory 10.38% over 71, throughput unchanged. Memory tightened to 10.4%.
// Then the allocators' reserve (forty-sixth pass, bench/results/allocator-reserve-2026-12-07/):
// reserved and device figures compared with the allocated peak / 0.85 under PyTorch's caching
// allocator (GMLake's 15% average fragmentation; none where no figure is published: expandable
// segments, Paddle's auto-growth), torchtitan's and torchao's 28 rows read as reserved: memory
// 9.01% over 71, throughput unchanged. Memory tightened to 9.1%.
constexpr double kMemoryMedianRatchet = 0.091;

Json read_json(const std::string& relative) {
  std::ifstream in(std::string(TRAINPLAN_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in.good()) << relative;
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

TEST(CrossValidation, HeadlineWithinRatchetAndResidualsCurrent) {
  const Json corpus = read_json("validation/corpus/published_runs.json");
  std::vector<PublishedRun> mapped;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    auto r = published_run_from_json(corpus[i], "entry " + std::to_string(i));
    if (r.ok()) mapped.push_back(std::move(*r));
  }
  std::vector<const PublishedRun*> runs;
  for (const PublishedRun& r : mapped) runs.push_back(&r);
  ASSERT_GE(runs.size(), 140u);
  const CrossValidation cv =
      cross_validate_published(runs, std::max(1u, std::thread::hardware_concurrency()));
  for (const FamilyStats& f : cv.by_family)
    std::printf("%-60s %6.1f%% %6.1f%% %+6.1f%% (%zu)\n", f.family.c_str(),
                100 * f.throughput.median_abs, 100 * f.throughput.p90_abs,
                100 * f.throughput.mean_signed, f.throughput.count);
  std::printf("cross-validated: median %.2f%%, p90 %.2f%%, mean %+.2f%% over %zu runs "
              "(ratchets %.1f%%, %.1f%%)\n",
              100 * cv.throughput.median_abs, 100 * cv.throughput.p90_abs,
              100 * cv.throughput.mean_signed, cv.throughput.count, 100 * kMedianRatchet,
              100 * kP90Ratchet);
  EXPECT_LE(cv.throughput.median_abs, kMedianRatchet);
  EXPECT_LE(cv.throughput.p90_abs, kP90Ratchet);
  std::printf("held-out memory: median %.2f%% over %zu runs (ratchet %.1f%%)\n",
              100 * cv.memory.median_abs, cv.memory.count, 100 * kMemoryMedianRatchet);
  EXPECT_LE(cv.memory.median_abs, kMemoryMedianRatchet);

  // The committed residuals are these, to rounding.
  const std::vector<FamilyResiduals> fresh = residuals_by_family(runs, cv);
  const std::vector<FamilyResiduals>& committed = corpus_residuals();
  const std::string regenerate =
      "regenerate: simulate --published validation/corpus/published_runs.json --cross-validate "
      "--write-residuals validation/corpus/error_residuals.json";
  ASSERT_EQ(committed.size(), fresh.size()) << regenerate;
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    EXPECT_EQ(committed[i].family, fresh[i].family) << regenerate;
    ASSERT_EQ(committed[i].errors.size(), fresh[i].errors.size()) << fresh[i].family << "; " << regenerate;
    for (std::size_t k = 0; k < fresh[i].errors.size(); ++k)
      EXPECT_NEAR(committed[i].errors[k], fresh[i].errors[k], 1e-6)
          << fresh[i].family << " run " << k << "; " << regenerate;
  }
}

}  // namespace
}  // namespace trainplan
