#include "ir/dtype.h"

#include <array>
#include <charconv>

#include "common/error.h"

namespace mybackend {
namespace {

struct DTypeNames {
  DType dtype;
  std::string_view name;
  std::string_view short_name;
  int size_bytes;
};

constexpr std::array<DTypeNames, 18> kDTypes = {{
    {DType::UInt8, "uint8", "u8", 1},
    {DType::Int8, "int8", "i8", 1},
    {DType::Int16, "int16", "i16", 2},
    {DType::Int32, "int32", "i32", 4},
    {DType::Int64, "int64", "i64", 8},
    {DType::Float16, "float16", "f16", 2},
    {DType::Float32, "float32", "f32", 4},
    {DType::Float64, "float64", "f64", 8},
    {DType::Complex32, "complex32", "c32", 4},
    {DType::Complex64, "complex64", "c64", 8},
    {DType::Complex128, "complex128", "c128", 16},
    {DType::Bool, "bool", "b8", 1},
    {DType::BFloat16, "bfloat16", "bf16", 2},
    {DType::Float8E5M2, "float8_e5m2", "f8e5m2", 1},
    {DType::Float8E4M3FN, "float8_e4m3fn", "f8e4m3fn", 1},
    {DType::UInt16, "uint16", "u16", 2},
    {DType::UInt32, "uint32", "u32", 4},
    {DType::UInt64, "uint64", "u64", 8},
}};

const DTypeNames& lookup(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  MB_ASSERT(false, "DType ", static_cast<int>(dtype), " has no name");
  return kDTypes[0];
}

}  // namespace

std::string_view dtype_name(DType dtype) { return lookup(dtype).name; }
std::string_view dtype_short_name(DType dtype) { return lookup(dtype).short_name; }
int dtype_size_bytes(DType dtype) { return lookup(dtype).size_bytes; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes) {
    if (entry.name == name || entry.short_name == name) return entry.dtype;
  }
  return std::nullopt;
}

bool is_floating(DType dtype) {
  switch (dtype) {
    case DType::Float16:
    case DType::Float32:
    case DType::Float64:
    case DType::BFloat16:
    case DType::Float8E5M2:
    case DType::Float8E4M3FN: return true;
    default: return false;
  }
}

bool is_complex(DType dtype) {
  return dtype == DType::Complex32 || dtype == DType::Complex64 || dtype == DType::Complex128;
}

bool is_integral(DType dtype) {
  return !is_floating(dtype) && !is_complex(dtype) && dtype != DType::Bool;
}

Device Device::parse(std::string_view text) {
  Device device;
  std::string_view type = text.substr(0, text.find(':'));
  if (type == "cpu") {
    device.type = DeviceType::CPU;
  } else if (type == "cuda") {
    device.type = DeviceType::CUDA;
  } else if (type == "meta") {
    device.type = DeviceType::Meta;
  } else {
    MB_CHECK(!type.empty(), "empty device string");
    device.type = DeviceType::Other;
    device.other_name = std::string(type);
  }
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    std::string_view digits = text.substr(colon + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), device.index);
    MB_CHECK(ec == std::errc() && end == digits.data() + digits.size() && device.index >= 0,
             "malformed device string '", text, "'");
  }
  return device;
}

std::string Device::str() const {
  std::string name;
  switch (type) {
    case DeviceType::CPU: name = "cpu"; break;
    case DeviceType::CUDA: name = "cuda"; break;
    case DeviceType::Meta: name = "meta"; break;
    case DeviceType::Other: name = other_name; break;
  }
  if (index >= 0) name += ":" + std::to_string(index);
  return name;
}

}  // namespace mybackend
