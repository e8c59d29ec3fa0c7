// The attention planner (CUDA engine II): which nodes of a CUDA partition run
// as one cuDNN SDPA graph, and the AttentionSpec of each such group.
// Torch-free: it reads the IR only. It claims before the matmul planner
// (Note [Claimed groups]): the products of a decomposed attention belong to
// its SDPA graph, not to two cuBLASLt calls.
//
// Note [Attention groups]
// * aten SDPA nodes: _scaled_dot_product_cudnn_attention (what sdpa
//   dispatches to for f16/bf16 on an H100 in torch 2.11 when it can),
//   _scaled_dot_product_flash_attention and
//   _scaled_dot_product_efficient_attention (flash without a mask, efficient
//   with one) and their backward nodes, each a
//   group of one node, when q, k, v are 4-D f16/bf16 CUDA tensors of one
//   dtype, dropout_p is the literal 0 (cuDNN's dropout RNG is not the aten
//   kernels', so masks would differ between forward and backward pairs),
//   no debug mask is asked for, the scale is known (a literal, or None with
//   a static head dim), the efficient bias is of q's dtype, and the
//   efficient backward asks for no bias gradient.
// * The decomposed pattern, as aot's decompositions leave matmul-softmax-
//   matmul written by hand:
//     bmm(view(expand(Q)), view(expand(transpose(K))))  -> view to [B,H,Sq,Skv]
//     [mul.Tensor/mul.Scalar by a literal | div.Tensor/div.Scalar by a literal]
//     [add.Tensor(·, mask), alpha 1, mask of the scores' dtype]
//     _softmax(·, -1, False)
//     bmm(view(expand(P)), view(expand(V)))  [-> view to [B,H,Sq,Dv]]
//   with Q, K, V 4-D f16/bf16, every intermediate read only by the next node
//   of the chain (a softmax output saved for a backward is not taken: the
//   group would have to produce it), all nodes in the partition, unclaimed,
//   and the group convex. sdpa's own math path (f32 upcast and the
//   fully-masked-row `where`) is not matched: it computes in f32.
// * A backward group also takes the views and the concatenation its three
//   gradients feed (Note [Gradients written stacked] in attention_spec.h)
//   when that leaves the group convex.
// Anything else is refused with the reason (explain() shows it).
//
// Note [Forward and backward agree]
// A forward and its backward are planned in different graphs (aot's forward
// and backward) and either may fall back at run time, so each end must
// accept what the other end of either kind produces. What flows between them
// is the aten op's: the output O (IR strides), the logsumexp in the aten op's
// shape (flash [B,H,Sq], efficient [B,H,ceil(Sq/32)*32], f32; cuDNN writes
// its Stats, the same natural-log row logsumexp of the scaled, biased
// scores, into it through strides, and reads it the same way), and the RNG
// outputs, which mean nothing without dropout (the group allocates them
// empty; neither backward reads them at dropout_p = 0). Sequence lengths are
// produced as the ints the aten op returns.
#pragma once

#include <string>
#include <vector>

#include "fusion/claimed_groups.h"
#include "fusion/graph_index.h"

namespace mybackend {

// Claims the attention groups of one partition (Note [Attention groups]):
// the aten cuDNN SDPA nodes, and with `beyond_cudnn_ops` the flash and
// memory-efficient ones and the decomposed pattern too. SDPA nodes that
// cannot be planned are refused with the reason.
void claim_attention_groups(const GraphIndex& index, const std::vector<NodeId>& partition_nodes,
                            ClaimedGroups& claimed, bool beyond_cudnn_ops = true);

}  // namespace mybackend
