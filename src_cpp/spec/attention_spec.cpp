#include "spec/attention_spec.h"

#include "spec/spec_text.h"

namespace mybackend {
namespace {

std::string ref(const char* name, ValueId value) {
  return std::string(" ") + name + "=%" + std::to_string(value);
}

}  // namespace

std::string_view attention_source_name(AttentionSource source) {
  switch (source) {
    case AttentionSource::CudnnForward: return "cudnn_forward";
    case AttentionSource::CudnnBackward: return "cudnn_backward";
    case AttentionSource::FlashForward: return "flash_forward";
    case AttentionSource::FlashBackward: return "flash_backward";
    case AttentionSource::EfficientForward: return "efficient_forward";
    case AttentionSource::EfficientBackward: return "efficient_backward";
    case AttentionSource::Decomposed: return "decomposed";
  }
  return "unknown";
}

bool attention_is_backward(AttentionSource source) {
  return source == AttentionSource::CudnnBackward || source == AttentionSource::FlashBackward ||
         source == AttentionSource::EfficientBackward;
}

std::vector<ValueId> AttentionSpec::inputs() const {
  std::vector<ValueId> in{q, k, v};
  if (bias >= 0) in.push_back(bias);
  if (attention_is_backward(source)) {
    in.push_back(out);
    in.push_back(logsumexp);
    in.push_back(grad_out);
  }
  return in;
}

std::vector<ValueId> AttentionSpec::outputs() const {
  std::vector<ValueId> written;
  if (attention_is_backward(source)) {
    written = stack.value >= 0 ? std::vector<ValueId>{stack.value}
                               : std::vector<ValueId>{grad_q, grad_k, grad_v};
  } else {
    written.push_back(out);
    if (logsumexp >= 0) written.push_back(logsumexp);
  }
  written.insert(written.end(), extra_outputs.begin(), extra_outputs.end());
  return written;
}

std::string AttentionSpec::to_string() const {
  std::string text = "attention " + std::string(attention_source_name(source)) + " " + op +
                     " dtype=" + std::string(dtype_short_name(dtype));
  text += "\n" + ref("q", q).substr(1) + ref("k", k) + ref("v", v);
  if (bias >= 0) text += ref("bias", bias);
  text += std::string(" causal=") + (causal ? "true" : "false") + " scale=" + spec_number(scale);
  text += "\n" + ref("out", out).substr(1);
  if (logsumexp >= 0) text += ref("logsumexp", logsumexp);
  if (attention_is_backward(source)) {
    text += ref("grad_out", grad_out) + ref("grad_q", grad_q) + ref("grad_k", grad_k) +
            ref("grad_v", grad_v);
    if (stack.value >= 0) {
      text += "\n" + ref("stack", stack.value).substr(1) + " dim=" + std::to_string(stack.dim);
      for (const StackedGradient& part : stack.parts) {
        text += std::string(" ") + "qkv"[part.gradient] + "->%" + std::to_string(part.part) + "[";
        for (std::size_t i = 0; i < part.views.size(); ++i) {
          const StackView& view = part.views[i];
          text += i ? " " : "";
          text += view.kind == StackView::Kind::Permute     ? "permute"
                  : view.kind == StackView::Kind::Unsqueeze ? "unsqueeze"
                                                            : "transpose";
          for (std::int64_t d : view.dims) text += "," + std::to_string(d);
        }
        text += "]";
      }
    }
  }
  if (!extra_outputs.empty()) {
    text += " extra=[";
    for (std::size_t i = 0; i < extra_outputs.size(); ++i)
      text += (i ? ",%" : "%") + std::to_string(extra_outputs[i]);
    text += "]";
  }
  return text + "\n";
}

}  // namespace mybackend
