# Runs one doc snippet and compares its standard output with the block the Markdown file documents.
# cmake -DEXE=<program> -DEXPECTED=<file> -DWHERE=<file.md:line> -P compare_output.cmake
execute_process(COMMAND "${EXE}" OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E echo "--- stdout:\n${_out}--- stderr:\n${_err}")
  message(FATAL_ERROR "${WHERE}: the snippet exited with ${_rc}")
endif()
file(READ "${EXPECTED}" _want)
# Trailing whitespace of each line, and leading and trailing blank lines, do not count.
foreach(_v _out _want)
  string(REGEX REPLACE "[ \t\r]+\n" "\n" ${_v} "${${_v}}")
  string(REGEX REPLACE "[ \t\r\n]+$" "" ${_v} "${${_v}}")
  string(REGEX REPLACE "^\n+" "" ${_v} "${${_v}}")
endforeach()
if(NOT _out STREQUAL _want)
  # Printed verbatim (message() would reflow the lines).
  execute_process(COMMAND "${CMAKE_COMMAND}" -E echo "--- documented:\n${_want}\n--- actual:\n${_out}\n---")
  message(FATAL_ERROR "${WHERE}: the snippet's output differs from the output documented after it")
endif()
