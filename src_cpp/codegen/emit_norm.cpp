// Normalization kernels: the row algorithms are templates in
// device/mb_norm.cuh; this emitter picks the instantiation (dtypes, vector
// width, which optional tensors exist) and writes the extern "C" entry
// points with their parameters.
#include <sstream>

#include "codegen/emit.h"
#include "codegen/emit_common.h"
#include "codegen/launch_tuning.h"
#include "common/error.h"

namespace mybackend {
namespace {

using emit::storage_type;

std::string b(bool value) { return value ? "true" : "false"; }

// One entry point under construction: parameters as source, as ABI, and
// the arguments passed on to the device template.
struct Entry {
  KernelEntry abi;
  std::ostringstream params;
  std::vector<std::string> call_args;
  int min_blocks = 0;  // __launch_bounds__'s blocks per SM to fit (0: the compiler's choice)

  void pointer(const std::string& type, const std::string& name, bool is_const) {
    pointer_param(type, name, is_const);
    call_args.push_back(name);
  }
  // A pointer parameter the device template does not take as it is.
  void pointer_param(const std::string& type, const std::string& name, bool is_const) {
    params << (abi.params.empty() ? "\n    " : ",\n    ") << (is_const ? "const " : "") << type
           << "* __restrict__ " << name;
    abi.params.push_back({KernelParam::Kind::Pointer, name});
  }
  // An optional tensor: a parameter only when present, nullptr for the template otherwise.
  void optional_pointer(bool present, const std::string& type, const std::string& name,
                        bool is_const) {
    if (present) {
      pointer(type, name, is_const);
    } else {
      call_args.push_back("static_cast<" + std::string(is_const ? "const " : "") + type +
                          "*>(nullptr)");
    }
  }
  // An integer argument: an index of type I, or kept as long long (a value
  // such as ignore_index, compared with int64 data).
  void int64(const std::string& name, bool index = true) {
    params << ",\n    const long long " << name;
    abi.params.push_back({KernelParam::Kind::Int64, name});
    call_args.push_back(index ? "static_cast<I>(" + name + ")" : name);
  }
  // A Dims<rank> parameter the device template does not take as it is.
  void dims_param(int rank, const std::string& name) {
    params << ",\n    " << emit::dims_param(rank, name);
    abi.params.push_back({KernelParam::Kind::Dims, name, rank});
  }
  void float64(const std::string& name) {
    params << ",\n    const double " << name;
    abi.params.push_back({KernelParam::Kind::Float64, name});
    call_args.push_back(name);
  }
  void sizes(bool with_eps) {
    params << ",\n    const long long rows,\n    const long long cols";
    abi.params.push_back({KernelParam::Kind::Int64, "rows"});
    abi.params.push_back({KernelParam::Kind::Int64, "cols"});
    call_args.push_back("static_cast<I>(rows)");
    call_args.push_back("static_cast<I>(cols)");
    if (with_eps) {
      params << ",\n    const double eps";
      abi.params.push_back({KernelParam::Kind::Float64, "eps"});
      call_args.push_back("eps");
    }
  }
  std::string write(const std::string& callee) const {
    std::ostringstream out;
    out << "extern \"C\" __global__ void __launch_bounds__("
        << std::to_string(abi.block_x * abi.block_y)
        << (min_blocks > 0 ? ", " + std::to_string(min_blocks) : std::string()) << ") " << abi.name
        << "(" << params.str() << ") {\n  " << callee << "(";
    for (std::size_t k = 0; k < call_args.size(); ++k) out << (k ? ", " : "") << call_args[k];
    out << ");\n}\n";
    return out.str();
  }
};

struct Names {
  std::string t;      // storage type of x / grads
  std::string to;     // storage type of the softmax or layer-norm output
  std::string w;      // storage type of weight and bias
  std::string stats;  // type of mean / rstd
  int vec = 1;
  int chunks = 1;  // vectors of a row per thread on the register path
};

Names names_of(const NormSpec& spec) {
  Names n;
  n.t = storage_type(spec.dtype);
  n.to = storage_type(spec.out_dtype);
  n.w = storage_type(spec.weight_dtype);
  n.stats = emit::compute_type(spec.dtype == DType::Float64 ? DType::Float64 : DType::Float32);
  std::vector<DType> dtypes = {spec.dtype, spec.out_dtype};
  if (spec.has_weight || spec.has_bias) dtypes.push_back(spec.weight_dtype);
  if (spec.prologue) {
    for (const TensorArg& in : spec.prologue->inputs) dtypes.push_back(in.dtype);
  }
  if (spec.epilogue) {
    for (const TensorArg& in : spec.epilogue->inputs) dtypes.push_back(in.dtype);
    for (const PwOutput& out : spec.epilogue->outputs) dtypes.push_back(out.tensor.dtype);
  }
  // Batch norm's reductions read x and grad_out (of x's dtype) by vectors
  // of x's width, a prologue's inputs by as many elements (a bool mask:
  // 8 bytes to bf16's 16); their fp32 results are per channel.
  if (is_channel_reduction(spec.kind)) dtypes = {spec.dtype};
  n.vec = spec.aligned ? pointwise_vector_width(dtypes) : 1;
  n.chunks = spec.tuning.norm_vec_per_thread;
  return n;
}

// Vectorized forward layer and RMS norms also get a row-per-block entry
// (Note [Wide rows for few rows] in launch_tuning.h).
bool has_wide_rows_entry(const NormSpec& spec, const Names& n) {
  return (spec.kind == NormKind::LayerNormForward || spec.kind == NormKind::RmsNormForward) &&
         n.vec > 1;
}

// What the kernel stores: decides MB_APPROX_MATH.
std::vector<DType> stored_dtypes(const NormSpec& spec) {
  switch (spec.kind) {
    case NormKind::SoftmaxForward:
    case NormKind::LogSoftmaxForward: return {spec.out_dtype};
    case NormKind::SoftmaxBackward:
    case NormKind::LogSoftmaxBackward:
    case NormKind::CrossEntropyBackward: return {spec.dtype};
    default: break;
  }
  // An epilogue's functions are as exact as its outputs need, as in a
  // pointwise kernel.
  if (spec.epilogue) {
    std::vector<DType> stored;
    for (const PwOutput& out : spec.epilogue->outputs) stored.push_back(out.tensor.dtype);
    return stored;
  }
  // Norms may store fp32 statistics and parameter grads; they need no
  // approximate function anyway.
  return {};
}

void tensor_reader(const NormSpec& spec, const std::string& stored, const std::string& name,
                   const Names& n, Entry& e);

std::string softmax_entries(const NormSpec& spec, const Names& n, Entry& e) {
  const bool log =
      spec.kind == NormKind::LogSoftmaxForward || spec.kind == NormKind::LogSoftmaxBackward;
  if (spec.kind == NormKind::SoftmaxForward || spec.kind == NormKind::LogSoftmaxForward) {
    tensor_reader(spec, "mb::StoredRows", "x", n, e);
    e.pointer(n.to, "y", false);
    e.sizes(false);
    return e.write("mb::softmax_forward<" + n.t + ", " + n.to + ", I, " + std::to_string(n.vec) +
                   ", " + std::to_string(n.chunks) + ", " + b(log) + ">");
  }
  e.pointer(n.t, "grad_out", true);
  e.pointer(n.t, "out", true);
  e.pointer(n.t, "grad_in", false);
  e.sizes(false);
  return e.write("mb::softmax_backward<" + n.t + ", I, " + std::to_string(n.vec) + ", " +
                 std::to_string(n.chunks) + ", " + b(log) + ">");
}

// Note [Norm prologues]: the Load functor computing x (or the batch-norm
// sums' grad_out) from the prologue's inputs, which the entries construct
// from their parameters in0, ... The sums hold rows of loads at storage
// width (Note [Gradient readers] in device/mb_batch_norm.cuh).
std::string prologue_load_struct(const NormSpec& spec) {
  const PointwiseSpec& prologue = *spec.prologue;
  std::ostringstream src;
  src << emit::body_function(prologue, "mb_prologue") << "\nstruct Load {\n  typedef "
      << emit::compute_type(prologue.outputs[0].tensor.dtype) << " Value;\n";
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k)
    src << "  const " << storage_type(prologue.inputs[k].dtype) << "* __restrict__ in"
        << std::to_string(k) << ";\n";
  if (spec.kind == NormKind::BatchNormBackward) {
    src << emit::dense_held_members(prologue, "in", "mb_prologue");
  } else if (!spec.store_x) {
    src << emit::dense_vec_member(prologue, "in", "mb_prologue");
  } else {
    // Note [A norm prologue read elsewhere]: each element is stored as it
    // is computed (twice on the loop path, the same value).
    src << "  " << storage_type(prologue.outputs[0].tensor.dtype) << "* __restrict__ xout;\n"
        << emit::dense_vec_member(prologue, "in", "mb_prologue", "computed")
        << "  template <int N>\n  __device__ __forceinline__ void vec(const I i, Value (&y0)[N]) "
           "const {\n    computed<N>(i, y0);\n    mb::store_compute<N>(xout + i, y0);\n  }\n";
  }
  src << "};\n\n";
  return src.str();
}

// Note [Softmax prologues with broadcast inputs]: the Load functor of a
// softmax prologue, read a row at a time. row(r, cols) places every input
// at row r once: a dense input at r * cols, a Strided one (any strides over
// x's shape, 0 where it broadcasts) at the offset of r's coordinates over
// x's leading dims; Row::vec then loads columns, dense inputs by vectors,
// Strided ones an element at a time `step` apart.
//
// Note [Row placement by multipliers]
// Placing the strided inputs peels r's coordinates off one leading dim at
// a time (emit::strided_offsets, as a pointwise kernel places its strided
// tensors), and every thread of the row's group does it. For short rows that
// is most of the kernel: Swin-T's window softmax (rows of 49 over [B, nW,
// heads, 49, 49], a bias and a mask broadcast) spent four divisions and
// four remainders by run-time sizes per input per row, about 300
// instructions a thread, against three elements a thread to load, and ran
// at 0.5 TB/s on an H200 (2026-11-29: 574 us a step at batch 32 for 12
// softmaxes, Inductor's about 340). The 32-bit variant divides by
// multiply and shift (Note [Divisors as multipliers] in
// runtime/fast_divisors.h: the launch passes each size's packed pair as
// shape_div), the remainder from the quotient; the 64-bit one divides.
// One pass serves every strided input.
std::string prologue_row_load_struct(const NormSpec& spec) {
  const PointwiseSpec& prologue = *spec.prologue;
  const std::vector<bool> used = emit::used_inputs(prologue);
  const int rank = prologue.rank;
  bool any_strided = false;
  for (const TensorArg& in : prologue.inputs) any_strided |= in.mode == IndexMode::Strided;
  std::ostringstream src, row, place, strided_place, vec;
  // Strided inputs: their offsets at r's coordinates over x's leading dims,
  // all from one pass over those dims.
  std::vector<emit::OffsetTensor> strided;
  src << emit::body_function(prologue, "mb_prologue") << "\nstruct Load {\n  typedef "
      << emit::compute_type(prologue.outputs[0].tensor.dtype) << " Value;\n";
  row << "  struct Row {\n";
  place << "  __device__ __forceinline__ Row row(const I r, const I cols) const {\n"
        << "    Row w;\n";
  vec << "    template <int N>\n    __device__ __forceinline__ void vec(const I c, Value (&y0)[N]) "
         "const {\n";
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    const std::string in = "in" + std::to_string(k);
    const std::string x = "x" + std::to_string(k);
    const std::string type(storage_type(prologue.inputs[k].dtype));
    src << "  const " << type << "* __restrict__ " << in << ";\n";
    row << "    const " << type << "* __restrict__ " << in << ";\n";
    vec << "      " << emit::compute_type(prologue.inputs[k].dtype) << " " << x << "[N];\n";
    if (prologue.inputs[k].mode != IndexMode::Strided) {
      place << "    w." << in << " = " << in << " + r * cols;\n";
      if (used[k]) vec << "      mb::load_compute<N>(" << in << " + c, " << x << ");\n";
      continue;
    }
    row << "    I step_" << in << ";\n";
    strided.push_back({"off_" + in, "stride_" + in, rank - 1});
    strided_place << "    w." << in << " = " << in << " + off_" << in << ";\n    w.step_" << in
                  << " = static_cast<I>(stride_" << in << ".d[" << rank - 1 << "]);\n";
    if (used[k])
      vec << "#pragma unroll\n      for (int e = 0; e < N; ++e) " << x << "[e] = mb::to_compute("
          << in << "[(c + e) * step_" << in << "]);\n";
  }
  if (any_strided) src << "  mb::Dims<" << rank << "> shape;\n";
  if (any_strided && !spec.index64) src << "  mb::Dims<" << rank << "> shape_div;\n";
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    if (prologue.inputs[k].mode == IndexMode::Strided)
      src << "  mb::Dims<" << rank << "> stride_in" << k << ";\n";
  }
  vec << "#pragma unroll\n      for (int k = 0; k < N; ++k) mb_prologue("
      << emit::body_call_args(prologue, "x", "[k]", "s", "y", "[k]") << ");\n    }\n";
  if (!strided.empty()) {  // Note [Row placement by multipliers]
    place << emit::strided_offsets(strided, rank - 1, "shape", "r", "    ",
                                   spec.index64 ? "" : "shape_div")
          << strided_place.str();
  }
  place << "    return w;\n  }\n";
  src << row.str() << vec.str() << "  };\n" << place.str() << "};\n\n";
  return src.str();
}

// Note [Norm epilogues]: the Store functor a backward norm hands its
// grad_in to, which the entry constructs from its parameters ein1, ...
// (the epilogue's other inputs) and eout0, ... (what it stores).
std::string epilogue_store_struct(const NormSpec& spec) {
  const PointwiseSpec& epilogue = *spec.epilogue;
  const std::vector<bool> used = emit::used_inputs(epilogue);
  std::ostringstream src, body;
  src << emit::body_function(epilogue, "mb_epilogue") << "\nstruct Store {\n";
  body << "  template <int N, class A>\n  __device__ __forceinline__ void store(const I i, "
          "const A (&x0)[N]) const {\n";
  for (std::size_t k = 1; k < epilogue.inputs.size(); ++k) {
    const std::string n = std::to_string(k);
    const DType dtype = epilogue.inputs[k].dtype;
    src << "  const " << storage_type(dtype) << "* __restrict__ ein" << n << ";\n";
    body << "    " << emit::compute_type(dtype) << " x" << n << "[N];\n";
    if (used[k]) body << "    mb::load_compute<N>(ein" << n << " + i, x" << n << ");\n";
  }
  for (std::size_t k = 0; k < epilogue.outputs.size(); ++k) {
    const std::string n = std::to_string(k);
    const DType dtype = epilogue.outputs[k].tensor.dtype;
    src << "  " << storage_type(dtype) << "* __restrict__ eout" << n << ";\n";
    body << "    " << emit::compute_type(dtype) << " y" << n << "[N];\n";
  }
  body << "#pragma unroll\n    for (int k = 0; k < N; ++k) mb_epilogue("
       << emit::body_call_args(epilogue, "x", "[k]", "s", "y", "[k]") << ");\n";
  for (std::size_t k = 0; k < epilogue.outputs.size(); ++k) {
    const std::string n = std::to_string(k);
    body << "    mb::store_compute<N>(eout" << n << " + i, y" << n << ");\n";
  }
  body << "  }\n";
  return src.str() + body.str() + "};\n\n";
}

// The kernel's grad_in as the device template writes it: the stored tensor
// (mb::StoredOut), or the Store functor of the epilogue's parameters.
void grad_in_writer(const NormSpec& spec, const Names& n, Entry& e) {
  if (!spec.epilogue) {
    e.pointer_param(n.t, "grad_in", false);
    e.call_args.push_back("mb::StoredOut<" + n.t + ">{grad_in}");
    return;
  }
  const PointwiseSpec& epilogue = *spec.epilogue;
  std::string store = "Store{";
  std::string sep;
  for (std::size_t k = 1; k < epilogue.inputs.size(); ++k, sep = ", ") {
    const std::string name = "ein" + std::to_string(k);
    e.pointer_param(std::string(storage_type(epilogue.inputs[k].dtype)), name, true);
    store += sep + name;
  }
  for (std::size_t k = 0; k < epilogue.outputs.size(); ++k, sep = ", ") {
    const std::string name = "eout" + std::to_string(k);
    e.pointer_param(std::string(storage_type(epilogue.outputs[k].tensor.dtype)), name, false);
    store += sep + name;
  }
  e.call_args.push_back(store + "}");
}

// The tensor `name` as the device template reads it: the stored tensor in
// `stored`'s reader (mb::StoredRows for x, mb::StoredGrad for the
// batch-norm sums' dy, Note [Gradient readers]), or the Load functor built
// from the prologue's parameters in0, ...
void tensor_reader(const NormSpec& spec, const std::string& stored, const std::string& name,
                   const Names& n, Entry& e) {
  if (!spec.prologue) {
    e.pointer_param(n.t, name, true);
    e.call_args.push_back(stored + "<" + n.t + ">{" + name + "}");
    return;
  }
  const PointwiseSpec& prologue = *spec.prologue;
  std::string load = "Load{";
  bool any_strided = false;
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    const std::string in = "in" + std::to_string(k);
    e.pointer_param(std::string(storage_type(prologue.inputs[k].dtype)), in, true);
    load += (k ? ", " : "") + in;
    any_strided |= prologue.inputs[k].mode == IndexMode::Strided;
  }
  if (spec.store_x) {  // Note [A norm prologue read elsewhere]
    e.pointer_param(std::string(storage_type(prologue.outputs[0].tensor.dtype)), "xout", false);
    load += ", xout";
  }
  // Note [Softmax prologues with broadcast inputs]: x's shape, then each
  // Strided input's strides, in the Load's member order.
  if (any_strided) {
    e.dims_param(prologue.rank, "shape");
    load += ", shape";
  }
  if (any_strided && !spec.index64) {  // Note [Row placement by multipliers]
    e.dims_param(prologue.rank, "shape_div");
    load += ", shape_div";
  }
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    if (prologue.inputs[k].mode != IndexMode::Strided) continue;
    const std::string name = "stride_in" + std::to_string(k);
    e.dims_param(prologue.rank, name);
    load += ", " + name;
  }
  e.call_args.push_back(load + "}");
}

// The register-path entry, or with `row_block` the row-per-block one (Note
// [Wide rows for few rows]).
std::string forward_entries(const NormSpec& spec, const Names& n, Entry& e, bool row_block) {
  const bool rms = spec.kind == NormKind::RmsNormForward;
  tensor_reader(spec, "mb::StoredRows", "x", n, e);
  e.optional_pointer(spec.has_weight, n.w, "weight", true);
  e.optional_pointer(spec.has_bias, n.w, "bias", true);
  e.pointer(n.to, "y", false);
  e.optional_pointer(spec.save_stats && !rms, n.stats, "mean", false);
  e.optional_pointer(spec.save_stats, n.stats, "rstd", false);
  e.sizes(true);
  const std::string flags = b(rms) + ", " + b(spec.has_weight) + ", " + b(spec.has_bias) + ", " +
                            b(spec.save_stats) + ", " + b(spec.round_before_weight) + ">";
  const std::string types = n.t + ", " + n.to + ", " + n.w + ", I, " + std::to_string(n.vec) + ", ";
  if (row_block) return e.write("mb::norm_forward_row_block<" + types + flags);
  return e.write("mb::norm_forward<" + types + std::to_string(n.chunks) + ", " + flags);
}

// Cross-entropy: logits rows `row_stride` apart, int64 targets, fp32 loss,
// lse and grad_loss (Note [Rows of any alignment]). Always vectorized: the
// kernel cuts each row at its own 16-byte boundary.
std::string cross_entropy_entries(const NormSpec& spec, const Names& n, Entry& e) {
  const bool forward = spec.kind == NormKind::CrossEntropyForward;
  if (!forward) e.pointer("float", "grad_loss", true);
  e.pointer(n.t, "x", true);
  e.pointer("long long", "target", true);
  if (forward) {
    e.pointer("float", "loss", false);
    e.pointer("float", "lse", false);
  } else {
    e.pointer("float", "lse", true);
    e.pointer(n.t, "grad_in", false);
  }
  e.sizes(false);
  e.int64("row_stride");
  if (!forward) e.int64("out_row_stride");
  e.int64("ignore_index", /*index=*/false);
  const int vec = pointwise_vector_width({spec.dtype});
  e.abi.elements_per_thread = vec;
  return e.write(
      std::string(forward ? "mb::cross_entropy_forward<" : "mb::cross_entropy_backward<") + n.t +
      ", I, " + std::to_string(vec) + ">");
}

// Batch norm's reductions (Note [Channel tiles] in device/mb_batch_norm.cuh):
// entry 0 reduces row chunks into a workspace of partials (a block of
// kChannelBlock threads), entry 1 combines them per channel (a block of
// kTotalsBlock threads) and writes the results.
std::string batch_norm_entries(const NormSpec& spec, const Names& n, Entry& partials,
                               Entry& totals) {
  const bool stats = spec.kind == NormKind::BatchNormStats;
  const std::string partial = stats ? "mb::Welford<float>" : "mb::Pair<float>";
  if (!stats) tensor_reader(spec, "mb::StoredGrad", "grad_out", n, partials);
  partials.pointer(n.t, "x", true);
  if (!stats) partials.pointer("float", "mean", true);
  partials.pointer(partial, "partials", false);
  partials.int64("rows");
  partials.int64("cols");
  partials.int64("splits");
  totals.pointer(partial, "partials", true);
  if (stats) {
    totals.pointer("float", "mean", false);
    totals.pointer("float", "invstd", false);
    totals.pointer(n.w, "running_mean", true);
    totals.pointer(n.w, "running_var", true);
    totals.pointer(n.w, "new_running_mean", false);
    totals.pointer(n.w, "new_running_var", false);
  } else {
    totals.pointer("float", "invstd", true);
    totals.pointer("float", "grad_bias", false);
    totals.pointer("float", "grad_weight", false);
  }
  totals.int64("cols");
  totals.int64("splits");
  if (stats) {
    totals.float64("momentum");
    totals.float64("eps");
  }
  partials.abi.elements_per_thread = n.vec;
  partials.min_blocks = spec.tuning.bn_min_blocks;
  const std::string vec = std::to_string(n.vec);
  const std::string unroll = std::to_string(spec.tuning.bn_row_unroll);
  const std::string lanes = std::to_string(spec.tuning.bn_max_lanes);
  return partials.write(std::string(stats ? "mb::batch_norm_stats_partials<"
                                          : "mb::batch_norm_backward_partials<") +
                        n.t + ", I, " + vec + ", " + unroll + ", " + lanes + ">") +
         "\n" +
         totals.write(stats ? "mb::batch_norm_stats_totals<" + n.w + ", I>"
                            : std::string("mb::batch_norm_backward_totals<I>"));
}

// Group norm's statistics (Note [Group-norm units] in
// device/mb_group_norm.cuh): batch norm's chunk stage per image, then a block
// per unit.
std::string group_norm_entries(const NormSpec& spec, const Names& n, Entry& partials,
                               Entry& totals) {
  partials.pointer(n.t, "x", true);
  partials.pointer("mb::Welford<float>", "partials", false);
  for (const char* name : {"rows", "cols", "splits", "images"}) partials.int64(name);
  totals.pointer("mb::Welford<float>", "partials", true);
  totals.pointer(n.w, "mean", false);
  totals.pointer(n.w, "rstd", false);
  totals.pointer("float", "channel_mean", false);
  totals.pointer("float", "channel_rstd", false);
  for (const char* name :
       {"cols", "splits", "units_per_image", "unit_cols", "units", "group_channels"})
    totals.int64(name);
  totals.float64("eps");
  partials.abi.elements_per_thread = n.vec;
  partials.min_blocks = spec.tuning.bn_min_blocks;
  return partials.write("mb::group_norm_stats_partials<" + n.t + ", I, " + std::to_string(n.vec) +
                        ", " + std::to_string(spec.tuning.bn_row_unroll) + ", " +
                        std::to_string(spec.tuning.bn_max_lanes) + ">") +
         "\n" + totals.write("mb::group_norm_stats_totals<" + n.w + ", I>");
}

// Backward norms have one entry point for grad_in (block per row) and, when
// the weight/bias grads are asked for, two more that reduce over rows in
// chunks (Note [Split parameter grads] in device/mb_norm.cuh).
std::string backward_entries(const NormSpec& spec, const Names& n, Entry& e, Entry& partials,
                             Entry& totals) {
  const bool rms = spec.kind == NormKind::RmsNormBackward;
  e.pointer(n.t, "grad_out", true);
  e.pointer(n.t, "x", true);
  e.optional_pointer(!rms, n.stats, "mean", true);
  e.pointer(n.stats, "rstd", true);
  e.optional_pointer(spec.has_weight, n.w, "weight", true);
  grad_in_writer(spec, n, e);
  e.sizes(false);
  std::string src =
      e.write("mb::norm_backward_input<" + n.t + ", " + n.w + ", I, " + std::to_string(n.vec) +
              ", " + std::to_string(n.chunks) + ", " + b(rms) + ", " + b(spec.has_weight) + ">");
  const bool has_bias = spec.has_bias && !rms;
  if (!spec.param_grads || !(spec.has_weight || has_bias)) return src;
  const std::string pair = "mb::Pair<" + n.stats + ">";
  partials.pointer(n.t, "grad_out", true);
  partials.pointer(n.t, "x", true);
  partials.optional_pointer(!rms, n.stats, "mean", true);
  partials.pointer(n.stats, "rstd", true);
  partials.pointer(pair, "partials", false);
  partials.sizes(false);
  partials.int64("splits");
  totals.pointer(pair, "partials", true);
  totals.optional_pointer(spec.has_weight, n.w, "grad_weight", false);
  totals.optional_pointer(has_bias, n.w, "grad_bias", false);
  totals.sizes(false);
  totals.int64("splits");
  return src + "\n" +
         partials.write("mb::norm_backward_param_partials<" + n.t + ", I, " + b(rms) + ">") + "\n" +
         totals.write("mb::norm_backward_param_totals<" + n.w + ", " + n.stats + ", I, " +
                      b(spec.has_weight) + ", " + b(has_bias) + ">");
}

const char* device_header(NormKind kind) {
  if (is_cross_entropy(kind)) return "mb_cross_entropy.cuh";
  if (kind == NormKind::GroupNormStats) return "mb_group_norm.cuh";
  if (is_channel_reduction(kind)) return "mb_batch_norm.cuh";
  return "mb_norm.cuh";
}

}  // namespace

EmittedKernel emit_norm(const NormSpec& spec) {
  const std::string problem = validate(spec);
  MB_ASSERT(problem.empty(), "emit_norm given an invalid spec: ", problem, "\n", spec.to_string());
  const Names n = names_of(spec);
  const std::string base = "mb_norm_" + emit::hex16(spec.hash());
  Entry main;
  main.abi.name = base;
  main.abi.block_x = spec.threads;
  main.abi.elements_per_thread = n.vec;
  // Entries with a register path (Note [Rows in registers]): the launcher
  // sizes row groups by row_elements_per_thread, as the device does.
  const bool register_path =
      spec.kind == NormKind::SoftmaxForward || spec.kind == NormKind::LogSoftmaxForward ||
      spec.kind == NormKind::SoftmaxBackward || spec.kind == NormKind::LogSoftmaxBackward ||
      spec.kind == NormKind::LayerNormForward || spec.kind == NormKind::RmsNormForward ||
      spec.kind == NormKind::LayerNormBackward || spec.kind == NormKind::RmsNormBackward;
  if (register_path) main.abi.row_elements_per_thread = n.vec * n.chunks;
  Entry partials, totals, wide;
  partials.abi.name = base + "_param_partials";
  totals.abi.name = base + "_param_totals";
  for (Entry* stage : {&partials, &totals}) {
    stage->abi.block_x = 32;  // reduce_outer's block shape
    stage->abi.block_y = 8;
  }

  std::string entries;
  switch (spec.kind) {
    case NormKind::SoftmaxForward:
    case NormKind::LogSoftmaxForward:
    case NormKind::SoftmaxBackward:
    case NormKind::LogSoftmaxBackward: entries = softmax_entries(spec, n, main); break;
    case NormKind::LayerNormForward:
    case NormKind::RmsNormForward:
      entries = forward_entries(spec, n, main, false);
      if (has_wide_rows_entry(spec, n)) {
        wide.abi.name = base + "_wide";
        wide.abi.block_x = kRowBlockMaxThreads;  // the launch sizes it to the row
        wide.abi.elements_per_thread = n.vec;
        wide.abi.row_elements_per_thread = n.vec;
        entries += "\n" + forward_entries(spec, n, wide, true);
      }
      break;
    case NormKind::LayerNormBackward:
    case NormKind::RmsNormBackward:
      entries = backward_entries(spec, n, main, partials, totals);
      break;
    case NormKind::CrossEntropyForward:
    case NormKind::CrossEntropyBackward: entries = cross_entropy_entries(spec, n, main); break;
    case NormKind::BatchNormStats:
    case NormKind::BatchNormBackward:
      main.abi.name = base + "_partials";
      main.abi.block_x = 256;  // kChannelBlock
      totals.abi.name = base + "_totals";
      totals.abi.block_x = 1024;  // kTotalsBlock
      totals.abi.block_y = 1;
      entries = batch_norm_entries(spec, n, main, totals);
      break;
    case NormKind::GroupNormStats:
      main.abi.name = base + "_partials";
      main.abi.block_x = 256;  // kChannelBlock
      totals.abi.name = base + "_totals";
      totals.abi.block_x = 1024;  // kTotalsBlock: a block per (sample, group)
      totals.abi.block_y = 1;
      entries = group_norm_entries(spec, n, main, totals);
      break;
  }
  std::ostringstream src;
  src << emit::comment_block(spec.to_string())
      << emit::approx_math_define(emit::approx_math_level(stored_dtypes(spec))) << "#include \""
      << device_header(spec.kind) << "\"\n\n"
      << (partials.abi.params.empty() && !is_channel_reduction(spec.kind) ? ""
                                                                          : outer_tile_assert())
      << "typedef " << emit::index_type(spec.index64) << " I;\n\n"
      << (!spec.prologue                  ? std::string()
          : is_softmax_forward(spec.kind) ? prologue_row_load_struct(spec)
                                          : prologue_load_struct(spec))
      << (spec.epilogue ? epilogue_store_struct(spec) : std::string()) << entries;
  EmittedKernel kernel{src.str(), {main.abi}};
  if (!wide.abi.name.empty()) kernel.entries.push_back(wide.abi);
  if (is_channel_reduction(spec.kind)) kernel.entries.push_back(totals.abi);
  if (!partials.abi.params.empty()) {
    kernel.entries.push_back(partials.abi);
    kernel.entries.push_back(totals.abi);
  }
  return kernel;
}

}  // namespace mybackend
