// Reduction kernels: a Load functor (the prologue on one input element), a
// Store functor (finalize the accumulator, run the epilogue, store), and a
// call into the loops of device/mb_reduction.cuh.
//
// Index spaces: the input side is the prologue's iteration space (rank
// input_rank; Inner views it as [rows, n], Outer as [outer, n, inner]); the
// output side is the epilogue's (rank output_rank, [rows] or [outer, inner]).
// Strided tensors on either side get that side's shape. A row epilogue
// (Note [Row epilogues] in spec/kernel_spec.h) is a third side over the
// input space: a RowStore functor the loops call at each element of a row
// after reducing it, given the row's values from the Store.
#include <sstream>

#include "codegen/emit.h"
#include "codegen/emit_common.h"
#include "codegen/launch_tuning.h"
#include "common/error.h"

namespace mybackend {
namespace {

using emit::compute_type;
using emit::storage_type;

struct Side {
  const PointwiseSpec& spec;
  bool divisors;              // periodic inputs divide by multipliers (32-bit index)
  std::string ptr_prefix;     // "in" (prologue), "ein" (epilogue) or "rin" (row epilogue) inputs
  std::string scalar_prefix;  // kernel parameter names of argument scalars
  std::string shape;          // "in_shape", "out_shape" or "row_shape"
  std::size_t first_input;    // inputs before it are values, not tensors (the reduced value,
                              // the row values)
  std::string out_prefix = "out";  // "out" or "rout"
  std::size_t stored = 0;          // outputs [0, stored) are stored
};

bool needs_shape(const Side& side, bool with_outputs) {
  bool any = false;
  for (std::size_t k = side.first_input; k < side.spec.inputs.size(); ++k) {
    const TensorArg& t = side.spec.inputs[k];
    any = any || (t.mode == IndexMode::Strided && t.rank > 0);
  }
  if (with_outputs) {
    for (std::size_t k = 0; k < side.stored; ++k) {
      const TensorArg& t = side.spec.outputs[k].tensor;
      any = any || (t.mode == IndexMode::Strided && t.rank > 0);
    }
  }
  return any;
}

std::vector<emit::OffsetTensor> strided_of(const Side& side, bool with_outputs) {
  std::vector<emit::OffsetTensor> tensors;
  for (std::size_t k = side.first_input; k < side.spec.inputs.size(); ++k) {
    const TensorArg& t = side.spec.inputs[k];
    const std::string n = side.ptr_prefix + std::to_string(k);
    if (t.mode == IndexMode::Strided) tensors.push_back({"off_" + n, "stride_" + n, t.rank});
  }
  if (with_outputs) {
    for (std::size_t k = 0; k < side.stored; ++k) {
      const TensorArg& t = side.spec.outputs[k].tensor;
      const std::string n = side.out_prefix + std::to_string(k);
      if (t.mode == IndexMode::Strided) tensors.push_back({"off_" + n, "stride_" + n, t.rank});
    }
  }
  return tensors;
}

std::string offset_of(const TensorArg& t, const std::string& n, const std::string& linear) {
  return t.mode == IndexMode::Strided || is_periodic(t.mode) ? "off_" + n : linear;
}

// The kernel parameters of the side's periodic inputs (Note [Periodic
// operands in reductions]), in ABI order.
std::vector<std::string> periodic_names(const Side& side) {
  std::vector<std::string> names;
  for (std::size_t k = side.first_input; k < side.spec.inputs.size(); ++k) {
    for (std::string& name : emit::periodic_params(
             side.spec.inputs[k], side.ptr_prefix + std::to_string(k), side.divisors))
      names.push_back(std::move(name));
  }
  return names;
}

// Struct members shared by Load and Store: pointers, scalars, shape, strides.
void members(const Side& side, bool with_outputs, std::ostringstream& src) {
  const PointwiseSpec& spec = side.spec;
  for (std::size_t k = side.first_input; k < spec.inputs.size(); ++k) {
    src << "  const " << storage_type(spec.inputs[k].dtype) << "* __restrict__ " << side.ptr_prefix
        << std::to_string(k) << ";\n";
  }
  if (with_outputs) {
    for (std::size_t k = 0; k < side.stored; ++k) {
      src << "  " << storage_type(spec.outputs[k].tensor.dtype) << "* __restrict__ "
          << side.out_prefix << std::to_string(k) << ";\n";
    }
  }
  for (std::size_t k = 0; k < spec.scalars.size(); ++k) {
    if (spec.scalars[k].is_argument)
      src << "  " << compute_type(spec.scalars[k].dtype) << " s" << std::to_string(k) << ";\n";
  }
  if (needs_shape(side, with_outputs))
    src << "  mb::Dims<" << std::to_string(spec.rank) << "> shape;\n";
  for (const auto& t : strided_of(side, with_outputs)) {
    if (t.rank > 0) src << "  mb::Dims<" << std::to_string(t.rank) << "> " << t.strides << ";\n";
  }
  for (const std::string& name : periodic_names(side)) src << "  long long " << name << ";\n";
}

// Statements loading every used input at linear index `linear` into x<k>.
void load_inputs(const Side& side, const std::string& linear, std::ostringstream& src) {
  const PointwiseSpec& spec = side.spec;
  const std::vector<bool> used = emit::used_inputs(spec);
  for (std::size_t k = side.first_input; k < spec.inputs.size(); ++k) {
    if (used[k] && is_periodic(spec.inputs[k].mode))
      src << emit::periodic_offset(spec.inputs[k], side.ptr_prefix + std::to_string(k), linear,
                                   "    ", side.divisors);
  }
  for (std::size_t k = side.first_input; k < spec.inputs.size(); ++k) {
    const std::string n = side.ptr_prefix + std::to_string(k);
    const std::string ct(compute_type(spec.inputs[k].dtype));
    src << "    const " << ct << " x" << std::to_string(k) << " = "
        << (used[k] ? "mb::to_compute(" + n + "[" + offset_of(spec.inputs[k], n, linear) + "])"
                    : ct + "(0)")
        << ";\n";
  }
}

// Declares x<k>[N] for each input from side.first_input on and loads the
// used ones at i..i+N-1: dense inputs as one vector, periodic ones (a
// weight over the row) element by element at their period.
void vector_loads(const Side& side, std::ostringstream& src) {
  const PointwiseSpec& spec = side.spec;
  const std::vector<bool> used = emit::used_inputs(spec);
  for (std::size_t k = side.first_input; k < spec.inputs.size(); ++k) {
    const std::string x = "x" + std::to_string(k);
    const std::string n = side.ptr_prefix + std::to_string(k);
    src << "    " << compute_type(spec.inputs[k].dtype) << " " << x << "[N];\n";
    if (!used[k]) continue;
    if (is_periodic(spec.inputs[k].mode)) {
      src << "#pragma unroll\n    for (int k = 0; k < N; ++k) {\n"
          << emit::periodic_offset(spec.inputs[k], n, "(i + k)", "      ", side.divisors)
          << "      " << x << "[k] = mb::to_compute(" << n << "[off_" << n << "]);\n    }\n";
    } else {
      src << "    mb::load_compute<N>(" << n << " + i, " << x << ");\n";
    }
  }
}

void emit_load_struct(const Side& side, int vec, std::ostringstream& src) {
  const PointwiseSpec& spec = side.spec;
  const std::string value(compute_type(spec.outputs[0].tensor.dtype));
  src << "struct Load {\n  typedef " << value << " Value;\n";
  members(side, false, src);
  src << "  __device__ __forceinline__ Value operator()(const I i) const {\n";
  src << emit::strided_offsets(strided_of(side, false), spec.rank, "shape", "i", "    ");
  load_inputs(side, "i", src);
  src << "    Value y0;\n    mb_prologue(" << emit::body_call_args(spec, "x", "", "s", "y", "")
      << ");\n"
      << "    return y0;\n  }\n";
  // Only emitted when every input is Aligned or periodic (see
  // reduce_inner_block).
  if (vec > 1) {
    src << "  template <int N>\n  __device__ __forceinline__ void vec(const I i, Value (&y0)[N]) "
           "const {\n";
    vector_loads(side, src);
    src << "#pragma unroll\n    for (int k = 0; k < N; ++k) mb_prologue("
        << emit::body_call_args(spec, "x", "[k]", "s", "y", "[k]") << ");\n  }\n";
  }
  src << "};\n\n";
}

// The reduced value, from accumulator `acc` over `n` elements, as out_dtype.
std::string finalize_expr(const ReductionSpec& spec, DType acc_dtype) {
  const std::string a(compute_type(acc_dtype));
  const std::string count = "static_cast<" + a + ">(n)";
  std::string value = "acc";
  DType from = acc_dtype;
  switch (spec.op) {
    case ReduceOp::Mean: value = "acc / " + count; break;
    case ReduceOp::Var:
    case ReduceOp::Std: {
      const std::string dof = "mb::maximum(" + a + "(0), " + count + " - " +
                              emit::literal(acc_dtype, spec.correction, 0) + ")";
      value = "acc.m2 / " + dof;
      if (spec.op == ReduceOp::Std) value = "mb::sqrt(" + value + ")";
      break;
    }
    case ReduceOp::Argmax:
    case ReduceOp::Argmin:
      value = "acc.index";
      from = DType::Int64;
      break;
    default: break;
  }
  return emit::cast_expr(from, spec.out_dtype, value);
}

// Statements storing outputs [0, side.stored) of y<k> at linear index `linear`.
void store_outputs(const Side& side, const std::string& linear, const std::string& indent,
                   std::ostringstream& src) {
  for (std::size_t k = 0; k < side.stored; ++k) {
    const TensorArg& t = side.spec.outputs[k].tensor;
    const std::string n = side.out_prefix + std::to_string(k);
    src << indent << n << "[" << offset_of(t, n, linear) << "] = mb::from_compute<"
        << storage_type(t.dtype) << ">(y" << std::to_string(k) << ");\n";
  }
}

// Declares y<k><suffix> for every output ("[N]": one per vector element).
void declare_outputs(const PointwiseSpec& spec, std::ostringstream& src,
                     const std::string& suffix = "") {
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    src << "    " << compute_type(spec.outputs[k].tensor.dtype) << " y" << std::to_string(k)
        << suffix << ";\n";
  }
}

// The Store functor. With a row epilogue (Note [Row epilogues]) every thread
// of the row calls it, `leader` stores, and it returns the row values, each
// rounded to its dtype as a store and a load would.
void emit_store_struct(const ReductionSpec& rspec, const Side& side, DType acc_dtype,
                       std::ostringstream& src) {
  const PointwiseSpec& spec = side.spec;
  const bool rows = rspec.row_epilogue.has_value();
  if (rows) {
    src << "struct RowValues {\n";
    for (std::size_t k = 0; k < rspec.row_values.size(); ++k) {
      const DType dtype = spec.outputs[static_cast<std::size_t>(rspec.row_values[k])].tensor.dtype;
      src << "  " << compute_type(dtype) << " v" << std::to_string(k) << ";\n";
    }
    src << "};\n\n";
  }
  src << "struct Store {\n";
  members(side, true, src);
  src << "  template <class Acc>\n  __device__ __forceinline__ " << (rows ? "RowValues" : "void")
      << " operator()(const I o, const Acc& acc, const I n" << (rows ? ", const bool leader" : "")
      << ") const {\n"
      << "    const " << compute_type(rspec.out_dtype)
      << " x0 = " << finalize_expr(rspec, acc_dtype) << ";\n";
  src << emit::strided_offsets(strided_of(side, true), spec.rank, "shape", "o", "    ");
  load_inputs(side, "o", src);
  declare_outputs(spec, src);
  src << "    mb_epilogue(" << emit::body_call_args(spec, "x", "", "s", "y", "") << ");\n";
  if (!rows) {
    store_outputs(side, "o", "    ", src);
    src << "  }\n};\n\n";
    return;
  }
  src << "    if (leader) {\n";
  store_outputs(side, "o", "      ", src);
  src << "    }\n    return RowValues{";
  for (std::size_t k = 0; k < rspec.row_values.size(); ++k) {
    const std::string y = "y" + std::to_string(rspec.row_values[k]);
    const DType dtype = spec.outputs[static_cast<std::size_t>(rspec.row_values[k])].tensor.dtype;
    src << (k ? ", " : "") << "mb::to_compute(mb::from_compute<" << storage_type(dtype) << ">(" << y
        << "))";
  }
  src << "};\n  }\n};\n\n";
}

// The RowStore functor of a row epilogue: at element i of the input space,
// the row epilogue over the row values `rv` and its loaded inputs, stored.
// `vec` > 1 adds the member vec<N>(i, rv) for dense rows (every tensor
// Aligned or periodic, i 16-byte aligned).
void emit_row_store_struct(const Side& side, int vec, std::ostringstream& src) {
  const PointwiseSpec& spec = side.spec;
  src << "struct RowStore {\n";
  members(side, true, src);
  src << "  __device__ __forceinline__ void operator()(const I i, const RowValues& rv) const {\n";
  src << emit::strided_offsets(strided_of(side, true), spec.rank, "shape", "i", "    ");
  for (std::size_t k = 0; k < side.first_input; ++k) {
    src << "    const " << compute_type(spec.inputs[k].dtype) << " x" << std::to_string(k)
        << " = rv.v" << std::to_string(k) << ";\n";
  }
  load_inputs(side, "i", src);
  declare_outputs(spec, src);
  src << "    mb_row(" << emit::body_call_args(spec, "x", "", "s", "y", "") << ");\n";
  store_outputs(side, "i", "    ", src);
  src << "  }\n";
  if (vec > 1) {
    src << "  template <int N>\n  __device__ __forceinline__ void vec(const I i, const RowValues& "
           "rv) const {\n";
    for (std::size_t k = 0; k < side.first_input; ++k) {
      const std::string x = "x" + std::to_string(k);
      src << "    " << compute_type(spec.inputs[k].dtype) << " " << x << "[N];\n"
          << "#pragma unroll\n    for (int k = 0; k < N; ++k) " << x << "[k] = rv.v"
          << std::to_string(k) << ";\n";
    }
    vector_loads(side, src);
    declare_outputs(spec, src, "[N]");
    src << "#pragma unroll\n    for (int k = 0; k < N; ++k) mb_row("
        << emit::body_call_args(spec, "x", "[k]", "s", "y", "[k]") << ");\n";
    for (std::size_t k = 0; k < side.stored; ++k) {
      src << "    mb::store_compute<N>(" << side.out_prefix << std::to_string(k) << " + i, y"
          << std::to_string(k) << ");\n";
    }
    src << "  }\n";
  }
  src << "};\n\n";
}

std::string reducer_type(ReduceOp op, DType acc_dtype) {
  const std::string a(compute_type(acc_dtype));
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: return "mb::SumReducer<" + a + ">";
    case ReduceOp::Prod: return "mb::ProdReducer<" + a + ">";
    case ReduceOp::Amax: return "mb::MaxReducer<" + a + ">";
    case ReduceOp::Amin: return "mb::MinReducer<" + a + ">";
    case ReduceOp::Var:
    case ReduceOp::Std: return "mb::WelfordReducer<" + a + ">";
    case ReduceOp::Argmax: return "mb::ArgReducer<" + a + ", true>";
    case ReduceOp::Argmin: return "mb::ArgReducer<" + a + ", false>";
  }
  return {};
}

// Kernel parameters (Note [Kernel ABI] order) plus the initializers of the
// Load and Store members, which follow the same order.
struct Params {
  std::ostringstream src;
  std::vector<std::string> load_init;
  std::vector<std::string> store_init;
  std::vector<std::string> row_init;
  std::string sep = "\n    ";
  KernelEntry* entry = nullptr;

  void add(const std::string& text, KernelParam p) {
    src << sep << text;
    sep = ",\n    ";
    entry->params.push_back(std::move(p));
  }
};

// A side's tensor parameters, into `init` (the functor's members, same
// order): "<ptr_prefix><k>" for inputs from side.first_input on, then
// "<out_prefix><k>" for its stored outputs.
void add_pointer_params(const Side& side, std::vector<std::string>& init, Params& p) {
  for (std::size_t k = side.first_input; k < side.spec.inputs.size(); ++k) {
    const std::string n = side.ptr_prefix + std::to_string(k);
    p.add("const " + std::string(storage_type(side.spec.inputs[k].dtype)) + "* __restrict__ " + n,
          {KernelParam::Kind::Pointer, n});
    init.push_back(n);
  }
  for (std::size_t k = 0; k < side.stored; ++k) {
    const std::string n = side.out_prefix + std::to_string(k);
    p.add(std::string(storage_type(side.spec.outputs[k].tensor.dtype)) + "* __restrict__ " + n,
          {KernelParam::Kind::Pointer, n});
    init.push_back(n);
  }
}

void add_scalar_params(const Side& side, std::vector<std::string>& init, Params& p) {
  for (std::size_t k = 0; k < side.spec.scalars.size(); ++k) {
    const PwScalar& s = side.spec.scalars[k];
    if (!s.is_argument) continue;
    const bool floating = is_floating(s.dtype);
    const std::string n = side.scalar_prefix + std::to_string(k);
    p.add(std::string(floating ? "const double " : "const long long ") + n,
          {floating ? KernelParam::Kind::Float64 : KernelParam::Kind::Int64, n});
    init.push_back(emit::cast_expr(floating ? DType::Float64 : DType::Int64, s.dtype, n));
  }
}

void add_dims_params(const Side& side, bool with_outputs, std::vector<std::string>& init,
                     Params& p) {
  if (needs_shape(side, with_outputs)) {
    p.add(emit::dims_param(side.spec.rank, side.shape),
          {KernelParam::Kind::Dims, side.shape, side.spec.rank});
    init.push_back(side.shape);
  }
  for (const auto& t : strided_of(side, with_outputs)) {
    if (t.rank == 0) continue;
    p.add(emit::dims_param(t.rank, t.strides), {KernelParam::Kind::Dims, t.strides, t.rank});
    init.push_back(t.strides);
  }
}

void add_periodic_params(const Side& side, std::vector<std::string>& init, Params& p) {
  for (const std::string& name : periodic_names(side)) {
    p.add("const long long " + name, {KernelParam::Kind::Int64, name});
    init.push_back(name);
  }
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

EmittedKernel emit_reduction(const ReductionSpec& spec) {
  const std::string problem = validate(spec);
  MB_ASSERT(problem.empty(), "emit_reduction given an invalid spec: ", problem, "\n",
            spec.to_string());
  const PointwiseSpec prologue = effective_prologue(spec);
  const PointwiseSpec epilogue = effective_epilogue(spec);
  const bool divisors = !spec.index64;  // fast_div takes 32-bit numerators
  const Side in{prologue, divisors, "in", "scalar", "in_shape", 0, "out", 0};
  const Side out{epilogue,    divisors, "ein", "escalar",
                 "out_shape", 1,        "out", spec.stored_outputs()};
  const PointwiseSpec row_spec = spec.row_epilogue.value_or(PointwiseSpec{});
  const Side row{row_spec,    divisors,
                 "rin",       "rscalar",
                 "row_shape", spec.row_values.size(),
                 "rout",      row_spec.outputs.size()};
  const DType acc_dtype = reduction_acc_dtype(prologue.outputs[0].tensor.dtype);

  // Vectors where every input is dense or periodic (a periodic one is read
  // element by element inside the vector loop).
  bool aligned = !prologue.inputs.empty();
  std::vector<DType> in_dtypes;
  for (const auto& t : prologue.inputs) {
    aligned = aligned && (t.mode == IndexMode::Aligned || is_periodic(t.mode));
    in_dtypes.push_back(t.dtype);
  }
  const bool inner_block =
      spec.axis == ReduceAxis::Inner && spec.strategy == ReduceStrategy::BlockPerRow;
  const int vec = inner_block && aligned ? pointwise_vector_width(in_dtypes) : 1;
  // Note [Row epilogues]: rows stored as vectors when every tensor is dense.
  bool rows_aligned = spec.row_epilogue.has_value();
  for (std::size_t k = row.first_input; k < row_spec.inputs.size(); ++k) {
    const IndexMode mode = row_spec.inputs[k].mode;
    rows_aligned = rows_aligned && (mode == IndexMode::Aligned || is_periodic(mode));
  }
  for (const PwOutput& o : row_spec.outputs)
    rows_aligned = rows_aligned && o.tensor.mode == IndexMode::Aligned;
  const int row_vec = rows_aligned ? pointwise_vector_width(row_spec) : 1;

  KernelEntry entry;
  entry.name = "mb_reduction_" + emit::hex16(spec.hash());
  entry.block_x = spec.axis == ReduceAxis::Outer ? 32 : spec.threads;
  entry.block_y = spec.axis == ReduceAxis::Outer ? 8 : 1;
  entry.elements_per_thread = vec;

  std::ostringstream src;
  src << emit::comment_block(spec.to_string()) << "#include \"mb_reduction.cuh\"\n\n"
      << (spec.axis == ReduceAxis::Outer ? outer_tile_assert() : "") << "typedef "
      << emit::index_type(spec.index64) << " I;\n\n"
      << emit::body_function(prologue, "mb_prologue") << "\n"
      << emit::body_function(epilogue, "mb_epilogue") << "\n";
  emit_load_struct(in, vec, src);
  emit_store_struct(spec, out, acc_dtype, src);
  if (spec.row_epilogue) {
    src << emit::body_function(row_spec, "mb_row") << "\n";
    emit_row_store_struct(row, row_vec, src);
  }

  Params p;
  p.entry = &entry;
  add_pointer_params(in, p.load_init, p);
  add_pointer_params(out, p.store_init, p);
  if (spec.row_epilogue) add_pointer_params(row, p.row_init, p);
  add_scalar_params(in, p.load_init, p);
  add_scalar_params(out, p.store_init, p);
  const std::string rows = spec.axis == ReduceAxis::Outer ? "outer" : "rows";
  p.add("const long long " + rows, {KernelParam::Kind::Int64, rows});
  p.add("const long long n", {KernelParam::Kind::Int64, "n"});
  if (spec.axis == ReduceAxis::Outer)
    p.add("const long long inner", {KernelParam::Kind::Int64, "inner"});
  add_dims_params(in, false, p.load_init, p);
  add_dims_params(out, true, p.store_init, p);
  if (spec.row_epilogue) add_dims_params(row, true, p.row_init, p);
  add_periodic_params(in, p.load_init, p);
  add_periodic_params(out, p.store_init, p);
  if (spec.row_epilogue) add_periodic_params(row, p.row_init, p);

  const std::string reducer = reducer_type(spec.op, acc_dtype);
  // The signature, Load and Store of an entry taking entry 0's parameters.
  auto open_entry = [&](const KernelEntry& e) {
    src << "extern \"C\" __global__ void __launch_bounds__("
        << std::to_string(e.block_x * e.block_y) << ") " << e.name << "(" << p.src.str() << ") {\n"
        << "  const Load load{" << join(p.load_init) << "};\n"
        << "  const Store store{" << join(p.store_init) << "};\n";
    if (spec.row_epilogue) src << "  const RowStore row_store{" << join(p.row_init) << "};\n";
  };
  open_entry(entry);
  if (spec.axis == ReduceAxis::Outer) {
    src << "  mb::reduce_outer<" << reducer
        << ", I>(load, store, static_cast<I>(outer), static_cast<I>(n), static_cast<I>(inner));\n";
  } else if (spec.row_epilogue) {
    // Note [Row epilogues]: one launch a row, no split entries.
    src << "  mb::reduce_inner_" << (inner_block ? "block" : "warp") << "_rows<" << reducer
        << ", I, " << std::to_string(inner_block ? vec : 1) << ", " << std::to_string(row_vec)
        << ">(load, store, row_store, static_cast<I>(rows), static_cast<I>(n));\n}\n";
    return EmittedKernel{src.str(), {entry}};
  } else if (inner_block) {
    src << "  mb::reduce_inner_block<" << reducer << ", I, " << std::to_string(vec)
        << ">(load, store, static_cast<I>(rows), static_cast<I>(n));\n";
  } else {
    src << "  mb::reduce_inner_warp<" << reducer
        << ", I>(load, store, static_cast<I>(rows), static_cast<I>(n));\n";
  }
  src << "}\n";
  // A warp per row has rows too short to split.
  if (spec.axis == ReduceAxis::Inner && !inner_block) return EmittedKernel{src.str(), {entry}};

  // Note [Split outer reductions], Note [Split inner reductions]: entries 1
  // and 2 take the same parameters plus the workspace and the chunk length.
  // The outer totals run blocks of (32, 8), the inner ones a block per row.
  const bool outer = spec.axis == ReduceAxis::Outer;
  const std::string split_params = p.src.str() +
                                   ",\n    void* __restrict__ partials,"
                                   "\n    const long long chunk";
  const std::string acc = reducer + "::AccT";
  const std::string sizes =
      outer ? "static_cast<I>(outer), static_cast<I>(n), "
              "static_cast<I>(inner), static_cast<I>(chunk), "
            : "static_cast<I>(rows), static_cast<I>(n), static_cast<I>(chunk), ";
  const std::string partials_call =
      outer ? "mb::reduce_outer_partials<" + reducer + ", I>"
            : "mb::reduce_inner_partials<" + reducer + ", I, " + std::to_string(vec) + ">";
  const std::string totals_call =
      std::string(outer ? "mb::reduce_outer_totals<" : "mb::reduce_inner_totals<") + reducer +
      ", I>";
  std::vector<KernelEntry> entries{entry};
  for (const char* stage : {"_partials", "_totals"}) {
    const bool partials = std::string(stage) == "_partials";
    KernelEntry e = entry;
    e.name += stage;
    e.params.push_back({KernelParam::Kind::Pointer, "partials"});
    e.params.push_back({KernelParam::Kind::Int64, "chunk"});
    // Totals read one partial a thread, in entry 0's block: (32, 8) for
    // Outer, the spec's threads for Inner.
    if (!partials) e.elements_per_thread = 1;
    entries.push_back(e);
    src << "\nextern \"C\" __global__ void __launch_bounds__("
        << std::to_string(e.block_x * e.block_y) << ") " << e.name << "(" << split_params
        << ") {\n";
    if (partials) {
      src << "  const Load load{" << join(p.load_init) << "};\n"
          << "  " << partials_call << "(load, " << sizes << "static_cast<" << acc
          << "*>(partials));\n";
    } else {
      src << "  const Store store{" << join(p.store_init) << "};\n"
          << "  " << totals_call << "(store, " << sizes << "static_cast<const " << acc
          << "*>(partials));\n";
    }
    src << "}\n";
  }
  // Note [Narrow outer tiles]: entry 3, entry 0's parameters, one column and
  // 32 thread rows a block.
  if (outer) {
    KernelEntry e = entry;
    e.name += "_narrow";
    e.block_y = 32;
    entries.push_back(e);
    src << "\n";
    open_entry(e);
    src << "  mb::reduce_outer<" << reducer << ", I, Load, Store, 1, " << std::to_string(e.block_y)
        << ">(load, store, static_cast<I>(outer), static_cast<I>(n), static_cast<I>(inner));\n}\n";
  }
  return EmittedKernel{src.str(), entries};
}

}  // namespace mybackend
