#include "runtime/tensor_alias.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/as_strided.h>
#include <c10/core/TensorImpl.h>

#include <typeinfo>
#include <vector>

#include "common/error.h"

namespace mybackend {

bool plain_alias_base(const at::Tensor& t) {
  if (!t.defined() || t.layout() != c10::kStrided) return false;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (typeid(*impl) != typeid(c10::TensorImpl) || impl->is_python_dispatch()) return false;
  return !(at::GradMode::is_enabled() && t.requires_grad());
}

at::Tensor plain_alias(const at::Tensor& base, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                       std::int64_t storage_offset) {
  at::Tensor view = at::detail::make_tensor<c10::TensorImpl>(
      c10::TensorImpl::VIEW, c10::Storage(base.storage()), base.key_set(), base.dtype());
  c10::TensorImpl* impl = view.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(sizes, strides, storage_offset);
  impl->set_version_counter(base.unsafeGetTensorImpl()->version_counter());
  return view;
}

at::Tensor alias_of(const at::Tensor& base, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                    std::int64_t storage_offset) {
  if (!plain_alias_base(base)) return at::as_strided(base, sizes, strides, storage_offset);
  return plain_alias(base, sizes, strides, storage_offset);
}

at::Tensor transposed_alias(const at::Tensor& base) {
  MB_ASSERT(base.dim() >= 2, "a transpose of a ", base.dim(), "-d tensor");
  std::vector<std::int64_t> sizes(base.sizes().begin(), base.sizes().end());
  std::vector<std::int64_t> strides(base.strides().begin(), base.strides().end());
  std::swap(sizes[sizes.size() - 1], sizes[sizes.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return alias_of(base, sizes, strides, base.storage_offset());
}

at::Tensor viewed_alias(const at::Tensor& base, c10::IntArrayRef sizes) {
  if (base.sizes() == sizes) return base;
  MB_ASSERT(base.is_contiguous(), "a view of a non-contiguous tensor as other sizes");
  std::vector<std::int64_t> strides(sizes.size(), 1);
  std::int64_t numel = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = numel;
    numel *= sizes[d];
  }
  MB_ASSERT(numel == base.numel(), "a view of ", base.numel(), " elements as ", numel);
  return alias_of(base, sizes, strides, base.storage_offset());
}

at::Tensor expanded_alias(const at::Tensor& base, c10::IntArrayRef sizes) {
  if (base.sizes() == sizes) return base;
  const auto rank = static_cast<std::int64_t>(sizes.size());
  MB_ASSERT(base.dim() <= rank, "a ", base.dim(), "-d tensor expanded to ", rank, " dims");
  std::vector<std::int64_t> strides(sizes.size(), 0);
  for (std::int64_t d = rank - 1, b = base.dim() - 1; b >= 0; --d, --b) {
    const std::int64_t size = base.size(b);
    MB_ASSERT(size == sizes[static_cast<std::size_t>(d)] || size == 1, "a size ", size,
              " expanded to ", sizes[static_cast<std::size_t>(d)]);
    strides[static_cast<std::size_t>(d)] =
        size == 1 && sizes[static_cast<std::size_t>(d)] != 1 ? 0 : base.stride(b);
  }
  return alias_of(base, sizes, strides, base.storage_offset());
}

}  // namespace mybackend
