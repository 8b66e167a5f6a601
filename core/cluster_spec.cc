// Cluster presets and loading. Tested by tests/core/cluster_spec_test.cc.
// Figures: ../shared/reference/hardware.json (NVIDIA datasheets via glennklockwood.com,
// nccl-tests issues #149, #212, #290, ml-engineering's network tables).
#include "core/cluster_spec.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <span>
#include <sstream>

#include "core/units.h"

namespace trainplan {

std::string_view to_string(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}

double bytes_per_element(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }

double GpuSpec::peak_flops_per_s(Precision p) const {
  switch (p) {
    case Precision::kBf16: return peak_bf16_flops_per_s;
    case Precision::kFp16: return peak_fp16_flops_per_s;
    case Precision::kFp32: return peak_fp32_flops_per_s;
  }
  return 0;
}

double in_step_gemm_efficiency(const GpuSpec& gpu, double share) {
  const double achievable = gpu.achievable_matmul_fraction > 0 ? gpu.achievable_matmul_fraction
                                                               : kUnmeasuredMatmulFraction;
  return std::min(1.0, share * achievable);
}

namespace {
std::string format_number(double v) {
  std::ostringstream os;
  os.precision(4);
  os << v;
  return os.str();
}

// The dense 16-bit tensor peak of one die at each board power NVIDIA configures it for and
// publishes a peak at: the same SMs at the clock that power sustains. Hopper, 132 SMs: H100 NVL
// (350-400 W configurable; its peak, 835 TFLOP/s, is the 400 W figure: 1,671 with sparsity,
// NVIDIA H100 datasheet) and H100 SXM5 at 700 W, 989.4 (hardware.json). Blackwell, 148 SMs:
// HGX B100 at 700 W, 1,750 (NVIDIA HGX B100 datasheet, 14 PFLOP/s FP16 sparse for 8 GPUs; the
// B200's die at a lower clock, glennklockwood.com/garden/processors/B200), HGX B200 at 1,000 W,
// 2,250 (hardware.json), and the B200 of a GB200 at 1,200 W, 2,500 (the same page, NVIDIA's
// figures). Between two points the peak is interpolated linearly in the power: the Blackwell
// points rise 1.67 TFLOP/s per W from 700 to 1,000 W and 1.25 from 1,000 to 1,200, so the curve
// is concave and a straight line between neighbours is the least that the points say.
struct PowerPoint {
  double watts;
  double bf16_tflops;
};
constexpr PowerPoint kHopperPeakByPower[] = {{400, 835}, {700, 989.4}};
constexpr PowerPoint kBlackwellPeakByPower[] = {{700, 1750}, {1000, 2250}, {1200, 2500}};

std::span<const PowerPoint> published_peak_by_power(std::string_view architecture) {
  if (architecture == "hopper") return kHopperPeakByPower;
  if (architecture == "blackwell") return kBlackwellPeakByPower;
  return {};
}

double interpolated_peak(std::span<const PowerPoint> points, double watts) {
  for (std::size_t i = 1; i < points.size(); ++i)
    if (watts <= points[i].watts) {
      const PowerPoint& a = points[i - 1];
      const PowerPoint& b = points[i];
      return a.bf16_tflops +
             (b.bf16_tflops - a.bf16_tflops) * (watts - a.watts) / (b.watts - a.watts);
    }
  return points.back().bf16_tflops;
}
}  // namespace

Result<GpuSpec> at_power_limit(const GpuSpec& gpu, double watts) {
  const std::string value = "power limit " + format_number(watts) + " W";
  const auto points = published_peak_by_power(gpu.architecture);
  if (points.size() < 2)
    return Status::Error(value + " on " + gpu.name + ": no peaks of its die at other board " +
                         "powers are published (only hopper and blackwell have them)");
  if (!(watts >= points.front().watts && watts <= points.back().watts))
    return Status::Error(value + " on " + gpu.name + ": outside " +
                         format_number(points.front().watts) + "-" +
                         format_number(points.back().watts) + " W, the board powers NVIDIA " +
                         "publishes " + gpu.architecture + " peaks at");
  if (!(gpu.board_power_w >= points.front().watts && gpu.board_power_w <= points.back().watts))
    return Status::Error(value + " on " + gpu.name + ": the part's own board power (" +
                         format_number(gpu.board_power_w) + " W) is not known");
  const double scale =
      interpolated_peak(points, watts) / interpolated_peak(points, gpu.board_power_w);
  GpuSpec g = gpu;
  g.peak_bf16_flops_per_s *= scale;
  g.peak_fp16_flops_per_s *= scale;
  g.peak_fp32_flops_per_s *= scale;
  g.peak_fp8_flops_per_s *= scale;
  g.peak_fp4_flops_per_s *= scale;
  g.board_power_w = watts;
  g.source += "; clock-bound peaks scaled x" + format_number(scale) + " to a " +
              format_number(watts) + " W limit (published " + gpu.architecture +
              " peaks by board power)";
  return g;
}

namespace {

// Node-level defaults that come with each GPU preset (a DGX/HGX node of that GPU).
struct Preset {
  GpuSpec gpu;
  std::int64_t gpus_per_node;
  double intra_GBps;        // ring all_reduce busbw inside a node
  double inter_GBps;        // per-NIC busbw across nodes
  double pcie_GBps;         // x16 per direction, line rate
  double host_GiB;          // host memory per node
  double host_GBps;         // host DRAM bandwidth per node
  double nvme_TB = 0;       // NVMe capacity per node (decimal TB, as drives are sold)
  double nvme_GBps = 0;     // NVMe sustained bandwidth per node
};

// NVMe per reference node. Capacity, cited (vendor datasheets: DGX-1 4x 1.92 TB SSD; DGX-2 8x
// 3.84 TB NVMe; DGX A100 320 GB 4x 3.84 TB, 640 GB 8x 3.84 TB; DGX H100/H200/B200 8x 3.84 TB
// U.2 NVMe). Bandwidth, ASSUMED: drives x a sustained write rate per drive (what an offloaded
// step writes back), 2 GB/s for the PCIe gen3 drives of DGX-1/2, 3.5 GB/s for gen4 U.2 drives
// (datacenter U.2 sheets give 2-4 GB/s sequential write and 3-7 read). No vendor figure
// replaces it: the DGX user guides and datasheets give the drives' count and capacity only,
// and the drive model inside a DGX varies by shipment, so no one drive datasheet applies.
// docs/inputs.md says so; give the cluster's fio figure as nvme_GBps_per_node.
// GB200 and GB300 racks (a 72-GPU node) keep the 8-drive default: no per-rack figure is sourced.
void add_nvme(std::vector<Preset>& presets) {
  for (Preset& p : presets) {
    const std::string& n = p.gpu.name;
    const bool gen3 = n.rfind("V100", 0) == 0;
    const double drives = n == "V100-16GB" || n == "A100-40GB" ? 4.0 : 8.0;
    const double drive_TB = n == "V100-16GB" ? 1.92 : 3.84;
    p.nvme_TB = drives * drive_TB;
    p.nvme_GBps = drives * (gen3 ? 2.0 : 3.5);
  }
}

// Per-step ring latencies: NCCL's own tuning model puts a ring hop at a few microseconds over
// NVLink and more across InfiniBand; these are defaults for `calibrate` to replace.
// Measured maximum achievable matmul fractions (GpuSpec::achievable_matmul_fraction): S. Bekman,
// "Machine Learning Engineering", compute/accelerator/README.md, MAMF table (bf16). Parts
// built on a measured die take that die's figure: H800, H200 ("H200 is the same") and the 96 GB
// H100 are H100 dies; the 96 GB part's fraction applies to its estimated peak. This workplace's
// H200 measured 769-798 TFLOP/s on an 8192^3 bf16 GEMM (0.78-0.81), in line. V100 has no row
// there; its figure is Baidu's DeepBench (baidu-research/DeepBench @ da81ba78,
// results/train/DeepBench_NV_V100.xlsx, sheet "Results - FP16 ip, Mixed math": DGX-1 V100 SXM2,
// CUDA 10.1.243, cublasGemmEx with tensor ops, fp16 inputs and fp32 accumulation, mean of 400
// calls after a warm-up, code/nvidia/gemm_bench.cu): its best of 160 GEMMs is M=4096 N=7000
// K=4096 NN in 2.092 ms, 112.3 TFLOP/s of 125 (0.898); the next nine reach 105.7-109.4.
// Both V100 presets take it (the DGX-2's SXM3 part has the same 125 TFLOP/s peak).
void add_achievable_matmul(std::vector<Preset>& p) {
  for (Preset& preset : p) {
    GpuSpec& g = preset.gpu;
    const std::string_view n = g.name;
    if (n.starts_with("A100")) {
      g.achievable_matmul_fraction = 271.2 / 312;  // A100 SXM
    } else if (n.starts_with("H100") || n.starts_with("H200") || n.starts_with("H800")) {
      g.achievable_matmul_fraction = 794.5 / 989;
    } else if (n.starts_with("B200")) {
      g.achievable_matmul_fraction = 1745.0 / 2250;
    } else if (n.starts_with("GB200")) {
      g.achievable_matmul_fraction = 1822.0 / 2500;  // GB200 SXM
    } else if (n.starts_with("B300")) {
      g.achievable_matmul_fraction = 1769.0 / 2250;  // B300 SXM
    } else if (n.starts_with("GB300")) {
      // Not in the table: the unmeasured default, not B300's (GB200 and B200, one die, differ).
      g.achievable_matmul_fraction = kUnmeasuredMatmulFraction;
    } else if (n.starts_with("V100")) {
      g.achievable_matmul_fraction = 112.3 / 125;  // DeepBench, V100 SXM2, cuBLAS 10.1
    }
    g.gemm_efficiency = in_step_gemm_efficiency(g, kPresetGemmShare);
  }
}

// Per-hop latency of NCCL's ring at the Simple protocol, the one large messages run: 3.4 us over
// NVLink and 14.0 us over the network, NCCL's own tuning model (src/graph/tuning.cc, `hwLat`,
// "Latencies in us", the 2.19-2.2x line; validation/corpus/NOTES.md, fourteenth pass). The
// other protocols and the tree take NCCL's values for the same link (collectives.cc).
constexpr double kIntraLatencyUs = 3.4;
constexpr double kInterLatencyUs = 14.0;

std::vector<Preset> presets() {
  std::vector<Preset> p;
  auto gpu = [](const char* name, double bf16_tflops, double fp32_tflops, double hbm_GB,
                double hbm_GBps, double nvlink_GBps, std::int64_t sms, const char* source) {
    GpuSpec g;
    g.name = name;
    g.peak_bf16_flops_per_s = bf16_tflops * kTFLOP;
    g.peak_fp16_flops_per_s = bf16_tflops * kTFLOP;
    g.peak_fp32_flops_per_s = fp32_tflops * kTFLOP;
    g.hbm_bytes = hbm_GB * kGB;
    g.hbm_bytes_per_s = hbm_GBps * kGB;
    g.nvlink_bytes_per_s = nvlink_GBps * kGB;
    g.sm_count = sms;
    g.source = source;
    g.memory_rates = MemoryRates::kPublished;
    return g;
  };
  // FP8 (Hopper and Blackwell): dense FP8 is twice dense bf16 on each part (H100 SXM 1,978.9
  // against 989.4, hardware.json; B200 4,500 against 2,250). A100 has no FP8 tensor cores.
  // A100: 312 TFLOP/s bf16 dense, 19.5 fp32; 40 GB HBM2 at 1555 GB/s or 80 GB HBM2e at
  // 2039 GB/s; NVLink3 300 GB/s per direction; 108 SMs. Intra-node ring busbw 230 GB/s
  // (nccl-tests #149); HDR 200 Gb/s per GPU = 25 GB/s line, ~23 achievable (same 92% as NDR's
  // 46/50 in nccl-tests #290); PCIe gen4 x16 31.5 GB/s; DGX A100: 1 TB (40GB) or 2 TB (80GB) host
  // memory, 2x AMD Rome 8-channel DDR4-3200 = 410 GB/s.
  p.push_back({gpu("A100-40GB", 312, 19.5, 40, 1555, 300, 108,
                   "NVIDIA A100 datasheet; hardware.json A100-SXM4-40GB"),
               8, 230, 23, 31.5, 1024, 410});
  p.push_back({gpu("A100-80GB", 312, 19.5, 80, 2039, 300, 108,
                   "NVIDIA A100 datasheet; hardware.json A100-SXM4-80GB"),
               8, 230, 23, 31.5, 2048, 410});
  // H100 SXM5: 989.4 TFLOP/s bf16 dense, 66.9 fp32; 80 GB HBM3 at 3350 GB/s; NVLink4 450 GB/s
  // per direction; 132 SMs. Ring busbw without NVLS ~370 GB/s (nccl-tests #212); NDR 400 Gb/s
  // 46-48 GB/s per NIC (nccl-tests #290); PCIe gen5 63 GB/s; DGX H100 2 TB host memory,
  // 2x Xeon 8480C 8-channel DDR5-4800 = 614 GB/s.
  p.push_back({gpu("H100-80GB", 989.4, 66.9, 80, 3350, 450, 132,
                   "NVIDIA Hopper whitepaper; hardware.json H100-SXM5-80GB"),
               8, 370, 46, 63, 2048, 614});
  p.back().gpu.peak_fp8_flops_per_s = 2.0 * p.back().gpu.peak_bf16_flops_per_s;
  // H800 SXM (the export H100, DeepSeek-V2/V3's clusters): the H100 die and memory with NVLink
  // cut to 400 GB/s both ways (200 per direction); an 8-GPU all-reduce measured 215 GB/s busbw
  // (hardware.json, nccl #1374; DeepSeek-V3 sec. 3.2.2 quotes 160 GB/s of NVLink against
  // 50 GB/s of IB per GPU); 400 Gb/s InfiniBand per GPU as H100's.
  p.push_back({gpu("H800-80GB", 989.4, 66.9, 80, 3350, 200, 132,
                   "H100 SXM die and memory (hardware.json H100-SXM5-80GB); NVLink 400 GB/s "
                   "bidirectional, 215 GB/s 8-GPU busbw (hardware.json, nccl #1374)"),
               8, 215, 46, 63, 2048, 614});
  p.back().gpu.peak_fp8_flops_per_s = 2.0 * p.back().gpu.peak_bf16_flops_per_s;
  // H100 96 GB HBM2e at 500 W (Meta's Grand Teton hosts, torchtitan's 2024-12 benchmarks): the
  // H100 die with 96 GB at 2400 GB/s and NVLink4; 400 Gb/s RDMA per GPU. Its peak is unpublished,
  // "between SXM and NVL" (torchtitan's footnote): the die's peaks at 500 W between the powers
  // NVIDIA publishes them at (at_power_limit: 886.5 TFLOP/s bf16, between H100 NVL's 835 at
  // 400 W and SXM's 989.4 at 700 W).
  {
    Preset h96{gpu("H100-96GB", 989.4, 66.9, 96, 2400, 450, 132,
                   "hardware.json H100 96GB HBM2e @500W; the H100 SXM5 die's peaks at 700 W"),
               8, 370, 46, 63, 2048, 614};
    h96.gpu.peak_fp8_flops_per_s = 2.0 * h96.gpu.peak_bf16_flops_per_s;
    h96.gpu.architecture = "hopper";
    h96.gpu.board_power_w = 700;
    h96.gpu = *at_power_limit(h96.gpu, 500);
    p.push_back(h96);
  }
  // H200: the H100 die with 141 GB HBM3e at 4800 GB/s.
  p.push_back({gpu("H200-141GB", 989.4, 66.9, 141, 4800, 450, 132,
                   "hardware.json H200-SXM-141GB"),
               8, 370, 46, 63, 2048, 614});
  p.back().gpu.peak_fp8_flops_per_s = 2.0 * p.back().gpu.peak_bf16_flops_per_s;
  // B200 (HGX, 1000 W): 2250 TFLOP/s bf16 dense, 80 fp32; 192 GB HBM3e (about 180 usable) at
  // 8000 GB/s; NVLink5 900 GB/s per direction; 148 SMs. Ring busbw assumed at H100's 82% of
  // line rate (no published figure in hardware.json): 740 GB/s.
  p.push_back({gpu("B200-192GB", 2250, 80, 180, 8000, 900, 148,
                   "hardware.json B200 (HGX B200, 1000 W); 180 GB usable per GPU"),
               8, 740, 46, 63, 2048, 614});
  p.back().gpu.peak_fp8_flops_per_s = 2.0 * p.back().gpu.peak_bf16_flops_per_s;
  // Blackwell's FP4 tensor cores (NVFP4, E2M1 with block scales): dense FP4 is twice dense FP8,
  // 9,000 TFLOP/s on HGX B200 (hardware.json B200 fp4_dense; NVIDIA's HGX B200 table gives 18
  // PFLOPS FP4 with sparsity, 9 PFLOPS FP8/FP6 with sparsity, i.e. 9 / 4.5 dense).
  p.back().gpu.peak_fp4_flops_per_s = 2.0 * p.back().gpu.peak_fp8_flops_per_s;
  // GB200 (the B200 die of a GB200 superchip at 1,200 W, in a GB200 NVL72 rack): 2,500 TFLOP/s
  // bf16, 5,000 FP8, 10,000 FP4 dense (NVIDIA's GB200 NVL72 per-GPU table, 5 / 10 / 20 PFLOPS
  // with sparsity, halved as for HGX B200; the 1,200 W point of kBlackwellPeakByPower); 186 GB
  // HBM3e (NVIDIA's label) at 8,000 GB/s; 148 SMs. The node is the NVLink domain: 72 GPUs over
  // NVLink 5 and NVSwitch, 900 GB/s per direction, at the B200 preset's ring busbw (740: the
  // presets' intra figure is a ring's; the rack's measured all-reduce, 835-847 GB/s at 8 GiB,
  // coreweave/nccl-tests README, has NVLS, which the collectives do not model). Across racks one
  // ConnectX-7 NDR 400 Gb/s per GPU (MLPerf v5.0 / v5.1 systems JSONs, "4x ConnectX-7 IB NDR
  // 400Gb/s" per 4-GPU tray): 46 GB/s, the H100 preset's. Host link: each Grace's NVLink-C2C,
  // 450 GB/s per direction, shared by its two GPUs: 225. Host memory: 36 Grace CPUs per rack,
  // 480 GB LPDDR5X at 384 GB/s each (the 480 GB part's bandwidth, NVIDIA's Grace tuning guide as
  // quoted by Verda's GB300 report). Figures and sources:
  // bench/results/mlperf-gb-drafts-2026-12-07/preset_sources.md; the rules that chose among
  // them: validation/corpus/NOTES.md, fifty-second pass.
  p.push_back({gpu("GB200-186GB", 2500, 80, 186, 8000, 900, 148,
                   "NVIDIA GB200 NVL72 (per GPU, 1200 W); NVL72 rack as one NVLink node"),
               72, 740, 46, 225, 36 * 480e9 / kGiB, 36 * 384.0});
  p.back().gpu.peak_fp8_flops_per_s = 2.0 * p.back().gpu.peak_bf16_flops_per_s;
  p.back().gpu.peak_fp4_flops_per_s = 2.0 * p.back().gpu.peak_fp8_flops_per_s;
  p.back().gpu.board_power_w = 1200;
  // Blackwell Ultra (160 SMs; NVIDIA, "Inside NVIDIA Blackwell Ultra", developer blog). GB300 in a
  // GB300 NVL72 rack: 2,500 TFLOP/s bf16, 5,000 FP8 dense, 15,000 dense NVFP4 (the blog), 288 GB
  // HBM3e at 8,000 GB/s (the blog); one ConnectX-8 XDR 800 Gb/s per GPU (MLPerf v5.1 systems
  // JSONs): 92 GB/s at the 92% of line rate the NDR figure uses; 17 TB of LPDDR5X at 14 TB/s per
  // rack (Verda's GB300 report). Node, NVLink and host link as GB200's.
  p.push_back({gpu("GB300-288GB", 2500, 80, 288, 8000, 900, 160,
                   "NVIDIA Blackwell Ultra blog; GB300 NVL72 (per GPU); NVL72 rack as one NVLink "
                   "node"),
               72, 740, 92, 225, 17e12 / kGiB, 14000});
  p.back().gpu.peak_fp8_flops_per_s = 2.0 * p.back().gpu.peak_bf16_flops_per_s;
  p.back().gpu.peak_fp4_flops_per_s = 15000 * kTFLOP;
  // HGX B300 (8 GPUs, x86 host): 2,250 TFLOP/s bf16, 4,500 FP8 dense; FP4 13,500 dense (NVIDIA's
  // HGX B300 table, 108 PFLOPS dense per 8 GPUs: NVIDIA's figure for this product form rather
  // than the GB300 die's 15,000); 270 GB (the MLPerf product name B300-SXM-270GB) at 7,700 GB/s
  // (DGX B300 datasheet, as Verda quotes it, against the blog's 8,000 for the die); 8x
  // ConnectX-8 XDR 800 Gb/s (Nebius's MLPerf v5.1 systems JSON): 92 GB/s per GPU; PCIe gen6 x16,
  // 126 GB/s. Host memory and bandwidth: none published, the B200 node's.
  p.push_back(
      {gpu("B300-270GB", 2250, 80, 270, 7700, 900, 160, "NVIDIA HGX B300 / DGX B300 (per GPU)"), 8,
       740, 92, 126, 2048, 614});
  p.back().gpu.peak_fp8_flops_per_s = 2.0 * p.back().gpu.peak_bf16_flops_per_s;
  p.back().gpu.peak_fp4_flops_per_s = 13500 * kTFLOP;
  // V100 SXM2/SXM3 (Volta; Megatron-LM 2019, ZeRO, Turing-NLG): 125 TFLOP/s fp16 tensor-core
  // dense, 15.7 fp32, no bf16 (Volta's tensor cores take fp16 only); HBM2 at 900 GB/s; six
  // NVLink2 links of 25 GB/s per direction = 150 GB/s; 80 SMs (NVIDIA V100 datasheet and
  // Volta whitepaper). Ring busbw at H100's 82% of NVLink line rate (no published figure in
  // hardware.json): 123 GB/s. EDR InfiniBand 100 Gb/s = 12.5 GB/s line, 11.5 at NDR's 92%
  // (nccl-tests #290), one NIC per two GPUs in both DGX-1 (4 per 8) and DGX-2 (8 per 16):
  // 5.75 GB/s per GPU. PCIe gen3 x16 15.75 GB/s. 16 GB: DGX-1 (8 GPUs, 512 GB host memory,
  // 2x Xeon E5-2698 v4 4-channel DDR4-2400 = 154 GB/s); 32 GB: DGX-2 (16 GPUs over NVSwitch,
  // 1.5 TB, 2x Xeon 8168 6-channel DDR4-2666 = 256 GB/s).
  p.push_back({gpu("V100-16GB", 125, 15.7, 16, 900, 150, 80,
                   "NVIDIA V100 datasheet (SXM2); DGX-1 node"),
               8, 123, 5.75, 15.75, 512, 154});
  p.back().gpu.peak_bf16_flops_per_s = 0;
  p.push_back({gpu("V100-32GB", 125, 15.7, 32, 900, 150, 80,
                   "NVIDIA V100 datasheet (SXM2/SXM3); DGX-2 node"),
               16, 123, 5.75, 15.75, 1536, 256});
  p.back().gpu.peak_bf16_flops_per_s = 0;
  // The die each part is built on (H800, H200 and the 96 GB part are H100 dies; B300 and GB300
  // the Blackwell Ultra die, whose attention NVIDIA measured apart: core/cost/attention_rates.cc).
  for (Preset& preset : p) {
    const std::string_view n = preset.gpu.name;
    preset.gpu.architecture = n.starts_with("A100")                             ? "ampere"
                              : n.starts_with("B300") || n.starts_with("GB300") ? "blackwell-ultra"
                              : n.starts_with("B") || n.starts_with("GB")       ? "blackwell"
                              : n.starts_with("V100")                           ? "volta"
                                                                                : "hopper";
  }
  // The board power each part's peaks are for (hardware.json tdp_w; H800 and H200 are the H100
  // SXM5 die at its 700 W; V100: not in hardware.json, left unknown; Blackwell Ultra: its peaks at
  // other powers are not published, so left unknown and a power limit is refused rather than
  // scaled on the B200 die's curve).
  for (Preset& preset : p) {
    const std::string_view n = preset.gpu.name;
    if (preset.gpu.board_power_w > 0) continue;
    preset.gpu.board_power_w =
        n.starts_with("A100")                                                      ? 400
        : n.starts_with("B200")                                                    ? 1000
        : n.starts_with("V100") || n.starts_with("B300") || n.starts_with("GB300") ? 0
                                                                                   : 700;
  }
  add_achievable_matmul(p);
  add_nvme(p);
  return p;
}

std::string normalise(std::string_view s) {
  std::string out;
  for (char c : s)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

Result<Preset> find_preset(std::string_view name) {
  const std::string key = normalise(name);
  for (const auto& p : presets()) {
    if (normalise(p.gpu.name) == key) return p;
  }
  // Accept the datasheet spellings of hardware.json too.
  // clang-format off
  static const std::pair<const char*, const char*> aliases[] = {
      {"A100SXM440GB", "A100-40GB"}, {"A100SXM480GB", "A100-80GB"},
      {"H100SXM580GB", "H100-80GB"}, {"H100SXM", "H100-80GB"},
      {"H100", "H100-80GB"},         {"H200SXM141GB", "H200-141GB"},
      {"H200", "H200-141GB"},        {"B200", "B200-192GB"},
      {"GB200", "GB200-186GB"},      {"GB300", "GB300-288GB"},
      {"B300", "B300-270GB"},        {"B300SXM270GB", "B300-270GB"},
      {"H10096GBHBM2E500W", "H100-96GB"}, {"H800", "H800-80GB"},
      {"H800SXM580GB", "H800-80GB"}, {"V100SXM216GB", "V100-16GB"},
      {"V100SXM232GB", "V100-32GB"}, {"V100SXM332GB", "V100-32GB"},
      {"TESLAV100SXM216GB", "V100-16GB"}, {"TESLAV100SXM232GB", "V100-32GB"}};
  // clang-format on
  for (const auto& [alias, target] : aliases) {
    if (key == alias) return find_preset(target);
  }
  std::string known;
  for (const auto& n : gpu_preset_names()) known += (known.empty() ? "" : ", ") + n;
  return Status::Error("unknown GPU \"" + std::string(name) + "\" (known: " + known + ")");
}

ClusterSpec cluster_from_preset(const Preset& p, std::int64_t num_nodes,
                                std::int64_t gpus_per_node) {
  ClusterSpec c;
  c.gpu = p.gpu;
  c.num_nodes = num_nodes;
  c.gpus_per_node = gpus_per_node;
  c.intra_node_bytes_per_s = p.intra_GBps * kGB;
  c.intra_node_latency_s = kIntraLatencyUs * kUs;
  c.inter_node_bytes_per_s = p.inter_GBps * kGB;
  c.inter_node_latency_s = kInterLatencyUs * kUs;
  c.collective_model = CollectiveModel::kNccl;
  c.pcie_bytes_per_s = p.pcie_GBps * kGB;
  c.host_memory_bytes_per_node = p.host_GiB * kGiB;
  c.host_memory_bytes_per_s_per_node = p.host_GBps * kGB;
  c.nvme_bytes_per_node = p.nvme_TB * kTB;
  c.nvme_bytes_per_s_per_node = p.nvme_GBps * kGB;
  c.name = std::to_string(num_nodes) + " x " + std::to_string(gpus_per_node) + " " + p.gpu.name;
  return c;
}

}  // namespace

double shared_nic_bytes_per_s(std::int64_t nics, double line_Gbps, std::int64_t gpus_per_node) {
  return static_cast<double>(nics) * line_Gbps / 8.0 * kGB * kNicAchievableFraction /
         static_cast<double>(std::max<std::int64_t>(1, gpus_per_node));
}

std::vector<std::string> gpu_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.gpu.name);
  return names;
}

Result<std::int64_t> preset_gpus_per_node(std::string_view name) {
  auto p = find_preset(name);
  if (!p.ok()) return p.status();
  return p->gpus_per_node;
}

Result<GpuSpec> gpu_preset(std::string_view name) {
  auto p = find_preset(name);
  if (!p.ok()) return p.status();
  return p->gpu;
}

Result<ClusterSpec> make_cluster(std::string_view gpu_name, std::int64_t total_gpus,
                                 std::int64_t gpus_per_node) {
  auto p = find_preset(gpu_name);
  if (!p.ok()) return p.status();
  if (total_gpus < 1 || total_gpus > ClusterLimits::kMaxGpus)
    return Status::Error("--gpus: value " + std::to_string(total_gpus) +
                         " is out of range [1, " + std::to_string(ClusterLimits::kMaxGpus) + "]");
  if (gpus_per_node < 1 || gpus_per_node > ClusterLimits::kMaxGpusPerNode)
    return Status::Error("--gpus-per-node: value " + std::to_string(gpus_per_node) +
                         " is out of range [1, 1024]");
  if (total_gpus < gpus_per_node) return cluster_from_preset(*p, 1, total_gpus);
  if (total_gpus % gpus_per_node != 0)
    return Status::Error("--gpus: value " + std::to_string(total_gpus) +
                         " is not a multiple of --gpus-per-node=" + std::to_string(gpus_per_node));
  return cluster_from_preset(*p, total_gpus / gpus_per_node, gpus_per_node);
}

Json gpu_to_json(const GpuSpec& g) {
  Json j;
  j["name"] = g.name;
  j["bf16_TFLOPs"] = g.peak_bf16_flops_per_s / kTFLOP;
  j["fp16_TFLOPs"] = g.peak_fp16_flops_per_s / kTFLOP;
  j["fp32_TFLOPs"] = g.peak_fp32_flops_per_s / kTFLOP;
  if (g.peak_fp8_flops_per_s > 0) j["fp8_TFLOPs"] = g.peak_fp8_flops_per_s / kTFLOP;
  if (g.peak_fp4_flops_per_s > 0) j["fp4_TFLOPs"] = g.peak_fp4_flops_per_s / kTFLOP;
  j["hbm_GB"] = g.hbm_bytes / kGB;
  j["hbm_GBps"] = g.hbm_bytes_per_s / kGB;
  j["nvlink_GBps"] = g.nvlink_bytes_per_s / kGB;
  j["sm_count"] = g.sm_count;
  j["gemm_efficiency"] = g.gemm_efficiency;
  if (g.achievable_matmul_fraction > 0)
    j["achievable_matmul_fraction"] = g.achievable_matmul_fraction;
  j["memory_efficiency"] = g.memory_efficiency;
  j["memory_rates"] = g.memory_rates == MemoryRates::kPublished ? "published" : "uniform";
  if (g.board_power_w > 0) j["board_power_W"] = g.board_power_w;
  // The die, so that a written cluster read back keeps its published attention rates.
  if (!g.architecture.empty()) j["architecture"] = g.architecture;
  j["source"] = g.source;
  return j;
}

namespace {
Result<GpuSpec> gpu_from_json(const Json& j, const std::string& where) {
  GpuSpec g;
  JsonReader r(j, where + " gpu");
  r.get_string("name", g.name, true);
  // A custom GPU may start from a preset ("base") and override figures.
  std::string base;
  if (r.get_string("base", base, false) && !r.failed()) {
    auto p = gpu_preset(base);
    if (!p.ok()) return Status::Error(where + " gpu: field 'base': " + p.status().message());
    std::string name = g.name;
    g = *p;
    g.name = name;
  }
  const bool need = base.empty();
  double v = 0;
  // bf16 0 is a GPU without bf16 (Volta), which must then give its fp16 rate.
  const bool has_bf16 = r.get_double("bf16_TFLOPs", v, 0, 1e6, need);
  if (has_bf16) g.peak_bf16_flops_per_s = v * kTFLOP;
  if (has_bf16 || need) g.peak_fp16_flops_per_s = g.peak_bf16_flops_per_s;
  if (r.get_double("fp16_TFLOPs", v, 1e-12, 1e6, false)) g.peak_fp16_flops_per_s = v * kTFLOP;
  if (!r.failed() && g.peak_fp16_flops_per_s <= 0)
    return Status::Error(where + " gpu: field 'fp16_TFLOPs' is needed when 'bf16_TFLOPs' is 0 "
                         "(a GPU without bf16)");
  if (r.get_double("fp32_TFLOPs", v, 1e-12, 1e6, need)) g.peak_fp32_flops_per_s = v * kTFLOP;
  if (r.get_double("fp8_TFLOPs", v, 1e-12, 1e6, false)) g.peak_fp8_flops_per_s = v * kTFLOP;
  if (r.get_double("fp4_TFLOPs", v, 1e-12, 1e6, false)) g.peak_fp4_flops_per_s = v * kTFLOP;
  if (r.get_double("hbm_GB", v, 1e-12, 1e6, need)) g.hbm_bytes = v * kGB;
  if (r.get_double("hbm_GBps", v, 1e-12, 1e6, need)) g.hbm_bytes_per_s = v * kGB;
  if (r.get_double("nvlink_GBps", v, 0, 1e6, false)) g.nvlink_bytes_per_s = v * kGB;
  r.get_int("sm_count", g.sm_count, 1, 100000, need);
  r.get_double("achievable_matmul_fraction", g.achievable_matmul_fraction, 0.01, 1.0, false);
  // Not given: the presets' share of the part's achievable matmul rate (its own, or the one it
  // takes from its base, or kUnmeasuredMatmulFraction).
  if (!r.get_double("gemm_efficiency", g.gemm_efficiency, 0.01, 1.0, false))
    g.gemm_efficiency = in_step_gemm_efficiency(g, kPresetGemmShare);
  // A GPU without a base times its memory-bound kernels at the published rates, as the presets
  // do; one that gives memory_efficiency (and not memory_rates) at that one figure.
  if (need) g.memory_rates = MemoryRates::kPublished;
  if (r.get_double("memory_efficiency", g.memory_efficiency, 0.01, 1.0, false))
    g.memory_rates = MemoryRates::kUniform;
  int rates = 0;
  if (r.get_choice("memory_rates", rates, {"uniform", "published"}, false))
    g.memory_rates = rates == 1 ? MemoryRates::kPublished : MemoryRates::kUniform;
  r.get_string("source", g.source, false);
  int arch = 0;
  if (r.get_choice("architecture", arch,
                   {"ampere", "hopper", "blackwell", "blackwell-ultra", "volta"}, false))
    g.architecture = std::array{"ampere", "hopper", "blackwell", "blackwell-ultra", "volta"}[arch];
  // The board power its peaks are for, and a limit it runs under (at_power_limit).
  r.get_double("board_power_W", g.board_power_w, 1, 1e5, false);
  double limit_w = 0;
  const bool limited = r.get_double("power_limit_W", limit_w, 1, 1e5, false);
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  if (limited) {
    auto at = at_power_limit(g, limit_w);
    if (!at.ok()) return Status::Error(where + " gpu: field 'power_limit_W': " + at.status().message());
    return at;
  }
  return g;
}
}  // namespace

Result<ClusterSpec> cluster_from_json(const Json& j, std::string_view source) {
  const std::string where = "cluster '" + std::string(source) + "'";
  JsonReader r(j, where);
  ClusterSpec c;
  r.get_string("name", c.name, false);
  r.accept("notes");
  std::int64_t nodes = 1, per_node = 8;
  r.get_int("num_nodes", nodes, 1, ClusterLimits::kMaxGpus, true);
  r.get_int("gpus_per_node", per_node, 1, ClusterLimits::kMaxGpusPerNode, true);
  if (r.failed()) return r.finish();
  if (nodes * per_node > ClusterLimits::kMaxGpus)
    return Status::Error(where + ": num_nodes x gpus_per_node = " +
                         std::to_string(nodes * per_node) + " exceeds the limit of " +
                         std::to_string(ClusterLimits::kMaxGpus) + " GPUs");
  // The GPU: a preset name, or an object (optionally starting from a preset "base").
  auto it = j.find("gpu");
  r.accept("gpu");
  if (it == j.end()) return Status::Error(where + ": missing required field 'gpu'");
  Preset base_links{};
  if (it->is_string()) {
    auto p = find_preset(it->get<std::string>());
    if (!p.ok()) return Status::Error(where + ": field 'gpu': " + p.status().message());
    base_links = *p;
  } else if (it->is_object()) {
    auto g = gpu_from_json(*it, where);
    if (!g.ok()) return g.status();
    // gpu_from_json has checked that "base", when present and not null, is a known preset.
    const auto b = it->find("base");
    const std::string base =
        b != it->end() && b->is_string() ? b->get<std::string>() : std::string("H100-80GB");
    auto p = find_preset(base);
    if (!p.ok()) p = find_preset("H100-80GB");
    base_links = *p;
    base_links.gpu = *g;
  } else {
    return Status::Error(where + ": field 'gpu': expected a preset name or an object, got " +
                         json_value_for_message(*it));
  }
  std::string name = c.name;
  c = cluster_from_preset(base_links, nodes, per_node);
  if (!name.empty()) c.name = name;
  double v = 0;
  if (r.get_double("intra_node_GBps", v, 1e-6, 1e6, false)) c.intra_node_bytes_per_s = v * kGB;
  if (r.get_double("intra_node_latency_us", v, 0, 1e6, false)) c.intra_node_latency_s = v * kUs;
  if (r.get_double("inter_node_GBps", v, 1e-6, 1e6, false)) c.inter_node_bytes_per_s = v * kGB;
  if (r.get_double("inter_node_latency_us", v, 0, 1e6, false)) c.inter_node_latency_s = v * kUs;
  r.get_int("nics_per_node", c.nics_per_node, 1, ClusterLimits::kMaxGpusPerNode, false);
  int model = -1;
  if (r.get_choice("collective_model", model, {"alpha-beta", "nccl"}, false))
    c.collective_model = static_cast<CollectiveModel>(model);
  if (r.get_double("pcie_GBps", v, 1e-6, 1e6, false)) c.pcie_bytes_per_s = v * kGB;
  // GB like every other figure the tools print; the GiB key of earlier versions is still read.
  const bool host_gb = r.get_double("host_memory_GB_per_node", v, 0, 1e9, false);
  if (host_gb) c.host_memory_bytes_per_node = v * kGB;
  if (r.get_double("host_memory_GiB_per_node", v, 0, 1e9, false)) {
    c.host_memory_bytes_per_node = v * kGiB;
    if (host_gb)
      r.fail_field("host_memory_GiB_per_node",
                   "host memory is also given as host_memory_GB_per_node (GB, 10^9 bytes); give one");
  }
  if (r.get_double("host_memory_GBps_per_node", v, 1e-6, 1e6, false))
    c.host_memory_bytes_per_s_per_node = v * kGB;
  if (r.get_double("nvme_TB_per_node", v, 0, 1e6, false)) c.nvme_bytes_per_node = v * kTB;
  if (r.get_double("nvme_GBps_per_node", v, 1e-6, 1e6, false))
    c.nvme_bytes_per_s_per_node = v * kGB;
  TRAINPLAN_RETURN_IF_ERROR(r.finish());
  return c;
}

Json cluster_to_json(const ClusterSpec& c) {
  Json j;
  j["name"] = c.name;
  j["gpu"] = gpu_to_json(c.gpu);
  j["num_nodes"] = c.num_nodes;
  j["gpus_per_node"] = c.gpus_per_node;
  j["intra_node_GBps"] = c.intra_node_bytes_per_s / kGB;
  j["intra_node_latency_us"] = c.intra_node_latency_s / kUs;
  j["inter_node_GBps"] = c.inter_node_bytes_per_s / kGB;
  j["inter_node_latency_us"] = c.inter_node_latency_s / kUs;
  if (c.nics_per_node > 0) j["nics_per_node"] = c.nics_per_node;  // 0: one per GPU, not written
  j["collective_model"] = c.collective_model == CollectiveModel::kNccl ? "nccl" : "alpha-beta";
  j["pcie_GBps"] = c.pcie_bytes_per_s / kGB;
  j["host_memory_GB_per_node"] = c.host_memory_bytes_per_node / kGB;
  j["host_memory_GBps_per_node"] = c.host_memory_bytes_per_s_per_node / kGB;
  j["nvme_TB_per_node"] = c.nvme_bytes_per_node / kTB;
  j["nvme_GBps_per_node"] = c.nvme_bytes_per_s_per_node / kGB;
  return j;
}

}  // namespace trainplan
