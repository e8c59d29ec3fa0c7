// Which calls keep their inputs for recovery (Note [Input ownership]).
//
// Note [Input ownership]
// A compiled graph's inputs (in a backward graph: the saved activations)
// must die as the graph runs, after their last use, as eager autograd frees
// saved tensors during the backward. So a boxed call hands its inputs over:
// the Python list is emptied and the executor's slots hold the only
// references the runtime has (Executor::run releases each after its last
// use, Note [Memory plan]). Recovery (rerun the graph eagerly when the
// compiled run fails, docs/architecture.md "Failure policy") needs the
// inputs, though. The rule: a call whose input signature (per input: dtype,
// device, sizes, strides, storage offset of a tensor; the value of an int;
// the kind of anything else) has not yet run to the end is a trial: its
// inputs are kept until the call returns and are given back when it fails,
// so it can be rerun eagerly. Once a signature ran to the end it is proven
// and its calls keep nothing. Everything that can make a compiled run fail
// where eager succeeds (an op or layout the backend mishandles, a size
// check, a missing kernel) depends on the signature, not on tensor data, so
// it shows on the trial; what can fail later on a proven signature (out of
// memory, a device-side assert on data, a Python node raising on data)
// fails eager alike, and the error reaches the user as eager's would. So
// only the first call per signature pays the memory of recovery, and only
// when the graph is new or sees new shapes (a trial per dynamic size).
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace mybackend {

// The signature of a call's inputs (Note [Input ownership]); reads no data.
std::uint64_t input_signature(const std::vector<c10::IValue>& inputs);

class RecoveryWindow {
 public:
  // True while calls of this signature must keep their inputs.
  bool is_trial(std::uint64_t signature) const;
  // The signature ran to the end. At most kMaxProven are remembered; later
  // ones stay trials (safe, at the memory cost of recovery).
  void prove(std::uint64_t signature);
  static constexpr std::size_t kMaxProven = 256;

 private:
  mutable std::mutex mutex_;
  std::unordered_set<std::uint64_t> proven_;
};

}  // namespace mybackend
