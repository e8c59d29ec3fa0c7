// Stage 8a: the kernel cache (memory + disk) and its entry format. Bad
// entries on disk must be detected, ignored and rebuilt, never loaded.
#include <gtest/gtest.h>

#if MYBACKEND_WITH_CODEGEN

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "codegen/cache_file.h"
#include "codegen/compile_pool.h"
#include "codegen/kernel_cache.h"
#include "codegen/nvrtc.h"
#include "common/error.h"

namespace mybackend {
namespace {

namespace fs = std::filesystem;

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "mb_kernel_cache_XXXXXX").string();
    MB_CHECK(::mkdtemp(pattern.data()) != nullptr, "mkdtemp failed");
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Small programs without the device headers: each compiles in ~20 ms.
CompileRequest tiny_request(int variant) {
  CompileRequest request;
  request.name = "tiny" + std::to_string(variant) + ".cu";
  request.source =
      "extern \"C\" __global__ void tiny(float* p) { p[threadIdx.x] += " + std::to_string(variant) +
      ".0f; }\n";
  request.options.target = GpuTarget::parse("compute_90");
  return request;
}

KernelCacheOptions on_disk(const std::string& dir) {
  KernelCacheOptions options;
  options.directory = dir;
  options.driver_version = "test-driver";
  return options;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

unsigned mode_of(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return info.st_mode & 0777;
}

TEST(KernelCache, RoundTripThenDiskHitWithoutCompiling) {
  TempDir dir;
  const CompileRequest request = tiny_request(1);
  std::string image;
  {
    KernelCache cache(on_disk(dir.path()));
    ASSERT_EQ(cache.disk_problem(), "");
    image = cache.get(request)->image;
    EXPECT_NE(image.find(".entry tiny"), std::string::npos);
    EXPECT_EQ(cache.get(request)->image, image);
    const KernelCacheStats s = cache.stats();
    EXPECT_EQ(s.compiles, 1u);
    EXPECT_EQ(s.memory_hits, 1u);
    EXPECT_EQ(s.disk_hits, 0u);
    EXPECT_TRUE(fs::exists(cache.entry_path(request)));
  }
  KernelCache fresh(on_disk(dir.path()));  // a new process, as far as the cache knows
  const auto kernel = fresh.get(request);
  EXPECT_EQ(kernel->image, image);
  EXPECT_EQ(kernel->kind, ImageKind::Ptx);
  EXPECT_EQ(fresh.stats().disk_hits, 1u);
  EXPECT_EQ(fresh.stats().compiles, 0u);
}

TEST(KernelCache, DirectoriesArePrivateAndWritesLeaveNoTemporaries) {
  TempDir dir;
  const std::string root = dir.path() + "/nested/cache";
  KernelCache cache(on_disk(root));
  ASSERT_EQ(cache.disk_problem(), "");
  EXPECT_EQ(mode_of(dir.path() + "/nested"), 0700u);
  EXPECT_EQ(mode_of(root), 0700u);
  EXPECT_EQ(mode_of(cache.directory()), 0700u);
  for (int v = 0; v < 3; ++v) cache.get(tiny_request(v));
  int entries = 0;
  for (const auto& file : fs::directory_iterator(cache.directory())) {
    EXPECT_EQ(file.path().extension(), ".mbk") << file.path();
    EXPECT_EQ(mode_of(file.path().string()), 0600u);
    ++entries;
  }
  EXPECT_EQ(entries, 3);
}

// Each corruption of a valid entry: the next cache must reject it (not
// load it), compile, and write a good entry back.
TEST(KernelCache, DamagedEntriesAreIgnoredAndRebuilt) {
  const std::map<std::string, std::function<std::string(const std::string&, const std::string&)>>
      damage = {
          {"empty", [](const std::string&, const std::string&) { return std::string(); }},
          {"header only", [](const std::string& b, const std::string&) { return b.substr(0, 20); }},
          {"truncated",
           [](const std::string& b, const std::string&) { return b.substr(0, b.size() / 2); }},
          {"extra byte", [](const std::string& b, const std::string&) { return b + "x"; }},
          {"flipped payload byte",
           [](std::string b, const std::string&) {
             b[b.size() - 10] = static_cast<char>(b[b.size() - 10] ^ 0x20);
             return b;
           }},
          {"flipped length",
           [](std::string b, const std::string&) {
             b[16] = static_cast<char>(b[16] ^ 0x01);
             return b;
           }},
          {"foreign magic",
           [](std::string b, const std::string&) { return b.replace(0, 8, "ELFELFEL"); }},
          {"other version",
           [](std::string b, const std::string&) {
             b[8] = 99;
             return b;
           }},
          {"wrong key", [](const std::string&, const std::string& other) { return other; }},
      };
  for (const auto& [label, corrupt] : damage) {
    SCOPED_TRACE(label);
    TempDir dir;
    const CompileRequest request = tiny_request(7);
    std::string path;
    std::string good;
    std::string other_entry;
    {
      KernelCache cache(on_disk(dir.path()));
      good = cache.get(request)->image;
      const CompileRequest other = tiny_request(8);
      cache.get(other);
      path = cache.entry_path(request);
      other_entry = read_all(cache.entry_path(other));
    }
    write_all(path, corrupt(read_all(path), other_entry));
    KernelCache second(on_disk(dir.path()));
    EXPECT_EQ(second.get(request)->image, good);
    EXPECT_EQ(second.stats().disk_hits, 0u);
    EXPECT_EQ(second.stats().disk_rejects, 1u);
    EXPECT_EQ(second.stats().compiles, 1u);
    KernelCache third(on_disk(dir.path()));
    EXPECT_EQ(third.get(request)->image, good);
    EXPECT_EQ(third.stats().disk_hits, 1u) << "the rebuilt entry should be good";
  }
}

TEST(KernelCacheFile, EveryTruncationAndEveryByteFlipIsRejected) {
  const std::string key = "mybackend kernel v1\nsource=abc\n";
  const std::string payload = "payload bytes \x01\x02\x03";
  const std::string entry = cache_file::encode(key, payload);
  ASSERT_EQ(cache_file::decode(entry, key, nullptr), payload);
  std::string why;
  EXPECT_EQ(cache_file::decode(entry, "another key", &why), std::nullopt);
  EXPECT_EQ(why, "entry is for another key");
  for (std::size_t n = 0; n < entry.size(); ++n) {
    EXPECT_EQ(cache_file::decode(entry.substr(0, n), key, nullptr), std::nullopt)
        << "truncated to " << n;
  }
  for (std::size_t at = 0; at < entry.size(); ++at) {
    std::string bad = entry;
    bad[at] = static_cast<char>(bad[at] ^ 0x04);
    EXPECT_EQ(cache_file::decode(bad, key, nullptr), std::nullopt) << "byte " << at << " flipped";
  }
}

TEST(KernelCache, KeyCoversSourceHeadersOptionsTargetAndVersions) {
  TempDir dir;
  KernelCache cache(on_disk(dir.path()));
  const CompileRequest base = tiny_request(1);
  const std::string key = cache.key(base);
  EXPECT_EQ(key, cache.key(tiny_request(1)));
  EXPECT_NE(key.find("nvrtc=" + nvrtc_version()), std::string::npos) << key;
  EXPECT_NE(key.find("driver=test-driver"), std::string::npos) << key;
  EXPECT_NE(key.find("target=compute_90"), std::string::npos) << key;

  std::vector<CompileRequest> variants(5, base);
  variants[0].source += " ";
  variants[1].headers.push_back({"mb_types.cuh", "// v2"});
  variants[2].options.lineinfo = true;
  variants[3].options.target = GpuTarget::parse("sm_90");
  variants[4].headers.push_back({"a.cuh", "bc"});
  CompileRequest shifted = base;
  shifted.headers.push_back({"a.cu", "hbc"});  // same bytes as variants[4], split differently
  for (const auto& v : variants) EXPECT_NE(cache.key(v), key);
  EXPECT_NE(cache.key(shifted), cache.key(variants[4]));

  KernelCacheOptions other_driver = on_disk(dir.path());
  other_driver.driver_version = "other";
  EXPECT_NE(KernelCache(other_driver).key(base), key);
}

TEST(KernelCache, DisabledAndMemoryOnlyModesTouchNoDisk) {
  TempDir dir;
  const std::string root = dir.path() + "/never";
  KernelCacheOptions disabled = on_disk(root);
  disabled.mode = KernelCacheMode::Disabled;
  KernelCache off(disabled);
  off.get(tiny_request(1));
  off.get(tiny_request(1));
  EXPECT_EQ(off.stats().compiles, 2u);
  EXPECT_EQ(off.stats().memory_hits, 0u);
  EXPECT_EQ(off.directory(), "");

  KernelCacheOptions memory = on_disk(root);
  memory.mode = KernelCacheMode::MemoryOnly;
  KernelCache mem(memory);
  mem.get(tiny_request(1));
  mem.get(tiny_request(1));
  EXPECT_EQ(mem.stats().compiles, 1u);
  EXPECT_EQ(mem.stats().memory_hits, 1u);
  EXPECT_FALSE(fs::exists(root));
}

TEST(KernelCache, UnusableDirectoryFallsBackToMemory) {
  TempDir dir;
  write_all(dir.path() + "/a_file", "not a directory");
  KernelCache cache(on_disk(dir.path() + "/a_file/cache"));
  EXPECT_NE(cache.disk_problem(), "");
  EXPECT_EQ(cache.directory(), "");
  EXPECT_EQ(cache.entry_path(tiny_request(1)), "");
  cache.get(tiny_request(1));
  cache.get(tiny_request(1));
  EXPECT_EQ(cache.stats().compiles, 1u);
  EXPECT_EQ(cache.stats().memory_hits, 1u);
}

TEST(KernelCache, SharedWritableDirectoryIsRefused) {
  TempDir dir;
  fs::create_directories(dir.path() + "/root/kernels");
  ASSERT_EQ(::chmod((dir.path() + "/root/kernels").c_str(), 0777), 0);
  KernelCache cache(on_disk(dir.path() + "/root"));
  EXPECT_NE(cache.disk_problem().find("writable by other users"), std::string::npos)
      << cache.disk_problem();
  EXPECT_EQ(cache.directory(), "");
  EXPECT_NE(cache.get(tiny_request(1)), nullptr);  // still works, in memory
}

TEST(KernelCache, DirectoryResolutionOrder) {
  std::map<std::string, std::string> vars;
  const EnvLookup env = [&vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  KernelCacheOptions options;
  std::string why;
  EXPECT_EQ(resolve_cache_directory(options, env, &why), std::nullopt);
  EXPECT_NE(why.find("MYBACKEND_CACHE_DIR"), std::string::npos);
  vars["HOME"] = "/home/u";
  EXPECT_EQ(resolve_cache_directory(options, env, &why), "/home/u/.cache/mybackend");
  vars["XDG_CACHE_HOME"] = "relative/ignored";
  EXPECT_EQ(resolve_cache_directory(options, env, &why), "/home/u/.cache/mybackend");
  vars["XDG_CACHE_HOME"] = "/xdg";
  EXPECT_EQ(resolve_cache_directory(options, env, &why), "/xdg/mybackend");
  // Set but empty, "0" or "off": no disk cache at all, whatever XDG says.
  for (const char* off : {"", "0", "off"}) {
    vars["MYBACKEND_CACHE_DIR"] = off;
    why.clear();
    EXPECT_EQ(resolve_cache_directory(options, env, &why), std::nullopt) << off;
    EXPECT_NE(why.find("disk cache is off"), std::string::npos) << why;
  }
  vars["MYBACKEND_CACHE_DIR"] = "/mb";
  EXPECT_EQ(resolve_cache_directory(options, env, &why), "/mb");
  options.directory = "/explicit";
  EXPECT_EQ(resolve_cache_directory(options, env, &why), "/explicit");
  vars["MYBACKEND_CACHE_DIR"] = "off";  // the option wins over the environment
  EXPECT_EQ(resolve_cache_directory(options, env, &why), "/explicit");
}

TEST(KernelCache, EnvironmentOffMeansMemoryOnly) {
  TempDir dir;
  const EnvLookup env = [&dir](const std::string& name) -> std::optional<std::string> {
    if (name == "MYBACKEND_CACHE_DIR") return "off";
    if (name == "XDG_CACHE_HOME") return dir.path();
    return std::nullopt;
  };
  KernelCacheOptions options;
  options.driver_version = "test-driver";
  KernelCache cache(options, env);
  EXPECT_EQ(cache.directory(), "");
  EXPECT_NE(cache.disk_problem().find("MYBACKEND_CACHE_DIR"), std::string::npos);
  cache.get(tiny_request(1));
  cache.get(tiny_request(1));
  EXPECT_EQ(cache.stats().compiles, 1u);
  EXPECT_EQ(cache.stats().memory_hits, 1u);
  EXPECT_TRUE(fs::is_empty(dir.path())) << "nothing may be written under XDG_CACHE_HOME";
}

// The process-wide cache of the runtime passes the disk directory per call
// (option kernel_cache_dir): memory is shared, each directory gets what was
// compiled while it was in use.
TEST(KernelCache, PerCallDirectoryRelocatesTheDiskHalfOnly) {
  TempDir a, b;
  std::string why;
  const std::optional<std::string> entries_a = open_entries_directory(a.path() + "/root", &why);
  const std::optional<std::string> entries_b = open_entries_directory(b.path(), &why);
  ASSERT_TRUE(entries_a && entries_b) << why;
  EXPECT_EQ(*entries_a, a.path() + "/root/kernels");
  EXPECT_EQ(mode_of(a.path() + "/root"), 0700u);
  EXPECT_EQ(mode_of(*entries_a), 0700u);

  KernelCacheOptions memory = on_disk("");
  memory.mode = KernelCacheMode::MemoryOnly;
  KernelCache cache(memory);
  const auto outcomes =
      cache.get_all({tiny_request(1), tiny_request(2)}, CompilePool(2), *entries_a);
  ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok());
  cache.get(tiny_request(1), *entries_b);  // a memory hit: b stays empty
  cache.get(tiny_request(3), "");          // memory only: no file anywhere
  EXPECT_EQ(cache.stats().compiles, 3u);
  EXPECT_EQ(cache.stats().memory_hits, 1u);
  auto count = [](const std::string& path) {
    return std::distance(fs::directory_iterator(path), fs::directory_iterator());
  };
  EXPECT_EQ(count(*entries_a), 2);
  EXPECT_EQ(count(*entries_b), 0);

  KernelCache next_process(memory);
  next_process.get(tiny_request(2), *entries_a);
  EXPECT_EQ(next_process.stats().disk_hits, 1u);
  EXPECT_EQ(next_process.stats().compiles, 0u);
}

// The container is intact (checksum, key) but what it holds is not a kernel
// image: another writer of the same format, or a payload from a future
// version. It must be rejected like a corrupt file.
TEST(KernelCache, IntactEntryWithAForeignPayloadIsRejected) {
  for (const std::string& payload : {std::string(), std::string("\x07PTX?"), std::string("\x01")}) {
    SCOPED_TRACE("payload of " + std::to_string(payload.size()) + " bytes");
    TempDir dir;
    const CompileRequest request = tiny_request(5);
    KernelCache first(on_disk(dir.path()));
    const std::string good = first.get(request)->image;
    write_all(first.entry_path(request), cache_file::encode(first.key(request), payload));
    KernelCache second(on_disk(dir.path()));
    EXPECT_EQ(second.get(request)->image, good);
    EXPECT_EQ(second.stats().disk_rejects, 1u);
    EXPECT_EQ(second.stats().compiles, 1u);
    KernelCache third(on_disk(dir.path()));
    EXPECT_EQ(third.get(request)->image, good);
    EXPECT_EQ(third.stats().disk_hits, 1u);
  }
}

// Something that is not a regular file sits where the entry belongs: the
// read is refused, the compile goes on, the failed write is counted.
TEST(KernelCache, DirectoryInPlaceOfAnEntryIsSurvived) {
  TempDir dir;
  const CompileRequest request = tiny_request(6);
  KernelCache probe(on_disk(dir.path()));
  fs::create_directories(probe.entry_path(request) + "/inside");
  KernelCache cache(on_disk(dir.path()));
  EXPECT_NE(cache.get(request), nullptr);
  EXPECT_EQ(cache.stats().compiles, 1u);
  EXPECT_EQ(cache.stats().disk_hits, 0u);
  EXPECT_EQ(cache.stats().disk_write_failures, 1u);
  for (const auto& file : fs::directory_iterator(cache.directory())) {
    EXPECT_EQ(file.path().filename().string().rfind(".tmp-", 0), std::string::npos)
        << "a temporary file was left behind: " << file.path();
  }
}

TEST(KernelCache, GetAllCompilesEachKeyOnceInRequestOrder) {
  TempDir dir;
  KernelCache cache(on_disk(dir.path()));
  std::vector<CompileRequest> requests = {tiny_request(1), tiny_request(2), tiny_request(1),
                                          tiny_request(3), tiny_request(2)};
  requests.push_back(tiny_request(4));
  requests.back().source += "#error broken on purpose\n";
  const auto outcomes = cache.get_all(requests, CompilePool(2));
  ASSERT_EQ(outcomes.size(), requests.size());
  for (std::size_t i = 0; i + 1 < requests.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok()) << outcomes[i].error;
  }
  EXPECT_EQ(outcomes[0].kernel, outcomes[2].kernel);  // one shared image
  EXPECT_NE(outcomes[0].kernel->image, outcomes[1].kernel->image);
  EXPECT_FALSE(outcomes.back().ok());
  EXPECT_NE(outcomes.back().error.find("broken on purpose"), std::string::npos);
  EXPECT_EQ(cache.stats().compiles, 4u);  // 1, 2, 3 and the broken one
  EXPECT_EQ(cache.stats().memory_hits, 2u);
}

}  // namespace
}  // namespace mybackend

#else  // !MYBACKEND_WITH_CODEGEN

TEST(KernelCache, SkippedWithoutCuda) {
  GTEST_SKIP() << "mybackend_codegen is built only when CUDA is enabled";
}

#endif
