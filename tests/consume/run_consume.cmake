# Consumption test driver: configures, builds and runs a small project that brings nanscope in the way a user
# would.
#   MODE=find_package      cmake --install <NANSCOPE_BINARY_DIR> into a fresh prefix, then find_package(nanscope)
#   MODE=add_subdirectory  add_subdirectory(<NANSCOPE_SOURCE_DIR>) from the consumer project
#   MODE=fetchcontent      FetchContent_Declare(nanscope SOURCE_DIR <NANSCOPE_SOURCE_DIR>) + MakeAvailable
# Other variables: NANSCOPE_SOURCE_DIR, NANSCOPE_BINARY_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, BUILD_TYPE.
# Every mode also checks that the consumer's configure neither looks for LibTorch nor prints its messages unless
# it asks for the torch adapter (add_subdirectory: NANSCOPE_WITH_TORCH=ON, configured a second time).
cmake_minimum_required(VERSION 3.25)

foreach(var IN ITEMS MODE NANSCOPE_SOURCE_DIR NANSCOPE_BINARY_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consume.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()

function(run)
  string(REPLACE ";" " " pretty "${ARGN}")
  message(STATUS "$ ${pretty}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rv)
  if(NOT rv STREQUAL "0")
    message(FATAL_ERROR "command failed (${rv}): ${pretty}")
  endif()
endfunction()

# Like run(), keeping what the command printed (stdout and stderr) in `var`, and printing it as run() would.
function(run_configure var)
  string(REPLACE ";" " " pretty "${ARGN}")
  message(STATUS "$ ${pretty}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rv OUTPUT_VARIABLE printed ERROR_VARIABLE printed)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E echo "${printed}")
  if(NOT rv STREQUAL "0")
    message(FATAL_ERROR "command failed (${rv}): ${pretty}")
  endif()
  set(${var} "${printed}" PARENT_SCOPE)
endfunction()

set(configure_args -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")

if(MODE STREQUAL "find_package")
  set(prefix "${WORK_DIR}/prefix")
  file(REMOVE_RECURSE "${prefix}")  # a fresh prefix every time: a file missing from the install must show
  run("${CMAKE_COMMAND}" --install "${NANSCOPE_BINARY_DIR}" --prefix "${prefix}" --config "${BUILD_TYPE}")
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${prefix}")
elseif(MODE STREQUAL "add_subdirectory" OR MODE STREQUAL "fetchcontent")
  list(APPEND configure_args "-DNANSCOPE_SOURCE_DIR=${NANSCOPE_SOURCE_DIR}")
  if(MODE STREQUAL "fetchcontent")
    list(APPEND configure_args -DUSE_FETCHCONTENT=ON)
  else()
    list(APPEND configure_args -DUSE_FETCHCONTENT=OFF)
  endif()
else()
  message(FATAL_ERROR "run_consume.cmake: unknown MODE '${MODE}'")
endif()

if(MODE STREQUAL "fetchcontent")
  set(src "${NANSCOPE_SOURCE_DIR}/tests/consume/add_subdirectory")
else()
  set(src "${NANSCOPE_SOURCE_DIR}/tests/consume/${MODE}")
endif()
set(bin "${WORK_DIR}/build")
file(REMOVE "${bin}/CMakeCache.txt")  # a fresh configure: what it looks up and prints is checked below
run_configure(out "${CMAKE_COMMAND}" -S "${src}" -B "${bin}" ${configure_args})
# A consumer that did not ask for the LibTorch adapter gets no LibTorch lookup: no "Caffe2: Found ..." lines in
# its configure output (LibTorch's package prints them even when looked up QUIET), and no Torch_DIR in its cache
# (which also holds where LibTorch is not installed, so the check means the same on every machine).
if(out MATCHES "Caffe2|Torch")
  message(FATAL_ERROR "the consumer's configure printed LibTorch's messages although it did not ask for the "
                      "torch adapter (NANSCOPE_WITH_TORCH)")
endif()
file(STRINGS "${bin}/CMakeCache.txt" torch_entries REGEX "^(Torch|Caffe2)_DIR:")
if(torch_entries)
  message(FATAL_ERROR "the consumer's configure looked for LibTorch although it did not ask for it: ${torch_entries}")
endif()
if(MODE STREQUAL "add_subdirectory")
  # Asked for (NANSCOPE_WITH_TORCH=ON before add_subdirectory), LibTorch is looked up: found or not, Torch_DIR is
  # in the cache (configured only: the build above is the one that is compiled).
  set(asked "${WORK_DIR}/build_with_torch")
  file(REMOVE "${asked}/CMakeCache.txt")
  run_configure(asked_out "${CMAKE_COMMAND}" -S "${src}" -B "${asked}" ${configure_args} -DNANSCOPE_WITH_TORCH=ON)
  file(STRINGS "${asked}/CMakeCache.txt" torch_entries REGEX "^Torch_DIR:")
  if(NOT torch_entries)
    message(FATAL_ERROR "NANSCOPE_WITH_TORCH=ON in the consumer: nanscope did not look for LibTorch")
  endif()
endif()
if(MODE STREQUAL "fetchcontent")
  # The same consumer project as add_subdirectory's, which builds and runs both programs: here the FetchContent
  # route is what is tested, and one program shows its target works (the other one's build took ~20 s).
  run("${CMAKE_COMMAND}" --build "${bin}" --config "${BUILD_TYPE}" --target consume)
  run("${CMAKE_CTEST_COMMAND}" --test-dir "${bin}" --output-on-failure -C "${BUILD_TYPE}" -R "^consume$")
else()
  run("${CMAKE_COMMAND}" --build "${bin}" --config "${BUILD_TYPE}")
  # The consumer project registers what to run as its own tests.
  run("${CMAKE_CTEST_COMMAND}" --test-dir "${bin}" --output-on-failure -C "${BUILD_TYPE}")
endif()
