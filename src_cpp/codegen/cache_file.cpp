#include "codegen/cache_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "common/hash.h"

namespace mybackend::cache_file {
namespace {

constexpr char kMagic[8] = {'M', 'B', 'K', 'C', 'A', 'C', 'H', 'E'};

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int b = 0; b < bytes; ++b) out.push_back(static_cast<char>((value >> (8 * b)) & 0xff));
}

std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t value = 0;
  for (int b = 0; b < bytes; ++b) {
    value |=
        static_cast<std::uint64_t>(static_cast<unsigned char>(in[at + static_cast<std::size_t>(b)]))
        << (8 * b);
  }
  return value;
}

std::uint64_t checksum(std::string_view key, std::string_view payload) {
  return fnv1a64(payload, fnv1a64(key));
}

std::string errno_text(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Closes a file descriptor on every exit path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace

std::string encode(std::string_view key, std::string_view payload) {
  std::string out(kMagic, sizeof kMagic);
  put_le(out, kFormatVersion, 4);
  put_le(out, key.size(), 4);
  put_le(out, payload.size(), 8);
  put_le(out, checksum(key, payload), 8);
  out.append(key);
  out.append(payload);
  return out;
}

std::optional<std::string> decode(std::string_view bytes, std::string_view key, std::string* why) {
  auto reject = [why](const char* reason) -> std::optional<std::string> {
    if (why != nullptr) *why = reason;
    return std::nullopt;
  };
  if (bytes.size() < kHeaderBytes) return reject("shorter than the header");
  if (bytes.substr(0, sizeof kMagic) != std::string_view(kMagic, sizeof kMagic))
    return reject("wrong magic");
  if (get_le(bytes, 8, 4) != kFormatVersion) return reject("other format version");
  const std::uint64_t key_length = get_le(bytes, 12, 4);
  const std::uint64_t payload_length = get_le(bytes, 16, 8);
  // Lengths are checked against the file size before any arithmetic that
  // could overflow.
  if (key_length > bytes.size() || payload_length > bytes.size() ||
      kHeaderBytes + key_length + payload_length != bytes.size()) {
    return reject("lengths do not match the file size (truncated?)");
  }
  const std::string_view stored_key = bytes.substr(kHeaderBytes, key_length);
  const std::string_view payload = bytes.substr(kHeaderBytes + key_length);
  if (checksum(stored_key, payload) != get_le(bytes, 24, 8)) return reject("checksum mismatch");
  if (stored_key != key) return reject("entry is for another key");
  return std::string(payload);
}

std::optional<std::string> read(const std::string& path, std::size_t max_bytes, std::string* why) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    if (why != nullptr) *why = "";
    return std::nullopt;
  }
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<std::uint64_t>(size) > max_bytes) {
    if (why != nullptr) *why = "unreadable or too large: " + path;
    return std::nullopt;
  }
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) {
    if (why != nullptr) *why = "read failed: " + path;
    return std::nullopt;
  }
  return bytes;
}

bool write_atomically(const std::string& path, std::string_view bytes, std::string* why) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  std::string temp = dir + "/.tmp-XXXXXX";
  Fd fd(::mkstemp(temp.data()));  // unique name, mode 0600
  if (fd.get() < 0) {
    if (why != nullptr) *why = errno_text("cannot create a temporary file in", dir);
    return false;
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (why != nullptr) *why = errno_text("write failed for", temp);
      ::unlink(temp.c_str());
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd.release()) != 0 || ::rename(temp.c_str(), path.c_str()) != 0) {
    if (why != nullptr) *why = errno_text("cannot move the entry into place at", path);
    ::unlink(temp.c_str());
    return false;
  }
  return true;
}

bool ensure_private_directory(const std::string& path, std::string* why) {
  if (path.empty()) {
    if (why != nullptr) *why = "empty cache directory path";
    return false;
  }
  std::size_t at = 0;
  while (at != std::string::npos) {
    at = path.find('/', at + 1);
    const std::string prefix = path.substr(0, at);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0700) == 0) {
      // The umask may have cleared bits we need; it cannot have added any.
      ::chmod(prefix.c_str(), 0700);
    } else if (errno != EEXIST) {
      if (why != nullptr) *why = errno_text("cannot create cache directory", prefix);
      return false;
    }
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) ||
      ::access(path.c_str(), W_OK | X_OK) != 0) {
    if (why != nullptr) *why = "cache directory " + path + " is not a writable directory";
    return false;
  }
  // A directory someone else can write to could hold planted kernels.
  if (info.st_uid != ::geteuid() || (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    if (why != nullptr)
      *why = "cache directory " + path + " is writable by other users or not ours";
    return false;
  }
  return true;
}

}  // namespace mybackend::cache_file
