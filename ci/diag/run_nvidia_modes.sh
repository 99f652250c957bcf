#!/usr/bin/env bash
# Runs modes of nvidia_subbuffer_repro.c on the GPU machine, one line per run, printed as each
# ends (no pipe buffering). Build it here first (the GPU machine has no OpenCL headers):
#   gcc -O2 ci/diag/nvidia_subbuffer_repro.c -o .diag/c/pool /usr/lib/x86_64-linux-gnu/libOpenCL.so.1 -lpthread
# then, on the GPU machine (carry .diag):  bash ci/diag/run_nvidia_modes.sh ROUNDS MODE...
# e.g. `bash ci/diag/run_nvidia_modes.sh 300 eP eP BP eWP eWDP acdP acdWP`. Keep ROUNDS x modes
# small: 300 rounds take 0.4-6 s a run on the H200 (modes with d or q are the slow ones), and
# each run is cut at 20 s.
set -u
cd "$(dirname "$0")/../.."
rounds=${1:-300}; shift
for m in "$@"; do
    s=$(date +%s%N)
    timeout 20 .diag/c/pool "$m" 8 "$rounds" > /tmp/pool.log 2>&1
    rc=$?
    printf 'mode %s rc %s %sms %s\n' "$m" "$rc" "$(( ($(date +%s%N) - s) / 1000000 ))" \
        "$(tail -c 100 /tmp/pool.log | tr '\n' ' ')"
done
