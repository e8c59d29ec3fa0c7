// The convolution engine's Python surface: its plan-cache counters.
#include "bindings/bindings.h"
#include "runtime/libraries/conv_group.h"

namespace mybackend::bindings {

void bind_conv(py::module_& m) {
  m.def(
      "cudnn_conv_cache_stats",
      [] {
        py::dict out;
        for (const auto& [name, count] : conv_plan_cache_counters()) out[name.c_str()] = count;
        return out;
      },
      "Counters of the process's cuDNN convolution plan cache: hits, misses, entries, "
      "failures (signatures cuDNN has no plan for).");
}

}  // namespace mybackend::bindings
