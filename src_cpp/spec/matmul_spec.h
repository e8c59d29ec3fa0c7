// What the runtime needs to run one matrix-product group through cuBLASLt
// (CUDA engine II): torch-free, decided by the matmul planner
// (matmul_planner.h) from the IR alone.
//
// Note [Matmul operands are logical]
// `mat1` and `mat2` name the values the product reads *before* any transpose
// the planner saw through: the product multiplies mat1^T when
// `mat1.transposed` (last two dims swapped), so `t(weight)` feeding addmm is
// read as `weight`, transposed, with no copy. The runtime derives cuBLASLt's
// operation and leading dimension from the actual strides of each call's
// tensors (a planned transpose and a non-contiguous input are the same thing
// to it), so the flags here are what the IR promised, for reports and tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

// The epilogue fused into the product; names follow cuBLASLt's.
enum class MatmulEpilogue : std::int8_t {
  None,
  Bias,          // + row vector (addmm's 1-D bias, or add of one after mm)
  Relu,          // relu(product)
  ReluBias,      // relu(product + bias)
  GeluTanh,      // gelu(product, approximate='tanh'): cuBLASLt's GELU is tanh-only
  GeluTanhBias,  // gelu(product + bias, approximate='tanh')
  BiasGradMat1,  // sum(G, [0]) where mat1 = G^T: cuBLASLt's BGRADB (mat1 is its B)
  BiasGradMat2,  // sum(G, [0]) where mat2 = G:  cuBLASLt's BGRADA (mat2 is its A)
};

std::string_view matmul_epilogue_name(MatmulEpilogue epilogue);
// The cuBLASLt constant's name without its prefix: "GELU_BIAS", "BGRADB".
std::string_view cublaslt_epilogue_name(MatmulEpilogue epilogue);
bool epilogue_has_bias(MatmulEpilogue epilogue);
bool epilogue_is_bias_grad(MatmulEpilogue epilogue);

struct MatmulOperand {
  ValueId value = -1;
  bool transposed = false;  // Note [Matmul operands are logical]
};

struct MatmulSpec {
  NodeId product = -1;   // the mm / addmm / bmm / baddbmm node
  std::string op;        // its overload, e.g. "aten::addmm.default"
  bool batched = false;  // bmm / baddbmm: rank 3, batch first
  MatmulOperand mat1, mat2;
  DType dtype = DType::Float32;  // of mat1, mat2 and the product
  // The dtype cuBLASLt writes D in: `dtype`, or f32 when an upcast of the
  // product joined the group (Note [Products written in f32]).
  DType out_dtype = DType::Float32;
  double alpha = 1.0;
  // addmm / baddbmm's self when it is not a fused bias: D = alpha·AB + beta·C
  // (C broadcast to the product's shape).
  ValueId c = -1;
  double beta = 0.0;
  // C is a residual of the group output's shape, read in D's row-major
  // order, not a broadcast operand (Note [Residual sums in the product]).
  bool c_is_residual = false;
  MatmulEpilogue epilogue = MatmulEpilogue::None;
  ValueId bias = -1;  // 1-D, length N, dtype `dtype` (epilogues with a bias)
  // The value the group's result is stored to: the last epilogue node's
  // output, or the product's. Its IR shape may be a view of the product's
  // [B,] M x N (Note [Views after the product] in matmul_planner.h).
  ValueId output = -1;
  ValueId bias_grad = -1;  // bias-gradient epilogues: the sum's output value
  // Choose the algorithm by timing the heuristic's top candidates (option
  // autotune, Note [Timed algorithm choice] in libs/cublaslt_gemm.h).
  bool autotune = false;

  // Every value the group reads, in a fixed order (mat1, mat2, c, bias).
  std::vector<ValueId> inputs() const;
  // One line per fact, stable: shown by explain() and asserted by tests.
  std::string to_string() const;
};

}  // namespace mybackend
