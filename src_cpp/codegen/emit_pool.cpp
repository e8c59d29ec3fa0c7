// Max-pool kernels (Note [Pool groups] in fusion/pool_planner.h): a Load
// functor (the prologue at one window element, for `vector` channels), a
// Store functor (pooled values and indices) and a call into the window loop
// of device/mb_pool.cuh. The backward's Load is the gradient's prologue at
// one output element, its Store writes the input-space sums, and the
// indices come in as a pointer argument.
//
// Each prologue input is read as its PoolRead says: Window inputs at the
// window element's offset (a vector load in NHWC), Channel inputs once per
// output before the window loop (Load::fixed), Strided inputs through their
// four strides over [N, C, H, W].
#include <sstream>

#include "codegen/emit.h"
#include "codegen/emit_common.h"
#include "common/error.h"

namespace mybackend {
namespace {

using emit::compute_type;
using emit::storage_type;

// The int64 kernel arguments, in ABI order: sizes, then the window.
const char* const kShapeParams[] = {"batch", "channels", "in_h",       "in_w",      "out_h",
                                    "out_w", "kernel_h", "kernel_w",   "stride_h",  "stride_w",
                                    "pad_h", "pad_w",    "dilation_h", "dilation_w"};
constexpr int kSizeParams = 6;  // the first six are sizes (I), the rest window ints

std::string input_name(std::size_t k) { return "in" + std::to_string(k); }

// "x<k>[j] = value of input k at channel c + j", for a Strided input.
std::string strided_element(const std::string& n, const std::string& channel) {
  const std::string s = "stride_" + n + ".d";
  return n + "[n * static_cast<I>(" + s + "[0]) + (" + channel + ") * static_cast<I>(" + s +
         "[1]) + h * static_cast<I>(" + s + "[2]) + w * static_cast<I>(" + s + "[3])]";
}

void emit_load_struct(const PoolSpec& spec, const PointwiseSpec& prologue,
                      std::ostringstream& src) {
  const std::string vec = std::to_string(spec.vector);
  const std::vector<bool> used = emit::used_inputs(prologue);
  src << "struct Load {\n  typedef " << compute_type(spec.dtype) << " Value;\n";
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    src << "  const " << storage_type(prologue.inputs[k].dtype) << "* __restrict__ "
        << input_name(k) << ";\n";
  }
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    if (spec.reads[k] == PoolRead::Strided)
      src << "  mb::Dims<4> stride_" << input_name(k) << ";\n";
  }
  // Channel inputs, loaded once per output element.
  src << "  struct Fixed {\n";
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    if (spec.reads[k] == PoolRead::Channel)
      src << "    " << compute_type(prologue.inputs[k].dtype) << " x" << std::to_string(k) << "["
          << vec << "];\n";
  }
  src << "  };\n";
  src << "  __device__ __forceinline__ Fixed fixed(const I c) const {\n"
      << "    Fixed f;\n";
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    if (spec.reads[k] != PoolRead::Channel) continue;
    const std::string x = "f.x" + std::to_string(k);
    if (used[k]) {
      src << "    mb::load_compute<" << vec << ">(" << input_name(k) << " + c, " << x << ");\n";
    } else {
      src << "    for (int j = 0; j < " << vec << "; ++j) " << x << "[j] = 0;\n";
    }
  }
  src << "    return f;\n  }\n";
  src << "  __device__ __forceinline__ void operator()(const Fixed& f, const I at, const I n, "
         "const I c, const I h, const I w, Value (&y0)["
      << vec << "]) const {\n";
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    const std::string n = input_name(k);
    const std::string x = "x" + std::to_string(k);
    const std::string ct(compute_type(prologue.inputs[k].dtype));
    if (spec.reads[k] == PoolRead::Channel) {
      src << "    const " << ct << " (&" << x << ")[" << vec << "] = f." << x << ";\n";
      continue;
    }
    src << "    " << ct << " " << x << "[" << vec << "];\n";
    if (!used[k]) {
      src << "    for (int j = 0; j < " << vec << "; ++j) " << x << "[j] = 0;\n";
    } else if (spec.reads[k] == PoolRead::Window) {
      src << "    mb::load_compute<" << vec << ">(" << n << " + at, " << x << ");\n";
    } else {
      src << "#pragma unroll\n    for (int j = 0; j < " << vec << "; ++j) " << x
          << "[j] = mb::to_compute(" << strided_element(n, "c + j") << ");\n";
    }
  }
  src << "#pragma unroll\n    for (int j = 0; j < " << vec << "; ++j) mb_prologue("
      << emit::body_call_args(prologue, "x", "[j]", "s", "y", "[j]") << ");\n"
      << "  }\n};\n\n";
}

void emit_store_struct(const PoolSpec& spec, std::ostringstream& src) {
  const std::string vec = std::to_string(spec.vector);
  const std::string value(compute_type(spec.dtype));
  src << "struct Store {\n  " << storage_type(spec.dtype) << "* __restrict__ out;\n";
  if (spec.backward) {  // the gradient sums of `vector` input elements
    src << "  __device__ __forceinline__ void operator()(const I at, const " << value << " (&v)["
        << vec << "]) const {\n"
        << "    mb::store_compute<" << vec << ">(out + at, v);\n  }\n};\n\n";
    return;
  }
  if (spec.store_indices) src << "  mb::i64* __restrict__ indices;\n";
  src << "  __device__ __forceinline__ void operator()(const I at, const " << value << " (&v)["
      << vec << "], const I (&where)[" << vec << "]) const {\n"
      << "    mb::store_compute<" << vec << ">(out + at, v);\n";
  if (spec.store_indices) {
    src << "    mb::i64 index[" << vec << "];\n"
        << "#pragma unroll\n    for (int j = 0; j < " << vec
        << "; ++j) index[j] = static_cast<mb::i64>(where[j]);\n"
        << "    mb::store_vec<" << vec << ">(indices + at, index);\n";
  }
  src << "  }\n};\n\n";
}

}  // namespace

EmittedKernel emit_pool(const PoolSpec& spec) {
  const std::string problem = validate(spec);
  MB_ASSERT(problem.empty(), "emit_pool given an invalid spec: ", problem, "\n", spec.to_string());
  const PointwiseSpec prologue = effective_prologue(spec);

  KernelEntry entry;
  entry.name = "mb_pool_" + emit::hex16(spec.hash());
  entry.block_x = spec.threads;
  entry.elements_per_thread = spec.vector;

  // Parameters (Note [Kernel ABI] order) and the Load/Store initializers,
  // which follow the members' order.
  std::ostringstream params;
  std::string sep = "\n    ";
  auto add = [&](const std::string& text, KernelParam p) {
    params << sep << text;
    sep = ",\n    ";
    entry.params.push_back(std::move(p));
  };
  std::vector<std::string> load_init, store_init{"out"};
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    add("const " + std::string(storage_type(prologue.inputs[k].dtype)) + "* __restrict__ " +
            input_name(k),
        {KernelParam::Kind::Pointer, input_name(k)});
    load_init.push_back(input_name(k));
  }
  add(std::string(storage_type(spec.dtype)) + "* __restrict__ out",
      {KernelParam::Kind::Pointer, "out"});
  if (spec.backward) {
    add("const mb::i64* __restrict__ indices", {KernelParam::Kind::Pointer, "indices"});
  } else if (spec.store_indices) {
    add("mb::i64* __restrict__ indices", {KernelParam::Kind::Pointer, "indices"});
    store_init.push_back("indices");
  }
  for (const char* name : kShapeParams)
    add(std::string("const long long ") + name, {KernelParam::Kind::Int64, name});
  for (std::size_t k = 0; k < prologue.inputs.size(); ++k) {
    if (spec.reads[k] != PoolRead::Strided) continue;
    const std::string n = "stride_" + input_name(k);
    add(emit::dims_param(4, n), {KernelParam::Kind::Dims, n, 4});
    load_init.push_back(n);
  }

  std::ostringstream src;
  src << emit::comment_block(spec.to_string()) << "#include \"mb_pool.cuh\"\n\n"
      << "typedef " << emit::index_type(spec.index64) << " I;\n\n"
      << emit::body_function(prologue, "mb_prologue") << "\n";
  emit_load_struct(spec, prologue, src);
  emit_store_struct(spec, src);

  auto join = [](const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
  };
  std::vector<std::string> shape;
  for (int k = 0; k < static_cast<int>(std::size(kShapeParams)); ++k) {
    const std::string type = k < kSizeParams ? "I" : "int";
    shape.push_back("static_cast<" + type + ">(" + kShapeParams[k] + ")");
  }
  src << "extern \"C\" __global__ void __launch_bounds__(" << std::to_string(spec.threads) << ") "
      << entry.name << "(" << params.str() << ") {\n"
      << "  const Load load{" << join(load_init) << "};\n"
      << "  const Store store{" << join(store_init) << "};\n"
      << "  const mb::PoolShape<I> shape{" << join(shape) << "};\n"
      << "  mb::" << (spec.backward ? "max_pool2d_backward<" : "max_pool2d<")
      << (spec.layout == PoolLayout::ChannelsLast ? "true" : "false") << ", "
      << std::to_string(spec.vector) << ", I>(load, " << (spec.backward ? "indices, " : "")
      << "store, shape);\n"
      << "}\n";
  return EmittedKernel{src.str(), {entry}};
}

}  // namespace mybackend
