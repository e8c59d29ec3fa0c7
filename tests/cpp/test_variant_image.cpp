// Stage 9 (runtime): a variant compiled on first use (Note [Variants
// compiled on first use] in runtime/generated/kernel_launch.h). Needs the runtime
// library, so it builds as one skipped test where that is not built.
#include <gtest/gtest.h>

#ifdef MYBACKEND_WITH_CUDA

#include <stdexcept>

#include "common/error.h"
#include "runtime/generated/kernel_launch.h"

namespace mybackend {
namespace {

std::shared_ptr<const CompiledKernel> image_of(const std::string& text) {
  return std::make_shared<const CompiledKernel>(CompiledKernel{ImageKind::Ptx, text, ""});
}

TEST(VariantImage, AnImageCompiledWithTheGroupIsThere) {
  const VariantImage image(image_of("ptx"));
  EXPECT_TRUE(image.compiled());
  EXPECT_EQ(image.get()->image, "ptx");
}

TEST(VariantImage, ADeferredImageCompilesOnceOnTheFirstGet) {
  int compiles = 0;
  const VariantImage image(VariantImage::Compile([&] {
    ++compiles;
    return image_of("general");
  }));
  EXPECT_FALSE(image.compiled());
  EXPECT_EQ(compiles, 0);
  const auto first = image.get();
  const auto second = image.get();
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first->image, "general");
  EXPECT_TRUE(image.compiled());
}

TEST(VariantImage, CopiesShareTheCompile) {
  int compiles = 0;
  const VariantImage image(VariantImage::Compile([&] {
    ++compiles;
    return image_of("shared");
  }));
  const VariantImage copy = image;  // as a cast group's singles copy their variants
  copy.get();
  EXPECT_TRUE(image.compiled());
  image.get();
  EXPECT_EQ(compiles, 1);
}

TEST(VariantImage, AFailedCompileIsRememberedAndNamed) {
  int compiles = 0;
  const VariantImage image(VariantImage::Compile([&]() -> std::shared_ptr<const CompiledKernel> {
    ++compiles;
    throw std::runtime_error("NVRTC: expected a ';'");
  }));
  for (int call = 0; call < 2; ++call) {
    try {
      image.get();
      FAIL() << "get() returned";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("compiling the variant on first use failed"),
                std::string::npos);
      EXPECT_NE(std::string(e.what()).find("expected a ';'"), std::string::npos);
    }
  }
  EXPECT_EQ(compiles, 1);
  EXPECT_FALSE(image.compiled());
}

}  // namespace
}  // namespace mybackend

#else

TEST(VariantImage, NeedsTheRuntimeLibrary) { GTEST_SKIP() << "built without CUDA"; }

#endif  // MYBACKEND_WITH_CUDA
