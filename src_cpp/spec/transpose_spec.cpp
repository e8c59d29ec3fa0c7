#include "spec/transpose_spec.h"

#include <sstream>

#include "common/hash.h"

namespace mybackend {
namespace {

// What the smallest static shared-memory budget of every CUDA target holds.
constexpr std::int64_t kMaxTileBytes = 48 * 1024;
// Tile sides the kernel's per-thread loop unrolls over comfortably.
constexpr int kMaxTileSide = 1024;

std::string name(DType dtype) { return std::string(dtype_short_name(dtype)); }

// The register type's size: 16-bit floats are held as float.
std::int64_t compute_bytes(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 ? 4 : dtype_size_bytes(dtype);
}

}  // namespace

std::string TransposeSpec::to_string() const {
  // A malformed body prints too: validate()'s callers print the spec it refused.
  const bool one_to_one = body.inputs.size() == 1 && body.outputs.size() == 1;
  std::ostringstream out;
  out << "transpose in=" << (one_to_one ? dtype_short_name(in_dtype()) : "?")
      << " out=" << (one_to_one ? dtype_short_name(out_dtype()) : "?")
      << " tile=" << std::to_string(tile_a) << "x" << std::to_string(tile_b)
      << " index=" << (index64 ? "i64" : "i32") << " threads=" << std::to_string(threads) << "\n"
      << "  body:\n";
  std::istringstream lines(body.to_string());
  for (std::string line; std::getline(lines, line);) out << "    " << line << "\n";
  return out.str();
}

std::uint64_t TransposeSpec::hash() const { return fnv1a64(to_string()); }

std::int64_t transpose_tile_bytes(const TransposeSpec& spec) {
  const std::int64_t pitch = spec.tile_b | 1;
  return static_cast<std::int64_t>(spec.tile_a) * pitch * compute_bytes(spec.out_dtype());
}

std::string validate(const TransposeSpec& spec) {
  if (spec.threads < 32 || spec.threads > 1024 || spec.threads % 32 != 0)
    return "threads must be a multiple of 32 in [32, 1024], got " + std::to_string(spec.threads);
  if (spec.body.inputs.size() != 1 || spec.body.outputs.size() != 1)
    return "the body maps one input element to one output element";
  if (std::string p = validate(spec.body); !p.empty()) return "body: " + p;
  for (const PwScalar& s : spec.body.scalars) {
    if (s.is_argument) return "the body takes its scalars as literals, not arguments";
  }
  for (DType d : {spec.in_dtype(), spec.out_dtype()}) {
    if (!is_floating(d)) return "transposing copies move floating values, got " + name(d);
  }
  for (int side : {spec.tile_a, spec.tile_b}) {
    if (side < 1 || side > kMaxTileSide)
      return "tile sides must be in [1, " + std::to_string(kMaxTileSide) + "], got " +
             std::to_string(side);
  }
  if (transpose_tile_bytes(spec) > kMaxTileBytes)
    return "a " + std::to_string(spec.tile_a) + "x" + std::to_string(spec.tile_b) + " tile of " +
           name(spec.out_dtype()) + " needs " + std::to_string(transpose_tile_bytes(spec)) +
           " bytes of shared memory, above " + std::to_string(kMaxTileBytes);
  return {};
}

}  // namespace mybackend
