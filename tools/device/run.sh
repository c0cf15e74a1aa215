#!/bin/bash
# run.sh: the GPU checklist (../shared/notes/gpu-checklist.md) in one device call, after
# tools/device/prepare.sh here: the Vulkan tests, edgespec-bench on the shipped models and the
# 134m/853m shapes (made there by mkmodel; each weight type's decode), bench_spec_call's cost of
# n rows, the speculation sweeps against plain decoding (a fixed tree beside the adaptive
# defaults), and ALSpec's pair gated on the devices and by the host (ALSPEC_LAMBDAS= skips it).
# Everything lands in $OUT (at most 8 files come back).
# Each phase has its own time limit so that the call ends inside the device budget.
cd "$(dirname "$0")/../.."; R=$PWD; T0=$(date +%s)
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
# the build's absolute paths (meson's test commands) and ../shared
[ -e /work/main ] || { mkdir -p /work; ln -s "$R" /work/main; }
[ -e /work/shared ] || ln -s "$R/gpu/shared" /work/shared
cd /work/main && tar xJf gpu/build.tar.xz
ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $ICD ] && export VK_DRIVER_FILES=$ICD
export B=build-gpu M=/tmp/m PY=python3 OUT
export CLI=$B/tools/edgespec/edgespec
mkdir -p $M
el() { echo "== $(( $(date +%s) - T0 )) s: $*"; }
{ el devices; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  $CLI devices; } > $OUT/devices.txt 2>&1
if ! $CLI devices > /dev/null 2>&1; then VK_LOADER_DEBUG=error,warn,driver $CLI devices 2>&1 | tail -40; exit 1; fi
# the tests' generated models first, the benchmark shapes in the background while the tests run
{ $CLI quantize models/long.gguf $B/tests/spec/long.f32.gguf f32
  $PY tools/train/grow.py models/default.gguf $B/tests/spec/default.x3.gguf --ss models/default.ss.gguf \
    $B/tests/spec/default.x3.ss.gguf --factor 3 --name edgespec-kjv-default-x3; } > $OUT/models.txt 2>&1
# each file by its own process: the device has 16 cores and mkmodel quantises on one
( for s in 134m 853m; do for t in q8_0 f16; do
    $B/tools/mkmodel/edgespec-mkmodel --quiet --preset $s --type $t -o $M/$s-$t.gguf & done; done
  # the K-quants' device layouts (Q4_K: a run of four blocks per lane; Q5_K/Q6_K: a byte per
  # quant) against Q4_0's, on the GPU
  for t in q4_0 q4_K q5_K q6_K; do $B/tools/mkmodel/edgespec-mkmodel --quiet --preset 853m --type $t -o $M/853m-$t.gguf & done
  wait; el benchmark models made ) >> $OUT/models.txt 2>&1 &
MODELS=$!
el tests >> $OUT/devices.txt
$PY tools/device/run_tests.py gpu/tests.json 12 ${TEST_BUDGET:-150} > $OUT/tests.txt 2>&1
wait $MODELS
el tests done >> $OUT/devices.txt
timeout ${BENCH_BUDGET:-140} bash -c '
  BE="$B/tools/bench/edgespec-bench --no-membw -b vulkan"
  $BE -m models/default.gguf -r 5 -p 64,512 -n 128
  $BE -m $B/tests/spec/long.f32.gguf -r 5 -p 64,512 -n 128
  for f in 134m-q8_0 134m-f16 853m-q8_0 853m-f16; do $BE -m $M/$f.gguf -r 3 -p 512 -n 128; done
  $BE -m $M/134m-q8_0.gguf -r 3 -p 0 -n 128 --profile
  $BE -m $M/853m-q8_0.gguf -r 3 -p 0 -n 128 --profile
  for f in 853m-q4_0 853m-q4_K 853m-q5_K 853m-q6_K; do $BE -m $M/$f.gguf -r 3 -p 0 -n 128 --profile; done
' > $OUT/bench.jsonl 2> $OUT/bench.err
timeout ${CALL_BUDGET:-100} bash -c '
  SC=$B/tests/bench/bench_spec_call
  $SC models/default.gguf models/default.ss.gguf vulkan 4 21 64
  for t in q8_0 q4_K q6_K; do $SC $M/853m-$t.gguf - vulkan 4 11 64; done
  $SC $B/tests/spec/long.f32.gguf models/long.ss.gguf vulkan 4 21 1024
' > $OUT/spec_call.txt 2>&1
# ALSpec over two logical devices of the GPU: gated on the devices against the host's round trip
# per layer (the same GPU twice: the gating's cost, not a speed-up)
timeout ${ALSPEC_BUDGET:-40} bash -c '
  for lam in ${ALSPEC_LAMBDAS-0 0.1}; do $B/tests/bench/bench_alspec_pair $B/tests/spec/long.f32.gguf 0,0 1100 24 $lam 256 3; done
' >> $OUT/spec_call.txt 2>&1
timeout ${SWEEP_BUDGET:-110} bash -c '
  SW="$PY tests/bench/spec_sweep.py --cli $CLI --backend vulkan --threads 4 --n 128"
  $SW --model models/default.gguf --adapter models/default.ss.gguf --draft models/draft.gguf --reps 2 --defaults-only
  $SW --model $B/tests/spec/long.f32.gguf --adapter models/long.ss.gguf --draft models/long.draft.gguf --reps 2 \
    --defaults-only --fixed-ref 4,1
  # what the adaptive tuner measured and decided (its cost lines), on two prompts of each model
  for m in default long; do f=models/$m.gguf; [ $m = long ] && f=$B/tests/spec/long.f32.gguf
    for p in "Now the word of the LORD came unto Jonah the son of Amittai, saying," "Vanity of vanities, saith the Preacher."; do
      echo "--- $m"; $CLI run -m $f --ss models/$m.ss.gguf --spec stream --backend vulkan -n 256 --temp 0 --ignore-eos \
        -p "$p" 2>&1 >/dev/null | grep -E "decode|tokens per call|calibrated|costs in|pruning"; done; done
' > $OUT/sweep.txt 2>&1
el all done
