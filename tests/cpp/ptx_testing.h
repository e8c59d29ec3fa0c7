// What the codegen tests that read PTX share (CUDA builds only): emitted
// kernels compiled with NVRTC to PTX for compute_90 through the compile
// pool, and patterns over that PTX.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "codegen/compile_pool.h"
#include "codegen/device_sources.h"
#include "codegen/emit.h"

namespace mybackend {
namespace {

// emit(spec) of each spec, compiled; a failure fails the test with the
// spec, the compiler's log and the source.
template <class Spec, class Emit>
std::vector<CompileOutcome> compile_to_ptx(const std::vector<Spec>& specs, Emit emit) {
  NvrtcOptions options;
  options.target = GpuTarget::parse("compute_90");
  std::vector<CompileRequest> requests;
  std::vector<EmittedKernel> kernels;
  for (const auto& spec : specs) {
    kernels.push_back(emit(spec));
    requests.push_back(compile_request(kernels.back(), options));
  }
  std::vector<CompileOutcome> outcomes = CompilePool().compile(requests);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    EXPECT_TRUE(outcomes[i].ok()) << specs[i].to_string() << outcomes[i].error << "\n"
                                  << kernels[i].source;
  }
  return outcomes;
}

[[maybe_unused]] bool has(const std::string& text, const std::string& pattern) {
  return std::regex_search(text, std::regex(pattern));
}

// ld.global(.nc).v4.u32 and the like: one 16-byte access.
const char* const k16ByteLoad = R"(ld\.global(\.nc)?\.(v4\.[bfsu]32|v2\.[bfsu]64)\s)";
const char* const k16ByteStore = R"(st\.global\.(v4\.[bfsu]32|v2\.[bfsu]64)\s)";
// Spills or arrays the compiler could not keep in registers.
const char* const kLocalMemory = R"(\.local|ld\.local|st\.local)";

// Registers a thread of `kernel` takes in a cubin (an ELF image for one
// SM): the EIATTR_REGCOUNT attribute of the .nv.info sections, which ptxas
// writes per kernel (format 0x04, attribute 0x2f: symbol index, count). -1
// when the image holds no count for `kernel`.
[[maybe_unused]] int cubin_registers(const std::string& elf, const std::string& kernel) {
  auto read = [&elf](std::size_t at, auto value) {
    if (at + sizeof(value) > elf.size()) return decltype(value){};
    std::memcpy(&value, elf.data() + at, sizeof(value));
    return value;
  };
  if (elf.size() < 64 || elf.compare(0, 4,
                                     "\x7f"
                                     "ELF") != 0)
    return -1;
  const auto sections = read(0x28, std::uint64_t{});
  const auto entry_size = read(0x3A, std::uint16_t{});
  const auto count = read(0x3C, std::uint16_t{});
  const auto names_index = read(0x3E, std::uint16_t{});
  auto header = [&](std::size_t i) { return sections + i * entry_size; };
  const auto names = read(header(names_index) + 0x18, std::uint64_t{});
  auto name_of = [&](std::size_t i) {
    return std::string(elf.c_str() + names + read(header(i), std::uint32_t{}));
  };
  // The kernel's symbol index: its .text section names it, and the symbol
  // table's entry for that section's symbol is the one .nv.info refers to.
  std::uint32_t symbol = 0;
  bool found = false;
  for (std::size_t i = 0; i < count && !found; ++i) {
    if (read(header(i) + 0x04, std::uint32_t{}) != 2) continue;  // SHT_SYMTAB
    const auto offset = read(header(i) + 0x18, std::uint64_t{});
    const auto size = read(header(i) + 0x20, std::uint64_t{});
    const auto strings =
        read(header(read(header(i) + 0x28, std::uint32_t{})) + 0x18, std::uint64_t{});
    for (std::uint64_t at = 0; at + 24 <= size; at += 24) {
      const auto name = read(offset + at, std::uint32_t{});
      if (kernel == elf.c_str() + strings + name) {
        symbol = static_cast<std::uint32_t>(at / 24);
        found = true;
        break;
      }
    }
  }
  if (!found) return -1;
  for (std::size_t i = 0; i < count; ++i) {
    if (name_of(i).rfind(".nv.info", 0) != 0) continue;
    const auto offset = read(header(i) + 0x18, std::uint64_t{});
    const auto size = read(header(i) + 0x20, std::uint64_t{});
    for (std::uint64_t at = offset; at + 2 <= offset + size;) {
      const auto format = static_cast<std::uint8_t>(elf[at]);
      const auto attribute = static_cast<std::uint8_t>(elf[at + 1]);
      if (format == 0x04) {
        const auto length = read(at + 2, std::uint16_t{});
        if (attribute == 0x2f && read(at + 4, std::uint32_t{}) == symbol)
          return static_cast<int>(read(at + 8, std::uint32_t{}));
        at += 4 + length;
      } else {
        at += format == 0x03 ? 4 : format == 0x02 ? 3 : 2;
      }
    }
  }
  return -1;
}

}  // namespace
}  // namespace mybackend
