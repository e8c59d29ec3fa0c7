#include "spec/matmul_spec.h"

#include "spec/spec_text.h"

namespace mybackend {
namespace {

std::string operand(const char* name, const MatmulOperand& op) {
  return std::string(name) + "=%" + std::to_string(op.value) + (op.transposed ? "^T" : "");
}

}  // namespace

std::string_view matmul_epilogue_name(MatmulEpilogue epilogue) {
  switch (epilogue) {
    case MatmulEpilogue::None: return "none";
    case MatmulEpilogue::Bias: return "bias";
    case MatmulEpilogue::Relu: return "relu";
    case MatmulEpilogue::ReluBias: return "relu_bias";
    case MatmulEpilogue::GeluTanh: return "gelu_tanh";
    case MatmulEpilogue::GeluTanhBias: return "gelu_tanh_bias";
    case MatmulEpilogue::BiasGradMat1: return "bias_grad_mat1";
    case MatmulEpilogue::BiasGradMat2: return "bias_grad_mat2";
  }
  return "unknown";
}

std::string_view cublaslt_epilogue_name(MatmulEpilogue epilogue) {
  switch (epilogue) {
    case MatmulEpilogue::None: return "DEFAULT";
    case MatmulEpilogue::Bias: return "BIAS";
    case MatmulEpilogue::Relu: return "RELU";
    case MatmulEpilogue::ReluBias: return "RELU_BIAS";
    case MatmulEpilogue::GeluTanh: return "GELU";
    case MatmulEpilogue::GeluTanhBias: return "GELU_BIAS";
    // cuBLASLt multiplies column-major matrices: D = op(A)·op(B) is our
    // product transposed, so its A is our mat2 and its B our mat1.
    case MatmulEpilogue::BiasGradMat1: return "BGRADB";
    case MatmulEpilogue::BiasGradMat2: return "BGRADA";
  }
  return "unknown";
}

bool epilogue_has_bias(MatmulEpilogue epilogue) {
  return epilogue == MatmulEpilogue::Bias || epilogue == MatmulEpilogue::ReluBias ||
         epilogue == MatmulEpilogue::GeluTanhBias;
}

bool epilogue_is_bias_grad(MatmulEpilogue epilogue) {
  return epilogue == MatmulEpilogue::BiasGradMat1 || epilogue == MatmulEpilogue::BiasGradMat2;
}

std::vector<ValueId> MatmulSpec::inputs() const {
  std::vector<ValueId> out{mat1.value, mat2.value};
  if (c >= 0) out.push_back(c);
  if (bias >= 0) out.push_back(bias);
  return out;
}

std::string MatmulSpec::to_string() const {
  std::string out = "matmul " + op + (batched ? " batched" : "") + " " + operand("mat1", mat1) +
                    " " + operand("mat2", mat2) + " dtype=" + std::string(dtype_short_name(dtype));
  if (alpha != 1.0) out += " alpha=" + spec_number(alpha);
  if (c >= 0)
    out += std::string(c_is_residual ? " residual" : " c") + "=%" + std::to_string(c) +
           " beta=" + spec_number(beta);
  out += "\nepilogue=" + std::string(matmul_epilogue_name(epilogue)) + " (cublaslt " +
         std::string(cublaslt_epilogue_name(epilogue)) + ")";
  if (bias >= 0) out += " bias=%" + std::to_string(bias);
  if (bias_grad >= 0) out += " bias_grad=%" + std::to_string(bias_grad);
  out += "\noutput=%" + std::to_string(output);
  if (out_dtype != dtype) out += " out_dtype=" + std::string(dtype_short_name(out_dtype));
  if (autotune) out += " algorithm=timed";
  out += "\n";
  return out;
}

}  // namespace mybackend
