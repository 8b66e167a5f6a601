import json
d={e['id']:e for e in json.load(open('/work/main/validation/corpus/published_runs.json'))}
M=lambda i: d[i]['model']
C='5776a6d90b4dd8692902ab2eb581369484e19283'; c='5776a6d90b'
SRC="NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (commit %s, 2025-12-10), section '25.11 NeMo Container' / Pre-Training Performance, System: DGX-GB300, table line %d"
FAM={"source":"megatron-bridge-perf-summary","framework":"nemo","gpu_generation":"GB300"}
W="scripts/performance/configs/"
def ic(n):
    r=min(n,64)
    return ("GB300 NVL72 (NVLink domain of 72 GB300 GPUs, 4 per compute tray; NVLink5 1800 GB/s per GPU + NVSwitch; ConnectX-8 800 Gb/s scale-out per the MLPerf v5.1 GB300 systems); table does not say how many racks the job used (gpus_per_node = min(GPUs, 64), as NVIDIA's MLPerf GB300 systems: 64 GPUs per rack)")
FP8CS="Precision key fp8_cs -> bf16_with_fp8_current_scaling_mixed() with first_last_layers_bf16 = False (scripts/performance/utils/precision.py:28-32@5776a6d90b). fp8_scaling current: the table's precision FP8-CS (Transformer Engine Float8CurrentScaling). fp8_weight_cache: Megatron-Core's Transformer Engine layers pass is_first_microbatch (added 2024-01-10, Megatron-LM commit 3c44fb9f61; megatron/core/extensions/transformer_engine.py), so TE casts each weight to FP8 on a step's first micro-batch and reuses it (TE Linear docstring: 'caching of the FP8 versions of the weights')."
FP8MX="Precision key fp8_mx -> bf16_with_mxfp8_mixed(), fp8_recipe 'mxfp8' (scripts/performance/utils/precision.py:33-34, src/megatron/bridge/training/mixed_precision.py:242-250@5776a6d90b). fp8_scaling block: the table's precision MXFP8 / FP8-MX (Transformer Engine MXFP8BlockScaling, 32-element blocks). fp8_weight_cache: Megatron-Core's Transformer Engine layers pass is_first_microbatch (added 2024-01-10, Megatron-LM commit 3c44fb9f61; megatron/core/extensions/transformer_engine.py), so TE casts each weight to FP8 on a step's first micro-batch and reuses it (TE Linear docstring: 'caching of the FP8 versions of the weights')."
METRIC="Metric: Tokens/sec/GPU (kept as tokens_per_s x GPUs, DERIVED) and Model TFLOP/sec/GPU (model FLOPs per Megatron-Bridge's flop formulas, no recompute term; kept in notes only)."
MOE="Source note: 'In MoE training benchmarks, we force-balance the token distribution among experts and all benchmarks are token-dropless' (26.x); 25.09 marks each MoE row tokendrop/dropless."
GPN="hardware.gpus_per_node = min(GPUs, 64) by the corpus rule for NVL72 systems (NVIDIA's MLPerf GB300 systems use 64 GPUs, 16 compute trays of 4, per NVL72 rack); the table does not say how many racks the job used, so confidence is at most medium."
FOLD="expert_layout folded, expert_tp 1: %s sets expert_tensor_parallel_size=1 in the model's base config (at 5776a6d90b, the table's commit), and the Megatron-Core it runs (pyproject.toml requires megatron-core>=0.15.0a0) places the expert groups by MoE parallel folding (Megatron-LM commit 7f22e210cd, 2024-11-23): an EP group is expert_tp*ep consecutive ranks of a pipeline stage."
def grad(f,l): return "grad_precision compute: Megatron-Bridge %s%s:%s@%s sets mixed_precision.grad_reduce_in_fp32 = False and ddp.grad_reduce_in_fp32 = False -> gradients reduced in bf16."%(W,f,l,c)
out=[]
def E(id_,line,model,n,prec,gbs,mbs,seq,fsdp,tp,pp,cp,vp,ep,ga,tok,tfl,par_extra,notes,pkey,extra=None,conf="medium"):
    dp=n//(tp*pp*cp)
    assert ga==gbs//(dp*mbs), id_
    it=gbs*seq/(tok*n)
    p={"tp":tp,"pp":pp,"cp":cp,"vp":(None if vp==1 else vp),"ep":(None if ep==1 else ep),"zero_stage":None,"sequence_parallel":(tp>1),"recompute":None,"micro_batch":mbs,"global_batch":gbs,"dp":dp}
    p.update(par_extra)
    row="Row (GB300): %d GPUs, precision %s, GBS %d, MBS %d, seq %d, FSDP %s, TP %d, PP %d, CP %d, VP %s, EP %s, GA %d: %s tokens/s/GPU, %s model TFLOP/s/GPU."%(n,prec,gbs,mbs,seq,fsdp,tp,pp,cp,vp if vp else 'n/a' if vp is None else vp,ep,ga,tok if isinstance(tok,int) else tok,tfl)
    e={"id":id_,"source":SRC%(C,line),"family":FAM,"model":model,
       "hardware":{"gpu":"GB300-288GB","num_gpus":n,"gpus_per_node":min(n,64),"interconnect":ic(n)},
       "parallel":p,"measured":{"tflops_per_gpu":None,"mfu":None,"iteration_time_s":None,"tokens_per_s":tok*n,"memory_gb":None},
       "precision":"bf16" if prec=="BF16" else "fp8","attention":"fused","confidence":conf,
       "notes":[row,"sequence_parallel %s: scripts/performance/utils/overrides.py:157@5776a6d90b sets cfg.model.sequence_parallel = settings.sequence_parallel, which is TP > 1 (scripts/performance/utils/utils.py:60-62@5776a6d90b); applied to the table's TP %d."%(str(tp>1).lower(),tp),"dp DERIVED = GPUs/(TP*PP*CP) = %d; GA check GBS/(DP*MBS) = %d = table GA; DERIVED iteration time = GBS*seq/(tokens/s/GPU*GPUs) = %.3f s."%(dp,ga,it),GPN,METRIC]+notes}
    if extra: e.update(extra)
    out.append(e)
cur={"fp8_scaling":"current","fp8_weight_cache":True,"grad_precision":"compute"}
blk={"fp8_scaling":"block","fp8_weight_cache":True,"grad_precision":"compute"}
L3=W+"llama/llama3_workload_base_configs.py"
# LLAMA3_8B
E("mbridge2511_gb300_llama3_8b_8gpu",53,M("mbridge2511_h100_llama3_8b_8gpu"),8,"FP8-CS (FP8-MX)",128,2,8192,0,1,1,1,None,1,8,37556,"1933 (1858)",{"cuda_graphs":"full_iteration"} if False else {},
 ["Parenthesised variant: FP8-MX gives 36108 tokens/s/GPU, 1858 model TFLOP/s/GPU; the entry takes the unparenthesised FP8-CS figure (rule 2).",
  "FP8-CS = FP8 with current (per-tensor) scaling, Transformer Engine.",FP8CS,grad("llama/llama3_llm_pretrain.py","73-74"),
  "Recipe %s:160-165@%s LLAMA3_8B_PRETRAIN_CONFIG_GB300_FP8_CS_BASE_CONFIG: micro_batch_size=4, cuda_graph_impl='local', cuda_graph_scope='full_iteration' (full-iteration CUDA graph; no corpus field, noted only); no recompute, no FSDP, no TP (sequence_parallel False since TP 1). The table's MBS 2 differs from the recipe's 4; the entry keeps the table's MBS (a value the table row states wins)."%(L3,c),
  "recompute null: the GB300 recipe sets no recompute_num_layers / recompute_modules (unlike the H100 config's recompute_num_layers=5)."],"fp8_cs",cur)
# LLAMA3_70B FSDP
E("mbridge2511_gb300_llama3_70b_64gpu",54,M("mbridge2511_h100_llama3_70b_64gpu"),64,"FP8-CS",256,2,8192,1,1,1,1,1,1,2,4520,"2030",{"zero_stage":3},
 ["VP column 1 -> no interleaving (PP 1); vp null, as existing entries write VP 1. EP column 1 -> ep null (dense model).","FSDP column 1 (= Megatron FSDP, ZeRO-3-like sharding over the 64 GPUs; zero_stage 3 as the existing H100 LLAMA3_8B 25.11 FSDP entry). Recipe agrees: %s:43-48@%s LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_BASE_CONFIG sets use_megatron_fsdp=True, micro_batch_size=2."%(L3,c),
    "NOT MODELLED: the same recipe object sets cpu_offloading_num_layers=20 (%s:47@%s): activations/weights of 20 layers offloaded to the Grace CPU over NVLink-C2C; trainplan has no field for it. Recipe GBS is 128 (BASE_LLAMA3_70B_CONFIG, line 28-31) vs table 256; table kept."%(L3,c),
  "FP8-CS = FP8 with current (per-tensor) scaling, Transformer Engine.",FP8CS,grad("llama/llama3_llm_pretrain.py","73-74"),
  "recompute null: the GB300 FP8_CS recipe sets no recompute; no CUDA graph setting in it."],"fp8_cs",cur)
# 405B
L31=W+"llama/llama31_workload_base_configs.py"
E("mbridge2511_gb300_llama31_405b_256gpu",55,M("mbridge2511_h100_llama31_405b_1024gpu"),256,"FP8-CS",1536,1,8192,0,2,8,2,4,1,192,999,"2522",{"tp_comm_overlap":True},
 ["126 layers over PP8 x VP4 = 32 chunks do not divide evenly; the split used is not stated in the table or the GB300 recipe.",
  "Recipe disagrees with the table's layout: %s:37-44@%s LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_BASE_CONFIG is num_gpus=128, TP 2, GBS 64, use_megatron_fsdp=True, cpu_offloading_num_layers=10 (no PP/CP/VP); the table row (FSDP 0, TP 2, PP 8, CP 2, VP 4, 256 GPUs, GBS 1536) is kept (a value the table row states wins). So the recipe's settings for this row's layout are not known; recompute/offload of the actual run unknown -> null."%(L31,c),
  "tp_comm_overlap true: %sllama/llama31_llm_pretrain.py:85-86@%s (llama31_405b_pretrain_config_gb300) sets cfg.comm_overlap.tp_comm_overlap_cfg (for fp8: userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192, line 75) and keeps tp_comm_overlap unless nvfp4, as the existing H100/B200 405B entries read it."%(W,c),
  "FP8-CS = FP8 with current (per-tensor) scaling, Transformer Engine.",FP8CS,grad("llama/llama31_llm_pretrain.py","58-59"),
  "cp_comm p2p: Megatron-Bridge's Llama recipes and scripts/performance configs set no cp_comm_type (as the existing 405B entries), so Megatron-Core's TEDotProductAttention passes Transformer Engine 'p2p'."],"fp8_cs",dict(cur,cp_comm="p2p"),conf="medium")
# DSV3
DS=W+"deepseek/deepseek_workload_base_configs.py"
dsm=M("mbridge2511_b200_deepseekv3_mtp_256gpu")
dsn=lambda prec:["Row labelled 'DeepSeekV3 (w/o MTP)': no multi-token-prediction module, matching trainplan's model.",
  "VP 4 over PP 2: 61 layers over 8 chunks do not divide evenly (split not stated).",
  "Recipe disagrees with the table's layout: %s:27-39@%s DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_BASE_CONFIG (BF16, FP8_CS, FP8_MX and NVFP4 are all this object, lines 40-43) is GBS 2048, PP 4, VP 4, EP 64; the table row (GBS 4096, PP 2, VP 4, EP 32) is kept (a value the table row states wins). Other settings taken from that object: moe_flex_dispatcher_backend='hybridep' (HybridEP dispatcher, noted only), moe_a2a_overlap=False -> ep_overlap false (overrides.py:139-142 then sets nothing; comm_overlap.py:435 sets False), cuda_graph_impl='transformer_engine' with scope ['attn','moe_router','moe_preprocess'] (noted only), recompute_modules=['moe_act']."%(DS,c),
  "recompute null: the recipe recomputes only the MoE activation (recompute_modules=['moe_act'], %s:38@%s); trainplan's recompute vocabulary has no value for that module set, so the run's extra recompute is not modelled."%(DS,c),
  FOLD%(DS+":22-24@"+c), grad("deepseek/deepseek_llm_pretrain.py","51-52"), MOE,
  "n_group 8 / topk_group 4 (node-limited routing) from DeepSeek-V3's HF config.json, copied from the existing B200 entry's model block."]
E("mbridge2511_gb300_deepseekv3_256gpu_bf16",56,dsm,256,"BF16",4096,1,4096,0,1,2,1,4,32,32,3848,"961",{"ep_overlap":False,"expert_layout":"folded","expert_tp":1},
  dsn("bf16"),"bf16",{"grad_precision":"compute"})
E("mbridge2511_gb300_deepseekv3_256gpu_mxfp8",57,dsm,256,"FP8-MX",4096,1,4096,0,1,2,1,4,32,32,4357,"1088",{"ep_overlap":False,"expert_layout":"folded","expert_tp":1},
  dsn("fp8_mx")+["precision FP8-MX (MXFP8 block scaling on Blackwell) mapped to fp8.",FP8MX],"fp8_mx",blk)
# GPT OSS
GO=W+"gpt_oss/gpt_oss_workload_base_configs.py"
E("mbridge2511_gb300_gptoss_120b_64gpu",58,M("mbridge2511_b200_gptoss_120b_64gpu"),64,"BF16",1280,2,8192,0,1,1,1,1,64,10,18347,"565",{"ep_overlap":False,"expert_layout":"folded","expert_tp":1},
 ["VP column 1 -> no interleaving (PP 1); vp null, as existing entries write VP 1.",
  "Recipe %s:33-39@%s GPT_OSS_120B_PRETRAIN_CONFIG_GB300_BF16_BASE_CONFIG: EP 64, micro_batch_size=4, cuda_graph_impl='transformer_engine' scope ['attn','moe_router','moe_preprocess'] (noted only); GBS 512 from the base (line 22-28). Table's MBS 2 and GBS 1280 differ; the table row is kept. moe_a2a_overlap not set -> WorkloadBaseConfig default False (scripts/performance/utils/utils.py:56@%s) -> ep_overlap false (_set_moe_a2a_overlap_overrides sets nothing when False, scripts/performance/utils/overrides.py:139-142@5776a6d90b; no src/megatron/bridge/recipes file sets overlap_moe_expert_parallel_comm, and src/megatron/bridge/training/comm_overlap.py:435@5776a6d90b sets it False). No recompute set -> null."%(GO,c,c),
  FOLD%(GO+":25@"+c), grad("gpt_oss/gpt_oss_llm_pretrain.py","36-37"), MOE],"bf16",{"grad_precision":"compute"})
# Qwen3 30B
Q=W+"qwen/qwen3_workload_base_configs.py"
E("mbridge2511_gb300_qwen3_30b_a3b_8gpu",59,M("mbridge2511_h100_qwen3_30b_a3b_16gpu"),8,"FP8-MX",512,4,4096,0,1,1,1,1,8,16,28934,"666",{"ep_overlap":False,"expert_layout":"folded","expert_tp":1},
 ["VP column 1 -> no interleaving (PP 1); vp null, as existing entries write VP 1.",
  "Recipe %s:160-170@%s QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_BASE_CONFIG (= FP8_CS object): 8 GPUs, EP 8 and GBS 512 (base, lines 27-31), micro_batch_size=8 (table: MBS 4, kept), moe_flex_dispatcher_backend='hybridep' (noted only), cuda_graph_impl='transformer_engine' scope ['moe_router','moe_preprocess'] (noted only). moe_a2a_overlap not set -> default False (scripts/performance/utils/utils.py:56@%s) -> ep_overlap false (_set_moe_a2a_overlap_overrides sets nothing when False, scripts/performance/utils/overrides.py:139-142@5776a6d90b; no src/megatron/bridge/recipes file sets overlap_moe_expert_parallel_comm, and src/megatron/bridge/training/comm_overlap.py:435@5776a6d90b sets it False). No recompute set -> null."%(Q,c,c),
  "precision FP8-MX (MXFP8 block scaling on Blackwell) mapped to fp8.",FP8MX,
  FOLD%(Q+":29@"+c), grad("qwen/qwen3_llm_pretrain.py","73-74 (set_qwen3_common_configs)"), MOE],"fp8_mx",blk)
json.dump(out,open('entries.json','w'),indent=1)
print(len(out))
