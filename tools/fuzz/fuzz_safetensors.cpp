// libFuzzer target: the .safetensors header and layout parser (nanscope::parse_safetensors) and the scan of
// every tensor it finds.
//   ./fuzz_safetensors -dict=tools/fuzz/safetensors.dict CORPUS_DIR tools/fuzz/corpus/safetensors
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The layout alone: tensors lie in the data section, in order, without sharing a byte, sizes matching.
  try {
    const nanscope::safetensors_layout lay = nanscope::parse_safetensors(data, size, "fuzz.safetensors");
    nanscope_fuzz::require_that(lay.data_start == 8 + lay.header_size && lay.data_start <= size);
    nanscope_fuzz::require_that(lay.data_size == size - lay.data_start);
    std::uint64_t covered = 0;
    for (const nanscope::safetensors_tensor& t : lay.tensors) {
      nanscope_fuzz::require_that(t.begin <= t.end && t.end <= lay.data_size);
      nanscope_fuzz::require_that(t.file_offset == lay.data_start + t.begin);
      if (t.supported) nanscope_fuzz::require_that(t.numel * nanscope::size_of(t.type) == t.byte_size());
      if (t.byte_size() != 0) {
        nanscope_fuzz::require_that(t.begin >= covered);
        covered = t.end;
      }
    }
  } catch (const nanscope::error&) {
  }
  nanscope_fuzz::scan(data, size, "fuzz.safetensors", nanscope_cli::file_format::safetensors);
  return 0;
}
