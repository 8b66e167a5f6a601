import json, copy
corpus = json.load(open('/work/main/validation/corpus/published_runs.json'))
byid = {e['id']: e for e in corpus}
M70 = copy.deepcopy(byid['mbridge260401_h100_llama3_70b_64gpu']['model'])
M405 = copy.deepcopy(byid['mbridge260401_h100_llama31_405b_1024gpu']['model'])
C = '21d102f5ec'
SRC = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (section '26.04.01 NeMo Container' added in commit "
       "21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6, 2026-05-27; moved unchanged to docs/performance-summary-archive.md by commit "
       "4ab94dfad36641cabdeb96452b21bf676aac4772), Pre-Training Performance, '{model}' table line {line}")
HW = {
 'GB300': ("GB300-288GB", "DGX GB300 NVL72 (table: 'DGX-GB300'): 4 GB300 GPUs per compute tray, one NVLink5 + NVSwitch domain of up to 72 GPUs (1.8 TB/s per GPU); scale-out network not stated in the source (NVIDIA's MLPerf v5.1 GB300 systems: 4x ConnectX-8 IB XDR 800 Gb/s per tray)"),
 'GB200': ("GB200-186GB", "DGX GB200 NVL72 (table: 'DGX-GB200'): 4 GB200 GPUs per compute tray, one NVLink5 + NVSwitch domain of up to 72 GPUs (1.8 TB/s per GPU); scale-out network not stated in the source (NVIDIA's MLPerf v5.0 GB200 systems: 4x ConnectX-7 IB NDR 400 Gb/s per tray)"),
}
FP8WC = ("fp8_weight_cache: Megatron-Core's Transformer Engine layers pass is_first_microbatch (added 2024-01-10, Megatron-LM commit 3c44fb9f61; "
         "megatron/core/extensions/transformer_engine.py), so TE casts each weight to FP8 on a step's first micro-batch and reuses it "
         "(TE Linear docstring: 'caching of the FP8 versions of the weights').")
METRIC = ("Metric: Tokens/sec/GPU (kept as tokens_per_s x GPUs, DERIVED) and Model TFLOP/sec/GPU (model FLOPs per Megatron-Bridge's flop "
          "formulas, no recompute term; kept in notes only).")
SRCNOTE = ("Source note: 'In MoE training benchmarks, we force-balance the token distribution among experts and all benchmarks are token-dropless' "
           "(26.x); 25.09 marks each MoE row tokendrop/dropless.")
# rows: (sys, model, gpus, prec, gbs, mbs, fsdp, tp, pp, cp, vp, tok, tflops, line)
rows = [
 ('GB300','70b',64,'FP8',256,2,64,1,1,1,None,5248,2348,48),
 ('GB300','70b',64,'MXFP8',256,1,0,1,4,1,5,4864,2186,49),
 ('GB300','70b',64,'NVFP4',256,1,0,1,4,1,5,7296,3253,50),
 ('GB200','70b',64,'FP8',256,2,64,1,1,1,None,4224,1892,51),
 ('GB200','70b',64,'MXFP8',256,1,0,2,4,1,5,3712,1664,52),
 ('GB200','70b',64,'NVFP4',256,1,0,2,4,1,5,4864,2202,53),
 ('GB300','405b',256,'FP8',1536,1,0,4,8,1,4,1024,2617,60),
 ('GB300','405b',256,'MXFP8',1536,1,0,2,8,2,4,960,2453,61),
 ('GB300','405b',256,'NVFP4',1536,1,0,4,8,1,4,1440,3653,62),
 ('GB200','405b',256,'FP8',1536,1,0,4,16,1,4,864,2144,63),
 ('GB200','405b',256,'MXFP8',1536,1,0,4,16,1,8,800,1994,64),
 ('GB200','405b',256,'NVFP4',1536,1,0,4,16,1,8,1184,2960,65),
]
KEY = {'FP8':'FP8_CS','MXFP8':'FP8_MX','NVFP4':'NVFP4'}
# workload base config line numbers at 21d102f5ec (V2 objects, default --config_variant v2: argument_parser.py:824-829)
CFGLINE = {
 ('GB300','70b','FP8'):'llama3_workload_base_configs.py:211-216 (micro_batch_size=2, use_megatron_fsdp=True, cpu_offloading_num_layers=20)',
 ('GB300','70b','MXFP8'):'llama3_workload_base_configs.py:219-223 (pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=5; TP/CP default 1, utils/utils.py:42-45)',
 ('GB300','70b','NVFP4'):'llama3_workload_base_configs.py:225-231 (pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=5, cuda_graph_impl="none")',
 ('GB200','70b','FP8'):'llama3_workload_base_configs.py:241-246 (micro_batch_size=2, use_megatron_fsdp=True, cpu_offloading_num_layers=40)',
 ('GB200','70b','MXFP8'):'llama3_workload_base_configs.py:249-254 (tensor_model_parallel_size=2, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=5)',
 ('GB200','70b','NVFP4'):'llama3_workload_base_configs.py:256-264 (tensor_model_parallel_size=2, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=5, context_parallel_size=1, cuda_graph_impl="none")',
 ('GB300','405b','FP8'):'llama31_workload_base_configs.py:225-235 (replace of the V1 object :44-51 with tensor_model_parallel_size=4, pipeline_model_parallel_size=8, context_parallel_size=1, virtual_pipeline_model_parallel_size=4, num_gpus=256, global_batch_size=1536, use_megatron_fsdp=False, cpu_offloading_num_layers=None)',
 ('GB300','405b','MXFP8'):'llama31_workload_base_configs.py:238-243 (replace of V1 :54-62 TP4 PP8 CP2 VP4 with tensor_model_parallel_size=2, num_gpus=256, global_batch_size=1536)',
 ('GB300','405b','NVFP4'):'llama31_workload_base_configs.py:245-251 (replace of V1 :64-74 TP4 PP8 CP1 VP4 with num_gpus=256, global_batch_size=1536, cuda_graph_impl="none", cuda_graph_scope=[])',
 ('GB200','405b','FP8'):'llama31_workload_base_configs.py:263-273 (replace of V1 :88-95 with num_gpus=256, tensor_model_parallel_size=4, pipeline_model_parallel_size=16, context_parallel_size=1, virtual_pipeline_model_parallel_size=4, global_batch_size=1536, use_megatron_fsdp=False, cpu_offloading_num_layers=None)',
 ('GB200','405b','MXFP8'):'llama31_workload_base_configs.py:276-282 (replace of V1 :98-106 TP4 PP8 CP2 VP8 with num_gpus=256, pipeline_model_parallel_size=16, context_parallel_size=1, global_batch_size=1536)',
 ('GB200','405b','NVFP4'):'llama31_workload_base_configs.py:284-289 (replace of V1 :108-119 TP4 PP16 CP1 VP8 cuda_graph_impl="none" recompute_num_layers=1 with num_gpus=256, global_batch_size=1536, recompute_num_layers=None)',
}
out = []
for (sy, mk, n, prec, gbs, mbs, fsdp, tp, pp, cp, vp, tok, tfl, line) in rows:
    is70 = mk == '70b'
    dp = n // (tp*pp*cp)
    ga = gbs // (dp*mbs)
    assert dp*mbs*ga == gbs
    seq = 8192
    tokens = tok*n
    it = gbs*seq/tokens
    gpu, ic = HW[sy]
    mdl = 'llama3_70b' if is70 else 'llama31_405b'
    tablename = 'Model: LLAMA3_70B' if is70 else 'Model: LLAMA3.1_405B'
    fam = 'llama3' if is70 else 'llama31'
    pre = 'scripts/performance/configs/llama/'
    wb = pre + CFGLINE[(sy, mk, prec)].replace('llama3_workload', 'llama3_workload').split(' ',1)[0]
    sid = {'FP8':'fp8','MXFP8':'mxfp8','NVFP4':'nvfp4'}[prec]
    e = {}
    e['id'] = f"mbridge260401_{sy.lower()}_{mdl}_{n}gpu_{sid}"
    e['source'] = SRC.format(model=tablename, line=line)
    e['family'] = {"source":"megatron-bridge-perf-summary","framework":"nemo","gpu_generation":sy}
    e['model'] = copy.deepcopy(M70 if is70 else M405)
    e['hardware'] = {"gpu": gpu, "num_gpus": n, "gpus_per_node": min(n, 64), "interconnect": ic}
    sp = tp > 1
    par = {"tp": tp, "pp": pp, "cp": cp, "vp": vp, "ep": None,
           "zero_stage": 3 if fsdp else None,
           "sequence_parallel": sp, "recompute": "none",
           "micro_batch": mbs, "global_batch": gbs, "dp": dp}
    tpo = (tp > 1 and prec != 'NVFP4')
    par['tp_comm_overlap'] = tpo
    lps = None
    if not is70:
        chunks = pp*vp
        per = (126+2)//chunks
        if per >= 2:
            lps = [per-1] + [per]*(chunks-2) + [per-1]
            assert sum(lps) == 126
            par['layers_per_stage'] = lps
    e['parallel'] = par
    e['measured'] = {"tflops_per_gpu": None, "mfu": None, "iteration_time_s": None, "tokens_per_s": tokens, "memory_gb": None}
    e['precision'] = 'fp8'
    e['fp8_scaling'] = {'FP8':'current','MXFP8':'block','NVFP4':'nvfp4'}[prec]
    e['fp8_weight_cache'] = True
    e['grad_precision'] = 'compute'
    e['attention'] = 'fused'
    e['confidence'] = 'medium'
    if cp == 2:
        e['cp_comm'] = 'p2p'
    vps = 'n/a' if vp is None else str(vp)
    notes = []
    notes.append(f"Row ({sy}): {n} GPUs, precision {prec}, GBS {gbs}, MBS {mbs}, seq {seq}, FSDP {fsdp}, TP {tp}, PP {pp}, CP {cp}, VP {vps}, EP n/a (the 26.04.01 table has no GA column): {tok} tokens/s/GPU, {tfl} model TFLOP/s/GPU.")
    notes.append(f"dp DERIVED = GPUs/(TP*PP*CP) = {dp}; GA DERIVED = GBS/(dp*MBS) = {ga}; DERIVED iteration time = GBS*seq/(tokens/s/GPU*GPUs) = {it:.3f} s.")
    notes.append(METRIC)
    notes.append(SRCNOTE)
    notes.append(f"Recipe read at {C} (the table's commit; 21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6): scripts/performance/configs/llama/{CFGLINE[(sy,mk,prec)]}; the object is {mdl.upper()}_PRETRAIN_CONFIG_{sy}_{KEY[prec]}_V2, picked by utils/utils.py:99 (name '{{model}}_{{task}}_config_{{gpu}}_{{compute_dtype}}_{{variant}}'.upper()) with --config_variant default 'v2' (argument_parser.py:824-829). Its layout matches the table row (TP {tp}, PP {pp}, CP {cp}, VP {vps}, MBS {mbs}, GBS {gbs}, {n} GPUs), so the recipe is taken as what ran.")
    if prec == 'FP8':
        notes.append(f"Precision 'FP8' = compute_dtype fp8_cs: the only FP8 key besides fp8_mx (MXFP8 row) with a {sy} config object for this model at {C}; argument_parser.py:595-598 lists bf16, fp8_cs, fp8_mx, fp8_sc, nvfp4, and there is no {mdl.upper()}_PRETRAIN_CONFIG_{sy}_FP8_SC_* object. utils/precision.py:28-32 maps fp8_cs to bf16_with_fp8_current_scaling_mixed() with first_last_layers_bf16 = False; src/megatron/bridge/training/mixed_precision.py:296-302: fp8 'hybrid' (E4M3 forward, E5M2 backward), fp8_recipe 'tensorwise' (Transformer Engine Float8CurrentScaling), fp8_param_gather True -> fp8_scaling current, all layers FP8. " + FP8WC)
    elif prec == 'MXFP8':
        notes.append(f"fp8_scaling block: compute_dtype fp8_mx -> utils/precision.py:33-34 bf16_with_mxfp8_mixed(); src/megatron/bridge/training/mixed_precision.py:261-265: fp8 'e4m3', fp8_recipe 'mxfp8' (Transformer Engine MXFP8BlockScaling, 32-element blocks), fp8_param_gather True, reuse_grad_buf_for_mxfp8_param_ag True. " + FP8WC)
    else:
        notes.append(f"precision fp8 with fp8_scaling nvfp4 (as the MLPerf v5.1 *_nvfp4 entries): compute_dtype nvfp4 -> utils/precision.py:39-41 bf16_with_nvfp4_mixed(); src/megatron/bridge/training/mixed_precision.py:411-416: fp8 None, fp4 'e2m1', fp4_recipe 'nvfp4' (Transformer Engine NVFP4BlockScaling for the linear GEMMs), fp8_param_gather False, fp4_param_gather True; no first/last layers in BF16 (that is set only in the nemotron_3_super variant, :426-427). fp8_weight_cache as the FP8 entries read the same TE code (is_first_microbatch).")
    notes.append(f"grad_precision compute: scripts/performance/configs/llama/{fam}_llm_pretrain.py set_{fam}_common_configs sets mixed_precision.grad_reduce_in_fp32 = False and ddp.grad_reduce_in_fp32 = False ({'llama3_llm_pretrain.py:43-44' if is70 else 'llama31_llm_pretrain.py:42-43'} at {C}) -> gradients reduced in bf16.")
    notes.append(f"sequence_parallel {str(sp).lower()}: utils/overrides.py:219 sets cfg.model.sequence_parallel = settings.sequence_parallel, which is tensor_model_parallel_size > 1 (utils/utils.py:71-74) at {C}.")
    rc = ("recompute none: the model recipe sets recompute_granularity None and recompute_modules None (src/megatron/bridge/recipes/llama/llama3.py:" + ("706-707" if is70 else "1170-1171") + f" at {C}) and the workload config gives no recompute_num_layers / recompute_modules, so utils/overrides.py:135-158 _set_recompute_overrides leaves it.")
    if (sy, mk, prec) == ('GB200','405b','NVFP4'):
        rc += " (The V1 object sets recompute_num_layers=1, llama31_workload_base_configs.py:118; V2 resets it to None, :288.)"
    notes.append(rc)
    if fsdp:
        off = 20 if sy == 'GB300' else 40
        notes.append(f"FSDP column {fsdp} (= Megatron FSDP, ZeRO-3-like sharding over the {n} GPUs; table nomenclature 'FSDP > 0: use FSDP with sharding group size = #GPUs / (TP x PP)' = {n}): the workload config sets use_megatron_fsdp=True, and utils/overrides.py:79-103 _set_megatron_fsdp_overrides sets ddp.use_megatron_fsdp True, data_parallel_sharding_strategy 'optim_grads_params' (optimizer state, gradients and parameters sharded: zero_stage 3), keep_fp8_transpose_cache False, average_in_collective False, init_model_with_meta_device True; configs/llama/llama3_llm_pretrain.py:{74 if sy=='GB300' else 109}-{77 if sy=='GB300' else 112} then sets fsdp_double_buffer True, gradient_accumulation_fusion False, suggested_communication_unit_size 800000000 (all at {C}).")
        notes.append(f"NOT IN THE ENTRY (no corpus field): activation CPU offloading of {off} layers: the workload config's cpu_offloading_num_layers={off} -> utils/overrides.py:142-145 sets model.cpu_offloading True, cpu_offloading_weights False, cpu_offloading_num_layers {off} (Megatron-Core offloads those layers' activations to host memory over the Grace C2C link and fetches them for the backward; no recompute). This is not DeepSpeed's cpu_checkpointing (offload_checkpoints), so it is not entered; the simulated memory and any offload traffic ignore it.")
        notes.append(f"FP8 parameters: fp8_param_gather True from the FP8-CS recipe (mixed_precision.py:302) with Megatron FSDP (parameters all-gathered in FP8); not entered as fp8_all_gather (the existing Megatron-Bridge FSDP entry mbridge2511_h100_llama3_8b_8gpu does not set it), a follow-up for the lead.")
    else:
        notes.append(f"zero_stage null (FSDP 0 in the table; rule of the existing entries). The model recipe runs Megatron-Core's distributed optimizer (src/megatron/bridge/recipes/llama/llama3.py:{'728-735' if is70 else '1192-1199'} at {C}: use_distributed_optimizer True, overlap_grad_reduce True, overlap_param_gather True, data_parallel_sharding_strategy 'no_shard')" + (", with fp8_param_gather True from the precision recipe (FP8 parameter all-gather; not entered, as the existing entries)." if prec != 'NVFP4' else ", with fp4_param_gather True from the precision recipe (not entered)."))
    if tp > 1 and prec != 'NVFP4':
        ub = ('userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192 (llama3_llm_pretrain.py:102, 114)' if is70 else f"userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 (llama31_llm_pretrain.py:{75 if sy=='GB300' else 109}, {86 if sy=='GB300' else 121})")
        notes.append(f"tp_comm_overlap true: the model recipe builds CommOverlapConfig(tp_comm_overlap=True) (src/megatron/bridge/recipes/llama/llama3.py:{'738-741' if is70 else '1202-1205'}), the {sy} function keeps it for this precision and sets tp_comm_overlap_cfg {ub}; src/megatron/bridge/training/comm_overlap.py:442-451 keeps it with TP >= 2 and sequence parallel (all at {C}).")
    elif prec == 'NVFP4':
        ln = (f"llama3_llm_pretrain.py:{80 if sy=='GB300' else 115}" if is70 else f"llama31_llm_pretrain.py:{87 if sy=='GB300' else 122}")
        notes.append(f"tp_comm_overlap false: {ln} sets cfg.comm_overlap.tp_comm_overlap = False if precision == 'nvfp4' (at {C})" + (" (and TP is 1 anyway)." if tp == 1 else "."))
    else:
        notes.append(f"tp_comm_overlap false: TP 1, so src/megatron/bridge/training/comm_overlap.py:443-445 turns the recipe's TP overlap off (at {C}).")
    if pp > 1:
        notes.append(f"Pipeline: PP {pp} x VP {vp} interleaved; comm_overlap.py:454-457 sets overlap_p2p_comm True, batch_p2p_comm False when VP > 1 (not entered, as the existing entries); perf_plugins.py:525-531 sets NCCL_P2P_NET_CHUNKSIZE 2097152 for {mdl} pretraining (at {C}).")
    if is70:
        if pp > 1:
            notes.append(f"Layer split: 80 layers over PP {pp} x VP {vp} = {pp*vp} chunks = 4 each; the 70B recipe sets no account_for_embedding/loss_in_pipeline_split (llama3.py:659-746 at {C}; Megatron-Core default False), so no layers_per_stage.")
    else:
        chunks = pp*vp
        if lps:
            notes.append(f"layers_per_stage: the model recipe sets account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split True (src/megatron/bridge/recipes/llama/llama3.py:1146-1147 at {C}); Megatron-Core (3rdparty/Megatron-LM submodule at 44151194143711368b17797bc7000fd0285d8d51, megatron/core/transformer/transformer_block.py:69 get_num_layers_to_build, :143-147 embedding and loss counted, :172 per-chunk count, :184-193 one layer off the end chunks) counts 126 + 2 = 128 over {pp} ranks = {128//pp} per rank, / VP {vp} = {128//chunks} per chunk, and removes one layer from the first chunk of the first rank and the last chunk of the last rank: {lps[0]}, {lps[1]} x {chunks-2}, {lps[-1]} (the same as the reader's balanced split).")
        else:
            notes.append(f"layers_per_stage NOT GIVEN (cannot be expressed): the model recipe sets account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split True (src/megatron/bridge/recipes/llama/llama3.py:1146-1147 at {C}); Megatron-Core (3rdparty/Megatron-LM at 44151194143711368b17797bc7000fd0285d8d51, megatron/core/transformer/transformer_block.py:69 get_num_layers_to_build, :143-147 embedding and loss counted, :172 per-chunk count, :184-193 one layer off the end chunks) gives 128 / 16 ranks = 8 per rank, / VP 8 = 1 per chunk, and takes one layer off the first chunk of rank 0 and the last chunk of rank 15 (asserting only >= 0): chunk 0 holds the embedding and no transformer layer, chunk 127 the loss and no transformer layer, the other 126 chunks one layer each. layers_per_stage needs >= 1 per chunk (validation/published_run.cc get_int_list min 1) and 128 chunks exceed the 126 layers, so the reader cannot build this split; the lead must decide how to read this row (entered per rule 1).")
        if cp == 2:
            notes.append(f"cp_comm p2p: Megatron-Bridge's Llama recipes and scripts/performance configs set no cp_comm_type (checked at {C}), so Megatron-Core's TEDotProductAttention passes Transformer Engine 'p2p' (megatron/core/extensions/transformer_engine.py: cp_comm_type None -> 'p2p'): the K/V ring with send/recv beside each step's attention (AttnFuncWithCPAndKVP2P).")
        if (sy, prec) == ('GB200','NVFP4'):
            notes.append(f"Parameter-gather overlap OFF: llama31_llm_pretrain.py:123-124 calls disable_param_gather_overlap (:46-55: ddp.overlap_param_gather, optimizer.overlap_param_gather, comm_overlap.overlap_param_gather, align_param_gather all False; 'workaround ... to reduce training peak memory and avoid OOM', issue #3714) for nvfp4 with config_variant v2 (at {C}); not entered (param_gather needs zero_stage, which stays null).")
    cg = "CUDA graphs: none. " + ("The workload config sets cuda_graph_impl 'none' (utils/overrides.py:128-130 clears the scope)" if prec == 'NVFP4' else "The workload config leaves cuda_graph_impl unset and the model recipe sets 'none' (llama3.py:" + ("698" if is70 else "1162") + ")") + f" at {C}."
    notes.append(cg)
    notes.append(f"Hardware: table system 'DGX-{sy}' only. gpu preset {gpu}; gpus_per_node {min(n,64)} = min(GPUs, 64): the NVL72 NVLink domain, taken as 64 GPUs (16 compute trays of 4) per rack as on NVIDIA's own MLPerf GB200/GB300 systems; the table does not say how many racks the job used ({n} GPUs = {n//64} rack(s) of 64 ASSUMED), hence confidence medium. The launcher's node is the 4-GPU compute tray (scripts/performance/argument_parser.py:34-35 NUM_GPUS_PER_NODE_MAP gb200/gb300: 4).")
    e['notes'] = notes
    out.append(e)
json.dump(out, open('/work/helpers/mb2604d/entries.json','w'), indent=1)
print(len(out))
for e in out: print(e['id'], e['measured']['tokens_per_s'], e['parallel']['dp'], e['parallel'].get('layers_per_stage', [None])[:2] if e['parallel'].get('layers_per_stage') else None)
