# Packaging test driver (CTest: consume_package, registered by tests/cli/CMakeLists.txt): the .deb a user gets from
# `cpack -G DEB`, installed the way dpkg would lay it out, used the way a user would use it.
#   1. cpack -G DEB from the existing build tree (nothing is rebuilt: CPack installs what is built)
#   2. the package's control fields: Package nanscope, Version, Depends (libfmt-dev; the tools' runtime libraries)
#   3. dpkg-deb -x into a fresh directory: <dir>/usr is the prefix (no root needed, nothing touches the system)
#   4. each installed tool's --version, run from that prefix: "<tool> <version>", exit 0
#   5. find_package(nanscope <version> EXACT) from tests/consume/package with CMAKE_PREFIX_PATH=<dir>/usr: the
#      package found there (nowhere else), a program built against nanscope::nanscope and run
# Variables: NANSCOPE_SOURCE_DIR, NANSCOPE_BINARY_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, CPACK_COMMAND, DPKG_DEB,
# VERSION, TOOLS (program names expected in bin/, comma-separated, may be empty), DEPENDS (package names Depends
# must contain, comma-separated).
cmake_minimum_required(VERSION 3.25)

foreach(var IN ITEMS NANSCOPE_SOURCE_DIR NANSCOPE_BINARY_DIR WORK_DIR GENERATOR CXX_COMPILER CPACK_COMMAND DPKG_DEB
                     VERSION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_package.cmake: ${var} is not set")
  endif()
endforeach()

string(REPLACE "," ";" TOOLS "${TOOLS}")
string(REPLACE "," ";" DEPENDS "${DEPENDS}")

function(run)
  string(REPLACE ";" " " pretty "${ARGN}")
  message(STATUS "$ ${pretty}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rv)
  if(NOT rv STREQUAL "0")
    message(FATAL_ERROR "command failed (${rv}): ${pretty}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")  # fresh every time: a file missing from the package must show
set(pkg_dir "${WORK_DIR}/pkg")
set(root "${WORK_DIR}/root")
file(MAKE_DIRECTORY "${pkg_dir}" "${root}")

# 1. the package
run("${CPACK_COMMAND}" -G DEB --config "${NANSCOPE_BINARY_DIR}/CPackConfig.cmake" -B "${pkg_dir}")
file(GLOB debs "${pkg_dir}/*.deb")
list(LENGTH debs n_debs)
if(NOT n_debs EQUAL 1)
  message(FATAL_ERROR "expected one .deb in ${pkg_dir}, found ${n_debs}: ${debs}")
endif()
message(STATUS "package: ${debs}")

# 2. its control fields
foreach(field IN ITEMS Package Version Depends)
  execute_process(COMMAND "${DPKG_DEB}" -f "${debs}" ${field} OUTPUT_VARIABLE value OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE rv)
  if(NOT rv STREQUAL "0")
    message(FATAL_ERROR "dpkg-deb -f ${debs} ${field} failed (${rv})")
  endif()
  message(STATUS "${field}: ${value}")
  set(control_${field} "${value}")
endforeach()
if(NOT control_Package STREQUAL "nanscope")
  message(FATAL_ERROR "Package is '${control_Package}', expected 'nanscope'")
endif()
if(NOT control_Version STREQUAL VERSION)
  message(FATAL_ERROR "Version is '${control_Version}', expected '${VERSION}'")
endif()
foreach(dep IN LISTS DEPENDS)
  if(NOT control_Depends MATCHES "(^|, )${dep}( |,|$)")
    message(FATAL_ERROR "Depends ('${control_Depends}') does not name ${dep}")
  endif()
endforeach()

# 3. unpacked into a fresh prefix
run("${DPKG_DEB}" -x "${debs}" "${root}")
set(prefix "${root}/usr")
foreach(f IN ITEMS include/nanscope/nanscope.hpp include/nanscope/check.hpp share/cmake/nanscope/nanscopeConfig.cmake
                   share/cmake/nanscope/nanscopeConfigVersion.cmake)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "the package has no ${f} (under ${prefix})")
  endif()
endforeach()

# 4. the tools, run from the prefix
foreach(tool IN LISTS TOOLS)
  if(NOT EXISTS "${prefix}/bin/${tool}")
    message(FATAL_ERROR "the package has no bin/${tool}")
  endif()
  execute_process(COMMAND "${prefix}/bin/${tool}" --version RESULT_VARIABLE rv OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rv STREQUAL "0" OR NOT out STREQUAL "${tool} ${VERSION}\n")
    message(FATAL_ERROR "${prefix}/bin/${tool} --version: exit ${rv}, printed '${out}' '${err}', expected '${tool} ${VERSION}'")
  endif()
  message(STATUS "${tool} --version: ${out}")
endforeach()
file(GLOB installed_tools RELATIVE "${prefix}/bin" "${prefix}/bin/*")
list(SORT installed_tools)
set(want_tools ${TOOLS})
list(SORT want_tools)
if(NOT "${installed_tools}" STREQUAL "${want_tools}")
  message(FATAL_ERROR "bin/ holds '${installed_tools}', expected '${want_tools}'")
endif()

# 5. the CMake package, from a consumer project
set(bin "${WORK_DIR}/consumer")
run("${CMAKE_COMMAND}" -S "${NANSCOPE_SOURCE_DIR}/tests/consume/package" -B "${bin}" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DEXPECTED_PREFIX=${prefix}" "-DEXPECTED_VERSION=${VERSION}")
run("${CMAKE_COMMAND}" --build "${bin}")
run("${CMAKE_CTEST_COMMAND}" --test-dir "${bin}" --output-on-failure)
