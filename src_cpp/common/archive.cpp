#include "common/archive.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/error.h"

namespace mybackend {
namespace {

static_assert(sizeof(double) == sizeof(std::uint64_t) && std::numeric_limits<double>::is_iec559,
              "doubles are saved as their IEEE-754 bits");
static_assert(sizeof(int) == 4, "an int field is saved in 4 bytes");

const char* id_space_name(IdSpace space) { return space == IdSpace::Node ? "node" : "value"; }

}  // namespace

void Writer::boolean(bool& value) { bytes_.push_back(value ? '\1' : '\0'); }

void Writer::real(double& value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  integer(bits);
}

void Writer::text(std::string& value) {
  count(value.size());
  bytes_ += value;
}

std::size_t Writer::count(std::size_t count) {
  MB_CHECK(count <= std::numeric_limits<std::uint32_t>::max(), "cannot save ", count,
           " elements: counts are 32-bit");
  auto saved = static_cast<std::uint32_t>(count);
  integer(saved);
  return count;
}

void Writer::id(std::int32_t& id, IdSpace) { integer(id); }

void Writer::below(std::uint8_t& code, std::size_t, const char*) { integer(code); }

void Writer::tag(std::string_view expected) { bytes_ += expected; }

Reader::Reader(std::string_view bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

std::string_view Reader::take(std::size_t size) {
  MB_CHECK(size <= bytes_.size() - offset_, what_, " is truncated: ", size,
           " bytes wanted at byte ", offset_, " of ", bytes_.size());
  const std::string_view out = bytes_.substr(offset_, size);
  offset_ += size;
  return out;
}

void Reader::boolean(bool& value) {
  const std::size_t at = offset_;
  const auto byte = static_cast<unsigned char>(take(1)[0]);
  MB_CHECK(byte <= 1, what_, " is garbled: byte ", at, " is ", static_cast<int>(byte),
           " where a bool (0 or 1) belongs");
  value = byte == 1;
}

void Reader::real(double& value) {
  std::uint64_t bits = 0;
  integer(bits);
  std::memcpy(&value, &bits, sizeof bits);
}

void Reader::text(std::string& value) {
  const std::size_t size = count(0);
  value = std::string(take(size));
}

std::size_t Reader::count(std::size_t) {
  const std::size_t at = offset_;
  std::uint32_t saved = 0;
  integer(saved);
  MB_CHECK(saved <= bytes_.size() - offset_, what_, " is garbled or truncated: the count ", saved,
           " at byte ", at, " exceeds the ", bytes_.size() - offset_, " bytes left");
  return saved;
}

void Reader::id(std::int32_t& id, IdSpace space) {
  const std::size_t at = offset_;
  integer(id);
  const std::optional<std::size_t>& limit = limits_[static_cast<std::size_t>(space)];
  MB_ASSERT(limit.has_value(), "reading a ", id_space_name(space), " id before its limit is set");
  MB_CHECK(id >= -1 && id < static_cast<std::int64_t>(*limit), what_,
           " does not match the graph: ", id_space_name(space), " id ", id, " at byte ", at,
           " is out of range (the graph has ", *limit, " ", id_space_name(space), "s)");
}

void Reader::below(std::uint8_t& code, std::size_t limit, const char* what) {
  const std::size_t at = offset_;
  integer(code);
  MB_CHECK(code < limit, what_, " is garbled: ", what, " ", static_cast<int>(code), " at byte ", at,
           " is not below ", limit);
}

void Reader::tag(std::string_view expected) {
  const std::size_t size = std::min(expected.size(), bytes_.size() - offset_);
  MB_CHECK(bytes_.substr(offset_, size) == expected.substr(0, size), "not a ", what_,
           ": the bytes do not start with its magic number");
  take(expected.size());
}

void Reader::limit(IdSpace space, std::size_t size) {
  limits_[static_cast<std::size_t>(space)] = size;
}

void Reader::finish() const {
  MB_CHECK(offset_ == bytes_.size(), what_, " is garbled: ", bytes_.size() - offset_,
           " bytes left after the end at byte ", offset_);
}

}  // namespace mybackend
