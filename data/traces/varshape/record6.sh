#!/usr/bin/env bash
# Records every workload of $SCRIPT (workloads6.py by default; WORKLOADS names them) twice (default allocator: trace + summary; expandable
# segments: summary only), JOBS processes at a time (6 by default), into $OUT (WORKLOADS: a
# space-separated subset). Run on the GPU machine from the repository root:
#   RT_DIR=<folder holding record_trace.py> bash data/traces/varshape/record6.sh
# It prints no allocator figure: only which recordings finished and which failed, so that the
# one who runs it can hand the set over unseen. The figures stay in the summaries under $OUT.
set -u
D=$(cd "$(dirname "$0")" && pwd)
RT_DIR=${RT_DIR:-$D/../../../../shared/gpu}
[ -f "$RT_DIR/record_trace.py" ] || { echo "record6.sh: no record_trace.py in $RT_DIR (set RT_DIR)" >&2; exit 2; }
export PYTHONPATH="$D:$RT_DIR:${PYTHONPATH:-}"
W="${WORKLOADS:-wav2vec2_varlen_infer dinov2_varres_infer detr_varsize_infer gemma_generate_growprompt longformer_growlen_infer mobilevit_varres_train}"
{ date -u +"start %F %T UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch, torchvision, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "torchvision", torchvision.__version__, "transformers", transformers.__version__)'
} > "$OUT/versions.txt" 2>&1
jobs=()
for w in $W; do
  for conf in "" "expandable_segments:True"; do
    if [ -z "$conf" ]; then out=$OUT/$w.trace.gz; else out=$OUT/$w.exp.gz; fi
    PYTORCH_CUDA_ALLOC_CONF=$conf timeout "${RECORD_TIMEOUT:-240}" python3 "$D/${SCRIPT:-workloads6.py}" "$w" "$out" > "$out.log" 2>&1 &
    jobs+=($!)
    if [ ${#jobs[@]} -ge "${JOBS:-6}" ]; then wait "${jobs[0]}"; jobs=("${jobs[@]:1}"); fi
  done
done
wait
date -u +"end %F %T UTC" >> "$OUT/versions.txt"
cat "$OUT/versions.txt"
for w in $W; do
  for s in trace exp; do
    f=$OUT/$w.$s.gz
    if [ -f "$f.summary.json" ] && ! grep -q "Traceback\|Error" "$f.log"; then echo "ok $w.$s"; else echo "FAILED $w.$s"; tail -5 "$f.log"; fi
  done
done
