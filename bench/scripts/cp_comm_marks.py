# Sets cp_comm, with a note from its source, on every context-parallel entry of the corpus that
# does not name it yet (study bench/results/published-2026-12-02-cp; the notes cite the code and
# configs read). Usage: python3 bench/scripts/cp_comm_marks.py validation/corpus/published_runs.json
import json, sys
path = sys.argv[1]
d = json.load(open(path))
TE_RING = ("AttnFuncWithCP in transformer_engine/pytorch/attention.py (TE v1.4, 0fbc76af3): "
           "each rank's K and V passed around the cp ring with send/recv while each step's "
           "attention runs")
notes = {
 "nemo-long-sequence-24.03.01":
  "cp_comm p2p: the NeMo 24.03.01 container's Transformer Engine predates cp_comm_type "
  "(added in TE commit 4713b790d, 2024-07-30, first released in v1.10); its one context-parallel "
  "attention is the ring, " + TE_RING + ".",
 "nemo-perf-summary-24.07":
  "cp_comm p2p: the NeMo 24.07 container's Transformer Engine is 1.8.0.dev0 (NeMo Framework "
  "user guide 24.09, 'Software Component Versions'), before cp_comm_type (first released in TE "
  "v1.10); its one context-parallel attention is the ring, " + TE_RING + ".",
 "dgxc-benchmarking-24.11":
  "cp_comm p2p: the recipe (the model's yaml and configure.sh at 35a9aecc) sets no "
  "cp_comm_type, so Transformer Engine runs its default, 'p2p' (DotProductAttention's "
  "cp_comm_type default from TE v1.10, 08a85d3b2; Megatron-Core's TEDotProductAttention passes "
  "'p2p' when none is set, Megatron-LM 91a8a4c8dc): the K/V ring with send/recv beside each "
  "step's attention (AttnFuncWithCPAndKVP2P).",
 "megatron-bridge-perf-summary":
  "cp_comm p2p: Megatron-Bridge's Llama recipes and scripts/performance configs set no "
  "cp_comm_type (checked at 5776a6d90b and 21d102f5ec), so Megatron-Core's "
  "TEDotProductAttention passes Transformer Engine 'p2p' (megatron/core/extensions/"
  "transformer_engine.py: cp_comm_type None -> 'p2p'): the K/V ring with send/recv beside each "
  "step's attention (AttnFuncWithCPAndKVP2P).",
 "mlperf-training-v5.0-nvidia-llama31-405b":
  "cp_comm p2p: the submission's config_*.sh, config_common.sh, conf/custom.yaml and "
  "pretrain.py set no cp_comm_type, so Megatron-Core's TEDotProductAttention passes Transformer "
  "Engine 'p2p' (cp_comm_type None -> 'p2p'): the K/V ring with send/recv beside each step's "
  "attention (AttnFuncWithCPAndKVP2P).",
 "mlperf-training-v5.1-uf-llama31":
  "cp_comm p2p: the submission's config_*.sh, config_common*.sh, conf/custom.yaml and "
  "pretrain.py set no cp_comm_type, so Megatron-Core's TEDotProductAttention passes Transformer "
  "Engine 'p2p' (cp_comm_type None -> 'p2p'): the K/V ring with send/recv beside each step's "
  "attention (AttnFuncWithCPAndKVP2P).",
 "torchtitan-h100-2024-12":
  "cp_comm torch-allgather: torchtitan 9dec370 runs PyTorch's context_parallel "
  "(torchtitan/utils.py create_context_parallel_ctx) after set_rotate_method("
  "experimental.context_parallel_rotate_method), whose default is 'allgather' "
  "(torchtitan/config_manager.py, added in c97876e7d 2024-12-11); the benchmark names no rotate "
  "method. PyTorch's ring (torch/distributed/tensor/experimental/_attention.py): K and V "
  "all-gathered once beside the first step's SDPA, one SDPA per step on the load-balanced "
  "chunks, outputs merged in fp32; the backward gathers again and rotates fp32 dK/dV with an "
  "all-to-all per step.",
 "llama3-herd-2024":
  "cp_comm all-gather: the paper's long-context CP is all-gather based, K and V all-gathered "
  "before the attention (arXiv:2407.21783 sec. 3.3.2, the note above).",
}
n = 0
for r in d:
    if (r["parallel"].get("cp") or 1) <= 1 or "cp_comm" in r:
        continue
    fam = r["family"]["source"]
    value = notes[fam].split(":")[0].split()[1]
    r["cp_comm"] = value
    r["notes"].append(notes[fam])
    n += 1
open(path, "w").write(json.dumps(d, indent=1) + "\n")
print(n, "entries")
