# End-to-end CLI check: gen writes data, train learns it and writes metrics (the start line
# states the budget, negatives and LSH settings), validation selects the kept model and the
# test set is scored once on it, predict writes the same top-k that eval scores, an
# explicit budget too small for the floor of negatives is warned about, bad input and bad
# options fail with messages naming the file/line or option.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
function(run expect_ok)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(OUT "${out}${err}" PARENT_SCOPE)
  if(expect_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}${err}")
  elseif(NOT expect_ok AND rc EQUAL 0)
    message(FATAL_ERROR "should have failed: ${ARGN}\n${out}${err}")
  endif()
endfunction()

# Idle OpenMP threads spin briefly, then sleep, unless the user chose otherwise (the program
# restarts itself with OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT=10000 where neither is set).
run(TRUE ${DSLIDE} --version)
if(NOT OUT MATCHES "idle threads: OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=10000")
  message(FATAL_ERROR "idle threads do not spin briefly and sleep by default:\n${OUT}")
endif()
run(TRUE ${CMAKE_COMMAND} -E env OMP_WAIT_POLICY=ACTIVE ${DSLIDE} --version)
if(NOT OUT MATCHES "idle threads: OMP_WAIT_POLICY=ACTIVE GOMP_SPINCOUNT=\\(unset\\)")
  message(FATAL_ERROR "the user's OMP_WAIT_POLICY was not kept alone:\n${OUT}")
endif()
run(TRUE ${CMAKE_COMMAND} -E env GOMP_SPINCOUNT=1000 ${DSLIDE} --version)
if(NOT OUT MATCHES "idle threads: OMP_WAIT_POLICY=\\(unset\\) GOMP_SPINCOUNT=1000")
  message(FATAL_ERROR "GOMP_SPINCOUNT did not leave the wait policy to the user:\n${OUT}")
endif()

run(TRUE ${DSLIDE} gen --points 3000 --features 1000 --labels 200 --nnz 15 --out ${WORK}/syn)
run(TRUE ${DSLIDE} train --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt --hidden 32
    --sparsity 0.1 --lr 1e-3 --batch 64 --epochs 3 --metrics ${WORK}/m.jsonl --threads 2)
if(NOT OUT MATCHES "test +iter [0-9]+ \\| P@1 0\\.[0-9]+")
  message(FATAL_ERROR "no evaluation line:\n${OUT}")
endif()
file(READ ${WORK}/m.jsonl metrics)
foreach(field iter epoch loss ms_per_iter samples_per_s bytes_sent_per_iter comm_ms_per_iter
        comm_network_ms_per_iter comm_wait_ms_per_iter peak_rss_mb ranks threads device strategy p_at_1 p_at_3 p_at_5
        train_wall_s train_cpu_s)
  if(NOT metrics MATCHES "\"${field}\":")
    message(FATAL_ERROR "metrics lack '${field}':\n${metrics}")
  endif()
endforeach()

file(READ ${WORK}/m.jsonl metrics)
foreach(field "\"event\":\"start\"" "\"budget\":" "\"min_negatives\":" "\"mean_negatives\":"
        "\"hash\":\"srp\"" "\"query\":" "\"eval_loss\":" "\"most_popular_label_p_at_1\":"
        "\"output_loss\":\"one-vs-rest\"" "\"memory_need_mb\":[0-9]")
  if(NOT metrics MATCHES "${field}")
    message(FATAL_ERROR "metrics lack ${field}:\n${metrics}")
  endif()
endforeach()
if(NOT OUT MATCHES "budget 20 per sample" OR NOT OUT MATCHES ">= 256 negatives beyond its labels")
  message(FATAL_ERROR "the start lines do not state the budget and the negatives:\n${OUT}")
endif()

# Auto: a 200-label output is computed densely, and says so.
run(TRUE ${DSLIDE} train --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt --hidden 32
    --epochs 1 --threads 2)
if(NOT OUT MATCHES "200 neurons, dense\\* \\(narrower than --dense-below\\)")
  message(FATAL_ERROR "auto did not report its dense choice:\n${OUT}")
endif()
# and, its points holding several labels each, --loss auto's one-vs-rest.
set(auto_ovr "\\(--loss auto: one-vs-rest for at least 1.5 labels a training point, the layer dense or log-Q corrected\\)")
if(NOT OUT MATCHES "layer 2 \\(output, one-vs-rest\\): 200 neurons, dense[^\n]*${auto_ovr}")
  message(FATAL_ERROR "auto did not report its one-vs-rest choice:\n${OUT}")
endif()
# A sampled output layer: one-vs-rest where log-Q corrected (the default), else the softmax.
run(TRUE ${DSLIDE} train --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt --hidden 32
    --sparsity 0.1 --epochs 1 --threads 2)
if(NOT OUT MATCHES "layer 2 \\(output, one-vs-rest\\): 200 neurons, budget[^\n]*log-Q corrected ${auto_ovr}")
  message(FATAL_ERROR "auto did not report one-vs-rest on the corrected sampled layer:\n${OUT}")
endif()
run(TRUE ${DSLIDE} train --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt --hidden 32
    --sparsity 0.1 --epochs 1 --threads 2 --log-q false)
if(NOT OUT MATCHES "layer 2 \\(output, softmax\\): 200 neurons, budget[^\n]*not log-Q corrected \\(--log-q false\\)\n")
  message(FATAL_ERROR "auto did not keep the softmax on an uncorrected sampled layer:\n${OUT}")
endif()

# An explicit budget of 1 neuron: a warning, and the floor of negatives keeps it learning.
run(TRUE ${DSLIDE} train --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt --hidden 32
    --sparsity 0.005 --epochs 1 --threads 2)
if(NOT OUT MATCHES "warning: --sparsity 0.005 gives the output layer a budget of 1 per sample")
  message(FATAL_ERROR "no warning for a budget that leaves no negatives:\n${OUT}")
endif()

# Validation: evaluations score the held-back points, the best is kept and saved, the test
# set is scored once, on it; predict on the kept model writes the top-k that eval scores.
run(TRUE ${DSLIDE} train --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt --hidden 32
    --epochs 6 --batch 64 --valid-fraction 0.2 --checkpoint-dir ${WORK}/ck --threads 2)
string(REGEX MATCHALL "valid +iter [0-9]+ \\| P@1" valid_lines "${OUT}")
list(LENGTH valid_lines n_valid)
string(REGEX MATCHALL "test +iter" test_lines "${OUT}")
list(LENGTH test_lines n_test)
if(n_valid LESS 3 OR NOT n_test EQUAL 1 OR NOT OUT MATCHES "validation: 600 points")
  message(FATAL_ERROR "expected several validation lines and one test line:\n${OUT}")
endif()
if(NOT OUT MATCHES "kept the model of iteration ([0-9]+) \\(best valid P@1 [0-9.]+\\), saved in")
  message(FATAL_ERROR "no kept model:\n${OUT}")
endif()
set(best_iter ${CMAKE_MATCH_1})
if(NOT OUT MATCHES "test +iter ${best_iter} \\| P@1 ([0-9.]+) P@3 ([0-9.]+) P@5 ([0-9.]+)")
  message(FATAL_ERROR "the test score is not of the kept model (iteration ${best_iter}):\n${OUT}")
endif()
set(test_p "P@1 ${CMAKE_MATCH_1} P@3 ${CMAKE_MATCH_2} P@5 ${CMAKE_MATCH_3}")
run(TRUE ${DSLIDE} eval --model ${WORK}/ck/best --test ${WORK}/syn.test.txt)
if(NOT OUT MATCHES "${test_p}")
  message(FATAL_ERROR "eval of ck/best differs from the run's test score (${test_p}):\n${OUT}")
endif()
run(TRUE ${DSLIDE} predict --model ${WORK}/ck/best --input ${WORK}/syn.test.txt --top-k 3
    --out ${WORK}/pred.tsv)
file(STRINGS ${WORK}/pred.tsv rows)
list(LENGTH rows n_rows)
list(GET rows 0 first)
if(NOT n_rows EQUAL 600 OR NOT first MATCHES "^0\t[0-9]+:[0-9.e-]+ [0-9]+:[0-9.e-]+ [0-9]+:[0-9.e-]+$")
  message(FATAL_ERROR "predict wrote ${n_rows} rows, first '${first}'")
endif()
# A resumed run keeps competing with the best model from before the interruption.
set(sel --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt --hidden 32 --batch 64
    --valid-fraction 0.2 --eval-every 10 --checkpoint-dir ${WORK}/ck2 --checkpoint-every 20 --threads 2)
run(TRUE ${DSLIDE} train ${sel} --iterations 40)
if(NOT OUT MATCHES "kept the model of iteration ([0-9]+)")
  message(FATAL_ERROR "no kept model in the first part:\n${OUT}")
endif()
set(first_best ${CMAKE_MATCH_1})
run(TRUE ${DSLIDE} train ${sel} --iterations 60 --resume ${WORK}/ck2)
if(NOT OUT MATCHES "the best model so far is that of iteration ${first_best} ")
  message(FATAL_ERROR "the resumed run lost the best model of iteration ${first_best}:\n${OUT}")
endif()

# Early stopping: at a rate that cannot move the model (1e-30), no evaluation betters the
# first, so training stops after --patience evaluations without a better validation P@1,
# keeps the first model, says so and records it.
set(es --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt --hidden 32 --batch 64
    --valid-fraction 0.2 --lr 1e-30 --threads 2)
run(TRUE ${DSLIDE} train ${es} --eval-every 10 --iterations 1000 --patience 3
    --metrics ${WORK}/es.jsonl)
if(NOT OUT MATCHES "early stop at iteration 40: the validation P@1 has not improved for 3 evaluations"
   OR NOT OUT MATCHES "kept the model of iteration 10 " OR NOT OUT MATCHES "test +iter 10 \\|")
  message(FATAL_ERROR "no early stop after 3 evaluations without a better P@1:\n${OUT}")
endif()
file(READ ${WORK}/es.jsonl metrics)
if(NOT metrics MATCHES "\"event\":\"early_stop\",\"iter\":40,\"best_iter\":10")
  message(FATAL_ERROR "no early_stop record:\n${metrics}")
endif()
# --patience 0: to the end.
run(TRUE ${DSLIDE} train ${es} --eval-every 10 --iterations 60 --patience 0)
if(OUT MATCHES "early stop" OR NOT OUT MATCHES "valid +iter 50 ")
  message(FATAL_ERROR "--patience 0 stopped early:\n${OUT}")
endif()
# --epochs auto (the default) with validation: up to max(100 epochs, 5,000 iterations),
# evaluated every max(an epoch, 100 iterations), stopped after 5 evaluations (auto).
run(TRUE ${DSLIDE} train ${es})
if(NOT OUT MATCHES "up to 5000 iterations" OR NOT OUT MATCHES "evaluated every 100 iterations"
   OR NOT OUT MATCHES "early stop at iteration 600: .* for 5 evaluations")
  message(FATAL_ERROR "--epochs auto with validation did not run until early stopping:\n${OUT}")
endif()
# ... and with it --dropout auto drops a fifth of the hidden activations (a short epoch); an
# explicit --iterations, or no validation, drops none.
if(NOT OUT MATCHES "layer 1 \\(hidden, ReLU\\): 32 neurons, dense[^\n]*, dropout 0.2 in training \\(--dropout auto")
  message(FATAL_ERROR "--dropout auto did not choose 0.2 when validating with --epochs auto:\n${OUT}")
endif()
run(TRUE ${DSLIDE} train ${es} --iterations 20)
if(OUT MATCHES "dropout")
  message(FATAL_ERROR "--dropout auto dropped with --iterations:\n${OUT}")
endif()
run(TRUE ${DSLIDE} train ${es} --iterations 20 --dropout 0.5)
if(NOT OUT MATCHES "32 neurons, dense[^\n]*, dropout 0.5 in training\n")
  message(FATAL_ERROR "--dropout 0.5 not said:\n${OUT}")
endif()
# Without validation data --patience has nothing to stop on.
run(FALSE ${DSLIDE} train --train ${WORK}/syn.train.txt --test ${WORK}/syn.test.txt --patience 3)
if(NOT OUT MATCHES "option --patience stops on the validation P@1")
  message(FATAL_ERROR "--patience without validation not refused:\n${OUT}")
endif()

run(FALSE ${DSLIDE} predict --model ${WORK}/ck/best --input ${WORK}/syn.test.txt --top-k 0
    --out ${WORK}/p0.tsv)
if(NOT OUT MATCHES "--top-k")
  message(FATAL_ERROR "bad --top-k not named:\n${OUT}")
endif()

file(WRITE ${WORK}/bad.txt "2 10 5\n1 3:0.5\n2 12:1\n")
run(FALSE ${DSLIDE} train --train ${WORK}/bad.txt)
if(NOT OUT MATCHES "bad.txt:3: feature id 12 out of range")
  message(FATAL_ERROR "error does not name file and line:\n${OUT}")
endif()
run(FALSE ${DSLIDE} train --train ${WORK}/syn.train.txt --batchsize 3)
if(NOT OUT MATCHES "batchsize")
  message(FATAL_ERROR "unknown option not named:\n${OUT}")
endif()
run(FALSE ${DSLIDE} train --train ${WORK}/syn.train.txt --device gpu)
if(NOT OUT MATCHES "--device gpu")
  message(FATAL_ERROR "gpu request without a usable device not explained:\n${OUT}")
endif()
run(TRUE ${DSLIDE} train --help)
