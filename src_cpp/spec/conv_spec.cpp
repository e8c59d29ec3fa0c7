#include "spec/conv_spec.h"

#include "spec/spec_text.h"

namespace mybackend {
namespace {

std::string ints(const std::vector<std::int64_t>& xs) {
  std::string out = "[";
  for (std::size_t k = 0; k < xs.size(); ++k) out += (k ? "," : "") + std::to_string(xs[k]);
  return out + "]";
}

std::string value(ValueId v) { return v >= 0 ? "%" + std::to_string(v) : "none"; }

}  // namespace

std::string_view conv_direction_name(ConvDirection direction) {
  switch (direction) {
    case ConvDirection::Forward: return "forward";
    case ConvDirection::Backward: return "backward";
  }
  return "unknown";
}

std::string ConvSpec::epilogue_name() const {
  std::string out;
  auto part = [&](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : "+") + std::string(name);
  };
  part(bias >= 0 && direction == ConvDirection::Forward, "bias");
  part(batch_norm, "batch_norm");
  part(residual >= 0, "residual");
  part(relu, "relu");
  return out.empty() ? "none" : out;
}

std::vector<ValueId> ConvSpec::inputs() const {
  std::vector<ValueId> out;
  if (direction == ConvDirection::Backward) out.push_back(grad_output);
  out.push_back(input);
  out.push_back(weight);
  if (direction == ConvDirection::Backward) return out;
  if (bias >= 0) out.push_back(bias);
  if (batch_norm) {
    for (ValueId v : {bn.weight, bn.bias, bn.mean, bn.var}) {
      if (v >= 0) out.push_back(v);
    }
  }
  if (residual >= 0) out.push_back(residual);
  return out;
}

std::string ConvSpec::to_string() const {
  std::string out = "conv " + std::string(conv_direction_name(direction)) + " " +
                    std::to_string(spatial_dims) +
                    "d dtype=" + std::string(dtype_short_name(dtype)) + " stride=" + ints(stride) +
                    " padding=" + ints(padding) + " dilation=" + ints(dilation) +
                    " groups=" + std::to_string(groups) + "\n";
  if (direction == ConvDirection::Backward) {
    out += "grad_output=" + value(grad_output) + " input=" + value(input) +
           " weight=" + value(weight) + "\ngrad_input=" + value(grad_input) +
           " grad_weight=" + value(grad_weight) + " grad_bias=" + value(grad_bias) + "\n";
    return out;
  }
  out += "input=" + value(input) + " weight=" + value(weight) + "\nepilogue=" + epilogue_name();
  if (bias >= 0) out += " bias=" + value(bias);
  if (batch_norm)
    out += " bn(weight=" + value(bn.weight) + " bias=" + value(bn.bias) +
           " mean=" + value(bn.mean) + " var=" + value(bn.var) + " eps=" + spec_number(bn.eps) +
           ")";
  if (residual >= 0) out += " residual=" + value(residual);
  out += "\noutput=" + value(output) + "\n";
  return out;
}

}  // namespace mybackend
