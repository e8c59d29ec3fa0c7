// Scaled dot-product attention through cuDNN's SDPA graphs (frontend v1
// API), forward and backward, on torch tensors. CUDA builds with cuDNN only.
// The frontend's headers are heavy: only cudnn_sdpa.cpp includes them.
//
// Note [SDPA plan cache]
// One cuDNN graph per signature: device, direction, dtype, the sizes and
// strides of every tensor (q, k, v, o, dO, dQ, dK, dV, Stats, bias), bias
// dtype, causal flag and scale. The first call of a signature validates the
// graph, builds the operation graph, asks heuristic A for plans, checks
// support and builds the plan; later calls only fill the variant pack and
// execute. A signature cuDNN cannot take (unsupported head dim, strides,
// bias layout, an old cuDNN) is remembered as its reason, so the hot path
// never builds twice. Like PyTorch's own cuDNN attention, the cache is per
// thread (forward and backward run on different threads; a graph built
// with one thread's handle never meets another's stream) and needs no lock;
// it is never evicted. Counters are process-wide (sdpa_cache_stats).
// Workspace comes from the caching allocator on the current stream;
// nothing synchronises the host, so the calls can be captured in CUDA
// graphs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace mybackend::cudnn {

// Tensors are [B, H, S, D] with a unit stride on D (any other strides).
// The bias is additive and broadcastable to [B, H, Sq, Skv]. Outputs are
// allocated by the caller; their strides are part of the signature.
struct SdpaForwardArgs {
  at::Tensor q, k, v;
  at::Tensor bias;  // undefined: none
  bool causal = false;
  double scale = 1.0;
  at::Tensor out;  // [B, H, Sq, Dv]
  // Undefined (inference), or the row logsumexp: f32 [B, H, L >= Sq] or [B, H, Sq, 1].
  at::Tensor stats;
};

struct SdpaBackwardArgs {
  at::Tensor q, k, v, bias, out, grad_out;
  at::Tensor stats;  // f32 [B, H, Sq] or [B, H, Sq, 1], from a forward of any kind
  bool causal = false;
  double scale = 1.0;
  at::Tensor grad_q, grad_k, grad_v;  // allocated by the caller
};

// Empty: cuDNN ran. Otherwise why this call must use the aten op (nothing
// was written).
std::string sdpa_forward(const SdpaForwardArgs& args);
std::string sdpa_backward(const SdpaBackwardArgs& args);

struct SdpaCacheStats {
  std::uint64_t hits = 0, misses = 0, entries = 0, unsupported = 0;
};
SdpaCacheStats sdpa_cache_stats();

}  // namespace mybackend::cudnn
