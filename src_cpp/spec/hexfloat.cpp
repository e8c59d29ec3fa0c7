#include "spec/hexfloat.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/error.h"

namespace mybackend {

std::string hexfloat(double value) {
  MB_ASSERT(std::isfinite(value), "hexfloat of a non-finite value");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  const bool negative = (bits >> 63) != 0;
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  std::uint64_t mantissa = bits & ((std::uint64_t{1} << 52) - 1);
  std::string out = negative ? "-0x" : "0x";
  if (biased == 0 && mantissa == 0) return out + "0p+0";
  out += biased == 0 ? '0' : '1';  // subnormal or normal
  if (mantissa != 0) {
    out += '.';
    static constexpr char kDigits[] = "0123456789abcdef";
    int digits = 13;
    while ((mantissa & 0xf) == 0) {
      mantissa >>= 4;
      --digits;
    }
    std::string hex(static_cast<std::size_t>(digits), '0');
    for (int d = digits - 1; d >= 0; --d, mantissa >>= 4)
      hex[static_cast<std::size_t>(d)] = kDigits[mantissa & 0xf];
    out += hex;
  }
  const int exponent = biased == 0 ? -1022 : biased - 1023;
  out += exponent < 0 ? "p-" : "p+";
  out += std::to_string(exponent < 0 ? -exponent : exponent);
  return out;
}

}  // namespace mybackend
