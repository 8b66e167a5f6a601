// Heap allocations inside a training step of the CPU executor (issue 28: "no allocation in the
// step"). This binary replaces malloc (glibc) to count every allocation, so it is its own
// executable. It runs small GPTs on one rank (local backend) under a set of plans (ZeRO 0-3,
// selective and full recompute, a zero-bubble schedule, several micro-batches, an MoE model)
// and under mpirun -np 4 (tensor, sequence, context, pipeline and expert parallelism; ZB-H1,
// zb-v, DualPipe), and checks the steady state: once the first step has sized every buffer, a
// step makes no heap allocation at all, and, on one rank under execute's allocation policy
// (executor/allocator.h), faults no page in. It prints the count, the bytes, the time spent in
// the allocator and the page faults per step; with STEP_ALLOCATIONS_TRACE=1 it also prints the
// call stack of each allocation of step 3.
// Not built with TRAINPLAN_SANITIZE (ASan owns malloc there).
// Run: ctest -R executor_step_allocations --output-on-failure (the counts are printed).
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <execinfo.h>
#include <unistd.h>

#include <sys/resource.h>

#include "executor/allocator.h"
#include "executor/comm.h"
#include "executor/cpu/cpu_stage.h"
#include "executor/cpu/reference_gemm.h"
#include "executor/data.h"
#ifdef TRAINPLAN_HAVE_MPI
#include <mpi.h>

#include "executor/cpu/comm_mpi.h"
#endif
#include "tests/core/test_util.h"

// glibc's allocator entry points, wrapped by the definitions below: a program's own malloc
// replaces the C library's for every library it loads (the glibc manual, "Replacing malloc"),
// which catches Eigen's aligned_malloc (std::malloc) as well as operator new.
extern "C" void* __libc_malloc(std::size_t);
extern "C" void* __libc_calloc(std::size_t, std::size_t);
extern "C" void* __libc_realloc(void*, std::size_t);
extern "C" void* __libc_memalign(std::size_t, std::size_t);

namespace {
std::atomic<long long> g_allocations{0};
std::atomic<long long> g_bytes{0};
std::atomic<long long> g_ns{0};  // time inside the C library's allocator
std::atomic<long long> g_mpi_allocations{0};  // inside MPI calls (the PMPI wrappers below)
thread_local bool t_in_mpi = false;
bool g_trace = false;             // print each allocation's call stack (STEP_ALLOCATIONS_TRACE)
thread_local bool t_in_trace = false;

// The call stack of an allocation, to stderr (backtrace_symbols_fd does not allocate; the
// first backtrace() may, which the guard keeps from recursing).
void print_stack() {
  if (t_in_trace) return;
  t_in_trace = true;
  void* frames[24];
  const int n = backtrace(frames, 24);
  static const char kRule[] = "---- allocation\n";
  (void)!write(2, kRule, sizeof(kRule) - 1);
  backtrace_symbols_fd(frames, n, 2);
  t_in_trace = false;
}

long long now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

// Counts one allocation of `bytes` and the time `allocate` takes.
template <class F>
auto counted(std::size_t bytes, F allocate) {
  if (t_in_mpi) {  // OpenMPI's own: counted apart
    g_mpi_allocations.fetch_add(1, std::memory_order_relaxed);
    return allocate();
  }
  const long long t0 = now_ns();
  auto result = allocate();
  g_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(static_cast<long long>(bytes), std::memory_order_relaxed);
  if (g_trace) print_stack();
  return result;
}
}  // namespace

extern "C" {
void* malloc(std::size_t bytes) noexcept {
  return counted(bytes, [&] { return __libc_malloc(bytes); });
}
void* calloc(std::size_t n, std::size_t bytes) noexcept {
  return counted(n * bytes, [&] { return __libc_calloc(n, bytes); });
}
void* realloc(void* p, std::size_t bytes) noexcept {
  return counted(bytes, [&] { return __libc_realloc(p, bytes); });
}
void* aligned_alloc(std::size_t alignment, std::size_t bytes) noexcept {
  return counted(bytes, [&] { return __libc_memalign(alignment, bytes); });
}
int posix_memalign(void** out, std::size_t alignment, std::size_t bytes) noexcept {
  *out = counted(bytes, [&] { return __libc_memalign(alignment, bytes); });
  return *out == nullptr ? ENOMEM : 0;
}
}

#ifdef TRAINPLAN_HAVE_MPI
// The MPI calls of a step (executor/cpu/comm_mpi.cc), through MPI's profiling interface (the
// MPI standard, "Profiling Interface": a program's MPI_X replaces the library's, which stays
// reachable as PMPI_X): allocations inside them are OpenMPI's, counted apart.
namespace {
struct InMpi {
  InMpi() { t_in_mpi = true; }
  ~InMpi() { t_in_mpi = false; }
};
}  // namespace
extern "C" {
int MPI_Allreduce(const void* in, void* out, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  InMpi mpi;
  return PMPI_Allreduce(in, out, n, t, op, c);
}
int MPI_Reduce_scatter_block(const void* in, void* out, int n, MPI_Datatype t, MPI_Op op,
                             MPI_Comm c) {
  InMpi mpi;
  return PMPI_Reduce_scatter_block(in, out, n, t, op, c);
}
int MPI_Allgather(const void* in, int n, MPI_Datatype t, void* out, int m, MPI_Datatype u,
                  MPI_Comm c) {
  InMpi mpi;
  return PMPI_Allgather(in, n, t, out, m, u, c);
}
int MPI_Alltoall(const void* in, int n, MPI_Datatype t, void* out, int m, MPI_Datatype u,
                 MPI_Comm c) {
  InMpi mpi;
  return PMPI_Alltoall(in, n, t, out, m, u, c);
}
int MPI_Alltoallv(const void* in, const int* n, const int* at, MPI_Datatype t, void* out,
                  const int* m, const int* to, MPI_Datatype u, MPI_Comm c) {
  InMpi mpi;
  return PMPI_Alltoallv(in, n, at, t, out, m, to, u, c);
}
int MPI_Allgatherv(const void* in, int n, MPI_Datatype t, void* out, const int* m,
                   const int* at, MPI_Datatype u, MPI_Comm c) {
  InMpi mpi;
  return PMPI_Allgatherv(in, n, t, out, m, at, u, c);
}
int MPI_Reduce_scatter(const void* in, void* out, const int* n, MPI_Datatype t, MPI_Op op,
                       MPI_Comm c) {
  InMpi mpi;
  return PMPI_Reduce_scatter(in, out, n, t, op, c);
}
int MPI_Isend(const void* data, int n, MPI_Datatype t, int peer, int tag, MPI_Comm c,
              MPI_Request* r) {
  InMpi mpi;
  return PMPI_Isend(data, n, t, peer, tag, c, r);
}
int MPI_Recv(void* data, int n, MPI_Datatype t, int peer, int tag, MPI_Comm c, MPI_Status* s) {
  InMpi mpi;
  return PMPI_Recv(data, n, t, peer, tag, c, s);
}
int MPI_Waitall(int n, MPI_Request* r, MPI_Status* s) {
  InMpi mpi;
  return PMPI_Waitall(n, r, s);
}
}
#endif

namespace trainplan::executor {
namespace {

ModelSpec gpt(int layers, int hidden, int heads, int seq_len) {
  ModelSpec m = testing::gpt_model(layers, hidden, heads, seq_len, /*vocab=*/256);
  m.name = "step allocations";
  m.dropout = false;
  return m;
}

// tests/executor/models/tiny-moe.json's shape at `layers` layers: a dense first layer, then MoE
// layers of 4 experts top-2 with a shared expert. The routed experts receive a different number
// of rows every micro-batch; their buffers are sized for the most they can receive (moe.h).
ModelSpec moe(int layers) {
  ModelSpec m = gpt(layers, 64, 4, 32);
  m.ffn_hidden_size = 64;
  m.num_experts = 4;
  m.experts_per_token = 2;
  m.shared_expert_ffn_size = 32;
  m.dense_layers = {0};
  m.dense_ffn_hidden_size = 128;
  return m;
}

long long minor_faults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

struct Count {
  long long allocations, bytes, allocator_ns, step_ns, page_faults;
};

// Five steps of `model` under `plan` (micro-batches of plan.micro_batch_size, several per step);
// prints each step's count and checks that steps `first_steady` to 5 (every buffer sized by the
// steps before) make no heap allocation and, on one rank (`faults`), fault no pages in: under
// MPI, OpenMPI's own allocations and shared-memory transport fault a few pages per step.
void expect_no_step_allocations(const ModelSpec& model, const Plan& plan, Comm& comm,
                                bool faults, std::size_t first_steady = 2,
                                const TrainOptions& options = {}) {
  auto trainer = make_cpu_trainer(model, plan, options, comm);
  ASSERT_TRUE(trainer.ok()) << describe(plan) << ": " << trainer.status().message();
  const bool trace = std::getenv("STEP_ALLOCATIONS_TRACE") != nullptr;
  std::vector<Count> per_step;
  for (int s = 0; s < 5; ++s) {
    // Built outside the counted region.
    const auto batch = random_batch(3, s, plan.global_batch_size, model.seq_len, 256);
    g_trace = trace && s == 2;
    const long long a0 = g_allocations.load(), b0 = g_bytes.load(), n0 = g_ns.load();
    const long long f0 = minor_faults(), t0 = now_ns(), m0 = g_mpi_allocations.load();
    auto r = (*trainer)->step(batch);
    const long long step_ns = now_ns() - t0;
    per_step.push_back({g_allocations.load() - a0, g_bytes.load() - b0, g_ns.load() - n0, step_ns,
                        minor_faults() - f0});
    g_trace = false;
    ASSERT_TRUE(r.ok()) << r.status().message();
    const long long in_mpi = g_mpi_allocations.load() - m0;
    const Count& c = per_step.back();
    std::printf("rank %lld, %s, step %d: %lld allocations, %lld bytes, %.1f us in the allocator of a %.1f "
                "ms step, %lld page faults; %lld allocations inside MPI calls\n",
                static_cast<long long>(comm.world_rank()), describe(plan).c_str(), s + 1,
                c.allocations, c.bytes, c.allocator_ns / 1e3, c.step_ns / 1e6, c.page_faults,
                in_mpi);
  }
  for (std::size_t s = first_steady - 1; s < 5; ++s) {
    EXPECT_EQ(per_step[s].allocations, 0) << describe(plan) << ", step " << s + 1;
    EXPECT_EQ(per_step[s].bytes, 0) << describe(plan) << ", step " << s + 1;
  }
  // With nothing allocated the steady steps touch only pages the first step mapped. The bound
  // leaves room for the kernel's own bookkeeping faults.
  for (std::size_t s = 2; s < 5 && faults; ++s)
    EXPECT_LE(per_step[s].page_faults, per_step[0].page_faults / 100) << "step " << s + 1;
}

void expect_no_step_allocations(const ModelSpec& model, const Plan& plan,
                                const TrainOptions& options = {}) {
  // The allocation policy `execute` runs with (executor/allocator.h); glibc only.
  if (!keep_freed_memory_mapped()) GTEST_SKIP() << "the C library ignores mallopt";
  auto comm = make_local_comm();
  expect_no_step_allocations(model, plan, *comm, /*faults=*/true, 2, options);
}

Plan one_rank(std::int64_t micro, std::int64_t micro_batches) {
  Plan plan;
  plan.micro_batch_size = micro;
  plan.global_batch_size = micro_batches * micro;
  plan.precision = Precision::kFp32;
  return plan;
}

// The reference kernel `execute` times after every step (executor/cpu/reference_gemm.h):
// its operands and timing buffer come from the constructor, so timing it between steps adds
// no allocation to a run.
TEST(StepAllocations, ReferenceKernelTimingAllocatesNothing) {
  ReferenceGemm reference(ReferenceGemm::kDefaultCalls);
  reference.median_seconds();  // the first call, as the first step, may size Eigen's buffers
  const long long a0 = g_allocations.load(), b0 = g_bytes.load();
  double rate = 0;
  for (int i = 0; i < 3; ++i) rate += reference.flops_per_s();
  EXPECT_GT(rate, 0);
  EXPECT_EQ(g_allocations.load() - a0, 0);
  EXPECT_EQ(g_bytes.load() - b0, 0);
}

// The memory-bound reference (ReferenceTriad, the same header): its arrays come from the
// constructor too.
TEST(StepAllocations, ReferenceTriadTimingAllocatesNothing) {
  ReferenceTriad triad(ReferenceGemm::kDefaultCalls, std::int64_t{1} << 20);
  triad.median_seconds();
  const long long a0 = g_allocations.load(), b0 = g_bytes.load();
  double rate = 0;
  for (int i = 0; i < 3; ++i) rate += triad.bytes_per_s();
  EXPECT_GT(rate, 0);
  EXPECT_EQ(g_allocations.load() - a0, 0);
  EXPECT_EQ(g_bytes.load() - b0, 0);
}

TEST(StepAllocations, SmallGptStepsAllocateNothing) {
  expect_no_step_allocations(gpt(2, 64, 4, 32), one_rank(2, 2));
}

// Issue 28's speed shape (bench/scripts/executor_cpu_speed.sh) with 2 micro-batches of 4: about
// a second of steps on a loaded 2-core machine.
TEST(StepAllocations, Issue28ShapeStepsAllocateNothing) {
  expect_no_step_allocations(gpt(4, 256, 4, 128), one_rank(4, 2));
}

// ZeRO 1-3 on one rank run the sharded code paths: ZeRO-2/3 free a block's full gradient after
// its reduce-scatter, ZeRO-3 its gathered parameters after use (into the pool, workspace.h).
TEST(StepAllocations, ZeroStagesAllocateNothing) {
  for (int stage : {1, 2, 3}) {
    Plan plan = one_rank(2, 3);
    plan.zero_stage = stage;
    expect_no_step_allocations(gpt(2, 64, 4, 32), plan);
  }
}

// The offload tiers (executor/offload.h): the host's copies, the NVMe file's reads and writes and
// the prefetch thread's reads (started once, before the steps) allocate nothing per step.
TEST(StepAllocations, OffloadTiersAllocateNothing) {
  char dir_template[] = "/tmp/trainplan-offload-alloc.XXXXXX";
  const char* dir = ::mkdtemp(dir_template);
  ASSERT_NE(dir, nullptr);
  struct Tier {
    Offload offload;
    OffloadDevice device;
    int zero;
  };
  for (const Tier& t : {Tier{Offload::kOptimizer, OffloadDevice::kCpu, 0},
                        Tier{Offload::kOptimizer, OffloadDevice::kNvme, 2},
                        Tier{Offload::kOptimizerParams, OffloadDevice::kCpu, 3},
                        Tier{Offload::kOptimizerParams, OffloadDevice::kNvme, 3}}) {
    Plan plan = one_rank(2, 3);
    plan.zero_stage = t.zero;
    plan.offload = t.offload;
    plan.offload_device = t.device;
    TrainOptions options;
    options.offload.dir = dir;
    expect_no_step_allocations(gpt(2, 64, 4, 32), plan, options);
  }
  ::rmdir(dir);
}

// Recompute releases a layer's cache but its input in the forward and rebuilds it in the
// backward (full), or rebuilds the softmax only (selective).
TEST(StepAllocations, RecomputeAllocatesNothing) {
  for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
    Plan plan = one_rank(2, 2);
    plan.recompute = r;
    expect_no_step_allocations(gpt(3, 64, 4, 32), plan);
  }
  Plan partial = one_rank(2, 2);  // the first layer recomputed, the others kept
  partial.recompute = Recompute::kFull;
  partial.recompute_num_layers = 1;
  expect_no_step_allocations(gpt(3, 64, 4, 32), partial);
}

// An MoE model on one rank: router, top-k, the counting sort of the dispatch, all four
// experts, the load-balancing loss; with full recompute the layer routes again in the backward.
TEST(StepAllocations, MixtureOfExpertsAllocatesNothing) {
  expect_no_step_allocations(moe(3), one_rank(2, 3));
  Plan recompute = one_rank(2, 2);
  recompute.recompute = Recompute::kFull;
  expect_no_step_allocations(moe(3), recompute);
}

#ifdef TRAINPLAN_HAVE_MPI
// The plans that need several ranks, under `mpirun -np 4` (CTest executor_step_allocations_mpi):
// tensor and sequence parallelism, context parallelism, pipelines (1F1B, interleaved, ZB-H1),
// ZeRO sharded over dp. Every allocation of the process is counted, OpenMPI's included.
bool under_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

void expect_no_step_allocations_mpi(const ModelSpec& model, const Plan& plan,
                                    std::size_t first_steady = 2) {
  if (!under_mpirun()) GTEST_SKIP() << "run under mpirun -np 4";
  if (!keep_freed_memory_mapped()) GTEST_SKIP() << "the C library ignores mallopt";
  int ready = 0;
  MPI_Initialized(&ready);
  if (ready == 0) {
    MPI_Init(nullptr, nullptr);
    std::atexit([] { MPI_Finalize(); });
  }
  auto comm = make_mpi_comm(plan, MPI_COMM_WORLD);
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  expect_no_step_allocations(model, plan, **comm, /*faults=*/false, first_steady);
}

Plan four_ranks(std::int64_t tp, std::int64_t cp, std::int64_t pp, std::int64_t dp) {
  Plan plan = one_rank(2, 4 / dp);
  plan.global_batch_size *= dp;
  plan.tp = tp;
  plan.cp = cp;
  plan.pp = pp;
  plan.dp = dp;
  return plan;
}

TEST(StepAllocationsMpi, TensorSequenceAndPipelineParallel) {
  Plan plan = four_ranks(2, 1, 2, 1);
  plan.sequence_parallel = true;
  plan.zero_stage = 1;
  expect_no_step_allocations_mpi(gpt(4, 64, 4, 32), plan);
}

TEST(StepAllocationsMpi, ContextParallelZero3) {
  Plan plan = four_ranks(1, 2, 1, 2);
  plan.zero_stage = 3;
  expect_no_step_allocations_mpi(gpt(2, 64, 4, 32), plan);
}

TEST(StepAllocationsMpi, InterleavedPipelineZero2) {
  Plan plan = four_ranks(1, 1, 2, 2);
  plan.schedule = Schedule::kInterleaved;
  plan.virtual_stages = 2;
  plan.zero_stage = 2;
  expect_no_step_allocations_mpi(gpt(4, 64, 4, 32), plan);
}

// ZB-H1 holds the weight gradients back from B to W (copies of x and dy); each TP rank keeps its
// rows of a recomputed layer's input (partitioned activations).
TEST(StepAllocationsMpi, ZeroBubbleWithPartitionedFullRecompute) {
  Plan plan = four_ranks(2, 1, 2, 1);
  plan.schedule = Schedule::kZbH1;
  plan.recompute = Recompute::kFull;
  plan.partition_activations = true;
  expect_no_step_allocations_mpi(gpt(4, 64, 4, 32), plan);
}

// Expert parallelism: the dispatch and combine all-to-alls in ep groups of 2, each rank's two
// experts receiving what the routing sends them, and the expert gradients' data-parallel sum.
TEST(StepAllocationsMpi, ExpertParallel) {
  Plan plan = four_ranks(1, 1, 1, 4);
  plan.ep = 2;
  plan.global_batch_size = plan.micro_batch_size * plan.dp * 2;  // 2 micro-batches per replica
  expect_no_step_allocations_mpi(moe(3), plan);
}

// Expert parallelism with a capacity (moe.h's moe_expert_capacity): the routed buffers sized at
// the capacity, what each expert gets over it dropped; the drops change from micro-batch to
// micro-batch, the buffers do not.
TEST(StepAllocationsMpi, ExpertParallelAtCapacity) {
  Plan plan = four_ranks(1, 1, 1, 4);
  plan.ep = 2;
  plan.global_batch_size = plan.micro_batch_size * plan.dp * 2;
  ModelSpec model = moe(3);
  model.moe_capacity_factor = 1.0;
  expect_no_step_allocations_mpi(model, plan);
}

// MoE parallel folding with the experts split over expert_tp 2 (tp 2 with SP, dp 2, ep 2): the
// expert-TP group's counts exchange, and its variable all-gather and reduce-scatter of rows
// whose number follows the routing, into buffers sized for the most they can hold (moe.h).
TEST(StepAllocationsMpi, FoldedExpertTensorParallel) {
  Plan plan = four_ranks(2, 1, 1, 2);
  plan.sequence_parallel = true;
  plan.expert_layout = ExpertLayout::kFolded;
  plan.ep = 2;
  plan.expert_tp = 2;
  expect_no_step_allocations_mpi(moe(3), plan);
}

// zb-v's V: the last stage feeds itself (the trainer's same-stage messages).
TEST(StepAllocationsMpi, ZeroBubbleV) {
  Plan plan = four_ranks(1, 1, 2, 2);
  plan.schedule = Schedule::kZbV;
  plan.virtual_stages = 2;
  expect_no_step_allocations_mpi(gpt(4, 64, 4, 32), plan);
}

// An MoE model under zero-bubble schedules: the W pass holds each routed expert's rows back,
// a number that follows the routing; it reads them in the cache (held from B to W) and copies
// only the output gradients, at an expert's capacity (moe.h), so the pools find them again
// (ZB-H1 and zb-v, pp 2 x dp 2 with ep 2). Both settle after the first step: ZB-H1 on this
// layout used to make one allocation of a micro-batch's activation (16 KiB) in step 2 on the
// first stage, when the pipeline's sends swapped the message buffer into a pass slot (gpt.cc
// now copies; checked by running this test from step 2 before and after that change).
TEST(StepAllocationsMpi, MixtureOfExpertsZeroBubble) {
  for (Schedule schedule : {Schedule::kZbH1, Schedule::kZbV}) {
    Plan plan = four_ranks(1, 1, 2, 2);
    plan.schedule = schedule;
    if (schedule == Schedule::kZbV) plan.virtual_stages = 2;
    plan.ep = 2;
    expect_no_step_allocations_mpi(moe(4), plan, 2);
  }
}

// DualPipe: two directions, each stage holding a copy of its mirror stage's chunk, on 2 stages
// of 2 data-parallel replicas (4 micro-batches each, the fewest it takes).
TEST(StepAllocationsMpi, DualPipe) {
  Plan plan = four_ranks(1, 1, 2, 2);
  plan.schedule = Schedule::kDualPipe;
  plan.virtual_stages = 2;
  plan.global_batch_size = plan.micro_batch_size * plan.dp * 2 * plan.pp;
  expect_no_step_allocations_mpi(gpt(4, 64, 4, 32), plan);
}
#endif

}  // namespace
}  // namespace trainplan::executor
