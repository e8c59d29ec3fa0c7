// Element types and devices as the IR names them. The IR does not include
// ATen: runtime/ converts these to c10 types (the numbering of DType follows
// c10::ScalarType so that the conversion is a checked cast).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mybackend {

enum class DType : std::int8_t {
  UInt8 = 0,
  Int8 = 1,
  Int16 = 2,
  Int32 = 3,
  Int64 = 4,
  Float16 = 5,
  Float32 = 6,
  Float64 = 7,
  Complex32 = 8,
  Complex64 = 9,
  Complex128 = 10,
  Bool = 11,
  BFloat16 = 15,
  Float8E5M2 = 23,
  Float8E4M3FN = 24,
  UInt16 = 27,
  UInt32 = 28,
  UInt64 = 29,
};

// Names are torch's Python spellings without the "torch." prefix.
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);
// Short form for the text IR: f32, bf16, i64, b8, ...
std::string_view dtype_short_name(DType dtype);

bool is_floating(DType dtype);
bool is_integral(DType dtype);  // bool excluded
bool is_complex(DType dtype);
int dtype_size_bytes(DType dtype);

enum class DeviceType : std::int8_t { CPU, CUDA, Meta, Other };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = -1;          // -1: no index given
  std::string other_name;  // set only for DeviceType::Other

  static Device parse(std::string_view text);  // "cpu", "cuda:0", "meta", ...
  std::string str() const;
  bool operator==(const Device& other) const {
    return type == other.type && index == other.index && other_name == other.other_name;
  }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

}  // namespace mybackend
