#!/bin/bash
# Records the figures tests/engine/tst_calibrate.cpp fits and predicts (issue: calibration from
# the user's own runs): five layouts of configs/tiny-gpt.yaml trained here by the CPU engine, each
# run's measured step in the cost model's parts (`stagecraft-cli runs compare --json`), into
# tests/engine/data/cpu_calibration_runs.json. Run it on a quiet machine from the repository root
# after a build: bash tests/bench/record_cpu_calibration.sh [build/bin]
set -euo pipefail
BIN=${1:-build/bin}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DB=$WORK/runs.sqlite
OUT=tests/engine/data/cpu_calibration_runs.json
# label | role | overrides
LAYOUTS=(
  "dp 2 x pp 2, micro-batch 4|fit|"
  "tp 2|fit|parallel.dp=1 parallel.pp=1 parallel.tp=2 cluster.gpus_per_node=2"
  "pp 2 interleaved (v 2)|predict|parallel.dp=1 cluster.gpus_per_node=2 pipeline.schedule=interleaved pipeline.virtual_stages=2"
  "dp 2 x pp 2, micro-batch 2|predict|train.micro_batch=2"
  "dp 2|predict|parallel.pp=1 cluster.gpus_per_node=2"
)
echo "[" > "$WORK/out.json"
id=0
for entry in "${LAYOUTS[@]}"; do
  IFS='|' read -r label role overrides <<< "$entry"
  # shellcheck disable=SC2086
  "$BIN/stagecraft-cli" run configs/tiny-gpt.yaml train.steps=80 train.checkpoint_dir="$WORK/ck" $overrides --db "$DB" > /dev/null
  id=$((id + 1))
  [ $id -gt 1 ] && echo "," >> "$WORK/out.json"
  printf '{"label": "%s", "role": "%s", "overrides": "%s", "cores": %d,\n "compare": ' "$label" "$role" "$overrides" "$(nproc)" >> "$WORK/out.json"
  "$BIN/stagecraft-cli" runs compare "$id" --json --db "$DB" >> "$WORK/out.json"
  echo "}" >> "$WORK/out.json"
done
echo "]" >> "$WORK/out.json"
mv "$WORK/out.json" "$OUT"
echo "wrote $OUT"
