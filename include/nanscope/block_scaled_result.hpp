// nanscope — block_scaled_result.hpp: what the block-scaled what-if statistics report (per format: blocks that lose
// values, clipped / flushed counts, the scale-exponent spread, the worst block), without the pass itself
// (block_scaled.hpp). docs/block-scaled.md.
#ifndef NANSCOPE_BLOCK_SCALED_RESULT_HPP
#define NANSCOPE_BLOCK_SCALED_RESULT_HPP

#include "block_scaled_formats.hpp"
#include "config.hpp"
#include "health.hpp"

#include <array>
#include <cstdint>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// One block's what-if record (block_scaled_options::keep_blocks): the scale as stored (MX: the E8M0 byte,
/// exponent + 127, 0xFF NaN; NVFP4: the E4M3 byte, 0x7F NaN) and the block's counts.
struct block_record {
  std::uint8_t scale = 0;
  std::uint8_t clipped = 0;    ///< elements whose magnitude / scale exceeds the format's max (stored as +-max)
  std::uint8_t flushed = 0;    ///< non-zero elements that quantize to zero
  std::uint8_t subnormal = 0;  ///< elements that quantize to a subnormal of the element format
};

/// The block that loses the most elements (clipped + flushed; ties: the lowest index). index -1: no block loses any.
struct block_worst {
  std::int64_t index = -1;          ///< block index (row-major in the scale tensor's shape)
  std::int64_t first_element = -1;  ///< flat (row-major) index of its first element in the tensor
  int elements = 0;
  double abs_max = detail::qnan;    ///< its largest |x|
  std::uint8_t scale = 0;           ///< its scale byte (E8M0, or NVFP4's E4M3)
  std::uint32_t clipped = 0, flushed = 0;
  double error_max_abs = detail::qnan;  ///< max |dequantize(quantize(x)) - x| over the block
  double error_rms = detail::qnan;      ///< root mean square of that error over the block
};

/// What quantizing the tensor to one block format would do.
struct block_format_stats {
  block_format format = block_format::mxfp4;
  scale_rule rule = scale_rule::ocp;  ///< MX formats; NVFP4's block scale is always its own rule
  int block_size = 32;
  std::uint64_t blocks = 0;             ///< blocks (a row's last one may be shorter)
  std::uint64_t elements = 0;
  std::uint64_t zero_blocks = 0;        ///< every element +-0
  std::uint64_t nan_blocks = 0;         ///< holding a NaN or an infinity: the scale is NaN, every element is lost
  std::uint64_t zero_scale_blocks = 0;  ///< NVFP4: a block scale that rounds to 0 with non-zero elements
  std::uint64_t lossy_blocks = 0;       ///< with a clipped or flushed element, or a NaN scale
  std::uint64_t clipped = 0;            ///< |x| / scale above the format's max: stored as +-max
  std::uint64_t flushed = 0;            ///< non-zero, quantized to 0
  std::uint64_t subnormal = 0;          ///< quantized to a subnormal of the element format
  /// Scale exponents (MX: X of 2^X; NVFP4: floor(log2) of the E4M3 block scale) of the blocks with a finite, non-zero
  /// scale: scale_histogram[X + 127], their mean, (unbiased) std, min and max. Zero and NaN blocks are not in them.
  std::array<std::uint64_t, 256> scale_histogram{};
  double scale_exp_mean = detail::qnan;
  double scale_exp_std = detail::qnan;
  int scale_exp_min = 0, scale_exp_max = 0;
  float tensor_scale = 0.0f;  ///< NVFP4: the per-tensor scale used (decode factor)
  block_worst worst;
  std::vector<block_record> per_block;  ///< keep_blocks: one record per block, in block index order

  /// Blocks with any loss, over all blocks.
  double lossy_fraction() const { return blocks == 0 ? 0.0 : static_cast<double>(lossy_blocks) / static_cast<double>(blocks); }
  /// Blocks whose scale exponent is x.
  std::uint64_t at(int x) const { return x < -127 || x > 128 ? 0 : scale_histogram[static_cast<std::size_t>(x + 127)]; }
};

/// The health of a tensor and, per requested format, the what-if statistics of quantizing it.
struct block_scaled_result {
  health_result health;  ///< what check() gives for the same view and check options
  int axis = 0;          ///< the dimension the blocks ran along (non-negative)
  std::vector<block_format_stats> formats;  ///< the requested formats, in block_format order

  const block_format_stats* find(block_format f) const {
    for (const block_format_stats& s : formats)
      if (s.format == f) return &s;
    return nullptr;
  }
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_BLOCK_SCALED_RESULT_HPP
