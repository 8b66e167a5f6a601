# End-to-end tests of tools/execute under mpirun (included by tests/executor/CMakeLists.txt
# when tools/execute.cmake defined the `execute` target). Each has a CTest TIMEOUT; labels executor;mpi.
set(_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root
    --mca btl_vader_single_copy_mechanism none)
set(_exe $<TARGET_FILE:execute> --model ${PROJECT_SOURCE_DIR}/models/tiny.json)
set(_plans ${PROJECT_SOURCE_DIR}/tests/executor/plans)
set(_expect ${CMAKE_COMMAND} -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
set(_out ${PROJECT_BINARY_DIR}/tests/executor)

function(_execute_test name timeout)
  add_test(NAME executor_execute_${name} COMMAND ${ARGN})
  trainplan_test_timeout(executor_execute_${name} ${timeout}
                       LABELS "executor;mpi" PROCESSORS 2)
endfunction()

# The loss on the shipped corpus falls over 300 steps of the tiny model (one rank, 4 sequences
# of 64 bytes per step, lr 3e-3; about 30 s on a loaded 2-core machine). At init the loss is
# ln(256) = 5.55 (uniform over bytes); the corpus' byte-unigram entropy is 3.02 nats and its
# bigram conditional entropy 2.22 nats, so a mean below 2.6 over the last 20 steps means the
# model uses context, not only byte frequencies. Measured: 2.38.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;1;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/single.json;--steps;300;--lr;3e-3;--data;${PROJECT_SOURCE_DIR}/data/kjv-genesis.txt;--out;${_out}/loss_falls.json")
_execute_test(loss_falls 300 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              -DREPORT=${_out}/loss_falls.json -DMAX_FINAL_LOSS=2.6
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)

# 2x2x2 with ZeRO-1 and SP through the tool: runs, writes a measured report.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;8;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/tp2_pp2_dp2.json;--steps;4;--random-tokens;--out;${_out}/tp2_pp2_dp2.json")
_execute_test(tp2_pp2_dp2 120 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=wrote .*tp2_pp2_dp2.json" -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)

# --memory-report: every rank's memory account (executor/memory_account.h), on two pipeline
# stages; into a directory that does not exist, an error naming the file.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/pp2.json;--steps;2;--random-tokens;--out;${_out}/memory_pp2.json;--memory-report;${_out}/memory_pp2.memory.json")
_execute_test(memory_report 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=wrote the memory account of 2 rank" -DMEMORY_REPORT=${_out}/memory_pp2.memory.json
              -DMEMORY_RANKS=2 -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/pp2.json;--steps;2;--random-tokens;--out;${_out}/memory_pp2.json;--memory-report;${_out}/no-such-dir/memory.json")
_execute_test(memory_report_unwritable 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: .*no-such-dir/memory.json" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)

# Input errors: a clear message and a non-zero exit, no hang.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/tp2_pp2_dp2.json;--steps;2;--random-tokens;--out;${_out}/never.json")
_execute_test(world_size_mismatch 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: .*8.*2|execute: error: .*2.*8" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/dp2.json;--steps;2;--data;${_out}/no-such-corpus.txt;--out;${_out}/never.json")
_execute_test(missing_data 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: .*no-such-corpus.txt" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
# --threads: two threads per rank run and write the report (stdout), with a note (stderr) that the rank's
# affinity (one core: --bind-to core) is smaller; 0 and a non-number are refused naming the
# option and the value (tests/executor/cpu/kernels_test.cc checks the products themselves).
string(REPLACE ";" "\\;" _cmd "${_mpirun};--bind-to;core;-np;1;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/single.json;--steps;2;--threads;2;--random-tokens;--out;${_out}/threads2.json")
_execute_test(threads_two 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=wrote .*threads2.json.*note: rank 0 runs --threads 2 on 1 CPU.*--bind-to none"
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
foreach(_bad 0 two)
  string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;1;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/single.json;--steps;2;--threads;${_bad};--random-tokens;--out;${_out}/never.json")
  _execute_test(threads_${_bad}_rejected 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
                "-DREGEX=execute: error: --threads: (value ${_bad} is out of range|'${_bad}' is not an integer)"
                -DMAX_SECONDS=30 -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
endforeach()
# A context-parallel plan through the tool: runs and writes its report; one whose sequence
# does not split into 2*cp equal chunks is rejected naming the fields.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/cp2.json;--steps;2;--random-tokens;--out;${_out}/cp2.json")
_execute_test(context_parallel 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=wrote .*cp2.json" -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;3;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/cp3.json;--steps;2;--random-tokens;--out;${_out}/never.json")
_execute_test(context_parallel_uneven 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=cp=3: seq_len=64 is not divisible by 2.cp = 6" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
# DualPipe through the tool (4 stages, both directions): runs on the corpus, writes its report.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;4;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/dualpipe_pp4.json;--steps;3;--data;${PROJECT_SOURCE_DIR}/data/kjv-genesis.txt;--out;${_out}/dualpipe_pp4.json")
_execute_test(dualpipe_pp4 120 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=wrote .*dualpipe_pp4.json" -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
# Mixture of experts through the tool: 4 experts over 2 EP ranks writes a report with the ep
# group's bytes; over tp 2 without sequence parallelism it is refused naming the field.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/tests/executor/models/tiny-moe.json;--plan;${_plans}/moe_ep2.json;--steps;3;--data;${PROJECT_SOURCE_DIR}/data/kjv-genesis.txt;--out;${_out}/moe_ep2.json")
_execute_test(moe_ep2 120 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=ep=2 .*wrote .*moe_ep2.json" -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/tests/executor/models/tiny-moe.json;--plan;${_plans}/moe_tp2.json;--steps;2;--random-tokens;--out;${_out}/never.json")
_execute_test(moe_tp2_rejected 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=tp=2 with a mixture-of-experts model" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
# MoE parallel folding through the tool: ep 2 over the two cp ranks of dp 1 writes its report,
# and so does expert_tp 2 over the two TP ranks (the experts split over them, their routed rows
# gathered and reduce-scattered).
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/tests/executor/models/tiny-moe.json;--plan;${_plans}/moe_fold_cp2.json;--steps;2;--random-tokens;--out;${_out}/moe_fold_cp2.json")
_execute_test(moe_fold_cp2 120 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=ep=2 folded etp=1 .*wrote .*moe_fold_cp2.json" -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/tests/executor/models/tiny-moe.json;--plan;${_plans}/moe_fold_etp2.json;--steps;2;--random-tokens;--out;${_out}/moe_fold_etp2.json")
_execute_test(moe_fold_etp2 120 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=folded etp=2 .*wrote .*moe_fold_etp2.json" -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;-x;RANK=5;-x;WORLD_SIZE=2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/dp2.json;--steps;2;--random-tokens;--out;${_out}/never.json")
_execute_test(launcher_mismatch 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=RANK=5 but this process is MPI rank" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)

# Faults: an exception on one rank aborts the job naming it; a killed rank ends the job < 30 s.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/pp2.json;--steps;50;--random-tokens;--inject-fault;1:3;--out;${_out}/never.json")
_execute_test(rank_exception 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=rank 1 failed: injected fault at step 4" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
_execute_test(rank_killed 120 ${PROJECT_SOURCE_DIR}/tests/executor/kill_rank_test.sh
              ${_mpirun} -np 2 $<TARGET_FILE:execute> --model ${PROJECT_SOURCE_DIR}/models/tiny.json
              --plan ${_plans}/pp2.json --steps 100000 --random-tokens --out ${_out}/never.json)

# --backend: an unknown name, and (in a build without CUDA) the cuda backend, are usage errors
# (exit 2, docs/errors.md) that name the backend, before MPI or a device is touched.
_execute_test(backend_unknown 30 ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:execute>\;--backend\;tpu"
              -DEXIT=nonzero "-DREGEX=execute: error: --backend 'tpu' is not a backend" -DMAX_SECONDS=20
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
if(NOT TARGET trainplan_executor_cuda)
  _execute_test(backend_cuda_not_built 30 ${CMAKE_COMMAND}
                "-DCMD=$<TARGET_FILE:execute>\;--backend\;cuda\;--out\;${_out}/never.json"
                -DEXIT=nonzero "-DREGEX=built without the cuda backend" -DMAX_SECONDS=20
                -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
endif()

# The PyTorch reference check (llm.c's manner): the executor's initial weights, first step and
# 20-step loss curve against an independent PyTorch GPT, dense and MoE, and a 50-step MoE curve
# (about 25 s of CPU; 58 s wall at load 14, 5 minutes with the whole suite and other builds on
# 2 cores: hence the timeout). Skipped when PyTorch is absent, except where the test
# dependencies are required (CI: TRAINPLAN_REQUIRE_TEST_DEPS, whose scripts/setup.sh installs
# python3-torch): there a missing PyTorch fails the test instead of skipping the check
# unnoticed.
add_test(NAME executor_reference_check
         COMMAND ${PROJECT_SOURCE_DIR}/tests/executor/reference_check_test.sh ${_mpirun} --
                 $<TARGET_FILE:execute> ${PROJECT_SOURCE_DIR} ${_out}/reference_check)
trainplan_test_timeout(executor_reference_check 900 LABELS "executor;mpi"
                     PROCESSORS 1)
if(NOT TRAINPLAN_REQUIRE_TEST_DEPS)
  set_tests_properties(executor_reference_check PROPERTIES SKIP_RETURN_CODE 77)
endif()
# --dump-reference needs one rank with full gradients.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/dp2.json;--steps;2;--random-tokens;--dump-reference;${_out}/never;--out;${_out}/never.json")
_execute_test(dump_reference_ranks 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=--dump-reference needs the single-rank run.*2 ranks" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
# The reference dump is the CPU backend's: --backend cuda says so (exit 2) before a device is
# touched, so the test runs on a machine without a GPU.
if(TARGET trainplan_executor_cuda)
  string(REPLACE ";" "\\;" _cmd "$<TARGET_FILE:execute>;--backend;cuda;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/single.json;--dump-reference;${_out}/never;--out;${_out}/never.json")
  _execute_test(dump_reference_cuda 30 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
                "-DREGEX=--dump-reference is CPU-only.*--backend cpu" -DMAX_SECONDS=20
                -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
endif()
# --cluster / --gpus: zb-v runs the order simulate plays on that machine (core/schedule.h's
# order_costs; parallel_check's link_GBps checks the passes against the simulator's trace).
# Two one-GPU nodes run; a cluster of another size, and --hardware without a cluster, are
# refused naming what is wrong.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/zb_v_pp2.json;--gpus;2;--gpus-per-node;1;--steps;2;--random-tokens;--out;${_out}/zb_v_cluster.json")
_execute_test(zb_v_cluster_order 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=wrote .*zb_v_cluster.json" -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/zb_v_pp2.json;--gpus;4;--steps;2;--random-tokens;--out;${_out}/never.json")
_execute_test(zb_v_cluster_size_rejected 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: zb-v's order: the cluster '.*H100-80GB' has 4 GPUs but the plan runs on 2 ranks"
              -DMAX_SECONDS=30 -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/zb_v_pp2.json;--hardware;${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/fuzz_hardware_profile/cpu.json;--steps;2;--random-tokens;--out;${_out}/never.json")
_execute_test(hardware_without_cluster_rejected 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: --hardware needs --cluster FILE or --gpus N"
              -DMAX_SECONDS=30 -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)

# The offload tiers (executor/offload.h): an nvme plan runs with --offload-dir and reports its
# bytes per step; without the flag, with a directory that is not there, over a file already
# there (left alone), or with a plan that offloads nothing to nvme: an error naming the flag.
file(MAKE_DIRECTORY ${_out}/offload-run ${_out}/offload-taken)
file(WRITE ${_out}/offload-taken/trainplan-offload.rank0.bin "someone's file\n")
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/offload_nvme_zero3.json;--steps;3;--random-tokens;--out;${_out}/offload_nvme.json;--offload-dir;${_out}/offload-run;--memory-report;${_out}/offload_nvme.memory.json")
_execute_test(offload_nvme 120 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=wrote .*offload_nvme.json" -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/offload_nvme_zero3.json;--steps;2;--random-tokens;--out;${_out}/never.json")
_execute_test(offload_nvme_no_dir 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: .*give --offload-dir DIR" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/offload_nvme_zero3.json;--steps;2;--random-tokens;--out;${_out}/never.json;--offload-dir;${_out}/no-such-offload-dir")
_execute_test(offload_nvme_missing_dir 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: --offload-dir '.*no-such-offload-dir'" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/offload_nvme_zero3.json;--steps;2;--random-tokens;--out;${_out}/never.json;--offload-dir;${_out}/offload-taken")
_execute_test(offload_nvme_file_exists 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: .*trainplan-offload.rank0.bin' already exists; refusing to overwrite"
              -DMAX_SECONDS=30 -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/offload_cpu.json;--steps;2;--random-tokens;--out;${_out}/never.json;--offload-dir;${_out}/offload-run")
_execute_test(offload_dir_without_nvme 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: --offload-dir is for plans with offload_device nvme; this plan has offload optimizer on cpu"
              -DMAX_SECONDS=30 -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/offload_cpu.json;--steps;3;--random-tokens;--out;${_out}/offload_cpu.json")
_execute_test(offload_cpu 120 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=wrote .*offload_cpu.json" -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)

# The reference kernel (executor/cpu/reference_gemm.h) after every step: every rank's rate per
# step in the report (cluster.reference_gemm), and the STREAM triad's beside it
# (cluster.reference_triad), rank 0's medians printed; --reference-calls 0
# leaves it out; a count out of range is a usage error naming the option.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/dp2.json;--steps;3;--warmup;1;--random-tokens;--out;${_out}/reference_dp2.json")
_execute_test(reference_kernel 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=reference kernel 256x256x256: rank 0 [0-9.]+ GFLOP/s.*reference triad 16777216 elements: rank 0 [0-9.]+ GB/s"
              -DREFERENCE_REPORT=${_out}/reference_dp2.json -DREFERENCE_RANKS=2 -DREFERENCE_STEPS=3
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
# The triad after every step (--reference-triad every-step), as the GEMM; a bad value names the
# option.
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/dp2.json;--steps;3;--warmup;1;--random-tokens;--reference-triad;every-step;--out;${_out}/reference_triad_every_step.json")
_execute_test(reference_triad_every_step 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=zero
              "-DREGEX=reference triad 16777216 elements: rank 0 [0-9.]+ GB/s .median of the measured steps"
              -DREFERENCE_REPORT=${_out}/reference_triad_every_step.json -DREFERENCE_RANKS=2
              -DREFERENCE_STEPS=3 -DREFERENCE_TRIAD_SAMPLES=3
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/dp2.json;--steps;2;--random-tokens;--reference-triad;always;--out;${_out}/reference_triad_bad.json")
_execute_test(reference_triad_bad_value 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: --reference-triad 'always': expected ends, every-step or off"
              -DMAX_SECONDS=30 -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
string(REPLACE ";" "\\;" _cmd "${_mpirun};-np;2;$<TARGET_FILE:execute>;--model;${PROJECT_SOURCE_DIR}/models/tiny.json;--plan;${_plans}/dp2.json;--steps;2;--random-tokens;--reference-calls;1001;--out;${_out}/reference_bad.json")
_execute_test(reference_calls_out_of_range 60 ${CMAKE_COMMAND} "-DCMD=${_cmd}" -DEXIT=nonzero
              "-DREGEX=execute: error: --reference-calls" -DMAX_SECONDS=30
              -P ${PROJECT_SOURCE_DIR}/tests/executor/expect.cmake)
