#!/bin/bash
# Records the figures tests/engine/tst_calibrate.cpp fits and predicts: five layouts of
# configs/tiny-gpt.yaml trained here by the CPU engine, each REPEATS times (default 3, the layouts
# taken in turn so a change of the machine's load touches all alike), every run's measured step in
# the cost model's parts (`stagecraft-cli runs compare --json`), into
# tests/engine/data/cpu_calibration_runs.json (or OUT). tst_calibrate fits and predicts each
# layout's median part by part and takes the spread of its repeats as the noise a prediction is
# judged against. Run it on a quiet machine from the repository root after a build:
#   bash tests/bench/record_cpu_calibration.sh [build/bin]
set -euo pipefail
BIN=${1:-build/bin}
REPEATS=${REPEATS:-3}
OUT=${OUT:-tests/engine/data/cpu_calibration_runs.json}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DB=$WORK/runs.sqlite
# label | role | overrides
LAYOUTS=(
  "dp 2 x pp 2, micro-batch 4|fit|"
  "tp 2|fit|parallel.dp=1 parallel.pp=1 parallel.tp=2 cluster.gpus_per_node=2"
  "pp 2 interleaved (v 2)|predict|parallel.dp=1 cluster.gpus_per_node=2 pipeline.schedule=interleaved pipeline.virtual_stages=2"
  "dp 2 x pp 2, micro-batch 2|predict|train.micro_batch=2"
  "dp 2|predict|parallel.pp=1 cluster.gpus_per_node=2"
)
id=0
load_before=$(cut -d' ' -f1 /proc/loadavg)
for rep in $(seq 1 "$REPEATS"); do
  for i in "${!LAYOUTS[@]}"; do
    IFS='|' read -r label role overrides <<< "${LAYOUTS[$i]}"
    # shellcheck disable=SC2086
    "$BIN/stagecraft-cli" run configs/tiny-gpt.yaml train.steps=80 train.checkpoint_dir="$WORK/ck" $overrides --db "$DB" > /dev/null
    id=$((id + 1))
    "$BIN/stagecraft-cli" runs compare "$id" --json --db "$DB" > "$WORK/$i.$rep.json"
  done
done
{
  printf '{"recorded": "%s", "cpu": "%s", "nproc": %d, "load_average_before": %s, "load_average_after": %s,\n "layouts": [\n' \
    "$(date -u +%Y-%m-%d)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$(nproc)" "$load_before" \
    "$(cut -d' ' -f1 /proc/loadavg)"
  for i in "${!LAYOUTS[@]}"; do
    IFS='|' read -r label role overrides <<< "${LAYOUTS[$i]}"
    [ "$i" -gt 0 ] && echo ","
    printf '{"label": "%s", "role": "%s", "overrides": "%s", "cores": %d,\n "runs": [' "$label" "$role" "$overrides" "$(nproc)"
    for rep in $(seq 1 "$REPEATS"); do
      [ "$rep" -gt 1 ] && echo ","
      cat "$WORK/$i.$rep.json"
    done
    echo "]}"
  done
  echo "]}"
} > "$WORK/out.json"
mv "$WORK/out.json" "$OUT"
echo "wrote $OUT"
