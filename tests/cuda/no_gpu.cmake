# CUDA checks that need neither a GPU nor the CUDA targets (included from tests/CMakeLists.txt).
#   gpu_check_table         tools/cuda_ratios.py (the table printer of tools/gpu-check.sh) on saved benchmark runs
#                           (tests/cuda/fixtures/cuda_bench_run*.json), against ratios computed in the test
#   gpu_check_script        tools/gpu-check.sh: argument parsing and refusals, --dry-run, and whole runs against
#                           stand-in programs (clean, a failing sanitizer, a suite without a device); skipped
#                           without bash
# Unless NANSCOPE_BUILD_CUDA=OFF (so that a machine without nvcc reports them as skipped rather than leaving them
# out):
#   cuda_resources          tests/cuda/resource_usage.py: compiles every kernel instantiation (resource_usage.cu)
#                           for sm_90 with -Xptxas -v and fails on a spill or a kernel over its register budget
#                           (docs/cuda.md#register-budgets); exit 77 (skipped) without nvcc. ~1 min of nvcc.
#   cuda_resources_parser   the same script on a saved ptxas report with a spilling and a missing kernel: it must
#                           name both (no nvcc needed)
find_program(NANSCOPE_PYTHON3_NO_GPU NAMES python3)
if(NOT NANSCOPE_PYTHON3_NO_GPU)
  message(STATUS "nanscope tests: no python3, the GPU-script and CUDA resource-usage tests are not registered")
  return()
endif()
set(_ns_src "${PROJECT_SOURCE_DIR}")
foreach(group IN ITEMS table script)
  add_test(NAME gpu_check_${group}
    COMMAND "${NANSCOPE_PYTHON3_NO_GPU}" "${_ns_src}/tests/cuda/gpu_check_test.py" --group ${group}
            --work "${CMAKE_CURRENT_BINARY_DIR}/gpu_check_${group}")
  set_tests_properties(gpu_check_${group} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120 LABELS cuda_no_gpu)
endforeach()

if(NANSCOPE_BUILD_CUDA STREQUAL "OFF")
  return()
endif()
set(_ns_nvcc_arg)
if(CMAKE_CUDA_COMPILER)
  set(_ns_nvcc_arg --nvcc "${CMAKE_CUDA_COMPILER}")
endif()
add_test(NAME cuda_resources
  COMMAND "${NANSCOPE_PYTHON3_NO_GPU}" "${_ns_src}/tests/cuda/resource_usage.py" ${_ns_nvcc_arg}
          --include "${_ns_src}/include" --source "${_ns_src}/tests/cuda/resource_usage.cu"
          --work "${CMAKE_CURRENT_BINARY_DIR}/cuda_resources")
set_tests_properties(cuda_resources PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900 LABELS cuda_no_gpu)
add_test(NAME cuda_resources_parser
  COMMAND "${NANSCOPE_PYTHON3_NO_GPU}" "${_ns_src}/tests/cuda/resource_usage.py"
          --from-log "${_ns_src}/tests/cuda/fixtures/ptxas_spill.txt"
          --header "${_ns_src}/include/nanscope/detail/cuda_pass.cuh")
set_tests_properties(cuda_resources_parser PROPERTIES LABELS cuda_no_gpu TIMEOUT 60
  PASS_REGULAR_EXPRESSION "FAIL: health_kernel<3, single>: SPILLS \\(24 B stores, 24 B loads\\); OVER BUDGET \\(255 > [0-9]+\\)\nFAIL: health_kernel<1, batch>: budgeted but not in the cubin")
