// One pipeline stage of a GPT on one rank: forward and backward of a micro-batch, written by
// hand, with Megatron-LM's tensor parallelism (column/row-parallel linears, f and g, attention
// split by heads, vocabulary-parallel embedding and cross-entropy, optional sequence
// parallelism), context parallelism (load-balanced chunks; K,V all-gathered and dK,dV
// reduce-scattered over the cp group) and activation recompute. It issues exactly the TP collectives of
// layer_forward_tasks / layer_backward_tasks / layer_recompute_tasks and the embedding_* and
// head_* tasks (core/cost/cost_model.h). Parameter storage and data parallelism are the caller's:
// the model reads and writes its blocks through BlockAccess, which the trainer implements
// (ZeRO-3 gathers a block on acquire and frees it on release). Every temporary comes from one
// scratch arena, sized once from the plan (workspace.h, scratch_floats below); a micro-batch's
// kept activations come from pools of released buffers.
//
// Tested against the single-process run by tests/executor/parallel_check.cc and by finite
// differences in tests/executor/cpu/gpt_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "executor/comm.h"
#include "executor/cpu/kernels.h"
#include "executor/cpu/moe.h"
#include "executor/cpu/workspace.h"
#include "executor/memory_account.h"
#include "executor/params.h"
#include "executor/stage.h"
#include "executor/stage_model.h"
#include "executor/trace.h"
#include "core/cost/cost_model.h"

namespace trainplan::executor {

// How the model reaches parameters and gradients (flat float32 buffers laid out as
// BlockLayout); its data-parallel points (DpEvents, executor/stage.h) go to the Trainer.
class BlockAccess : public DpEvents {
 public:
  virtual const float* params(std::size_t b) = 0;
  virtual float* grads(std::size_t b) = 0;
};

class StageModel final : public StageModelBase {
 public:
  // capacity_shares: see params.h (MoeCapacityShares); only with a plan that routes whole
  // micro-batches.
  StageModel(const ModelSpec& model, const Plan& plan, std::int64_t stage, Comm& comm,
             BlockAccess& access, MoeCapacityShares capacity_shares = {});
  ~StageModel();
  StageModel(const StageModel&) = delete;
  StageModel& operator=(const StageModel&) = delete;

  // Forward of micro-batch `mb` through chunk `chunk`. The embedding chunk reads `tokens` (T),
  // others `input` (local_tokens, h). The head chunk reads `targets` (T) and returns the sum
  // of the token losses; the others write `output` (local_tokens, h) and return 0.
  // `loss_scale` multiplies every token's loss gradient (1 / tokens in the global batch).
  double forward(std::int64_t chunk, std::int64_t mb, const std::int32_t* tokens,
                 const std::int32_t* targets, const Mat* input, Mat* output, float loss_scale);
  // Backward of micro-batch `mb` through `chunk`: the head chunk starts from its loss, the
  // others from `grad_output`; all but the embedding chunk write `grad_input`. Releases the
  // micro-batch's state to the pools (workspace.h).
  void backward(std::int64_t chunk, std::int64_t mb, const Mat* grad_output, Mat* grad_input);
  // Zero-bubble schedules (Qi et al. 2023, sec. 2; core/schedule.h): the backward split in two.
  // backward_input is `backward` with every weight-gradient GEMM (dW += X^T dY) and every
  // block's backward_done held back; backward_weight runs them for the micro-batch, then the
  // held-back backward_done calls, in the order `backward` makes them. An operand in the
  // micro-batch's cache (a layer's norm outputs, attention output, GELU output, the routed
  // experts' rows) is referenced: its buffer is kept from B to W instead of released, as the
  // paper's memory accounting keeps the activations W needs (Qi et al. 2023, sec. 2.1). One
  // that is not (dY, a gathered input) is copied.
  void backward_input(std::int64_t chunk, std::int64_t mb, const Mat* grad_output,
                      Mat* grad_input);
  void backward_weight(std::int64_t chunk, std::int64_t mb);

  // Adds every buffer the model holds now (caches, W passes, scratch, pools) to `account`.
  void account_memory(MemoryAccount& account) const;
  // The scratch arena (workspace.h): its size, worked out from the plan when the model is
  // built, and how much of it the passes so far have used at most.
  const ScratchArena& scratch() const { return arena_; }

  // Records a span per cost-model task into `trace` from now on (null: stop; see trace.h). The
  // caller sets the pass and micro-batch in the trace's context; the model sets the layer.
  void set_trace(TraceRecorder* trace) { trace_ = trace; }
  // The load-balancing losses of the MoE layers' forwards so far (recomputes included), each
  // weighted as its gradient is (moe.h); not part of forward's returned loss.
  double aux_loss_sum() const { return aux_loss_sum_; }
  // The same without the recomputed forwards: what the objective adds (execute reports it).
  double aux_loss_trained() const { return aux_loss_trained_; }
  // The token-expert assignments the MoE layers' forwards have dropped over their experts'
  // capacity so far (moe.h's moe_expert_capacity; recomputes left out): 0 when dropless.
  std::int64_t dropped_assignments() const { return dropped_assignments_; }
  // A hash of the experts every MoE layer chose for every token in the last forward (0 without
  // MoE layers): tests compare routings by it.
  std::uint64_t routing_fingerprint() const { return routing_hash_; }
  // Appends each micro-batch's logits (T, padded vocab / tp) to `sink` (null: stop).
  void capture_logits(std::vector<float>* sink) { logits_sink_ = sink; }
  // Appends every MoE layer's routing per forward, recomputes left out (stage.h), to `sink`
  // (null: stop).
  void capture_routing(RoutingCapture* sink) { routing_sink_ = sink; }

 private:
  struct LayerCache;
  struct MicroBatch;
  struct LayerParams;
  struct DeferredGrad;
  // A buffer kept from a B pass to its W pass: a cache field the W pass reads, named as the
  // memory account names it, or (kWeightPassCopies) output gradients written for W.
  struct HeldBuffer {
    const char* name = nullptr;
    Mat m;
    MemoryUse use = MemoryUse::kKeptForWeightPass;
  };
  // An activation (or its gradient) between layers of a pass, (local tokens, h): one of the
  // pass's two slots in the scratch arena, or the received message (read only).
  struct Slot {
    float* data = nullptr;
  };
  static Slot other_slot(float* const* slots, Slot in);
  MatMap view(Slot s) const { return MatMap(s.data, x_.local_tokens, model_.hidden_size); }

  // The scratch arena's size in floats: the largest stack of temporaries a pass of this stage
  // takes (each function's below, in the order it takes them; gpt.cc).
  std::size_t scratch_floats() const;
  std::size_t layer_forward_floats(std::size_t block) const;
  std::size_t layer_backward_floats(std::size_t block) const;
  std::size_t moe_forward_floats() const;
  std::size_t moe_backward_floats(std::size_t block) const;
  std::size_t moe_folded_forward_floats(std::size_t block) const;
  std::size_t moe_folded_backward_floats(std::size_t block) const;
  std::size_t attention_backward_floats() const;
  std::size_t gather_kv_floats() const;
  std::size_t kernel_workspace_floats() const;
  // The rows an MoE layer's routed buffers are sized for on this rank (moe.h): those its experts
  // process (folded with expert_tp > 1, gathered over the expert-TP group), and those the
  // dispatch's all-to-all brings it.
  std::int64_t routed_capacity_rows() const;
  std::int64_t dispatch_capacity_rows() const;
  // The expert-TP members that gather each other's routed rows: folded, the expert_tp group's;
  // carved, 1 (the experts' TP split rides on the layer's own TP collectives).
  std::int64_t expert_tp_members() const;

  // Buffers (workspace.h): `take` gives m the shape from the pool, `release` returns a layer's
  // cache to it.
  Mat& take(Mat& m, Eigen::Index rows, Eigen::Index cols);
  // Sequence parallelism's all-gather of `local` (T/tp rows) into a slice of the arena (T
  // rows), counted as `task`; without it, `local` itself.
  ConstMatMap gathered_rows(const ConstMatRef& local, std::string_view task);
  void release(LayerCache& c, bool keep_input);
  // A cache buffer released by a B pass: kept for its W pass if one of the pass's deferred
  // gradients reads it, else back to the pool.
  void give_or_hold(const char* name, Mat& m);
  // Whether `p` points into a buffer that lives until the W pass: the cache of the micro-batch
  // being back-propagated (backward_state_), or one already held for its W pass.
  bool kept_until_weight_pass(const float* p) const;
  // A buffer from the pools, rows x cols, held for the W pass being collected (a B pass's
  // output gradients written for it in place; counted as W-pass copies).
  Mat& hold_for_weight_pass(const char* name, Eigen::Index rows, Eigen::Index cols);
  void account_cache(const LayerCache& c, MemoryAccount& account) const;
  void account_scratch(MemoryAccount& account) const;
  void take_cache(LayerCache& c, Eigen::Index Tl, Eigen::Index T, Eigen::Index qr,
                  std::int64_t heads);
  MicroBatch& start_micro_batch(std::int64_t chunk, std::int64_t mb, std::size_t layers);
  void finish_micro_batch(std::size_t at);  // its index in in_flight_
  // `capacity_rows` (0: x's rows) sizes the copies of x and dy: a routed expert's rows change
  // with the routing, so its copies are taken at an expert's capacity (moe.h) and the
  // pool finds them again next step.
  void defer_weight_grad(std::string_view task, std::size_t block, std::size_t offset,
                         std::int64_t rows, std::int64_t cols, const ConstMatRef& x,
                         const ConstMatRef& dy, std::int64_t capacity_rows = 0);

  LayerParams layer_params(std::size_t block, bool with_grads);
  void layer_forward(std::size_t block, const ConstMatRef& x, LayerCache& c, MatRef out);
  void layer_backward(std::size_t block, LayerCache& c, const ConstMatRef& dout, MatRef dx);
  // The dense MLP on the (gathered) norm2 output y2, its fc2 product (this TP rank's partial
  // sum, T rows) into `partial`.
  void dense_mlp_forward(std::size_t block, const ConstMatRef& y2, LayerCache& c,
                         MatRef partial);
  // The MLP's backward from the layer output's gradient to norm2's output gradient `dyl`
  // (Tl rows, TP-summed).
  void dense_mlp_backward(std::size_t block, LayerCache& c, const ConstMatRef& dout, MatRef dyl);
  void moe_mlp_backward(std::size_t block, LayerCache& c, const ConstMatRef& dout, MatRef dyl);
  // Megatron's g (forward) and f's backward: the TP sum of the partial rows `partial` (T rows)
  // into `out`, by an all-reduce in place (out is then `partial` itself, or a copy) or, with
  // SP, a reduce-scatter over the tokens (T/tp rows), named by the cost-model task of each.
  void tp_sum(MatRef partial, MatRef out, std::string_view reduce_scatter_task,
              std::string_view all_reduce_task);
  // An MoE layer's MLP (executor/cpu/moe.h) on the (gathered) norm2 output y: out is this TP
  // rank's partial sum of the MLP's output; backward takes its gradient dm and writes this
  // rank's partial sum of y's.
  // With Plan::expert_layout folded, moe_forward and moe_backward leave the shared experts out
  // and work on this rank's own tokens (the sequence-parallel share), their outputs complete;
  // the layer runs the shared experts around them with moe_shared_forward over the gathered
  // tokens and sums them over TP (moe_folded_forward / moe_folded_backward, Tl rows).
  void moe_forward(std::size_t block, const ConstMatRef& y, MoeCache& c, MatRef out);
  void moe_backward(std::size_t block, const ConstMatRef& y, MoeCache& c, const ConstMatRef& dm,
                    MatRef dy);
  void moe_shared_forward(std::size_t block, const ConstMatRef& y, MoeCache& c, MatRef partial);
  void moe_folded_forward(std::size_t block, LayerCache& c, MatRef m);
  void moe_folded_backward(std::size_t block, LayerCache& c, const ConstMatRef& dout, MatRef dyl);
  // Router, top-k, token dropping at the capacity (moe.h), the dispatch plan; the rows to
  // send into `send` (T*k rows; the kept ones first).
  void moe_route(std::size_t block, const ConstMatRef& y, MoeCache& c, MatRef send);
  void moe_drop_over_capacity(MoeCache& c);
  void moe_aux_loss(MoeCache& c);
  void moe_shared_backward(std::size_t block, const ConstMatRef& y, MoeCache& c,
                           const ConstMatRef& dm, MatRef dy);
  // dout_rows is the arena slice the combine's gradient was received into; once it is read it
  // holds the experts' input gradients.
  void moe_experts_backward(std::size_t block, MoeCache& c, MatMap dout_rows, MatRef dx_rows);
  void moe_router_backward(std::size_t block, const ConstMatRef& y, MoeCache& c,
                           const ConstMatRef& dgates, MatRef dy);
  void embedding_forward(const std::int32_t* tokens, MatRef out);
  void embedding_backward(const std::int32_t* tokens, const ConstMatRef& dout);
  double head_forward(MicroBatch& s, const ConstMatRef& x, const std::int32_t* targets,
                      float scale);
  void head_backward(MicroBatch& s, MatRef dx);
  // dW += x^T dy into tensor `tensor` (rows x cols) of block `block`'s gradients, now or, in a
  // B pass, in the micro-batch's W pass; the bias gradient (db, when given) now.
  // `capacity_rows`: as defer_weight_grad's.
  void weight_grad(std::size_t block, std::size_t tensor, std::int64_t rows, std::int64_t cols,
                   const ConstMatRef& x, const ConstMatRef& dy, float* db, std::string_view task,
                   std::int64_t capacity_rows = 0);
  // Context parallelism: [K | V] of the cp group in sequence order, and its backward.
  void gather_kv(const ConstMatRef& k, const ConstMatRef& v, MatRef k_full, MatRef v_full,
                 std::string_view task);
  void reduce_scatter_kv_grad(const ConstMatRef& dk_full, const ConstMatRef& dv_full, MatRef dk,
                              MatRef dv);
  // The attention core's backward (with cp > 1 between its K,V gather and dK,dV reduce-scatter).
  void attention_core_backward(LayerCache& c, const ConstMatRef& dattn, std::int64_t heads,
                               MatRef dq, MatRef dk, MatRef dv);
  // Sequence-parallel helpers (T rows <-> T/tp rows), counted as the listed TP collectives.
  void gather_tokens(const ConstMatRef& local, MatRef full, std::string_view task);
  void reduce_scatter_tokens(const ConstMatRef& full, MatRef local, std::string_view task);
  // layernorm_backward's and attention_backward's workspace (kernels.h), at the arena's base.
  float* kernel_workspace() const { return kernel_workspace_; }
  const float* head_weights();
  float* head_grads();

  PassContext pass_context() { return {plan_, model_.tie_word_embeddings, access_, trace_}; }

  ModelSpec model_;
  Plan plan_;
  Comm& comm_;
  BlockAccess& access_;
  BufferPool<Mat> mats_;
  BufferPool<Vec> vecs_;
  ScratchArena arena_;                  // every temporary (workspace.h)
  float* kernel_workspace_ = nullptr;   // its first slice, for the kernels' own
  std::int64_t expert_capacity_ = 0;    // MoE: moe_expert_capacity (moe.h) of a share of the
                                        // routed tokens, 0: dropless
  MoeCapacityShares capacity_shares_;   // the shares each dropping on its own (params.h)
  std::int64_t capacity_share_count_ = 1;  // cp * tp of them
  // The most rows one expert keeps of a micro-batch: its capacity in every share (0: dropless).
  std::int64_t expert_capacity_rows() const { return expert_capacity_ * capacity_share_count_; }
  // The share of the micro-batch's token t (0 <= t < its T routed tokens) with capacity_shares_.
  std::int64_t capacity_share(std::int64_t t) const;
  MoeScratch moe_scratch_;  // moe.cc's routing bookkeeping (index vectors)
  struct InFlight {
    std::int64_t chunk, mb;
    std::unique_ptr<MicroBatch> state;
  };
  std::vector<InFlight> in_flight_;  // few: a linear search finds one
  std::vector<std::unique_ptr<MicroBatch>> spare_batches_;  // finished, kept for reuse
  TraceRecorder* trace_ = nullptr;
  float loss_scale_ = 0;
  double aux_loss_sum_ = 0, aux_loss_trained_ = 0;
  bool recomputing_ = false;  // in a full recompute's forward
  std::int64_t dropped_assignments_ = 0;
  std::uint64_t routing_hash_ = 0;  // the last forward's (the same every micro-batch): MoE's aux weight
  // A micro-batch's W pass, collected by its B pass (backward_input).
  struct WeightPass {
    std::vector<DeferredGrad> grads;
    std::vector<std::size_t> done;  // blocks whose backward_done waits for W
    std::vector<HeldBuffer> held;   // cache buffers the grads read, kept from B to W
  };
  WeightPass* deferring_ = nullptr;  // set during backward_input
  const MicroBatch* backward_state_ = nullptr;  // the micro-batch of the running backward
  struct PendingWeightPass {
    std::int64_t chunk, mb;
    std::unique_ptr<WeightPass> pass;
  };
  std::vector<PendingWeightPass> weight_passes_;
  std::vector<std::unique_ptr<WeightPass>> spare_passes_;  // run, kept for reuse
  std::vector<float>* logits_sink_ = nullptr;
  RoutingCapture* routing_sink_ = nullptr;
  std::vector<std::int64_t> q_positions_;  // each sequence's tokens on this rank, by position
};

}  // namespace trainplan::executor
