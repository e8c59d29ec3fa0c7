// Pointwise kernels: out_k[i] = f_k(inputs[i]) over a flat index i < numel.
//
// Shape of the generated kernel:
//   body()          the SSA instructions on one element, in compute types
//   vector loop     when every output is Aligned and every input Aligned,
//                   Periodic (Note [Periodic operands] in
//                   fusion/pointwise_planner.h) or Strided: UNROLL vectors
//                   of VEC elements per thread and step, 16-byte
//                   loads/stores, grid-stride over tiles of numel / VEC
//                   (Note [Vectors beside strided inputs])
//   scalar loop     the remaining elements (all of them when some tensor is
//                   not Aligned), with strided offsets where needed
#include <sstream>

#include "codegen/emit.h"
#include "codegen/emit_common.h"
#include "codegen/launch_tuning.h"
#include "common/error.h"

namespace mybackend {
namespace {

using emit::compute_type;
using emit::storage_type;

struct Layout {
  const PointwiseSpec& spec;
  int vec = 1;                     // > 1: the vector loop exists
  int unroll = 1;                  // vectors per thread and loop step
  int approx_math = 0;             // MB_APPROX_MATH (Note [Approximate math for 16-bit results])
  bool any_strided = false;        // some tensor takes strides
  bool needs_shape = false;        // some strided tensor has rank > 0
  bool fast_divisors = false;      // shape_div: Note [Divisors as multipliers]
  bool strided_vectors = false;    // the vector loop reads strided inputs element by element
  bool periodic = false;           // some input is Periodic (Note [Periodic operands])
  bool periodic_divisors = false;  // ... and its period comes with a multiplier
};

// Note [Vectors beside strided inputs]
// A broadcast operand that is not periodic (Note [Periodic operands] in
// fusion/pointwise_planner.h: a column broadcast, a transposed operand, a
// per-channel operand whose layout is known only at run time) is Strided
// while the activations and outputs stay Aligned. The vector loop still
// runs: aligned tensors move in 16-byte
// vectors and each strided input is read element by element at offsets
// computed once per vector (the div/mod chain of strided_offsets, for the
// vector's first element) plus k times its innermost stride. That holds
// while a vector never crosses a row of the innermost dim, so the kernel
// checks shape[rank-1] % VEC == 0 at run time and otherwise leaves every
// element to the scalar loop. Before this, one strided input sent the whole
// kernel down the scalar loop with a div/mod chain per element: ResNet-50's
// batch-norm + ReLU kernels ran at a third of copy bandwidth.
// A strided input whose innermost stride is 1 at run time (a per-channel
// tensor beside channels-last activations) is read as one vector when its
// address allows, and one with stride 0 (a broadcast scalar) once
// (mb::issue_strided): a training batch norm's backward reads five
// per-channel tensors, 40 scalar loads per vector of eight elements
// otherwise.

// Note [Vectors held at storage width]
// The vector loop keeps what it loaded in the storage type (two bf16 in a
// register) and converts each element where the body reads it; outputs are
// rounded to their storage type as each element is computed. Converting a
// whole vector of every operand to float first held 8 floats per operand
// per vector: a channels-last batch norm + ReLU (five operands) took 71
// registers a thread, 7 blocks of 128 a SM, too few 16-byte loads in flight
// to reach bandwidth on a 32x256x56x56 activation (1.9 TB/s on an H200,
// Inductor's kernel 2.9). Held at storage width it takes 40 (ptxas, sm_90).

Layout layout_of(const PointwiseSpec& spec) {
  Layout layout{spec};
  bool all_aligned = true;
  auto visit = [&](const TensorArg& t) {
    all_aligned = all_aligned && t.mode == IndexMode::Aligned;
    layout.any_strided = layout.any_strided || t.mode == IndexMode::Strided;
    layout.needs_shape = layout.needs_shape || (t.mode == IndexMode::Strided && t.rank > 0);
  };
  bool inputs_vectorizable = true, outputs_aligned = true, strided_input = false;
  for (const auto& t : spec.inputs) {
    visit(t);
    inputs_vectorizable = inputs_vectorizable && t.mode != IndexMode::Contiguous;
    strided_input = strided_input || t.mode == IndexMode::Strided;
    layout.periodic = layout.periodic || is_periodic(t.mode);
  }
  for (const auto& o : spec.outputs) {
    visit(o.tensor);
    outputs_aligned = outputs_aligned && o.tensor.mode == IndexMode::Aligned;
  }
  const bool strided_walk = strided_input && spec.rank > 0;
  if (all_aligned || (inputs_vectorizable && outputs_aligned &&
                      (strided_walk || (!strided_input && layout.periodic)))) {
    layout.vec = pointwise_vector_width(spec);
    layout.strided_vectors = strided_input && layout.vec > 1;
  }
  if (layout.vec > 1) layout.unroll = spec.tuning.pw_vec_per_thread;
  std::vector<DType> stored;
  for (const auto& o : spec.outputs) stored.push_back(o.tensor.dtype);
  layout.approx_math = emit::approx_math_level(stored);
  // Coordinates come from the walk's shape (Note [Concatenations in pointwise kernels]).
  layout.needs_shape = layout.needs_shape || spec.coords > 0;
  layout.fast_divisors = layout.needs_shape && !spec.index64 && spec.tuning.pw_fast_divisors;
  layout.periodic_divisors = layout.periodic && !spec.index64 && spec.tuning.pw_fast_divisors;
  return layout;
}

// Parameters in Note [Kernel ABI] order, as source and as ABI description.
void add_params(const Layout& layout, std::ostringstream& src, KernelEntry& entry) {
  const PointwiseSpec& spec = layout.spec;
  std::string sep = "\n    ";
  auto param = [&](const std::string& text, KernelParam p) {
    src << sep << text;
    sep = ",\n    ";
    entry.params.push_back(std::move(p));
  };
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    const std::string n = "in" + std::to_string(k);
    param("const " + std::string(storage_type(spec.inputs[k].dtype)) + "* __restrict__ " + n,
          {KernelParam::Kind::Pointer, n});
  }
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    const std::string n = "out" + std::to_string(k);
    param(std::string(storage_type(spec.outputs[k].tensor.dtype)) + "* __restrict__ " + n,
          {KernelParam::Kind::Pointer, n});
  }
  for (std::size_t k = 0; k < spec.scalars.size(); ++k) {
    if (!spec.scalars[k].is_argument) continue;
    const bool floating = is_floating(spec.scalars[k].dtype);
    const std::string n = "scalar" + std::to_string(k);
    param(std::string(floating ? "const double " : "const long long ") + n,
          {floating ? KernelParam::Kind::Float64 : KernelParam::Kind::Int64, n});
  }
  param("const long long numel_arg", {KernelParam::Kind::Int64, "numel"});
  if (layout.needs_shape)
    param(emit::dims_param(spec.rank, "shape"), {KernelParam::Kind::Dims, "shape", spec.rank});
  if (layout.fast_divisors)
    param(emit::dims_param(spec.rank, "shape_div"),
          {KernelParam::Kind::Dims, "shape_div", spec.rank});
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    if (!is_periodic(spec.inputs[k].mode)) continue;
    for (const std::string& name :
         emit::periodic_params(spec.inputs[k], "in" + std::to_string(k), layout.periodic_divisors))
      param("const long long " + name, {KernelParam::Kind::Int64, name});
  }
  for (int a = 0; a < spec.coords; ++a) {
    const std::string n = "coord_dim" + std::to_string(a);
    param("const long long " + n, {KernelParam::Kind::Int64, n});
  }
  auto strides = [&](const TensorArg& t, const std::string& n) {
    if (t.mode != IndexMode::Strided || t.rank == 0) return;
    param(emit::dims_param(t.rank, "stride_" + n),
          {KernelParam::Kind::Dims, "stride_" + n, t.rank});
  };
  for (std::size_t k = 0; k < spec.inputs.size(); ++k)
    strides(spec.inputs[k], "in" + std::to_string(k));
  for (std::size_t k = 0; k < spec.outputs.size(); ++k)
    strides(spec.outputs[k].tensor, "out" + std::to_string(k));
}

// The guards of input k (Note [Concatenations in pointwise kernels]).
std::vector<PwGuard> guards_of(const PointwiseSpec& spec, std::size_t k) {
  std::vector<PwGuard> out;
  for (const PwGuard& g : spec.guards)
    if (static_cast<std::size_t>(g.input) == k) out.push_back(g);
  return out;
}

// The condition under which input k is read at the coordinates c<a><suffix>;
// empty for an unguarded input.
std::string guard_condition(const PointwiseSpec& spec, std::size_t k) {
  std::string cond;
  for (const PwGuard& g : guards_of(spec, k)) {
    const std::string c = "static_cast<long long>(c" + std::to_string(g.axis) + ")";
    cond += (cond.empty() ? "" : " && ") + c + " >= s" + std::to_string(g.lo) + " && " + c +
            " < s" + std::to_string(g.hi);
  }
  return cond;
}

// The offset expression of tensor `n` at flat index i.
std::string offset_of(const TensorArg& t, const std::string& n) {
  return t.mode == IndexMode::Strided || is_periodic(t.mode) ? "off_" + n : "i";
}

std::vector<emit::OffsetTensor> strided_tensors(const PointwiseSpec& spec) {
  std::vector<emit::OffsetTensor> tensors;
  auto add = [&](const TensorArg& t, const std::string& n) {
    if (t.mode == IndexMode::Strided) tensors.push_back({"off_" + n, "stride_" + n, t.rank});
  };
  for (std::size_t k = 0; k < spec.inputs.size(); ++k)
    add(spec.inputs[k], "in" + std::to_string(k));
  for (std::size_t k = 0; k < spec.outputs.size(); ++k)
    add(spec.outputs[k].tensor, "out" + std::to_string(k));
  return tensors;
}

// Each block takes tiles of blockDim * UNROLL vectors (thread t: vectors t,
// t + blockDim, ...), all loads of a tile issued before any math so that
// UNROLL 16-byte accesses per thread are in flight; tiles are grid-stride.
// Loaded values stay in their storage type until the body reads them (Note
// [Vectors held at storage width]).
void emit_vector_loop(const Layout& layout, std::ostringstream& src) {
  const PointwiseSpec& spec = layout.spec;
  const std::vector<bool> used = emit::used_inputs(spec);
  auto strided_input = [&](std::size_t k) {
    return used[k] && spec.inputs[k].mode == IndexMode::Strided;
  };
  src << "  constexpr int VEC = " << std::to_string(layout.vec) << ";\n"
      << "  constexpr int UNROLL = " << std::to_string(layout.unroll) << ";\n";
  for (int a = 0; a < spec.coords; ++a)
    src << "  const I cstep" << a << " = coord_dim" << a << " == " << std::to_string(spec.rank - 1)
        << " ? I(1) : I(0);\n";
  if (layout.strided_vectors && layout.needs_shape) {
    src << "  const I nvec = static_cast<I>(shape.d[" << std::to_string(spec.rank - 1)
        << "]) % VEC == 0 ? numel / VEC : 0;\n";
  } else {
    src << "  const I nvec = numel / VEC;\n";
  }
  src << "  const I tile = static_cast<I>(blockDim.x) * UNROLL;\n"
      << "  for (I base = static_cast<I>(blockIdx.x) * tile; base < nvec;\n"
      << "       base += static_cast<I>(gridDim.x) * tile) {\n";
  auto vector_index = [](const std::string& indent) {
    return indent +
           "const I v = base + static_cast<I>(u) * static_cast<I>(blockDim.x) + "
           "static_cast<I>(threadIdx.x);\n";
  };
  std::vector<emit::OffsetTensor> strided;
  // Note [Concatenations in pointwise kernels]: each vector's coordinates,
  // of its first element; the next elements' move along the innermost dim.
  for (int a = 0; a < spec.coords; ++a) src << "    I crd" << a << "[UNROLL];\n";
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    if (!used[k]) continue;
    const std::string n = std::to_string(k);
    const std::string st(storage_type(spec.inputs[k].dtype));
    if (strided_input(k)) {
      strided.push_back({"off_in" + n, "stride_in" + n, spec.inputs[k].rank});
      src << "    mb::StridedRaw<VEC, " << st << "> raw" << n << "[UNROLL];\n";
    } else {
      src << "    " << st << " raw" << n << "[UNROLL][VEC];\n";
    }
  }
  // Every load is issued before any is used (Note [Strided loads issued
  // together] in mb_vector_io.cuh); lanes past the end load nothing and
  // store nothing.
  src << "#pragma unroll\n"
      << "    for (int u = 0; u < UNROLL; ++u) {\n"
      << vector_index("      ") << "      if (v >= nvec) continue;\n";
  if (!strided.empty() || spec.coords > 0)
    src << emit::strided_offsets(strided, spec.rank, "shape", "v * VEC", "      ",
                                 layout.fast_divisors ? "shape_div" : "", spec.coords);
  for (int a = 0; a < spec.coords; ++a) src << "      crd" << a << "[u] = c" << a << ";\n";
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    if (!used[k]) continue;
    const std::string n = std::to_string(k);
    const TensorArg& t = spec.inputs[k];
    const std::vector<PwGuard> guards = guards_of(spec, k);
    if (strided_input(k) && !guards.empty()) {
      src << "      const unsigned mask" << n << " = ";
      for (std::size_t j = 0; j < guards.size(); ++j) {
        const std::string a = std::to_string(guards[j].axis);
        src << (j ? " & " : "") << "mb::range_mask<VEC>(c" << a << ", cstep" << a << ", s"
            << guards[j].lo << ", s" << guards[j].hi << ")";
      }
      src << ";\n      mb::issue_guarded<VEC>(in" << n << " + off_in" << n
          << ", static_cast<I>(stride_in" << n << ".d[" << std::to_string(t.rank - 1) << "]), mask"
          << n << ", raw" << n << "[u]);\n";
    } else if (strided_input(k)) {
      const std::string inner =
          t.rank > 0 ? "static_cast<I>(stride_in" + n + ".d[" + std::to_string(t.rank - 1) + "])"
                     : "I(0)";
      src << "      mb::issue_strided<VEC>(in" << n << " + off_in" << n << ", " << inner << ", raw"
          << n << "[u]);\n";
    } else if (is_periodic(t.mode)) {
      src << emit::periodic_offset(t, "in" + n, "v * VEC", "      ", layout.periodic_divisors)
          << "      mb::load_stored<VEC>(in" << n << " + off_in" << n << ", raw" << n << "[u]);\n";
    } else {
      src << "      mb::load_stored<VEC>(in" << n << " + v * VEC, raw" << n << "[u]);\n";
    }
  }
  src << "    }\n"
      << "#pragma unroll\n"
      << "    for (int u = 0; u < UNROLL; ++u) {\n"
      << vector_index("      ") << "      if (v >= nvec) continue;\n";
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    src << "      " << storage_type(spec.outputs[k].tensor.dtype) << " out_raw" << std::to_string(k)
        << "[VEC];\n";
  }
  src << "#pragma unroll\n"
      << "      for (int k = 0; k < VEC; ++k) {\n";
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    const std::string n = std::to_string(k);
    const std::string ct(compute_type(spec.inputs[k].dtype));
    src << "        const " << ct << " x" << n << " = ";
    if (!used[k])
      src << ct << "(0);\n";
    else if (strided_input(k))
      src << "mb::strided_at(raw" << n << "[u], k);\n";
    else
      src << "mb::to_compute(raw" << n << "[u][k]);\n";
  }
  for (int a = 0; a < spec.coords; ++a)
    src << "        const long long c" << a << "_k = static_cast<long long>(crd" << a
        << "[u]) + static_cast<long long>(k) * cstep" << a << ";\n";
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    src << "        " << compute_type(spec.outputs[k].tensor.dtype) << " y" << std::to_string(k)
        << ";\n";
  }
  src << "        mb_body(" << emit::body_call_args(spec, "x", "", "s", "y", "", "_k") << ");\n";
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    const std::string n = std::to_string(k);
    src << "        out_raw" << n << "[k] = mb::from_compute<"
        << storage_type(spec.outputs[k].tensor.dtype) << ">(y" << n << ");\n";
  }
  src << "      }\n";
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    const std::string n = std::to_string(k);
    src << "      mb::store_vec<VEC>(out" << n << " + v * VEC, out_raw" << n << ");\n";
  }
  src << "    }\n  }\n";
}

void emit_scalar_loop(const Layout& layout, std::ostringstream& src) {
  const PointwiseSpec& spec = layout.spec;
  const std::vector<bool> used = emit::used_inputs(spec);
  const std::string start = layout.vec > 1 ? "nvec * VEC + first" : "first";
  src << "  for (I i = " << start << "; i < numel; i += step) {\n";
  if (layout.any_strided || spec.coords > 0)
    src << emit::strided_offsets(strided_tensors(spec), spec.rank, "shape", "i", "    ",
                                 layout.fast_divisors ? "shape_div" : "", spec.coords);
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    if (used[k] && is_periodic(spec.inputs[k].mode))
      src << emit::periodic_offset(spec.inputs[k], "in" + std::to_string(k), "i", "    ",
                                   layout.periodic_divisors);
  }
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    const std::string n = "in" + std::to_string(k);
    const std::string ct(compute_type(spec.inputs[k].dtype));
    const std::string load = "mb::to_compute(" + n + "[" + offset_of(spec.inputs[k], n) + "])";
    const std::string guard = guard_condition(spec, k);
    src << "    const " << ct << " x" << std::to_string(k) << " = ";
    if (!used[k])
      src << ct << "(0)";
    else if (guard.empty())
      src << load;
    else
      src << "(" << guard << ") ? " << load << " : " << ct << "(0)";
    src << ";\n";
  }
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    src << "    " << compute_type(spec.outputs[k].tensor.dtype) << " y" << std::to_string(k)
        << ";\n";
  }
  src << "    mb_body(" << emit::body_call_args(spec, "x", "", "s", "y", "") << ");\n";
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    const std::string n = "out" + std::to_string(k);
    const TensorArg& t = spec.outputs[k].tensor;
    src << "    " << n << "[" << offset_of(t, n) << "] = mb::from_compute<" << storage_type(t.dtype)
        << ">(y" << std::to_string(k) << ");\n";
  }
  src << "  }\n";
}

}  // namespace

EmittedKernel emit_pointwise(const PointwiseSpec& spec) {
  const std::string problem = validate(spec);
  MB_ASSERT(problem.empty(), "emit_pointwise given an invalid spec: ", problem, "\n",
            spec.to_string());
  const Layout layout = layout_of(spec);
  KernelEntry entry;
  entry.name = "mb_pointwise_" + emit::hex16(spec.hash());
  entry.block_x = spec.threads;
  entry.elements_per_thread = layout.vec * layout.unroll;

  std::ostringstream src;
  src << emit::comment_block(spec.to_string()) << emit::approx_math_define(layout.approx_math)
      << "#include \"mb_math.cuh\"\n#include \"mb_vector_io.cuh\"\n\n"
      << "typedef " << emit::index_type(spec.index64) << " I;\n\n"
      << emit::body_function(spec, "mb_body") << "\n"
      << "extern \"C\" __global__ void __launch_bounds__(" << std::to_string(spec.threads) << ") "
      << entry.name << "(";
  add_params(layout, src, entry);
  src << ") {\n"
      << "  const I numel = static_cast<I>(numel_arg);\n"
      << "  const I step = static_cast<I>(blockDim.x) * static_cast<I>(gridDim.x);\n"
      << "  const I first = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + "
         "static_cast<I>(threadIdx.x);\n"
      << emit::scalar_locals(spec, "scalar", "  ");
  if (layout.vec > 1) emit_vector_loop(layout, src);
  emit_scalar_loop(layout, src);
  src << "}\n";
  return EmittedKernel{src.str(), {entry}};
}

}  // namespace mybackend
