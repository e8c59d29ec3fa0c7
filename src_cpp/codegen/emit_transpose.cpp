// Tiled transposing copies (Note [Tiled transposing copies] in
// fusion/transposed_copies.h): the tile walk is mb::transpose_tiles
// (device/mb_transpose.cuh, Note [Transpose tiles]); what varies per spec is
// the element function (the body's loads and casts), the dtypes and the
// tile, written here.
#include <sstream>

#include "codegen/emit.h"
#include "codegen/emit_common.h"
#include "common/error.h"
#include "spec/transpose_spec.h"

namespace mybackend {

EmittedKernel emit_transpose(const TransposeSpec& spec) {
  const std::string problem = validate(spec);
  MB_ASSERT(problem.empty(), "emit_transpose given an invalid spec: ", problem, "\n",
            spec.to_string());
  KernelEntry entry;
  entry.name = "mb_transpose_" + emit::hex16(spec.hash());
  entry.block_x = spec.threads;
  entry.params.push_back({KernelParam::Kind::Pointer, "in"});
  entry.params.push_back({KernelParam::Kind::Pointer, "out"});
  // Sizes, then the input's and the output's strides, each of [batch, a, b]
  // (TransposeShape's order).
  for (const char* name :
       {"batch", "size_a", "size_b", "in_batch", "in_a", "in_b", "out_batch", "out_a", "out_b"})
    entry.params.push_back({KernelParam::Kind::Int64, name});

  const std::string in(emit::storage_type(spec.in_dtype()));
  const std::string out(emit::storage_type(spec.out_dtype()));
  const std::string value(emit::compute_type(spec.out_dtype()));
  std::ostringstream src;
  src << emit::comment_block(spec.to_string())
      << emit::approx_math_define(emit::approx_math_level({spec.out_dtype()}))
      << "#include \"mb_transpose.cuh\"\n\n"
      << "typedef " << emit::index_type(spec.index64) << " I;\n\n"
      << emit::body_function(spec.body, "mb_body") << "\n"
      << "struct Element {\n"
      << "  typedef " << value << " Value;\n"
      << "  __device__ __forceinline__ Value operator()(const " << in << " x) const {\n"
      << "    Value y;\n"
      << "    mb_body(mb::to_compute(x), y);\n"
      << "    return y;\n"
      << "  }\n"
      << "};\n\n"
      << "extern \"C\" __global__ void __launch_bounds__(" << std::to_string(spec.threads) << ") "
      << entry.name << "(\n"
      << "    const " << in << "* __restrict__ in, " << out << "* __restrict__ out,";
  std::string sep = "\n    ";
  for (std::size_t k = 2; k < entry.params.size(); ++k) {
    src << sep << "const long long " << entry.params[k].name;
    sep = ",\n    ";
  }
  src << ") {\n"
      << "  const mb::TransposeShape<I> s = {\n"
      << "      static_cast<I>(batch),    static_cast<I>(size_a), static_cast<I>(size_b),\n"
      << "      static_cast<I>(in_batch), static_cast<I>(in_a),   static_cast<I>(in_b),\n"
      << "      static_cast<I>(out_batch), static_cast<I>(out_a), static_cast<I>(out_b)};\n"
      << "  mb::transpose_tiles<" << std::to_string(spec.tile_a) << ", "
      << std::to_string(spec.tile_b) << ", " << std::to_string(spec.threads)
      << ", I>(in, out, s, Element());\n"
      << "}\n";
  return EmittedKernel{src.str(), {entry}};
}

}  // namespace mybackend
