#!/usr/bin/env python3
"""The published memory-kernel rates (core/cost/memory_kernel_rates.cc), derived by one rule.

Every figure is a kernel's achieved fraction of its GPU's HBM peak from
bench/results/memkernels-sources-2026-12-07/SOURCES.md (the section is named beside each), at
the largest shape its source published, against the source's own byte count. Rules, fixed
before any accuracy run (validation/corpus/NOTES.md, fifty-first pass):
  - an A100 whose memory variant the source does not name: the mean of its two readings
    (against 1555 GB/s and 2039 GB/s);
  - a class's rate is the median of its figures, times the model's byte count over the
    source's for the same tensor (core/cost/tasks.cc), capped at 1;
  - a class or direction without a figure takes the elementwise class's rate;
  - forward+backward rows and rows of unknown dtype are left out.
Run: python3 derive_rates.py   (prints the table the C++ holds, rounded to 0.01)
"""
import statistics


def a100(frac_80, frac_40):
    return (frac_80 + frac_40) / 2


# (figure, "source (SOURCES.md section)")
ELEMENTWISE = [  # one SM kernel, reads and writes each element once (source bytes = model's)
    (0.873, "A100-40 torch.add bf16, FlagPerf (s2)"),
    (0.874, "A100-40 torch.add fp32, FlagPerf (s2)"),
    (0.886, "A100-40 FlagGems add bf16, FlagPerf (s2)"),
    (0.91, "V100 torch add fp32, ml-explore/mlx#2330 (s2)"),
    (0.840, "B200 CUB DeviceTransform add 2^28 F16, NVIDIA/cccl#7391 (s2)"),
    (0.82, "B200 CUB DeviceTransform relu 2^28 F16, NVIDIA/cccl#7391 (s4)"),
    (0.84, "A100-40 torch GELU bf16, FlagPerf (s4)"),
    (0.90, "A100-40 torch GELU fp32, FlagPerf (s4)"),
    (0.85, "H100 Liger relu^2 fwd M=4096 N=16384, Liger CSV (s4)"),
]
NORM_FWD = [  # one-kernel norms (fused, native, compiled); source bytes 2MNe = model's
    (a100(949.8 / 2039, 949.8 / 1555), "A100 torch LayerNorm fwd N=8192, allenai/OLMo#258 (s3)"),
    (a100(1379.7 / 2039, 1379.7 / 1555), "A100 Triton LayerNorm fwd N=8192, allenai/OLMo#258 (s3)"),
    (a100(895.78 / 2039, 895.78 / 1555), "A100 Apex LayerNorm fwd, NVIDIA/apex#1037 (s3)"),
    (a100(1258.03 / 2039, 1258.03 / 1555), "A100 Apex FastLayerNorm fwd, NVIDIA/apex#1037 (s3)"),
    (715 / 1555, "A100-40 torch LayerNorm (Nsight), ecmwf/WeatherGenerator#1546 (s3)"),
    (0.72, "A100-80 Liger RMSNorm fwd H=32768 bf16, Liger CSV (s3)"),
    (0.82, "A100-80 Liger LayerNorm fwd N=16384 fp32, Liger CSV (s3)"),
    (0.52, "A100-80 torch LayerNorm fwd N=16384 fp32, Liger CSV (s3)"),
    (0.90, "H100 Quack RMSNorm (stated ~90%), Dao-AILab/quack membound-sol (s3)"),
    (0.54, "H100 torch.nn.RMSNorm fwd H=16384, Liger CSV megatron_rms_norm (s3)"),
    (0.84, "H100 Liger RMSNorm fwd H=16384, Liger CSV (s3)"),
    (0.87, "H100 Liger LayerNorm fwd N=16384, Liger CSV (s3)"),
    (0.52, "H100 torch LayerNorm fwd N=16384, Liger CSV (s3)"),
    (0.63, "H100 torch LayerNorm fwd 16384x2048, pytorch/pytorch#159682 (s3)"),
    (0.79, "H100 cuDNN LayerNorm fwd 16384x2048, pytorch/pytorch#159682 (s3)"),
    (0.81, "B200 CuTe-DSL RMSNorm fwd 32768x16384, NVIDIA/cutlass#2917 (s3)"),
    (0.80, "B200 torch RMSNorm fwd 65536x4096, pytorch/pytorch#159682 (s3)"),
    (0.85, "B200 cuDNN RMSNorm fwd 65536x4096, pytorch/pytorch#159682 (s3)"),
    (0.45, "B200 torch RMSNorm fwd 32768x4096, pytorch/pytorch#175551 (s3)"),
    (0.58, "B200 CuTe-DSL RMSNorm fwd 32768x4096, pytorch/pytorch#175551 (s3)"),
    (0.22, "B200 torch.compile RMSNorm fwd 32768x4096, pytorch/pytorch#175551 (s3)"),
]
NORM_BWD = [  # source bytes 3MNe (read x, dy; write dx); the model counts 4MNe (2x forward)
    (a100(491.5 / 2039, 491.5 / 1555), "A100 torch LayerNorm bwd N=8192, allenai/OLMo#258 (s3)"),
    (a100(632.2 / 2039, 632.2 / 1555), "A100 Triton LayerNorm bwd N=8192, allenai/OLMo#258 (s3)"),
    (a100(572.17 / 2039, 572.17 / 1555), "A100 Apex LayerNorm bwd, NVIDIA/apex#1037 (s3)"),
    (a100(1163.44 / 2039, 1163.44 / 1555), "A100 Apex FastLayerNorm bwd, NVIDIA/apex#1037 (s3)"),
    (0.7432, "A100 nvFuser bias+dropout+add+LayerNorm bwd (tool peak), NVIDIA/Fuser#1473 (s3)"),
    (0.31, "A100-80 Liger RMSNorm bwd H=16384, Liger CSV (s3)"),
    (0.19, "H100 torch.nn.RMSNorm bwd H=16384, Liger CSV megatron_rms_norm (s3)"),
    (0.26, "H100 Liger RMSNorm bwd H=16384, Liger CSV (s3)"),
    (0.42, "H100 Liger LayerNorm bwd N=16384, Liger CSV (s3)"),
    (0.37, "H100 torch LayerNorm bwd N=16384, Liger CSV (s3)"),
]
NORM_BWD_MODEL_OVER_SOURCE = 4 / 3
# PyTorch eager RMSNorm as torchtitan issues it (HF LlamaRMSNorm: the same ops), A100-80, Liger
# CSV v0.2.1, M=2048, H=32768 bf16, against the model's own bytes for that chain (tasks.cc
# eager_rmsnorm_*_bytes_per_element: 4e+28 forward, 8e+76 backward, e=2).
EAGER_NORM_FWD = [(36 * 2048 * 32768 / 1.9191e-3 / 2039e9, "A100-80 HF LlamaRMSNorm fwd H=32768, Liger CSV (s3)")]
EAGER_NORM_BWD = [(92 * 2048 * 32768 / 5.0147e-3 / 2039e9, "A100-80 HF LlamaRMSNorm bwd H=32768, Liger CSV (s3)")]
ACTIVATION_FWD = [  # one-kernel activations; source bytes = model's (SwiGLU 3, unary 2 per element)
    (0.84, "A100-40 torch GELU bf16, FlagPerf (s4)"),
    (0.90, "A100-40 torch GELU fp32, FlagPerf (s4)"),
    (0.91, "H100 Liger SwiGLU fwd F=32768, Liger CSV (s4)"),
    (0.56, "H100 Megatron-Core bias-SwiGLU fwd F=32768, Liger CSV (s4)"),
    (0.85, "H100 Liger relu^2 fwd, Liger CSV (s4)"),
    (0.82, "B200 CUB relu, NVIDIA/cccl#7391 (s4)"),
]
# Backward, against the model's bytes: SwiGLU model 6 / source 5 elements, unary model 4 / source 3.
ACTIVATION_BWD = [
    (0.42 * 6 / 5, "H100 Liger SwiGLU bwd F=32768, Liger CSV (s4)"),
    (0.16 * 6 / 5, "H100 Megatron-Core bias-SwiGLU bwd F=32768, Liger CSV (s4)"),
    (min(1.0, 0.88 * 4 / 3), "H100 Liger relu^2 bwd, Liger CSV (s4)"),
]
# PyTorch eager SwiGLU (silu then a product), H100, Liger CSV v0.8.1 megatron_swiglu "torch",
# rows 8192, F=32768 bf16, against the model's bytes (tasks.cc: 5 elements forward, 9 backward).
EAGER_ACTIVATION_FWD = [(5 * 8192 * 32768 * 2 / 1.4953e-3 / 3350e9, "H100 torch silu*mul fwd, Liger CSV (s4)")]
EAGER_ACTIVATION_BWD = [(9 * 8192 * 32768 * 2 / 4.5729e-3 / 3350e9, "H100 torch silu*mul bwd, Liger CSV (s4)")]
SOFTMAX = [  # row softmax kernels, read + write per element (the model's attention softmax)
    (0.897, "H100 Quack softmax 16Kx131K fp32 (Nsight), Dao-AILab/quack (s5)"),
    (0.56, "H100 torch.compile softmax N=262K, Dao-AILab/quack (s5)"),
    (0.60, "H100 Liger softmax N=65K, Dao-AILab/quack (s5)"),
]
EMBEDDING_FWD = [(0.30, "A100-80 nn.Embedding fwd V=131072 D=4096 fp32, Liger CSV (s6)")]


def rate(figures, model_over_source=1.0):
    return min(1.0, statistics.median(f for f, _ in figures) * model_over_source)


def table():
    """(C++ constant, description, forward, backward, figures) per row of the table."""
    elementwise = rate(ELEMENTWISE)
    return [
        ("kElementwise", "elementwise (also optimizer, cross-entropy backward)", elementwise, elementwise, ELEMENTWISE),
        ("kNormOneKernel", "norm, one kernel", rate(NORM_FWD), rate(NORM_BWD, NORM_BWD_MODEL_OVER_SOURCE), NORM_FWD + NORM_BWD),
        ("kNormEager", "norm, PyTorch eager", rate(EAGER_NORM_FWD), rate(EAGER_NORM_BWD), EAGER_NORM_FWD + EAGER_NORM_BWD),
        ("kActivationOneKernel", "activation, one kernel", rate(ACTIVATION_FWD), rate(ACTIVATION_BWD), ACTIVATION_FWD + ACTIVATION_BWD),
        ("kActivationEager", "activation, PyTorch eager", rate(EAGER_ACTIVATION_FWD), rate(EAGER_ACTIVATION_BWD),
         EAGER_ACTIVATION_FWD + EAGER_ACTIVATION_BWD),
        ("kSoftmax", "softmax (no backward figure: the forward's)", rate(SOFTMAX), rate(SOFTMAX), SOFTMAX),
        ("kEmbedding", "embedding (no usable backward figure: the forward's)", rate(EMBEDDING_FWD), rate(EMBEDDING_FWD), EMBEDDING_FWD),
    ]


def main():
    print(f"{'class':55s} {'forward':>8s} {'backward':>9s}  figures")
    for _, name, fwd, bwd, figs in table():
        print(f"{name:55s} {fwd:8.3f} {bwd:9.3f}  {len(figs)}")


if __name__ == "__main__":
    main()
