// Cast-group kernels (Note [Grouped casts] in fusion/cast_groups.h): one
// launch converts every tensor of a CastTable. The per-chunk work is
// mb::cast_chunk, or mb::layout_copy_entry for a member that changes layout
// (device/mb_cast_group.cuh); what varies per spec is the switch over its
// conversions, written here.
#include <sstream>

#include "codegen/device/mb_cast_table.cuh"
#include "codegen/emit.h"
#include "codegen/emit_common.h"
#include "common/error.h"

namespace mybackend {

EmittedKernel emit_cast_group(const CastGroupSpec& spec) {
  const std::string problem = validate(spec);
  MB_ASSERT(problem.empty(), "emit_cast_group given an invalid spec: ", problem, "\n",
            spec.to_string());
  static_assert(sizeof(mb::CastTable) % 8 == 0, "kernel arguments travel as 8-byte words");
  KernelEntry entry;
  entry.name = "mb_cast_group_" + emit::hex16(spec.hash());
  entry.block_x = spec.threads;
  entry.elements_per_thread = kCastElementsPerThread;
  KernelParam table{KernelParam::Kind::Bytes, "table"};
  table.bytes = sizeof(mb::CastTable);
  entry.params.push_back(table);

  const std::string threads = std::to_string(spec.threads);
  std::ostringstream src;
  src << emit::comment_block(spec.to_string()) << "#include \"mb_cast_group.cuh\"\n\n"
      << "extern \"C\" __global__ void __launch_bounds__(" << threads << ") " << entry.name
      << "(const mb::CastTable table) {\n"
      << "  enum : int { PER_THREAD = " << std::to_string(kCastElementsPerThread)
      << ", CHUNK = " << threads << " * PER_THREAD };\n"
      << "  const int blocks = table.first_block[table.count];\n"
      // Grid-stride over the table's blocks (Note [Kernel ABI]): the
      // launch caps the grid, so one block may take several chunks.
      << "  for (int b = static_cast<int>(blockIdx.x); b < blocks; b += "
         "static_cast<int>(gridDim.x)) {\n"
      << "    const int t = mb::cast_table_entry(table, b);\n"
      << "    const long long start = static_cast<long long>(b - table.first_block[t]) * CHUNK;\n"
      << "    const long long left = table.numel[t] - start;\n"
      << "    const int n = left < CHUNK ? static_cast<int>(left) : static_cast<int>(CHUNK);\n"
      << "    switch (table.pair[t]) {\n";
  for (std::size_t k = 0; k < spec.pairs.size(); ++k) {
    const std::string from(emit::storage_type(spec.pairs[k].from));
    const std::string to(emit::storage_type(spec.pairs[k].to));
    src << "      case " << std::to_string(k) << ":\n";
    // Note [Grouped layout copies]: only groups with such members emit them.
    if (spec.layout_copies) {
      src << "        if (table.b[t] != 0) {\n"
          << "          mb::layout_copy_entry<" << from << ", " << to << ">(table, t, start, n);\n"
          << "          break;\n"
          << "        }\n";
    }
    src << "        mb::cast_chunk<" << from << ", " << to << ", PER_THREAD>(\n"
        << "            static_cast<const " << from << "*>(table.src[t]) + start,\n"
        << "            static_cast<" << to << "*>(table.dst[t]) + start, n);\n"
        << "        break;\n";
  }
  src << "      default: break;\n"
      << "    }\n"
      << "  }\n"
      << "}\n";
  return EmittedKernel{src.str(), {entry}};
}

}  // namespace mybackend
