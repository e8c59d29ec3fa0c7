// What the runtime needs to run one attention group as a cuDNN SDPA graph
// (libs/cudnn_sdpa.h): torch-free, decided by the attention planner
// (attention_planner.h) from the IR alone.
//
// Note [Attention values are [B, H, S, D]]
// q, k, v, out and their gradients name 4-D values laid out as batch, heads,
// sequence, head dim (any strides: the runtime hands cuDNN each call's
// actual strides). For a decomposed pattern they are the values before the
// expand/view that flattens batch and heads for bmm, and k is K itself (the
// planner saw through the transpose of the scores' product).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

// Where the group came from: an aten SDPA op (cuDNN, flash or
// memory-efficient, forward or backward) or the matmul-softmax-matmul chain
// of an inference graph.
enum class AttentionSource : std::int8_t {
  CudnnForward,
  CudnnBackward,
  FlashForward,
  FlashBackward,
  EfficientForward,
  EfficientBackward,
  Decomposed,
};

std::string_view attention_source_name(AttentionSource source);
bool attention_is_backward(AttentionSource source);

// Note [Gradients written stacked]
// A backward whose dq, dk and dv are read only by one concatenation, each
// through a chain of views (permute, unsqueeze, transpose), writes them
// straight into the concatenation's output: the three gradients are strided
// views of it, handed to cuDNN as its dQ, dK, dV (any strides with a unit
// head-dim stride), and the concatenation and its views run no kernel.
// timm's ViT splits one qkv projection into heads and its backward stacks
// the gradients back into the projection's [B, N, 3, H, D] layout (after
// Note [Permuted concatenations] in mybackend/passes/permuted_cats.py,
// one cat of permuted views): a 3-pass strided copy per layer, 0.92 ms of
// ViT-B/16's training step at batch 64 on an H100, where Inductor's fused
// copy took 0.45 ms.
struct StackView {
  enum class Kind : std::int8_t { Permute, Unsqueeze, Transpose };
  Kind kind = Kind::Permute;
  std::vector<std::int64_t> dims;  // permute: the order; unsqueeze: {dim}; transpose: {a, b}
};

struct StackedGradient {
  int gradient = 0;              // 0: dq, 1: dk, 2: dv
  ValueId part = -1;             // the cat's input this gradient becomes
  std::vector<StackView> views;  // from the gradient to `part`, in order
};

struct GradientStack {
  ValueId value = -1;                  // the cat's output; -1: no stack
  std::int64_t dim = 0;                // the cat's dim, non-negative
  std::vector<StackedGradient> parts;  // in the cat's order
};

struct AttentionSpec {
  AttentionSource source = AttentionSource::FlashForward;
  NodeId anchor = -1;              // the SDPA node, or the decomposed pattern's second bmm
  std::string op;                  // the anchor's overload
  DType dtype = DType::BFloat16;   // of q, k, v, out (f16 or bf16)
  ValueId q = -1, k = -1, v = -1;  // Note [Attention values are [B, H, S, D]]
  // Additive bias/mask, broadcastable to [B, H, Sq, Skv], dtype `dtype`;
  // -1: none. Boolean masks reach us already turned into 0/-inf by sdpa.
  ValueId bias = -1;
  bool causal = false;  // top-left aligned, as the aten ops and cuDNN's TOP_LEFT
  double scale = 1.0;   // applied to q·kᵀ (explicit: 1/sqrt(D) when the op had None)
  ValueId out = -1;     // O: forward output, backward input
  // Forward: the logsumexp output when the op makes one (training), backward:
  // its input. f32 [B, H, L] with L >= Sq (the efficient kernel pads L to a
  // multiple of 32), or cuDNN's own [B, H, Sq, 1]; natural log of the row sums of exp(scale·q·kᵀ +
  // bias), the meaning of flash's, the efficient kernel's and cuDNN's Stats alike (Note [Forward
  // and backward agree] in attention_planner.h).
  ValueId logsumexp = -1;
  // Outputs the aten op also returns that the group must produce for its
  // readers: sequence lengths (Int), RNG state and other tensors that mean
  // nothing without dropout (allocated empty, IR dtype and sizes), None.
  std::vector<ValueId> extra_outputs;
  // Backward only.
  ValueId grad_out = -1;
  ValueId grad_q = -1, grad_k = -1, grad_v = -1;
  GradientStack stack;  // Note [Gradients written stacked]

  // Every value the group reads, in a fixed order (q, k, v, bias, out, logsumexp, grad_out).
  std::vector<ValueId> inputs() const;
  // Values the group writes (out/logsumexp, or the gradients or their stack,
  // then extra_outputs).
  std::vector<ValueId> outputs() const;
  // One line per fact, stable: shown by explain() and asserted by tests.
  std::string to_string() const;
};

}  // namespace mybackend
