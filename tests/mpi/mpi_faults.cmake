# A failing rank stops the whole job with a message naming the rank and the cause, never a
# hang: an exception, a failed allocation, SIGKILL, and a missing file on every rank.
# Faults are injected with DSLIDE_FAULT=KIND:RANK:ITER (src/common/fault.h).
include(${CMAKE_CURRENT_LIST_DIR}/mpi_setup.cmake)
function(expect_failure fault pattern)
  execute_process(
    COMMAND ${MPIEXEC} -n 2 ${flags} -x DSLIDE_FAULT=${fault} -x OMP_NUM_THREADS=1
            ${DSLIDE} train --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt
            --hidden 16 --sparsity 0.2 --epochs 3 --log-every 1
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(rc MATCHES "timeout")
    message(FATAL_ERROR "DSLIDE_FAULT=${fault}: the job hung\n${out}${err}")
  endif()
  if(rc EQUAL 0)
    message(FATAL_ERROR "DSLIDE_FAULT=${fault}: the job succeeded\n${out}${err}")
  endif()
  if(NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "DSLIDE_FAULT=${fault}: no message matching '${pattern}'\n${out}${err}")
  endif()
  message(STATUS "DSLIDE_FAULT=${fault}: exit ${rc}, message found")
endfunction()
expect_failure(throw:1:3 "\\[rank 1\\] dslide error: injected fault \\(DSLIDE_FAULT\\) at iteration 3")
expect_failure(oom:1:4 "\\[rank 1\\] dslide error: out of memory")
expect_failure(kill:1:2 "rank 1[^\n]*signal 9")
expect_failure(throw:0:5 "\\[rank 0\\] dslide error: injected fault")
# Every rank fails alike on a missing file: each names itself and the file.
execute_process(COMMAND ${MPIEXEC} -n 2 ${flags} ${DSLIDE} train --train ${WORK}/missing.txt
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(rc EQUAL 0 OR rc MATCHES "timeout" OR NOT "${out}${err}" MATCHES "\\[rank [01]\\] dslide error: [^\n]*missing.txt: cannot open")
  message(FATAL_ERROR "missing file: rc ${rc}\n${out}${err}")
endif()
