# cmake -DRUN=<command;args> -DEXPECT=success|failure -DPATTERN=<regex> -P expect_outcome.cmake
# Runs RUN and checks its exit status and, when PATTERN is given, that its output matches it.
execute_process(COMMAND ${RUN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(output "${out}${err}")
if(EXPECT STREQUAL "failure" AND status EQUAL 0)
  message(FATAL_ERROR "expected `${RUN}` to fail, and it succeeded:\n${output}")
elseif(EXPECT STREQUAL "success" AND NOT status EQUAL 0)
  message(FATAL_ERROR "expected `${RUN}` to succeed, and it failed (${status}):\n${output}")
endif()
if(NOT PATTERN STREQUAL "" AND NOT output MATCHES "${PATTERN}")
  message(FATAL_ERROR "the output of `${RUN}` does not say \"${PATTERN}\":\n${output}")
endif()
message(STATUS "as expected (${EXPECT}): ${RUN}")
