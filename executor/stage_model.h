// What the CPU and CUDA stage models (executor/cpu/gpt.h, executor/cuda/gpt_cuda.h) share: the
// geometry of one pipeline stage on one rank (token counts, parameter blocks, the layer blocks
// of each model chunk, the attention kernel's task names), and the order of a chunk's forward
// and backward for one micro-batch: which block is acquired and released around which step,
// where a layer keeps only its input for recompute, where its backward is done. The backends
// write the steps (kernels and TP collectives on their own activations); the order, and so the
// data-parallel points the Trainer acts on (executor/stage.h's DpEvents), is written once here.
//
// Tested through both stage models: tests/executor/cpu/gpt_test.cc and
// tests/executor/parallel_check.cc (CPU), tests/executor/cuda/gpt_cuda_test.cc (GPU).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/cost/cost_model.h"
#include "executor/data.h"
#include "executor/params.h"
#include "executor/stage.h"
#include "executor/trace.h"

namespace trainplan::executor {

struct StageShape {
  std::int64_t stage = 0, tp_rank = 0, tp = 1;
  std::int64_t cp_rank = 0, cp = 1;  // context parallelism (data.h's ContextSplit)
  std::int64_t seq_len = 0;          // the whole sequence
  std::int64_t seq_tokens = 0;       // this rank's tokens of each sequence: seq_len / cp
  std::int64_t tokens = 0;           // T = micro_batch_size * seq_tokens
  std::int64_t local_tokens = 0;     // T / tp with sequence parallelism, else T
  // Holds the embedding / the head and a loss (core/plan.h's stage_holds_embedding / _head:
  // with dualpipe both end stages hold both).
  bool first = false, last = false, sp = false;
  // The position in its whole sequence of token i (0 <= i < T) of a micro-batch on this rank.
  std::int64_t position(std::int64_t i) const {
    return cp_position(seq_len, {cp, cp_rank}, i % seq_tokens);
  }
};

struct StageGeometry {
  StageShape shape;
  std::vector<BlockLayout> layouts;                    // param_blocks_on_stage order
  std::vector<std::vector<std::size_t>> chunk_blocks;  // layer blocks of each chunk
  // The model chunk (core/plan.h's stage_chunk) of each of the stage's chunks, and how many
  // model chunks there are (Plan::num_chunks).
  std::vector<std::int64_t> model_chunks;
  std::int64_t num_model_chunks = 1;
  // The cost-model tasks one attention kernel call covers, joined by '+' ("attention", or
  // "attn_scores+softmax+attn_values" when unfused), forward and backward; context
  // parallelism's collectives around it are traced by the Comm under their own names.
  std::string attention_task, attention_bwd_task;
  // The head reads the embedding table (tied, and one stage holds both) instead of a matrix of
  // its own.
  bool head_reads_table = false;

  // Model chunks on this stage (virtual_stages; chunk c is model chunk model_chunks[c]).
  std::int64_t num_chunks() const { return static_cast<std::int64_t>(chunk_blocks.size()); }
  // Whether chunk c begins with the embedding / ends with the head and loss: it is the first /
  // the last model chunk (dualpipe's end stages hold one of each, in either order).
  bool has_embedding(std::int64_t c) const {
    return model_chunks[static_cast<std::size_t>(c)] == 0;
  }
  bool has_head(std::int64_t c) const {
    return model_chunks[static_cast<std::size_t>(c)] == num_model_chunks - 1;
  }
};

// Stage `stage` for TP rank `tp_rank`, CP rank `cp_rank`, EP rank `ep_rank` and expert-TP rank
// `expert_tp_rank` (folded layouts).
StageGeometry stage_geometry(const ModelSpec& model, const Plan& plan, std::int64_t stage,
                             std::int64_t tp_rank, std::int64_t cp_rank = 0,
                             std::int64_t ep_rank = 0, std::int64_t expert_tp_rank = 0);

// The part of a stage model that both backends share: its geometry, with the short names the
// kernels' code reads, and where the head's matrix is.
class StageModelBase {
 public:
  const std::vector<BlockLayout>& layouts() const { return geo_.layouts; }
  const StageShape& shape() const { return geo_.shape; }
  std::int64_t num_chunks() const { return geo_.num_chunks(); }
  bool has_embedding(std::int64_t c) const { return geo_.has_embedding(c); }
  bool has_head(std::int64_t c) const { return geo_.has_head(c); }

 protected:
  StageModelBase(const ModelSpec& model, const Plan& plan, std::int64_t stage,
                 std::int64_t tp_rank, std::int64_t cp_rank = 0, std::int64_t ep_rank = 0,
                 std::int64_t expert_tp_rank = 0)
      : geo_(stage_geometry(model, plan, stage, tp_rank, cp_rank, ep_rank, expert_tp_rank)) {}
  ~StageModelBase() = default;
  StageModelBase(const StageModelBase&) = delete;
  StageModelBase& operator=(const StageModelBase&) = delete;
  // The block holding the head's matrix and the matrix's offset in it: the embedding table
  // (block 0) when the head reads it, else the head block's own.
  std::pair<std::size_t, std::int64_t> head_matrix() const;

  const StageGeometry geo_;
  const StageShape& x_ = geo_.shape;
  const std::vector<BlockLayout>& layouts_ = geo_.layouts;
  const std::vector<std::vector<std::size_t>>& chunk_blocks_ = geo_.chunk_blocks;
  const std::string& attention_task_ = geo_.attention_task;
  const std::string& attention_bwd_task_ = geo_.attention_bwd_task;
};

// What a chunk's pass reports to and records in.
struct PassContext {
  const Plan& plan;
  bool tied_embeddings = false;  // the model's tie_word_embeddings
  DpEvents& access;
  StepTrace* trace = nullptr;
};

// Forward of one micro-batch through `chunk`; returns the head's loss sum (or 0). `Steps`, on
// the backend's activation type Act:
//   Act embed()                           the embedding's output (block 0 acquired)
//   Act received()                        the activation received from the previous stage
//   Act layer(i, b, Act& h)               layer i of the chunk (block b), its cache kept
//   void keep_input_only(i)               recompute: drop all of layer i's cache but its input
//   double head(Act& h)                   final norm, head and loss; the loss sum (or 0)
//   void send(Act& h)                     the activation for the next stage
template <class Act, class Steps>
double forward_chunk(const StageGeometry& g, std::int64_t chunk, const PassContext& c,
                     Steps& steps) {
  const std::vector<std::size_t>& blocks = g.chunk_blocks[static_cast<std::size_t>(chunk)];
  const bool embed = g.has_embedding(chunk), head = g.has_head(chunk);
  // A tied head on the embedding's stage reads the embedding table (block 0): in the
  // embedding's chunk, kept from the lookup to the loss; in another chunk of the stage (zb-v's
  // V), acquired around the head.
  const bool reads_table = head && g.head_reads_table;
  const bool hold_embedding = embed && reads_table;
  Act h;
  if (embed) {
    c.access.acquire(0, DpPoint::kBeforeForward);
    h = steps.embed();
    if (!hold_embedding) c.access.release(0);
  } else {
    h = steps.received();
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::size_t b = blocks[i];
    TraceScope<StepTrace> layer(c.trace,
                                {.layer = static_cast<std::int32_t>(g.layouts[b].layer)});
    c.access.acquire(b, DpPoint::kBeforeForward);
    Act out = steps.layer(i, b, h);
    c.access.release(b);
    if (recomputes_layer(c.plan, static_cast<std::int64_t>(i))) steps.keep_input_only(i);
    h = std::move(out);
  }
  if (!head) {
    steps.send(h);
    return 0;
  }
  const std::size_t hb = g.layouts.size() - 1;
  if (reads_table && !embed) c.access.acquire(0, DpPoint::kBeforeForward);
  c.access.acquire(hb, DpPoint::kBeforeForward);
  const double loss = steps.head(h);
  c.access.release(hb);
  if (reads_table) c.access.release(0);
  return loss;
}

// Backward of one micro-batch through `chunk`, the order of forward_chunk reversed, with full
// recompute where the forward kept only a layer's input. `Steps`:
//   Act head_backward()                   the loss's gradient through head and final norm
//   Act received()                        the gradient received from the next stage
//   bool complete(i)                      whether layer i kept its whole cache
//   Act recompute_input(i)                the input that layer i kept (gathered if partitioned)
//   void recompute(i, b, Act& x)          layer i's forward again, its cache kept
//   Act layer_backward(i, b, Act& d)      the gradient of layer i's input
//   void drop(i)                          frees layer i's cache
//   void embedding_backward(Act& d)
//   void send(Act& d)                     the gradient for the previous stage
template <class Act, class Steps>
void backward_chunk(const StageGeometry& g, std::int64_t chunk, const PassContext& c,
                    Steps& steps) {
  const std::vector<std::size_t>& blocks = g.chunk_blocks[static_cast<std::size_t>(chunk)];
  const bool embed = g.has_embedding(chunk), head = g.has_head(chunk);
  const bool reads_table = head && g.head_reads_table;  // as in forward_chunk
  const bool hold_embedding = embed && reads_table;
  Act d;
  if (head) {
    const std::size_t hb = g.layouts.size() - 1;
    if (reads_table) c.access.acquire(0, DpPoint::kBeforeBackward);
    c.access.acquire(hb, DpPoint::kBeforeBackward);
    d = steps.head_backward();
    c.access.release(hb);
    if (reads_table && !embed) c.access.release(0);
    c.access.backward_done(hb);
  } else {
    d = steps.received();
  }
  for (std::size_t i = blocks.size(); i-- > 0;) {
    const std::size_t b = blocks[i];
    TraceScope<StepTrace> layer(c.trace,
                                {.layer = static_cast<std::int32_t>(g.layouts[b].layer)});
    if (!steps.complete(i)) {
      // Full recompute: rebuild this layer's activations from its input, collectives included
      // (layer_recompute_tasks: a partitioned input's gather, then layer_forward_tasks).
      TraceScope<StepTrace> recompute(c.trace, {.pass = 'R'});
      Act x = steps.recompute_input(i);
      c.access.acquire(b, DpPoint::kBeforeRecompute);
      steps.recompute(i, b, x);
      c.access.release(b);
    }
    c.access.acquire(b, DpPoint::kBeforeBackward);
    Act dx = steps.layer_backward(i, b, d);
    c.access.release(b);
    c.access.backward_done(b);
    steps.drop(i);
    d = std::move(dx);
  }
  if (!embed) {
    steps.send(d);
    return;
  }
  if (!hold_embedding) c.access.acquire(0, DpPoint::kBeforeBackward);
  steps.embedding_backward(d);
  c.access.release(0);
  c.access.backward_done(0);
}

}  // namespace trainplan::executor
