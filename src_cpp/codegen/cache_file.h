// The on-disk form of one kernel cache entry, and the few file operations
// the cache needs. Separate from kernel_cache.cpp so the format can be
// tested byte by byte.
//
// Note [Cache entry format]
// Little-endian, fixed 32-byte header then key then payload:
//    0   8  magic "MBKCACHE"
//    8   4  format version (kFormatVersion)
//   12   4  key length K
//   16   8  payload length P
//   24   8  checksum: fnv1a64 of the key bytes followed by the payload bytes
//   32   K  key (the full cache key text, compared on load)
//   32+K P  payload
// An entry is used only if the file is exactly 32 + K + P bytes long and
// magic, version, key and checksum all match; anything else (truncated,
// corrupt, another program's file, a hash collision on the file name) is
// ignored and rebuilt, never loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mybackend::cache_file {

constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderBytes = 32;

std::string encode(std::string_view key, std::string_view payload);
// The payload, or nullopt with the reason in *why.
std::optional<std::string> decode(std::string_view bytes, std::string_view key, std::string* why);

// The whole file; nullopt when it does not exist, cannot be read, or is
// larger than max_bytes (*why says which, empty for "does not exist").
std::optional<std::string> read(const std::string& path, std::size_t max_bytes, std::string* why);

// Writes a uniquely named temporary file (mode 0600) beside `path` and
// renames it over `path`: readers see the old entry or the new one, never a
// partial one. No fsync: an entry torn by a crash fails the checks above
// and is rebuilt.
bool write_atomically(const std::string& path, std::string_view bytes, std::string* why);

// mkdir -p; every directory it creates gets mode 0700, and `path` itself
// must be ours and writable by no one else (kernels are code that will run:
// other users must not plant them). Parents that exist are left alone.
bool ensure_private_directory(const std::string& path, std::string* why);

}  // namespace mybackend::cache_file
