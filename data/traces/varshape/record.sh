#!/usr/bin/env bash
# Records every workload of workloads.py twice (default allocator: trace + summary; expandable
# segments: summary), four processes at a time, into $OUT (WORKLOADS: a space-separated subset). Run on the GPU machine from the
# repository root: bash data/traces/varshape/record.sh
set -u
D=$(cd "$(dirname "$0")" && pwd)
RT_DIR=${RT_DIR:-$D/../../../../shared/gpu}
# The device machine's copy of the repository may come without ../shared: then copy
# record_trace.py into a carried folder and point RT_DIR at it.
[ -f "$RT_DIR/record_trace.py" ] || { echo "record.sh: no record_trace.py in $RT_DIR (set RT_DIR)" >&2; exit 2; }
export PYTHONPATH="$D:$RT_DIR:${PYTHONPATH:-}"
W="${WORKLOADS:-gpt2_varlen_infer resnet50_varres_infer lstm_packed_train llama_generate_varprompt bert_fp16_varlen_infer fasterrcnn_varsize_infer t5_generate_varbatch vit_varbatch_infer}"
jobs=()
for w in $W; do
  for conf in "" "expandable_segments:True"; do
    if [ -z "$conf" ]; then out=$OUT/$w.trace.gz; else out=$OUT/$w.exp.gz; fi
    PYTORCH_CUDA_ALLOC_CONF=$conf timeout "${RECORD_TIMEOUT:-240}" python3 "$D/workloads.py" "$w" "$out" > "$out.log" 2>&1 &
    jobs+=($!)
    if [ ${#jobs[@]} -ge 4 ]; then wait "${jobs[0]}"; jobs=("${jobs[@]:1}"); fi
  done
done
wait
for f in $OUT/*.summary.json; do echo "$(basename $f): $(cat $f)"; done
grep -l "Error\|Traceback" $OUT/*.log | while read f; do echo "FAILED $f"; tail -3 "$f"; done
