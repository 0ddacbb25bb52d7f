#!/bin/bash
# bench_zero: what ZeRO's stages cost a step on this machine's CPU engine. Trains one model over
# real worker processes and Gloo at dp 2 with parallel.zero 0, 1, 2 and 3 (2 and 3 also with their
# collectives run at once, parallel.overlap_grad_reduce: false), `rounds` times each in
# turn (so a slow minute hits every variant alike), and prints each variant's median step, its
# time in the gradient group's collectives (DP: the reduce-scatters and all-gathers, zero 2 and
# 3's inside the forward and backward included), forward and backward without them, the
# optimizer, and the engine's memory (mem_bytes) of the bottleneck rank, with the cost model's
# step and memory beside them: the medians `stagecraft-cli runs compare --json` reports over the
# runs' steady steps. Asserts nothing about time. Run it on a quiet machine from the repository
# root after a build (stagecraft-cli and stagecraft-worker):
#   bash tests/bench/bench_zero.sh [build/bin] [rounds] [steps]
set -euo pipefail
BIN=${1:-build/bin}
ROUNDS=${2:-3}
STEPS=${3:-30}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DB=$WORK/runs.sqlite
# GPT with 4 layers of width 256: 3.2 M parameters (12.6 MiB of fp32 weights), two micro-batches
# of 4 x 64 tokens per rank and step.
BASE=(configs/tiny-gpt.yaml model.hidden=256 model.heads=8 parallel.pp=1 parallel.dp=2 cluster.gpus_per_node=2
      train.micro_batch=4 train.global_batch=16 "train.steps=$STEPS" train.warmup_steps=10 "train.checkpoint_dir=$WORK/ck")
VARIANTS=("zero 0|parallel.zero=0" "zero 1|parallel.zero=1" "zero 2|parallel.zero=2" "zero 3|parallel.zero=3"
          "zero 2, no overlap|parallel.zero=2 parallel.overlap_grad_reduce=false"
          "zero 3, no overlap|parallel.zero=3 parallel.overlap_grad_reduce=false")
id=0
declare -A IDS
for ((round = 0; round < ROUNDS; ++round)); do
  for v in "${!VARIANTS[@]}"; do
    IFS='|' read -r label overrides <<< "${VARIANTS[$v]}"
    # shellcheck disable=SC2086
    "$BIN/stagecraft-cli" run "${BASE[@]}" $overrides --db "$DB" > /dev/null
    id=$((id + 1))
    IDS[$v]="${IDS[$v]:-} $id"
  done
done
echo "dp 2 on $(nproc) cores, ${ROUNDS} runs of ${STEPS} steps per variant (medians of the runs' medians)"
printf '%-18s %9s %9s %9s %9s %9s %11s %11s %11s\n' variant step DP forward backward optimizer "mem MiB" "model step" "model MiB"
for v in "${!VARIANTS[@]}"; do
  IFS='|' read -r label overrides <<< "${VARIANTS[$v]}"
  files=()
  for i in ${IDS[$v]}; do
    "$BIN/stagecraft-cli" runs compare "$i" --json --db "$DB" > "$WORK/run$i.json"
    files+=("$WORK/run$i.json")
  done
  python3 - "$label" "${files[@]}" <<'PY'
import json, statistics, sys
label = sys.argv[1]
runs = [json.load(open(path)) for path in sys.argv[2:]]
def part(r, name, key):
    return next(p[key] for p in r["parts"] if p["part"] == name)
def rank(r):
    return next(x for x in r["ranks"] if x["rank"] == r["bottleneck_rank"])
def med(xs, scale=1e3):
    return statistics.median(xs) * scale
step = med([part(r, "step", "measured") for r in runs])
dp = med([rank(r)["dp_s"] for r in runs])
fwd = med([rank(r)["forward_s"] for r in runs])
bwd = med([rank(r)["backward_s"] for r in runs])
opt = med([rank(r)["optimizer_s"] for r in runs])
mem = med([rank(r)["mem_bytes"] for r in runs], 1 / 2**20)
print(f"{label:<18} {step:7.1f}ms {dp:7.1f}ms {fwd:7.1f}ms {bwd:7.1f}ms {opt:7.1f}ms {mem:11.2f} "
      f"{med([part(r, 'step', 'predicted') for r in runs]):9.1f}ms {med([part(r, 'memory pp 0', 'predicted') for r in runs], 1 / 2**20):11.2f}")
PY
done
