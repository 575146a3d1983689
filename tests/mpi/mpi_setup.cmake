# The start of the MPI command-line scripts: an empty WORK folder, a small generated data
# set (WORK/syn.train.txt, WORK/syn.test.txt), and MPIFLAGS as the list `flags`.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${DSLIDE} gen --points 2000 --features 500 --labels 100 --nnz 10
                        --out ${WORK}/syn RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gen failed")
endif()
separate_arguments(flags UNIX_COMMAND "${MPIFLAGS}")
