// libFuzzer target: the .npy parser (nanscope::parse_npy) and the scan of the array it finds.
//   ./fuzz_npy -dict=tools/fuzz/npy.dict CORPUS_DIR tools/fuzz/corpus/npy
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The layout alone: when it parses, the array exactly fills the rest of the file.
  try {
    const nanscope::npy_layout lay = nanscope::parse_npy(data, size, "fuzz.npy");
    nanscope_fuzz::require_that(lay.data_offset <= size && lay.data_size == size - lay.data_offset);
    nanscope_fuzz::require_that(lay.shape.size() <= static_cast<std::size_t>(nanscope::max_rank));
    nanscope_fuzz::require_that(lay.numel * nanscope::size_of(lay.type) == lay.data_size);
  } catch (const nanscope::error&) {
  }
  nanscope_fuzz::scan(data, size, "fuzz.npy", nanscope_cli::file_format::npy);
  return 0;
}
