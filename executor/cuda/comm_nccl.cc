// The NCCL backend; see comm_nccl.h.
#include "executor/cuda/comm_nccl.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/cost/collectives.h"
#include "core/rank_layout.h"

namespace trainplan::executor::cuda {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ncclDataType_t to_nccl(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF64: return ncclFloat64;
  }
  return ncclFloat32;
}

ncclRedOp_t to_nccl(ReduceOp op) { return op == ReduceOp::kMax ? ncclMax : ncclSum; }

std::size_t to_size(std::int64_t n) { return static_cast<std::size_t>(n); }

}  // namespace

std::int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
  }
  return 4;
}

void check_nccl(ncclResult_t r, const char* call, const char* file, int line) {
  if (r == ncclSuccess) return;
  throw CommError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                  ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) + ")");
}

Result<std::unique_ptr<NcclComm>> NcclComm::make(const Plan& plan, const LaunchInfo& info,
                                                 const NcclOptions& options) {
  auto layout = RankLayout::make(plan);
  if (!layout.ok()) return layout.status();
  if (info.size != plan.world_size())
    return Status::Error("the job has " + std::to_string(info.size) + " ranks (" + info.launcher +
                         "), the plan needs " + std::to_string(plan.world_size()));
  auto dev = select_device(info);
  if (!dev.ok()) return dev.status();
  int version = 0;
  TP_NCCL(ncclGetVersion(&version));
  prepare_shared_gpu_env(info, version);

  std::unique_ptr<NcclComm> c(new NcclComm());
  c->options_ = options;
  c->rank_ = info.rank;
  c->size_ = info.size;
  c->device_ = *dev;
  c->sizes_.fill(1);
  c->ranks_.fill(0);
  TP_CUDA(cudaSetDevice(c->device_));

  ncclUniqueId id{};
  if (info.rank == 0) TP_NCCL(ncclGetUniqueId(&id));
  TRAINPLAN_RETURN_IF_ERROR(broadcast_bytes(info, &id, sizeof(id), options.rendezvous_timeout_s));
  TP_NCCL(ncclCommInitRank(&c->world_, info.size, id, info.rank));

  const RankCoord me = layout->coord(info.rank);
  auto split = [&](int color, int key) {
    ncclComm_t out = nullptr;
    TP_NCCL(ncclCommSplit(c->world_, color, key, &out, nullptr));
    return out;
  };
  auto set_group = [&](CommGroup g, ncclComm_t out) {
    c->groups_[idx(g)] = out;
    if (out == nullptr) return;
    int n = 0, r = 0;
    TP_NCCL(ncclCommCount(out, &n));
    TP_NCCL(ncclCommUserRank(out, &r));
    c->sizes_[idx(g)] = n;
    c->ranks_[idx(g)] = r;
  };
  // The same colors and keys as comm_mpi.cc, in the same order on every rank.
  set_group(CommGroup::kTp, split(static_cast<int>(layout->group_color(Axis::kTp, info.rank)),
                                  static_cast<int>(me.tp)));
  set_group(CommGroup::kDp,
            split(static_cast<int>(layout->group_color(Axis::kZeroShard, info.rank)),
                  static_cast<int>(layout->index_in_group(Axis::kZeroShard, info.rank))));
  set_group(CommGroup::kDpReplica,
            split(static_cast<int>(layout->group_color(Axis::kZeroReplica, info.rank)),
                  static_cast<int>(layout->index_in_group(Axis::kZeroReplica, info.rank))));
  const int pp_color = static_cast<int>(layout->group_color(Axis::kPp, info.rank));
  set_group(CommGroup::kPp, split(pp_color, static_cast<int>(me.pp)));
  const bool ends = splits_tied_embedding(plan) && (me.pp == 0 || me.pp == head_stage(plan));
  set_group(CommGroup::kEmbedding,
            split(ends ? static_cast<int>(me.tp + plan.tp * (me.cp + plan.cp * me.dp))
                       : NCCL_SPLIT_NOCOLOR,
                  static_cast<int>(me.pp)));
  for (ncclComm_t& p : c->p2p_) p = split(pp_color, static_cast<int>(me.pp));

  for (cudaStream_t& s : c->streams_) TP_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (cudaStream_t& s : c->p2p_streams_)
    TP_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TP_CUDA(cudaStreamCreateWithFlags(&c->control_stream_, cudaStreamNonBlocking));
  TP_CUDA(cudaEventCreateWithFlags(&c->ordering_event_, cudaEventDisableTiming));
  c->watchdog_ = std::thread([p = c.get()] { p->watchdog_loop(); });
  return c;
}

NcclComm::~NcclComm() {
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  // Best effort: a destructor must not throw. After an abort the handles are gone already.
  if (!aborted_) {
    for (ncclComm_t& g : groups_)
      if (g != nullptr) ncclCommDestroy(g);
    for (ncclComm_t& p : p2p_)
      if (p != nullptr) ncclCommDestroy(p);
    if (world_ != nullptr) ncclCommDestroy(world_);
  }
  for (cudaStream_t s : streams_)
    if (s != nullptr) cudaStreamDestroy(s);
  for (cudaStream_t s : p2p_streams_)
    if (s != nullptr) cudaStreamDestroy(s);
  if (control_stream_ != nullptr) cudaStreamDestroy(control_stream_);
  if (ordering_event_ != nullptr) cudaEventDestroy(ordering_event_);
}

std::string NcclComm::backend_name() const {
  int v = 0;
  ncclGetVersion(&v);
  return "nccl (" + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100) + ", device " + std::to_string(device_) + ")";
}

ncclComm_t NcclComm::comm(CommGroup g) const {
  if (aborted_) throw CommError("NCCL communicators were aborted: " + abort_reason_);
  ncclComm_t c = groups_[idx(g)];
  if (c == nullptr)
    throw CommError("rank " + std::to_string(rank_) + " is not in a " +
                    std::string(to_string(g)) + " group");
  return c;
}

int NcclComm::p2p_channel(CommGroup g, std::int64_t peer, bool) const {
  if (g != CommGroup::kPp)
    throw CommError("NCCL backend: send/recv only on the pp group, not " +
                    std::string(to_string(g)));
  if (peer < 0 || peer >= sizes_[idx(g)])
    throw CommError("send/recv peer " + std::to_string(peer) + " outside the pp group");
  return 0;
}

bool NcclComm::is_device_pointer(const void* p) const {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

void* NcclComm::scratch(std::size_t slot, std::int64_t bytes) {
  if (scratch_[slot].size() < bytes) scratch_[slot].resize(bytes);
  return scratch_[slot].data();
}

void NcclComm::wait_stream(cudaStream_t s, const char* what) {
  wait_started_ = now_s();
  while (true) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      wait_started_ = 0;
      check_cuda(e, what, __FILE__, __LINE__);
    }
    if (aborted_) {
      wait_started_ = 0;
      std::lock_guard<std::mutex> lock(abort_mutex_);
      throw CommError(std::string(what) + " on rank " + std::to_string(rank_) +
                      " did not complete: " + abort_reason_);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  wait_started_ = 0;
}

void NcclComm::abort_all(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_) return;
    abort_reason_ = why;
    aborted_ = true;
  }
  std::fprintf(stderr, "trainplan: rank %d: NCCL watchdog: %s; aborting the communicators\n",
               rank_, why.c_str());
  for (ncclComm_t& g : groups_)
    if (g != nullptr) ncclCommAbort(g);
  for (ncclComm_t& p : p2p_)
    if (p != nullptr) ncclCommAbort(p);
  if (world_ != nullptr) ncclCommAbort(world_);
}

void NcclComm::watchdog_loop() {
  while (!stop_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (aborted_) break;
    auto poll = [&](ncclComm_t c, const std::string& name) {
      if (c == nullptr || aborted_) return;
      ncclResult_t r = ncclSuccess;
      if (ncclCommGetAsyncError(c, &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress)
        abort_all("asynchronous NCCL error in the " + name + " communicator: " +
                  ncclGetErrorString(r));
    };
    for (std::size_t g = 0; g < kNumCommGroups; ++g)
      poll(groups_[g], std::string(to_string(static_cast<CommGroup>(g))));
    for (ncclComm_t p : p2p_) poll(p, "pipeline p2p");
    poll(world_, "world");
    const double started = wait_started_;
    if (!aborted_ && started > 0 && now_s() - started > options_.timeout_s)
      abort_all("a collective made no progress for " + std::to_string(options_.timeout_s) +
                " s (a peer is gone or hung)");
  }
  if (aborted_ && options_.hard_exit_after_s > 0) {
    const double t0 = now_s();
    while (!stop_ && now_s() - t0 < options_.hard_exit_after_s)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!stop_) {
      std::fprintf(stderr, "trainplan: rank %d: still stuck %.0f s after the NCCL abort; exiting\n",
                   rank_, options_.hard_exit_after_s);
      std::_Exit(static_cast<int>(ExitCode::kRuntime));
    }
  }
}

void NcclComm::synchronize() {
  for (cudaStream_t s : streams_) wait_stream(s, "NcclComm::synchronize");
  for (cudaStream_t s : p2p_streams_) wait_stream(s, "NcclComm::synchronize");
}

std::int64_t NcclComm::count_device(CommGroup g, Collective c, std::int64_t message_bytes) {
  GroupCounters& k = device_counters_[idx(g)];
  const std::int64_t sent = bytes_sent_per_rank(c, message_bytes, group_size(g));
  k.bytes_sent += sent;
  ++k.calls;
  return sent;
}

template <typename Enqueue>
void NcclComm::ordered_on_group(CommGroup g, Collective c, std::string_view task,
                                std::int64_t bytes_sent, cudaStream_t compute, Enqueue&& enqueue) {
  cudaStream_t s = streams_[idx(g)];
  TP_CUDA(cudaEventRecord(ordering_event_, compute));
  TP_CUDA(cudaStreamWaitEvent(s, ordering_event_, 0));
  std::size_t span = 0;
  if (trace_ != nullptr)
    span = trace_->open(task.empty() ? to_string(c) : task, comm_track(g, c, task), s, bytes_sent,
                        g);
  enqueue(s);
  if (trace_ != nullptr) trace_->close(span, s);
  TP_CUDA(cudaEventRecord(ordering_event_, s));
  TP_CUDA(cudaStreamWaitEvent(compute, ordering_event_, 0));
}

GroupCounters NcclComm::group_counters(CommGroup g) const {
  GroupCounters a = counters(g);
  const GroupCounters& d = device_counters_[idx(g)];
  a.bytes_sent += d.bytes_sent;
  a.time_s += d.time_s;
  a.calls += d.calls;
  return a;
}

void NcclComm::reset_all_counters() {
  reset_counters();
  device_counters_ = {};
}

// ---- device collectives: ordered on the group's stream between compute's before and after ----

void NcclComm::all_reduce_device(CommGroup g, void* data, std::int64_t count, DType type,
                                 ReduceOp op, cudaStream_t compute, std::string_view task) {
  const std::int64_t sent = count_device(g, Collective::kAllReduce, count * dtype_bytes(type));
  if (group_size(g) == 1) return;
  ordered_on_group(g, Collective::kAllReduce, task, sent, compute, [&](cudaStream_t s) {
    TP_NCCL(ncclAllReduce(data, data, to_size(count), to_nccl(type), to_nccl(op), comm(g), s));
  });
}

void NcclComm::reduce_scatter_device(CommGroup g, const void* in, void* out, std::int64_t count,
                                     DType type, cudaStream_t compute, std::string_view task) {
  const std::int64_t sent =
      count_device(g, Collective::kReduceScatter, count * group_size(g) * dtype_bytes(type));
  if (group_size(g) == 1) {
    if (in != out)
      TP_CUDA(cudaMemcpyAsync(out, in, to_size(count * dtype_bytes(type)),
                              cudaMemcpyDeviceToDevice, compute));
    return;
  }
  ordered_on_group(g, Collective::kReduceScatter, task, sent, compute, [&](cudaStream_t s) {
    TP_NCCL(ncclReduceScatter(in, out, to_size(count), to_nccl(type), ncclSum, comm(g), s));
  });
}

void NcclComm::all_gather_device(CommGroup g, const void* in, void* out, std::int64_t count,
                                 DType type, cudaStream_t compute, std::string_view task) {
  const std::int64_t sent =
      count_device(g, Collective::kAllGather, count * group_size(g) * dtype_bytes(type));
  if (group_size(g) == 1) {
    if (in != out)
      TP_CUDA(cudaMemcpyAsync(out, in, to_size(count * dtype_bytes(type)),
                              cudaMemcpyDeviceToDevice, compute));
    return;
  }
  ordered_on_group(g, Collective::kAllGather, task, sent, compute, [&](cudaStream_t s) {
    TP_NCCL(ncclAllGather(in, out, to_size(count), to_nccl(type), comm(g), s));
  });
}

// ---- executor/comm.h hooks: float32, host-synchronous, host or device pointers ----

void NcclComm::do_all_reduce(CommGroup g, float* data, std::int64_t n, ReduceOp op) {
  cudaStream_t s = streams_[idx(g)];
  const std::int64_t bytes = n * 4;
  const bool dev = is_device_pointer(data);
  float* d = dev ? data : static_cast<float*>(scratch(0, bytes));
  if (!dev) TP_CUDA(cudaMemcpyAsync(d, data, to_size(bytes), cudaMemcpyHostToDevice, s));
  TP_NCCL(ncclAllReduce(d, d, to_size(n), ncclFloat32, to_nccl(op), comm(g), s));
  if (!dev) TP_CUDA(cudaMemcpyAsync(data, d, to_size(bytes), cudaMemcpyDeviceToHost, s));
  wait_stream(s, "ncclAllReduce");
}

void NcclComm::do_reduce_scatter(CommGroup g, const float* in, float* out, std::int64_t n) {
  cudaStream_t s = streams_[idx(g)];
  const std::int64_t nin = n * group_size(g);
  const bool dev = is_device_pointer(in) && is_device_pointer(out);
  const float* i = in;
  float* o = out;
  if (!dev) {
    i = static_cast<float*>(scratch(0, nin * 4));
    o = static_cast<float*>(scratch(1, n * 4));
    TP_CUDA(cudaMemcpyAsync(const_cast<float*>(i), in, to_size(nin * 4), cudaMemcpyDefault, s));
  }
  TP_NCCL(ncclReduceScatter(i, o, to_size(n), ncclFloat32, ncclSum, comm(g), s));
  if (!dev) TP_CUDA(cudaMemcpyAsync(out, o, to_size(n * 4), cudaMemcpyDefault, s));
  wait_stream(s, "ncclReduceScatter");
}

void NcclComm::do_all_gather(CommGroup g, const float* in, float* out, std::int64_t n) {
  cudaStream_t s = streams_[idx(g)];
  const std::int64_t nout = n * group_size(g);
  const bool dev = is_device_pointer(in) && is_device_pointer(out);
  const float* i = in;
  float* o = out;
  if (!dev) {
    i = static_cast<float*>(scratch(0, n * 4));
    o = static_cast<float*>(scratch(1, nout * 4));
    TP_CUDA(cudaMemcpyAsync(const_cast<float*>(i), in, to_size(n * 4), cudaMemcpyDefault, s));
  }
  TP_NCCL(ncclAllGather(i, o, to_size(n), ncclFloat32, comm(g), s));
  if (!dev) TP_CUDA(cudaMemcpyAsync(out, o, to_size(nout * 4), cudaMemcpyDefault, s));
  wait_stream(s, "ncclAllGather");
}

void NcclComm::do_all_to_all(CommGroup g, const float* in, float* out, std::int64_t n) {
  cudaStream_t s = streams_[idx(g)];
  const std::int64_t members = group_size(g), total = n * members;
  const bool dev = is_device_pointer(in) && is_device_pointer(out);
  const float* i = in;
  float* o = out;
  if (!dev) {
    i = static_cast<float*>(scratch(0, total * 4));
    o = static_cast<float*>(scratch(1, total * 4));
    TP_CUDA(cudaMemcpyAsync(const_cast<float*>(i), in, to_size(total * 4), cudaMemcpyDefault, s));
  }
  ncclComm_t c = comm(g);
  TP_NCCL(ncclGroupStart());
  for (std::int64_t j = 0; j < members; ++j) {
    TP_NCCL(ncclSend(i + j * n, to_size(n), ncclFloat32, static_cast<int>(j), c, s));
    TP_NCCL(ncclRecv(o + j * n, to_size(n), ncclFloat32, static_cast<int>(j), c, s));
  }
  TP_NCCL(ncclGroupEnd());
  if (!dev) TP_CUDA(cudaMemcpyAsync(out, o, to_size(total * 4), cudaMemcpyDefault, s));
  wait_stream(s, "all_to_all (ncclSend/ncclRecv)");
}

void NcclComm::do_all_to_all_v(CommGroup g, const float*, const std::vector<std::int64_t>&,
                               float*, const std::vector<std::int64_t>&) {
  throw CommError("all_to_all_v on group " + std::string(to_string(g)) +
                  ": the NCCL backend has no variable all-to-all (MoE runs on the CPU executor)");
}

void NcclComm::do_exchange_counts(CommGroup g, const std::int64_t*, std::int64_t*, std::int64_t) {
  throw CommError("exchange_counts on group " + std::string(to_string(g)) +
                  ": the NCCL backend has no variable all-to-all (MoE runs on the CPU executor)");
}

// Pipeline messages: the channel is the tag's parity, so each direction of the trainer's
// forward (tag 1) and backward (tag 2) traffic has its own communicator and stream; messages
// of one tag stay in order.
void NcclComm::do_send(CommGroup g, const float* data, std::int64_t n, std::int64_t peer,
                       int tag, std::string_view task) {
  p2p_channel(g, peer, true);
  const std::size_t ch = static_cast<std::size_t>(tag) % 2;
  if (aborted_) throw CommError("NCCL communicators were aborted: " + abort_reason_);
  cudaStream_t s = p2p_streams_[ch];
  // "The data is copied" before send returns: the caller may free or overwrite `data` at once.
  // The copy runs on its own stream, not behind earlier sends on `s` (which complete only when
  // the peer receives); `data` must be complete (the trainer synchronizes its stream first).
  DeviceBuffer<char>& copy = pending_sends_.emplace_back(n * 4);
  TP_CUDA(cudaMemcpyAsync(copy.data(), data, to_size(n * 4), cudaMemcpyDefault, control_stream_));
  TP_CUDA(cudaStreamSynchronize(control_stream_));
  std::size_t span = 0;
  if (trace_ != nullptr)
    span = trace_->open(task, comm_track(g, Collective::kSendRecv, task), s, n * 4, g);
  TP_NCCL(ncclSend(copy.data(), to_size(n), ncclFloat32, static_cast<int>(peer), p2p_[ch], s));
  if (trace_ != nullptr) trace_->close(span, s);
}

void NcclComm::do_recv(CommGroup g, float* data, std::int64_t n, std::int64_t peer, int tag,
                       std::string_view task) {
  p2p_channel(g, peer, false);
  const std::size_t ch = static_cast<std::size_t>(tag) % 2;
  if (aborted_) throw CommError("NCCL communicators were aborted: " + abort_reason_);
  cudaStream_t s = p2p_streams_[ch];
  const bool dev = is_device_pointer(data);
  float* d = dev ? data : static_cast<float*>(scratch(2, n * 4));
  std::size_t span = 0;
  if (trace_ != nullptr)
    span = trace_->open(task, comm_track(g, Collective::kSendRecv, task), s, 0, g);
  TP_NCCL(ncclRecv(d, to_size(n), ncclFloat32, static_cast<int>(peer), p2p_[ch], s));
  if (trace_ != nullptr) trace_->close(span, s);
  if (!dev) TP_CUDA(cudaMemcpyAsync(data, d, to_size(n * 4), cudaMemcpyDeviceToHost, s));
  wait_stream(s, "ncclRecv");
}

void NcclComm::do_wait_sends() {
  for (cudaStream_t s : p2p_streams_) wait_stream(s, "ncclSend");
  pending_sends_.clear();
}

void NcclComm::do_barrier(CommGroup g) {
  cudaStream_t s = streams_[idx(g)];
  float* d = static_cast<float*>(scratch(0, 4));
  TP_CUDA(cudaMemsetAsync(d, 0, 4, s));
  TP_NCCL(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, comm(g), s));
  wait_stream(s, "barrier (ncclAllReduce)");
}

void NcclComm::do_control_all_reduce(double* data, std::int64_t n, ReduceOp op) {
  if (aborted_) throw CommError("NCCL communicators were aborted: " + abort_reason_);
  cudaStream_t s = control_stream_;
  double* d = static_cast<double*>(scratch(0, n * 8));
  TP_CUDA(cudaMemcpyAsync(d, data, to_size(n * 8), cudaMemcpyDefault, s));
  TP_NCCL(ncclAllReduce(d, d, to_size(n), ncclFloat64, to_nccl(op), world_, s));
  TP_CUDA(cudaMemcpyAsync(data, d, to_size(n * 8), cudaMemcpyDefault, s));
  wait_stream(s, "control ncclAllReduce");
}

}  // namespace trainplan::executor::cuda
