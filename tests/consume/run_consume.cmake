# Consumption test driver: configures, builds and runs a small project that brings nanscope in the way a user
# would.
#   MODE=find_package      cmake --install <NANSCOPE_BINARY_DIR> into a fresh prefix, then find_package(nanscope)
#   MODE=add_subdirectory  add_subdirectory(<NANSCOPE_SOURCE_DIR>) from the consumer project
#   MODE=fetchcontent      FetchContent_Declare(nanscope SOURCE_DIR <NANSCOPE_SOURCE_DIR>) + MakeAvailable
# Other variables: NANSCOPE_SOURCE_DIR, NANSCOPE_BINARY_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, BUILD_TYPE.
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
run("${CMAKE_COMMAND}" -S "${src}" -B "${bin}" ${configure_args})
run("${CMAKE_COMMAND}" --build "${bin}" --config "${BUILD_TYPE}")
# The consumer project registers what to run as its own tests.
run("${CMAKE_CTEST_COMMAND}" --test-dir "${bin}" --output-on-failure -C "${BUILD_TYPE}")
