// A 24-layer encoder built from the block of transformer_block.hpp, for the layer-tree rows: a root scope
// "Encoder" whose children are "layers.0" ... "layers.23" (each the block's 11 scopes), the shape of the models
// HuggingFace's tool prunes. The including translation unit defines BLOCK_SCOPE / BLOCK_OUTPUT first, as for
// transformer_block.hpp; BLOCK_SCOPE must accept a std::string_view name (the block's own root scope, named ""
// in transformer_block.hpp, takes the layer's name "layers.<i>" here).
#ifndef NANSCOPE_BENCH_ENCODER24_HPP
#define NANSCOPE_BENCH_ENCODER24_HPP

#include <string>
#include <string_view>

namespace {
namespace encoder24 {
constexpr int layers = 24;
/// The name the block's unnamed root scope takes (set by forward before each layer).
inline std::string& layer_name() {
  static std::string name;
  return name;
}
inline std::string_view block_name(std::string_view name) { return name.empty() ? std::string_view(layer_name()) : name; }
}  // namespace encoder24
}  // namespace

#include "transformer_block.hpp"

namespace {
namespace encoder24 {
inline block::Mat forward(const block::Mat& x, const block::weights& w) {
  BLOCK_ROOT_SCOPE("", "Encoder");
  block::Mat h = x;
  for (int i = 0; i < layers; ++i) {
    layer_name() = "layers." + std::to_string(i);
    h = block::forward(h, w);
    h *= 0.5f;  // keep the activations in range over 24 residual blocks
  }
  return h;
}
}  // namespace encoder24
}  // namespace

#endif
