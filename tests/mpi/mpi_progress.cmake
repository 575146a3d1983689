# A 2-rank run's progress: every line names the time in the exchanges and the network's
# part of it, and every metrics record splits the exchanges' time into network and waiting,
# neither negative. Evaluations (left out of the split) and checkpoints (kept in it) fall
# between the lines, so a split the ranks kept differently would end the run with an error.
include(${CMAKE_CURRENT_LIST_DIR}/mpi_setup.cmake)
execute_process(
  COMMAND ${MPIEXEC} -n 2 ${flags} -x OMP_NUM_THREADS=1
          ${DSLIDE} train --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt
          --hidden 16 --sparsity 0.2 --iterations 30 --log-every 5 --eval-every 6
          --checkpoint-dir ${WORK}/ck --checkpoint-every 7 --metrics ${WORK}/m.jsonl
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the 2-rank run failed (${rc})\n${out}${err}")
endif()
string(REGEX MATCHALL "iter [0-9]+/30 [^\n]*" lines "${out}")
list(LENGTH lines n)
if(NOT n EQUAL 6)
  message(FATAL_ERROR "expected 6 progress lines, found ${n}\n${out}")
endif()
foreach(line IN LISTS lines)
  if(NOT line MATCHES "KB sent/iter \\| comm [0-9.]+ ms \\(network [0-9.]+\\) \\| RSS")
    message(FATAL_ERROR "a progress line without the exchanges' time:\n${line}")
  endif()
endforeach()
file(STRINGS ${WORK}/m.jsonl records REGEX "\"comm_ms_per_iter\"")
list(LENGTH records n)
if(NOT n EQUAL 6)
  message(FATAL_ERROR "expected 6 progress records, found ${n}")
endif()
foreach(r IN LISTS records)
  string(REGEX MATCH "\"comm_ms_per_iter\":([-0-9.e]+)" _ "${r}")
  set(comm ${CMAKE_MATCH_1})
  string(REGEX MATCH "\"comm_network_ms_per_iter\":([-0-9.e]+)" _ "${r}")
  set(net ${CMAKE_MATCH_1})
  string(REGEX MATCH "\"comm_wait_ms_per_iter\":([-0-9.e]+)" _ "${r}")
  set(wait ${CMAKE_MATCH_1})
  if(net STREQUAL "" OR wait STREQUAL "" OR net LESS 0 OR wait LESS 0 OR NOT comm GREATER 0)
    message(FATAL_ERROR "a record without a sound split (comm ${comm}, network ${net}, "
                        "waiting ${wait}):\n${r}")
  endif()
endforeach()
message(STATUS "6 progress lines and records with the exchanges' split")
