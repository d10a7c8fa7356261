# Runs EXE ARG and passes when it ends abnormally (non-zero exit or a signal) with EXPECT in its stderr.
#   cmake -DEXE=... -DARG=... -DEXPECT=... -P expect_abort.cmake
execute_process(COMMAND "${EXE}" ${ARG} RESULT_VARIABLE rv OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "exit: ${rv}\nstdout: ${out}\nstderr: ${err}")
if(rv STREQUAL "0")
  message(FATAL_ERROR "expected an abnormal end, the program exited 0")
endif()
string(FIND "${err}" "${EXPECT}" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "stderr does not contain the expected message: ${EXPECT}")
endif()
