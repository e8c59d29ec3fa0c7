// A byte format for plain structs, written and read by one function per
// struct.
//
// Note [One archive function per struct]
// A struct that is saved has one function
//   template <class Ar> void archive(Ar& ar, Struct& value);
// that names each field once, in a fixed order. Writer and Reader both
// visit it: the writer appends each field's bytes, the reader fills each
// field from them, so the two directions cannot drift apart (a field added
// to the function is both written and read; one left out is neither). The
// writer only reads what it is given; save functions take const objects and
// hand them over with const_cast. The overloads below cover the fields'
// types: fixed-width integers (little-endian, two's complement, the C++
// type's width), bool (one byte, 0 or 1), double (its IEEE bits as an
// 8-byte integer, so every value round-trips bit-exactly), enums (as their
// underlying integer), strings (a u32 length, then the bytes), vectors (a
// u32 count, then the elements), optionals and shared pointers (a presence
// byte, then the value), arrays and pairs (their elements). A struct's own
// function is found by argument-dependent lookup: it lives in the struct's
// namespace.
//
// The reader checks every read against the bytes left, so truncated or
// garbled bytes raise Error (MB_CHECK) instead of reading past the end or
// allocating a bogus count, and it checks ids against the table sizes it
// is given (Reader::limit): a saved id may be -1 ("none") or index one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mybackend {

// The tables saved ids index; a reader is told their sizes.
enum class IdSpace : std::int8_t { Node, Value };
constexpr std::size_t kIdSpaceCount = 2;

class Writer {
 public:
  static constexpr bool kLoading = false;

  template <class Int>
  void integer(Int& value) {
    static_assert(std::is_integral_v<Int> && !std::is_same_v<Int, bool>);
    auto bits = static_cast<std::make_unsigned_t<Int>>(value);
    for (std::size_t k = 0; k < sizeof(Int); ++k) {
      bytes_.push_back(static_cast<char>(bits & 0xFFu));
      bits = static_cast<std::make_unsigned_t<Int>>(bits >> 8);
    }
  }
  void boolean(bool& value);
  void real(double& value);
  void text(std::string& value);
  // A container's element count; returns it.
  std::size_t count(std::size_t count);
  // A node or value id (Note [One archive function per struct]).
  void id(std::int32_t& id, IdSpace space);
  // A code that must be below `limit` (a variant's index, say).
  void below(std::uint8_t& code, std::size_t limit, const char* what);
  // Fixed bytes (a magic number): written as they are.
  void tag(std::string_view expected);

  const std::string& bytes() const { return bytes_; }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class Reader {
 public:
  static constexpr bool kLoading = true;

  // `what` names the bytes in errors ("saved plan").
  Reader(std::string_view bytes, std::string what);

  template <class Int>
  void integer(Int& value) {
    static_assert(std::is_integral_v<Int> && !std::is_same_v<Int, bool>);
    const std::string_view raw = take(sizeof(Int));
    std::make_unsigned_t<Int> bits = 0;
    for (std::size_t k = sizeof(Int); k-- > 0;) {
      bits = static_cast<std::make_unsigned_t<Int>>(bits << 8);
      bits = static_cast<std::make_unsigned_t<Int>>(bits | static_cast<unsigned char>(raw[k]));
    }
    value = static_cast<Int>(bits);
  }
  void boolean(bool& value);
  void real(double& value);
  void text(std::string& value);
  // Reads a container's element count (the argument is ignored): at most
  // the bytes left, since every element takes at least one.
  std::size_t count(std::size_t ignored);
  // Reads an id and checks it against `space`'s limit: -1 or an index.
  void id(std::int32_t& id, IdSpace space);
  // Reads a code and checks it is below `limit`; `what` names it in the error.
  void below(std::uint8_t& code, std::size_t limit, const char* what);
  // Reads fixed bytes and checks they are `expected`.
  void tag(std::string_view expected);

  // The size of the table ids of `space` index: set before any id is read.
  void limit(IdSpace space, std::size_t size);
  // Checks that every byte was read.
  void finish() const;
  std::size_t offset() const { return offset_; }
  const std::string& what() const { return what_; }

 private:
  std::string_view take(std::size_t size);

  std::string_view bytes_;
  std::size_t offset_ = 0;
  std::string what_;
  std::array<std::optional<std::size_t>, kIdSpaceCount> limits_{};
};

// ---- the fields' types (Note [One archive function per struct]) -------------

template <class Ar, class Int>
std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool>> archive(Ar& ar,
                                                                                Int& value) {
  ar.integer(value);
}

template <class Ar>
void archive(Ar& ar, bool& value) {
  ar.boolean(value);
}

template <class Ar>
void archive(Ar& ar, double& value) {
  ar.real(value);
}

template <class Ar, class Enum>
std::enable_if_t<std::is_enum_v<Enum>> archive(Ar& ar, Enum& value) {
  auto raw = static_cast<std::underlying_type_t<Enum>>(value);
  ar.integer(raw);
  if constexpr (Ar::kLoading) value = static_cast<Enum>(raw);
}

template <class Ar>
void archive(Ar& ar, std::string& value) {
  ar.text(value);
}

// Declared before any is defined: each may hold the others.
template <class Ar, class T>
void archive(Ar& ar, std::vector<T>& values);
template <class Ar, class T>
void archive(Ar& ar, std::optional<T>& value);
template <class Ar, class T>
void archive(Ar& ar, std::shared_ptr<const T>& value);
template <class Ar, class T, std::size_t N>
void archive(Ar& ar, std::array<T, N>& values);
template <class Ar, class A, class B>
void archive(Ar& ar, std::pair<A, B>& value);

template <class Ar, class T>
void archive(Ar& ar, std::vector<T>& values) {
  const std::size_t count = ar.count(values.size());
  if constexpr (Ar::kLoading) values.resize(count);
  for (T& value : values) archive(ar, value);
}

template <class Ar, class T>
void archive(Ar& ar, std::optional<T>& value) {
  bool present = value.has_value();
  ar.boolean(present);
  if constexpr (Ar::kLoading) {
    value.reset();
    if (present) value.emplace();
  }
  if (present) archive(ar, *value);
}

template <class Ar, class T>
void archive(Ar& ar, std::shared_ptr<const T>& value) {
  bool present = value != nullptr;
  ar.boolean(present);
  if (!present) {
    value.reset();
    return;
  }
  if constexpr (Ar::kLoading) {
    auto loaded = std::make_shared<T>();
    archive(ar, *loaded);
    value = std::move(loaded);
  } else {
    archive(ar, const_cast<T&>(*value));  // the writer only reads it
  }
}

template <class Ar, class T, std::size_t N>
void archive(Ar& ar, std::array<T, N>& values) {
  for (T& value : values) archive(ar, value);
}

template <class Ar, class A, class B>
void archive(Ar& ar, std::pair<A, B>& value) {
  archive(ar, value.first);
  archive(ar, value.second);
}

// Several fields in order: a struct's function names each once.
template <class Ar, class... Fields>
void fields(Ar& ar, Fields&... values) {
  (archive(ar, values), ...);
}

// Ids into one of the reader's tables (Reader::limit).
template <class Ar>
void archive_ids(Ar& ar, std::vector<std::int32_t>& ids, IdSpace space) {
  const std::size_t count = ar.count(ids.size());
  if constexpr (Ar::kLoading) ids.resize(count);
  for (std::int32_t& id : ids) ar.id(id, space);
}

// The bytes of `value` alone: to compare two values field by field.
template <class T>
std::string archived(const T& value) {
  Writer writer;
  archive(writer, const_cast<T&>(value));  // the writer only reads it
  return writer.take();
}

// True when T has its archive function (declared where this is asked).
template <class T, class = void>
struct is_archivable : std::false_type {};
template <class T>
struct is_archivable<T, std::void_t<decltype(archive(std::declval<Writer&>(), std::declval<T&>()))>>
    : std::true_type {};

}  // namespace mybackend

// Instantiates a struct's archive function, defined in a .cpp, for both
// directions (Note [One archive function per struct]).
#define MB_ARCHIVE_BOTH_WAYS(Type)                                         \
  template void archive<::mybackend::Writer>(::mybackend::Writer&, Type&); \
  template void archive<::mybackend::Reader>(::mybackend::Reader&, Type&)
